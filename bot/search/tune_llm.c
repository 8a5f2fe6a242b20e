#include "core/common.h"
#include "search/search_priv.h"
#include "core/log.h"
#include "core/progress.h"
#include "core/util.h"
#include "search/extract.h"
#include "templates/tune.h"

#include <math.h>

/*
 * The template step: the best LLM kernel goes back to a model with the
 * request to mark its tunable constants (`// kb-tune NAME: V1 V2 ...`,
 * extract.h); the parameter space is then searched with the built-in
 * autotuner's strategy (struct kb_search, templates/tune.h: every point
 * of a small space, else a sample and coordinate refinement around the
 * best), each point rendered and evaluated as a candidate of proposer
 * "tune" on island 0, without the LLM verifiers (a point is the same
 * kernel with other constants).
 */
int srch_template_step(struct srch *s, int64_t g)
{
	struct kb_search_cand *best = srch_best(s, NULL, 0, true), **batch = NULL;
	struct kb_prompt_vars v = KB_PROMPT_VARS_INIT;
	struct strbuf prompt = STRBUF_INIT, code = STRBUF_INIT, why = STRBUF_INIT, key = STRBUF_INIT;
	struct strbuf src = STRBUF_INIT, name = STRBUF_INIT, ckey = STRBUF_INIT, sb = STRBUF_INIT;
	struct kb_llm_reply reply;
	struct kb_tparams tp;
	struct kb_search ks;
	size_t radix[KB_TPARAM_MAX], digits[KB_TPARAM_MAX], *points = NULL, n, best_index = SIZE_MAX;
	double best_fit = 0;
	bool ks_ready = false;
	int rc = 0;

	kb_llm_reply_init(&reply);
	if (!best) {
		kb_progress_note(s->pg, "template step: no verified LLM kernel to templatize");
		goto out;
	}
	kb_progress_stage(s->pg, "templates", 0);
	kb_prompt_var(&v, "parent_source", best->source);
	srch_fmt_speedup(best->speedup, &sb);
	kb_prompt_var(&v, "parent_speedup", sb.buf);
	if (srch_render(s, T_TEMPLATIZE, &v, &prompt)) {
		rc = -1;
		goto out;
	}
	rc = srch_ask(s, g, 0, 0, "templatize", 0, SIZE_MAX, prompt.buf, &reply, &key);
	if (rc == KB_ECANCELLED || rc == -1)
		goto out;
	if (rc) {
		rc = 0;
		goto out;
	}
	if (srch_extract(reply.text.buf, &code, &why)) {
		kb_progress_note(s->pg, "template step: the reply has no kernel: %s", why.buf);
		goto out;
	}
	if (why.len)
		kb_progress_note(s->pg, "template step: %s", why.buf);
	if (kb_tparams_parse(code.buf, &tp, &why)) {
		kb_progress_note(s->pg, "template step: bad kb-tune parameters: %s", why.buf);
		goto out;
	}
	if (!tp.nr) {
		kb_progress_note(s->pg, "template step: the rewrite of #%lld has no kb-tune parameters", (long long)best->id);
		goto out;
	}
	for (size_t i = 0; i < tp.nr; i++)
		radix[i] = tp.p[i].nr_values;
	if (kb_search_init(&ks, radix, tp.nr, (size_t)(s->cfg->tune_max_points > 0 ? s->cfg->tune_max_points : 8),
			   (size_t)s->cfg->tune_exhaustive_limit, (size_t)s->cfg->tune_refine_rounds,
			   s->seed ^ 0x74756e655f6c6c6dULL)) {
		rc = -1;
		goto out;
	}
	ks_ready = true;
	points = xcalloc(ks.max_points, sizeof(*points));
	batch = xcalloc(ks.max_points, sizeof(*batch));
	kb_progress_note(s->pg, "template step: #%lld rewritten with %zu parameter%s, %zu point%s", (long long)best->id,
			 tp.nr, tp.nr == 1 ? "" : "s", ks.total, ks.total == 1 ? "" : "s");
	s->no_verifiers = true;
	while (!rc && !s->cut_short && (n = kb_search_next(&ks, best_index, points))) {
		size_t m = 0;

		for (size_t i = 0; i < n && !rc; i++) {
			struct kb_search_cand *c, *got = NULL;

			kb_search_digits(&ks, points[i], digits);
			strbuf_reset(&src);
			kb_tparams_render(code.buf, &tp, digits, &src);
			c = srch_cand_new(s, "tune", src.buf, g, 0, (int64_t)points[i], 0);
			strbuf_reset(&ckey);
			strbuf_addf(&ckey, "%s/p%zu", key.buf, points[i]);
			c->call_key = xstrdup(ckey.buf);
			c->model = xstrdup(reply.model);
			c->parent_id = best->id;
			c->prompt_id = best->prompt_id;
			rc = srch_register(s, c, &got);
			if (!rc && got)
				batch[m++] = got;
		}
		if (!rc && m)
			rc = srch_process(s, batch, m, "templates");
		for (size_t i = 0; i < m; i++)
			if (!strcmp(batch[i]->verdict, "verified") && batch[i]->speedup > best_fit) {
				best_fit = batch[i]->speedup;
				best_index = (size_t)batch[i]->slot;
			}
		if (best_index != SIZE_MAX) {
			strbuf_reset(&name);
			kb_search_digits(&ks, best_index, digits);
			kb_tparams_point_name(&tp, digits, &name);
			kb_progress_note(s->pg, "template step: best point %s, %.2fx", name.buf, best_fit);
		}
	}
	s->no_verifiers = false;
out:
	if (ks_ready)
		kb_search_release(&ks);
	free(points);
	free(batch);
	kb_llm_reply_release(&reply);
	kb_prompt_vars_release(&v);
	strbuf_release(&prompt);
	strbuf_release(&code);
	strbuf_release(&why);
	strbuf_release(&key);
	strbuf_release(&src);
	strbuf_release(&name);
	strbuf_release(&ckey);
	strbuf_release(&sb);
	return rc;
}
