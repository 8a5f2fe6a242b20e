#include "core/common.h"
#include "core/json.h"
#include "search/search_priv.h"
#include "core/log.h"
#include "core/util.h"
#include "llm/usage.h"
#include "core/markdown.h"
#include "search/llm_verifiers.h"

#include <math.h>

static double round_to(double x, double unit)
{
	return round(x / unit) * unit;
}

static cJSON *best_json(const struct kb_search_cand *c)
{
	cJSON *b = cJSON_CreateObject();

	cJSON_AddNumberToObject(b, "candidate_id", (double)c->id);
	cJSON_AddStringToObject(b, "proposer", c->proposer ? c->proposer : "?");
	if (c->model)
		cJSON_AddStringToObject(b, "model", c->model);
	else
		cJSON_AddNullToObject(b, "model");
	cJSON_AddNumberToObject(b, "generation", (double)c->generation);
	cJSON_AddNumberToObject(b, "island", (double)c->island);
	cJSON_AddNumberToObject(b, "cell", c->cell);
	if (isfinite(c->speedup))
		cJSON_AddNumberToObject(b, "speedup", round_to(c->speedup, 0.001));
	return b;
}

cJSON *srch_summary(struct srch *s, bool final)
{
	static const char *const verdicts[] = { "verified", "rejected", "build", "static", "filtered", "error",
						"pending" };
	cJSON *j = cJSON_CreateObject(), *arr, *o;
	struct kb_llm_usage t;
	struct kb_verifier_stats vs = { 0 }, each[KB_SV_NR] = { { 0 } };
	struct strbuf grid = STRBUF_INIT;
	size_t counts[ARRAY_SIZE(verdicts)] = { 0 };
	const struct kb_search_cand *best = NULL;
	int64_t gens = s->row.generation - 1;

	cJSON_AddStringToObject(j, "proposer", "llm search");
	cJSON_AddNumberToObject(j, "search_id", (double)s->row.id);
	cJSON_AddStringToObject(j, "state", final ? "done" : "running");
	cJSON_AddNumberToObject(j, "seed", (double)s->seed);
	arr = cJSON_AddArrayToObject(j, "models");
	for (size_t i = 0; i < kb_llm_nr_models(s->llm); i++)
		cJSON_AddItemToArray(arr, cJSON_CreateString(kb_llm_model(s->llm, i)->name));
	for (size_t i = 0; i < s->nr_cands; i++) {
		const struct kb_search_cand *c = s->cands[i];

		for (size_t k = 0; k < ARRAY_SIZE(verdicts); k++)
			if (!strcmp(c->verdict, verdicts[k]))
				counts[k]++;
		kb_verifier_stats_add_candidate(&vs, c->verifiers, c->verdict);
		for (int k = 0; k < KB_SV_NR; k++)
			kb_verifier_stats_add_one(&each[k], c->verifiers, (enum kb_soft_verifier)k, c->verdict);
	}
	cJSON_AddNumberToObject(j, "candidates", (double)s->nr_cands);
	cJSON_AddNumberToObject(j, "verified", (double)counts[0]);
	o = cJSON_AddObjectToObject(j, "verdicts");
	for (size_t k = 0; k < ARRAY_SIZE(verdicts); k++)
		cJSON_AddNumberToObject(o, verdicts[k], (double)counts[k]);
	if (gens > s->generations)
		gens = s->generations;
	cJSON_AddNumberToObject(j, "generations", (double)(gens > 0 ? gens : 0));
	cJSON_AddNumberToObject(j, "generations_planned", (double)s->generations);
	cJSON_AddNumberToObject(j, "islands", (double)s->nr_islands);
	cJSON_AddNumberToObject(j, "wall_s", round_to(srch_wall_s(s), 0.01));

	o = cJSON_AddObjectToObject(j, "llm");
	if (kb_llm_usage_search(s->st, s->row.id, &t))
		memset(&t, 0, sizeof(t));
	cJSON_AddNumberToObject(o, "calls", (double)t.calls);
	cJSON_AddNumberToObject(o, "failed", (double)t.failed);
	cJSON_AddNumberToObject(o, "prompt_tokens", (double)t.prompt_tokens);
	cJSON_AddNumberToObject(o, "completion_tokens", (double)t.completion_tokens);
	cJSON_AddNumberToObject(o, "cost_usd", round_to(t.cost_usd, 1e-6));
	cJSON_AddNumberToObject(o, "replayed", (double)s->replayed);

	o = kb_verifier_stats_json(&vs);
	cJSON_AddBoolToObject(o, "enabled", s->cfg->search_llm_verifiers);
	arr = cJSON_AddObjectToObject(o, "each");
	for (int k = 0; k < KB_SV_NR; k++)
		cJSON_AddItemToObject(arr, kb_soft_verifier_name((enum kb_soft_verifier)k),
				      kb_verifier_stats_json(&each[k]));
	cJSON_AddItemToObject(j, "verifiers", o);

	if (s->archive.cells) {
		kb_archive_grid(&s->archive, &grid);
		cJSON_AddStringToObject(j, "archive_grid", grid.buf);
		cJSON_AddNumberToObject(j, "filled_cells", (double)kb_archive_filled(&s->archive, SIZE_MAX));
		/* the cells filled on any island: the progress comment's grid */
		arr = cJSON_AddArrayToObject(j, "cells");
		for (int c = 0; c < KB_BEHAVIOR_CELLS; c++)
			for (size_t i = 0; i < s->archive.nr_islands; i++)
				if (kb_archive_get(&s->archive, i, c)) {
					cJSON_AddItemToArray(arr, cJSON_CreateNumber(c));
					break;
				}
	}
	arr = cJSON_AddArrayToObject(j, "history");
	for (size_t i = 0; i < s->nr_hist; i++) {
		cJSON *e = cJSON_CreateObject();

		cJSON_AddNumberToObject(e, "t_s", round_to(s->hist[i].t_s, 0.01));
		cJSON_AddNumberToObject(e, "speedup", round_to(s->hist[i].best, 0.001));
		cJSON_AddNumberToObject(e, "candidate_id", (double)s->hist[i].candidate_id);
		cJSON_AddItemToArray(arr, e);
	}
	if (s->cut_short)
		cJSON_AddStringToObject(j, "cut_short", s->cut_short);
	else
		cJSON_AddNullToObject(j, "cut_short");
	if (final && s->res->outcome == KB_SEARCH_OK && s->res->best_candidate_id)
		best = srch_cand(s, s->res->best_candidate_id);
	else if (!final && s->best_id)
		best = srch_cand(s, s->best_id);
	if (best)
		cJSON_AddItemToObject(j, "best", best_json(best));
	else
		cJSON_AddNullToObject(j, "best");
	if (isfinite(srch_best_so_far(s)) && srch_best_so_far(s) > 0)
		cJSON_AddNumberToObject(j, "best_speedup", round_to(srch_best_so_far(s), 0.001));
	else
		cJSON_AddNullToObject(j, "best_speedup");
	strbuf_release(&grid);
	return j;
}

