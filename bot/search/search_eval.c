#include "core/common.h"
#include "core/json.h"
#include "search/search_priv.h"
#include "core/log.h"
#include "core/progress.h"
#include "core/signals.h"
#include "core/state.h"
#include "core/util.h"
#include "search/behavior.h"
#include "search/extract.h"
#include "search/llm_verifiers.h"
#include "templates/tune.h"
#include "verifier/evidence.h"
#include "verifier/harness_client.h"
#include "verifier/static_check.h"

#include <math.h>

struct kb_search_cand *srch_cand_new(const struct srch *s, const char *proposer, const char *source,
				     int64_t g, int64_t island, int64_t slot, int64_t round)
{
	struct kb_search_cand *c = xmalloc(sizeof(*c));

	kb_search_cand_init(c);
	c->proposer = xstrdup(proposer);
	c->source = xstrdup(source);
	kb_source_hash(source, c->hash);
	c->backend = xstrdup(s->backend);
	c->generation = g;
	c->island = island;
	c->slot = slot;
	c->round = round;
	return c;
}

static void cands_push(struct srch *s, struct kb_search_cand *c)
{
	if (s->nr_cands == s->alloc_cands) {
		s->alloc_cands = s->alloc_cands ? 2 * s->alloc_cands : 32;
		s->cands = xrealloc(s->cands, s->alloc_cands * sizeof(*s->cands));
	}
	s->cands[s->nr_cands++] = c;
}

int srch_register(struct srch *s, struct kb_search_cand *c, struct kb_search_cand **out)
{
	int rc;

	*out = NULL;
	for (size_t i = 0; i < s->nr_cands; i++) {
		struct kb_search_cand *e = s->cands[i];

		if (strcmp(e->hash, c->hash))
			continue;
		if (e->call_key && c->call_key && !strcmp(e->call_key, c->call_key)) {
			/* proposed before a kill: its outcome (if any) stands */
			e->slot = c->slot;
			e->round = c->round;
			*out = e;
		} else {
			log_info("search: %s proposal %s duplicates candidate %lld", c->proposer,
				 c->call_key ? c->call_key : "", (long long)e->id);
			kb_progress_note(s->pg, "%s proposal: same kernel as #%lld (dropped)", c->proposer,
					 (long long)e->id);
		}
		kb_search_cand_free(c);
		return 0;
	}
	rc = kb_search_db_cand_insert(s->st, s->row.id, c);
	if (rc == KB_EEXISTS) {
		kb_search_cand_free(c);
		return 0;
	}
	if (rc) {
		kb_search_cand_free(c);
		return -1;
	}
	cands_push(s, c);
	*out = c;
	return 0;
}