void srch_write_status(struct srch *s, const cJSON *summary)
{
	cJSON *j;
	char *text;

	if (!s->o->status_path)
		return;
	j = summary ? cJSON_Duplicate(summary, true) : srch_summary(s, false);
	cJSON_AddNumberToObject(j, "updated_at", (double)kb_wall_s());
	text = cJSON_Print(j);
	if (!text)
		die("out of memory");
	if (kb_write_file_atomic(s->o->status_path, text, strlen(text)))
		log_warn("could not write the search status '%s'", s->o->status_path);
	free(text);
	cJSON_Delete(j);
}

/* --- report.md --- */

static const char *str(const cJSON *o, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);

	return cJSON_IsString(v) ? v->valuestring : NULL;
}

static void pct(char *buf, size_t size, double x)
{
	if (isnan(x))
		kb_strlcpy(buf, "n/a", size);
	else
		snprintf(buf, size, "%.0f%%", x * 100);
}

/* One line per verifier: a verifier that only adds noise shows here. */
static void each_verifier(struct strbuf *out, const cJSON *each)
{
	const cJSON *v;

	cJSON_ArrayForEach(v, each) {
		char p[16], r[16];

		if (!v->string)
			continue;
		pct(p, sizeof(p), kb_json_num(v, "precision", NAN));
		pct(r, sizeof(r), kb_json_num(v, "recall", NAN));
		strbuf_addf(out, "- %s: precision %s, recall %s (%.0f/%.0f/%.0f/%.0f tp/fp/fn/tn)\n",
			    v->string, p, r, kb_json_num(v, "tp", NAN), kb_json_num(v, "fp", NAN),
			    kb_json_num(v, "fn", NAN), kb_json_num(v, "tn", NAN));
	}
}