struct kb_search_cand *srch_cand(const struct srch *s, int64_t id)
{
	/* ids grow with the array: binary search */
	size_t lo = 0, hi = s->nr_cands;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (s->cands[mid]->id == id)
			return s->cands[mid];
		if (s->cands[mid]->id < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

bool srch_is_llm_proposer(const char *p)
{
	return p && strcmp(p, "template") && strcmp(p, "tune");
}

struct kb_search_cand *srch_best(const struct srch *s, const int64_t *skip, size_t nr_skip, bool llm_only)
{
	struct kb_search_cand *best = NULL;

	for (size_t i = 0; i < s->nr_cands; i++) {
		struct kb_search_cand *c = s->cands[i];
		bool skipped = false;

		if (strcmp(c->verdict, "verified") || !isfinite(c->speedup) || c->speedup <= 0)
			continue;
		if (llm_only && !srch_is_llm_proposer(c->proposer))
			continue;
		for (size_t k = 0; k < nr_skip; k++)
			skipped = skipped || skip[k] == c->id;
		if (!skipped && (!best || c->speedup > best->speedup))
			best = c;
	}
	return best;
}

/* Decided before any build: a finding is the candidate's "static" rejection. */
static bool static_reject(struct srch *s, struct kb_search_cand *c)
{
	struct kb_findings f = KB_FINDINGS_INIT;
	struct strbuf sb = STRBUF_INIT;
	enum kb_kernel_abi abi = kb_source_abi(c->source, strlen(c->source));
	bool rejected = false;

	cJSON_Delete(c->reasons);
	c->reasons = cJSON_CreateArray();
	if (abi != KB_ABI_NATIVE) {
		cJSON *r = cJSON_CreateObject();

		cJSON_AddStringToObject(r, "check", "static");
		cJSON_AddStringToObject(r, "message", abi == KB_ABI_TORCH_EXT
					? "a torch extension: the search takes native-ABI kernels only (kb_forward)"
					: abi == KB_ABI_MODELNEW
					? "a KernelBench ModelNew: the search takes native-ABI kernels only (kb_forward)"
					: "defines no kb_forward");
		cJSON_AddItemToArray(c->reasons, r);
		rejected = true;
	} else if (kb_static_check(c->source, strlen(c->source), KB_ABI_NATIVE, &f) > 0) {
		for (size_t i = 0; i < f.nr; i++) {
			cJSON *r = cJSON_CreateObject();

			strbuf_reset(&sb);
			strbuf_addf(&sb, "line %d: %s: %s", f.v[i].line, f.v[i].rule, f.v[i].message);
			cJSON_AddStringToObject(r, "check", "static");
			cJSON_AddStringToObject(r, "message", sb.buf);
			cJSON_AddItemToArray(c->reasons, r);
		}
		rejected = true;
	}
	if (!rejected) {
		cJSON_Delete(c->reasons);
		c->reasons = NULL;
	} else {
		kb_strlcpy(c->verdict, "static", sizeof(c->verdict));
	}
	kb_findings_release(&f);
	strbuf_release(&sb);
	return rejected;
}

/* A candidate the verifiers rejected is evaluated anyway for this share of hashes (deterministic). */
static bool audit_draw(const struct srch *s, const struct kb_search_cand *c)
{
	uint64_t h = 0;

	for (int i = 0; i < 8 && c->hash[i]; i++) {
		int ch = c->hash[i];

		h = h * 16 + (uint64_t)(ch <= '9' ? ch - '0' : ch - 'a' + 10);
	}
	return (double)h / 4294967296.0 < s->cfg->search_verifier_audit;
}

static void note_failure(struct srch *s, const struct kb_search_cand *c)
{
	struct strbuf sb = STRBUF_INIT;

	/* a point is a constant's value, not a lesson, and is tuned in the model's waits: its
	 * failures must not steer the rewrites, which follow the order of completions */
	if (!strcmp(c->proposer, "tune"))
		return;
	kb_reasons_first(c->reasons, &sb);
	srch_diagnose(s, c->id, "%s kernel #%lld: %s: %s", c->proposer, (long long)c->id, c->verdict,
		      sb.len ? sb.buf : "no reason given");
	strbuf_release(&sb);
}

struct eval_ctx {
	struct srch *s;
	struct kb_search_cand **to_run;
	size_t done;
};

static void on_eval(size_t i, const char *kernel_path, const cJSON *ev, void *payload)
{
	struct eval_ctx *ec = payload;
	struct srch *s = ec->s;
	struct kb_search_cand *c = ec->to_run[i];
	const char *verdict = kb_evidence_verdict(ev);
	const cJSON *summary = cJSON_GetObjectItemCaseSensitive(ev, "summary");
	const cJSON *kb = cJSON_GetObjectItemCaseSensitive(ev, "kernelbot");
	const cJSON *build = cJSON_GetObjectItemCaseSensitive(kb, "build");
	const cJSON *reasons = cJSON_GetObjectItemCaseSensitive(ev, "reasons"), *r;
	struct kb_behavior b;
	struct strbuf detail = STRBUF_INIT;
	bool has_build = false, has_static = false;

	cJSON_ArrayForEach(r, reasons) {
		const char *check = kb_json_str(r, "check");

		has_build = has_build || (check && !strcmp(check, "build"));
		has_static = has_static || (check && !strcmp(check, "static"));
	}
	if (!strcmp(verdict, "verified")) {
		const cJSON *ge = cJSON_GetObjectItemCaseSensitive(summary, "geomean_speedup_eager");
		const cJSON *gc = cJSON_GetObjectItemCaseSensitive(summary, "geomean_speedup_compile");

		kb_strlcpy(c->verdict, "verified", sizeof(c->verdict));
		c->speedup = cJSON_IsNumber(ge) ? ge->valuedouble : NAN;
		c->speedup_compile = cJSON_IsNumber(gc) ? gc->valuedouble : NAN;
	} else if (!strcmp(verdict, "rejected")) {
		kb_strlcpy(c->verdict, has_build ? "build" : has_static ? "static" : "rejected", sizeof(c->verdict));
	} else {
		kb_strlcpy(c->verdict, "error", sizeof(c->verdict));
	}
	cJSON_Delete(c->reasons);
	c->reasons = cJSON_IsArray(reasons) ? cJSON_Duplicate(reasons, true) : NULL;
	cJSON_Delete(c->build_info);
	c->build_info = cJSON_IsObject(build) ? cJSON_Duplicate(build, true) : NULL;
	cJSON_Delete(c->evidence);
	c->evidence = cJSON_Duplicate(ev, true);
	kb_behavior_score(c->source, s->o->backend, &b);
	c->cell = kb_behavior_cell(&b);
	if (kb_search_db_cand_update(s->st, c))
		log_warn("search: the outcome of candidate %lld was not stored", (long long)c->id);
	s->evaluated++;

	strbuf_addf(&detail, "#%lld %s", (long long)c->id, c->proposer);
	if (!strcmp(c->verdict, "verified")) {
		strbuf_addstr(&detail, ": ");
		srch_fmt_speedup(c->speedup, &detail);
	} else {
		/* "build: compile failed ...", "rejected: correctness: ..." */
		if (strcmp(c->verdict, "build") && strcmp(c->verdict, "static"))
			strbuf_addf(&detail, ": %s", c->verdict);
		strbuf_addstr(&detail, ": ");
		kb_reasons_first(c->reasons, &detail);
		note_failure(s, c);
	}
	ec->done++;
	kb_progress_step(s->pg, ec->done, detail.buf);
	strbuf_release(&detail);
	(void)kernel_path;
}

/* Build and run the candidates of to_run (all still unjudged) in the harness worker. */
static int evaluate(struct srch *s, struct kb_search_cand **to_run, size_t m, const char *stage)
{
	const char **paths = xcalloc(m ? m : 1, sizeof(*paths));
	cJSON **evs = xcalloc(m ? m : 1, sizeof(*evs));
	int64_t final_seeds = srch_final_seeds(s);
	struct kb_eval_opts eo = {
		.operator_path = s->o->operator_path, .mode = "bench", .pass = s->pass,
		.backend = s->o->backend, .seeds = final_seeds < KB_TUNE_SEEDS ? final_seeds : KB_TUNE_SEEDS,
		.timing = true,
		/* a hung build or kernel cannot eat the final checks' reserve */
		.deadline_ms = srch_work_deadline_ms(s),
		/* the replies that come meanwhile are taken (and their next calls asked) at once */
		.idle = s->idle, .idle_arg = s->flow,
	};
	struct eval_ctx ec = { .s = s, .to_run = to_run };
	struct strbuf path = STRBUF_INIT;
	struct kb_config tcfg;
	int rc = 0;

	if (kb_mkdir_p(s->work.buf, 0755)) {
		rc = error_errno("could not create '%s'", s->work.buf);
		goto out;
	}
	for (size_t i = 0; i < m; i++) {
		strbuf_reset(&path);
		strbuf_addf(&path, "%s/%.16s%s", s->work.buf, to_run[i]->hash, s->ext);
		if (kb_write_file_atomic(path.buf, to_run[i]->source, strlen(to_run[i]->source))) {
			rc = error_errno("could not write '%s'", path.buf);
			goto out;
		}
		paths[i] = xstrdup(path.buf);
	}
	kb_progress_stage(s->pg, stage, m);
	/* fitness is the speedup over eager; torch.compile only in the final check */
	tcfg = *s->cfg;
	tcfg.baselines = (char *)"eager";
	s->vf->cfg = &tcfg;
	kb_verifier_use_worker(s->vf);
	rc = kb_verifier_evaluate_many(s->vf, &eo, paths, m, evs, on_eval, &ec);
	s->vf->cfg = s->cfg;
out:
	for (size_t i = 0; i < m; i++) {
		cJSON_Delete(evs[i]);
		free((char *)paths[i]);
	}
	free(evs);
	free(paths);
	strbuf_release(&path);
	return rc;
}

double srch_best_so_far(const struct srch *s)
{
	return s->best_fitness > s->tuner.best ? s->best_fitness : s->tuner.best;
}

/*
 * c verified: the archive's best (best_fitness) or the tuner's (a point)
 * moves up; the best so far (best_id, the history) when c beats both.
 */
static void record_best(struct srch *s, const struct kb_search_cand *c)
{
	double so_far = srch_best_so_far(s);

	if (!strcmp(c->proposer, "tune")) {
		if (c->speedup > s->tuner.best)
			s->tuner.best = c->speedup;
	} else if (c->speedup > s->best_fitness) {
		s->best_fitness = c->speedup;
	}
	if (!(c->speedup > so_far))
		return;
	s->best_id = c->id;
	if (s->nr_hist == s->alloc_hist) {
		s->alloc_hist = s->alloc_hist ? 2 * s->alloc_hist : 16;
		s->hist = xrealloc(s->hist, s->alloc_hist * sizeof(*s->hist));
	}
	s->hist[s->nr_hist].t_s = srch_wall_s(s);
	s->hist[s->nr_hist].best = c->speedup;
	s->hist[s->nr_hist].candidate_id = c->id;
	s->nr_hist++;
	kb_progress_note(s->pg, "new best: #%lld (%s%s%s), %.2fx", (long long)c->id, c->proposer,
			 c->model ? ", " : "", c->model ? c->model : "", c->speedup);
}

/*
 * A candidate that would become the search's best is verified again, with
 * the final check's seeds (untimed, in the worker), before it is archived.
 * Two screening seeds can miss what more trials show (a result kept from
 * an earlier call, a kernel wrong only for large or tiny inputs): such a
 * kernel must not own the archive, be mutated as its best parent
 * generation after generation and crowd the final check. Rejected there,
 * it is stored with those reasons and never offered. No confirmation
 * when the final check has no more seeds than the screening, or when the
 * budget leaves no time for it (the final check still walks past it).
 */
static int confirm_best(struct srch *s, struct kb_search_cand *c)
{
	int64_t seeds = srch_final_seeds(s);
	struct kb_eval_opts eo = {
		.operator_path = s->o->operator_path, .mode = "verify", .pass = s->pass,
		.backend = s->o->backend, .seeds = seeds, .deadline_ms = srch_work_deadline_ms(s),
	};
	struct strbuf path = STRBUF_INIT, sb = STRBUF_INIT;
	const char *kernel;
	cJSON *ev = NULL;
	int rc;

	if (seeds <= KB_TUNE_SEEDS || !kb_budget_may_start(&s->clock, kb_now_ms(), 1))
		return 0;
	strbuf_addf(&path, "%s/%.16s%s", s->work.buf, c->hash, s->ext);
	kernel = path.buf;
	if (kb_mkdir_p(s->work.buf, 0755) || kb_write_file_atomic(path.buf, c->source, strlen(c->source))) {
		rc = error_errno("could not write '%s'", path.buf);
		goto out;
	}
	kb_progress_activity(s->pg, "#%lld: a new best, verified again with %lld seeds", (long long)c->id,
			     (long long)seeds);
	kb_verifier_use_worker(s->vf);
	rc = kb_verifier_evaluate_many(s->vf, &eo, &kernel, 1, &ev, NULL, NULL);
	if (rc || !strcmp(kb_evidence_verdict(ev), "verified"))
		goto out;
	kb_strlcpy(c->verdict, strcmp(kb_evidence_verdict(ev), "rejected") ? "error" : "rejected",
		   sizeof(c->verdict));
	cJSON_Delete(c->reasons);
	c->reasons = cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(ev, "reasons"), true);
	cJSON_Delete(c->evidence);
	c->evidence = ev;
	ev = NULL;
	if (kb_search_db_cand_update(s->st, c))
		log_warn("search: the outcome of candidate %lld was not stored", (long long)c->id);
	kb_reasons_first(c->reasons, &sb);
	kb_progress_note(s->pg, "#%lld %s passed the screening (%.2fx) but not %lld seeds: %s", (long long)c->id,
			 c->proposer, c->speedup, (long long)seeds, sb.buf);
	note_failure(s, c);
out:
	cJSON_Delete(ev);
	strbuf_release(&path);
	strbuf_release(&sb);
	return rc;
}

/* Offer the verified candidates of a batch to their island's archive (a new best confirmed first). */
static int offer_batch(struct srch *s, struct kb_search_cand **batch, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		struct kb_search_cand *c = batch[i];
		struct kb_prompt *p;

		if (strcmp(c->verdict, "verified") || !isfinite(c->speedup) || c->speedup <= 0 || c->cell < 0)
			continue;
		if (c->speedup > s->best_fitness) {
			int rc = confirm_best(s, c);

			if (rc)
				return rc;
			if (strcmp(c->verdict, "verified"))
				continue;
		}
		if (kb_archive_offer(&s->archive, (size_t)c->island % s->nr_islands, c->cell, c->id, c->speedup) < 0)
			log_warn("search: candidate %lld could not be offered to the archive", (long long)c->id);
		p = c->prompt_id ? srch_prompt(s, c->prompt_id) : NULL;
		if (p)
			kb_prompt_credit(p, c->speedup);
		record_best(s, c);
	}
	return 0;
}