void kb_search_report_markdown(struct strbuf *out, const cJSON *summary)
{
	static const char *const head[] = { "candidates", "verified", "generations", "filled cells",
					     "model calls", "tokens", "cost", "time" };
	const cJSON *llm = cJSON_GetObjectItemCaseSensitive(summary, "llm");
	const cJSON *vf = cJSON_GetObjectItemCaseSensitive(summary, "verifiers");
	const cJSON *best = cJSON_GetObjectItemCaseSensitive(summary, "best");
	const cJSON *hist = cJSON_GetObjectItemCaseSensitive(summary, "history"), *h;
	const cJSON *models = cJSON_GetObjectItemCaseSensitive(summary, "models"), *m;
	char c[8][48];
	const char *cells[8];
	struct strbuf sb = STRBUF_INIT;

	strbuf_addstr(out, "\n## LLM search\n\n");
	kb_md_table_head(out, head, ARRAY_SIZE(head), "rrrrrrrr");
	snprintf(c[0], sizeof(c[0]), "%.0f", kb_json_num(summary, "candidates", NAN));
	snprintf(c[1], sizeof(c[1]), "%.0f", kb_json_num(summary, "verified", NAN));
	snprintf(c[2], sizeof(c[2]), "%.0f of %.0f", kb_json_num(summary, "generations", NAN), kb_json_num(summary, "generations_planned", NAN));
	snprintf(c[3], sizeof(c[3]), "%.0f of 64", kb_json_num(summary, "filled_cells", NAN));
	snprintf(c[4], sizeof(c[4]), "%.0f", kb_json_num(llm, "calls", NAN));
	snprintf(c[5], sizeof(c[5]), "%.0f", kb_json_num(llm, "prompt_tokens", NAN) + kb_json_num(llm, "completion_tokens", NAN));
	snprintf(c[6], sizeof(c[6]), "$%.4f", kb_json_num(llm, "cost_usd", NAN));
	kb_md_fmt_duration(c[7], sizeof(c[7]), kb_json_num(summary, "wall_s", NAN));
	for (int i = 0; i < 8; i++)
		cells[i] = c[i];
	kb_md_table_row(out, cells, ARRAY_SIZE(cells));
	strbuf_addstr(out, "\nModels: ");
	cJSON_ArrayForEach(m, models) {
		if (m != models->child)
			strbuf_addstr(out, ", ");
		kb_md_code(out, cJSON_IsString(m) ? m->valuestring : "?", false);
	}
	strbuf_addstr(out, ".");
	if (cJSON_IsObject(best)) {
		strbuf_addf(out, " Best kernel: candidate %.0f (", kb_json_num(best, "candidate_id", NAN));
		kb_md_escape(out, str(best, "proposer") ? str(best, "proposer") : "?");
		if (str(best, "model")) {
			strbuf_addstr(out, " by ");
			kb_md_code(out, str(best, "model"), false);
		}
		strbuf_addf(out, ", generation %.0f, island %.0f", kb_json_num(best, "generation", NAN), kb_json_num(best, "island", NAN));
		if (!isnan(kb_json_num(best, "speedup", NAN)))
			strbuf_addf(out, ", %.2fx over eager while searching", kb_json_num(best, "speedup", NAN));
		strbuf_addstr(out, ").");
	}
	strbuf_addch(out, '\n');
	if (str(summary, "cut_short")) {
		strbuf_addstr(out, "\n**Cut short**: ");
		kb_md_escape(out, str(summary, "cut_short"));
		strbuf_addstr(out, "; this is the best kernel found by then.\n");
	}
	if (str(summary, "archive_grid")) {
		strbuf_addstr(out, "\n### Archive\n\nRows: memory level 0-3; columns: compute level 0-3; each cell the "
			      "number of parallelism levels filled.\n\n");
		strbuf_addstr(out, str(summary, "archive_grid"));
		if (out->len && out->buf[out->len - 1] != '\n')
			strbuf_addch(out, '\n');
	}
	if (cJSON_GetArraySize(hist)) {
		static const char *const hh[] = { "time", "best speedup", "candidate" };

		strbuf_addstr(out, "\n### Best speedup over time\n\n");
		kb_md_table_head(out, hh, ARRAY_SIZE(hh), "rrr");
		cJSON_ArrayForEach(h, hist) {
			char t[32], x[32], id[32];
			const char *row[3] = { t, x, id };

			kb_md_fmt_duration(t, sizeof(t), kb_json_num(h, "t_s", NAN));
			kb_md_fmt_speedup(x, sizeof(x), kb_json_num(h, "speedup", NAN));
			snprintf(id, sizeof(id), "%.0f", kb_json_num(h, "candidate_id", NAN));
			kb_md_table_row(out, row, 3);
		}
	}
	strbuf_addstr(out, "\n### LLM verifiers\n\n");
	if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(vf, "enabled"))) {
		strbuf_addstr(out, "Off ([search] llm_verifiers = off).\n");
	} else {
		char p[16], r[16];

		pct(p, sizeof(p), kb_json_num(vf, "precision", NAN));
		pct(r, sizeof(r), kb_json_num(vf, "recall", NAN));
		strbuf_addf(out, "Precision %s, recall %s (%.0f true and %.0f false rejections, %.0f missed, %.0f "
			    "rightly passed). A rejection by the compile, numerics or memory verifier is a "
			    "positive; the harness's verdict is the truth. Rejected kernels are only run when "
			    "audited, so precision rests on the audited share.\n", p, r, kb_json_num(vf, "tp", NAN),
			    kb_json_num(vf, "fp", NAN), kb_json_num(vf, "fn", NAN), kb_json_num(vf, "tn", NAN));
		each_verifier(out, cJSON_GetObjectItemCaseSensitive(vf, "each"));
	}
	strbuf_release(&sb);
}