int srch_screen_static(struct srch *s, struct kb_search_cand *c, bool *rejected)
{
	*rejected = static_reject(s, c);
	if (!*rejected)
		return 0;
	if (kb_search_db_cand_update(s->st, c))
		return -1;
	note_failure(s, c);
	kb_progress_note(s->pg, "#%lld %s: static: %s", (long long)c->id, c->proposer,
			 kb_json_str(cJSON_GetArrayItem(c->reasons, 0), "message"));
	return 0;
}

/* c's reasons: the verifiers that said FAIL, with their notes. */
static void filtered_reasons(struct kb_search_cand *c)
{
	const cJSON *v;

	cJSON_Delete(c->reasons);
	c->reasons = cJSON_CreateArray();
	cJSON_ArrayForEach(v, c->verifiers) {
		const char *verdict = kb_json_str(v, "verdict");
		cJSON *r;

		if (!verdict || strcmp(verdict, "FAIL"))
			continue;
		r = cJSON_CreateObject();
		cJSON_AddStringToObject(r, "check", "llm_verifier");
		cJSON_AddStringToObject(r, "verifier", v->string);
		cJSON_AddStringToObject(r, "message", kb_json_str(v, "note") ? kb_json_str(v, "note") : "");
		cJSON_AddItemToArray(c->reasons, r);
	}
}

int srch_screen_llm(struct srch *s, struct kb_search_cand *c, bool pass, bool *run)
{
	*run = true;
	if (!pass) {
		bool audited = audit_draw(s, c);

		cJSON_DeleteItemFromObjectCaseSensitive(c->verifiers, "audited");
		cJSON_AddBoolToObject(c->verifiers, "audited", audited);
		c->audited = audited;
		if (!audited) {
			kb_strlcpy(c->verdict, "filtered", sizeof(c->verdict));
			filtered_reasons(c);
			kb_progress_note(s->pg, "#%lld %s: filtered by the llm verifiers", (long long)c->id,
					 c->proposer);
			note_failure(s, c);
			*run = false;
		}
	}
	return kb_search_db_cand_update(s->st, c) ? -1 : 0;
}

int srch_run_batch(struct srch *s, struct kb_search_cand **to_run, size_t m, struct kb_search_cand **batch,
		   size_t n, const char *stage)
{
	int64_t t0;
	int rc = 0;

	if (m && !kb_budget_may_start(&s->clock, kb_now_ms(), m)) {
		srch_cut_short(s, "the time budget ran out (%zu more candidate%s and the final check would "
			       "take about %lld s)", m, m == 1 ? "" : "s",
			       (long long)((kb_budget_estimate_ms(&s->clock, m) +
					    kb_budget_reserve_ms(&s->clock)) / 1000));
		m = 0;
	}
	if (m && kb_stop_requested())
		return KB_ECANCELLED;
	t0 = kb_now_ms();
	if (m)
		rc = evaluate(s, to_run, m, stage);
	if (!rc)
		rc = offer_batch(s, batch, n);
	/* the confirmations are part of what a batch costs */
	if (!rc && m)
		kb_budget_spent(&s->clock, kb_now_ms() - t0, m);
	return rc;
}

int srch_reply_cand(struct srch *s, const char *proposer, const struct kb_llm_reply *reply, const char *key,
		    const struct kb_search_cand *like, struct kb_search_cand **out)
{
	struct strbuf code = STRBUF_INIT, why = STRBUF_INIT;
	struct kb_search_cand *c;
	int rc = 0;

	*out = NULL;
	if (srch_extract(reply->text.buf, &code, &why)) {
		kb_progress_note(s->pg, "%s reply (%s): %s", proposer, reply->model, why.buf);
		srch_diagnose(s, 0, "a %s reply had no usable kernel: %s", proposer, why.buf);
		goto out;
	}
	if (why.len)
		kb_progress_note(s->pg, "%s reply (%s): %s", proposer, reply->model, why.buf);
	c = srch_cand_new(s, proposer, code.buf, like->generation, like->island, like->slot, like->round);
	c->model = xstrdup(reply->model);
	c->call_key = xstrdup(key);
	c->parent_id = like->parent_id;
	c->second_parent_id = like->second_parent_id;
	c->prompt_id = like->prompt_id;
	rc = srch_register(s, c, out);
out:
	strbuf_release(&code);
	strbuf_release(&why);
	return rc;
}

int srch_run_points(struct srch *s, struct kb_search_cand **points, size_t n)
{
	struct kb_search_cand **to_run = xcalloc(n ? n : 1, sizeof(*to_run));
	size_t m = 0;
	int64_t t0;
	int rc = 0;

	for (size_t i = 0; i < n && !rc; i++) {
		bool rejected;

		rc = srch_screen_static(s, points[i], &rejected);
		if (!rc && !rejected)
			to_run[m++] = points[i];
	}
	if (!rc && m && kb_stop_requested())
		rc = KB_ECANCELLED;
	if (rc || !m)
		goto out;
	t0 = kb_now_ms();
	rc = evaluate(s, to_run, m, "tune");
	for (size_t i = 0; i < m && !rc; i++) {
		struct kb_search_cand *c = to_run[i];

		if (strcmp(c->verdict, "verified") || !isfinite(c->speedup) || c->speedup <= 0)
			continue;
		if (c->speedup > srch_best_so_far(s))
			rc = confirm_best(s, c);
		if (!rc && !strcmp(c->verdict, "verified"))
			record_best(s, c);
	}
	if (!rc)
		kb_budget_spent(&s->clock, kb_now_ms() - t0, m);
	s->tuner.points += m;
out:
	free(to_run);
	return rc;
}
