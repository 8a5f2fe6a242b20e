#include "core/common.h"
#include "search/search_priv.h"
#include "core/log.h"
#include "core/progress.h"
#include "core/signals.h"
#include "core/util.h"
#include "llm/pool.h"
#include "search/extract.h"
#include "templates/tune.h"
#include "verifier/harness_client.h"
#include "verifier/harness_pool.h"

#include <math.h>

/*
 * Template parameter tuning of LLM kernels (search_priv.h). A templatized
 * kernel's space is searched with the built-in autotuner's strategy
 * (struct kb_search, templates/tune.h: every point of a small space, else
 * a sample and coordinate refinement around the best), each point
 * rendered and evaluated as a candidate of proposer "tune" without the
 * LLM verifiers (a point is the same kernel with other constants).
 *
 * The points are evaluated when the harness would otherwise idle: a
 * search waiting on its models (20-30 s a call) leaves the GPU idle most
 * of the time, and a search cut short by its time budget never reached a
 * tuning step at its end. Which points run in the waits depends on time,
 * so the points stay out of the archive (srch_run_points). A resumed run
 * or a replay asks the same rewrite under the same key (the base's own
 * place) and finds its points decided: none is evaluated twice.
 */

static void base_release(struct srch_tune_base *b)
{
	kb_search_release(&b->ks);
	free(b->points);
	free(b->code);
	free(b->key);
	free(b->model);
}

void srch_tuner_release(struct srch *s)
{
	for (size_t i = 0; i < s->tuner.nr; i++)
		base_release(&s->tuner.q[i]);
	free(s->tuner.q);
	free(s->tuner.asked);
	memset(&s->tuner, 0, sizeof(s->tuner));
}

static bool asked(const struct srch *s, int64_t id)
{
	for (size_t i = 0; i < s->tuner.nr_asked; i++)
		if (s->tuner.asked[i] == id)
			return true;
	return false;
}

struct kb_search_cand *srch_tune_wanted(struct srch *s)
{
	struct kb_search_cand *best = NULL;

	if (!s->cfg->search_tune_templates || s->cut_short)
		return NULL;
	/*
	 * The archive as committed (what a resumed run of this generation sees
	 * too): its fittest LLM elite this run has not had rewritten. Once the
	 * best is tuned, the elites of the other cells are: a different design
	 * with the right constants may beat it.
	 */
	for (size_t i = 0; i < s->nr_islands; i++)
		for (int cell = 0; cell < KB_BEHAVIOR_CELLS; cell++) {
			const struct kb_elite *e = kb_archive_get(&s->archive, i, cell);
			struct kb_search_cand *c = e ? srch_cand(s, e->candidate_id) : NULL;

			if (c && srch_is_llm_proposer(c->proposer) && !asked(s, c->id) &&
			    (!best || c->speedup > best->speedup))
				best = c;
		}
	return best;
}

int srch_tune_prompt(struct srch *s, const struct kb_search_cand *base, struct strbuf *prompt)
{
	struct kb_prompt_vars v = KB_PROMPT_VARS_INIT;
	struct strbuf sb = STRBUF_INIT;
	int rc;

	if (s->tuner.nr_asked == s->tuner.alloc_asked) {
		s->tuner.alloc_asked = s->tuner.alloc_asked ? 2 * s->tuner.alloc_asked : 8;
		s->tuner.asked = xrealloc(s->tuner.asked, s->tuner.alloc_asked * sizeof(*s->tuner.asked));
	}
	s->tuner.asked[s->tuner.nr_asked++] = base->id;
	kb_prompt_var(&v, "parent_source", base->source);
	srch_fmt_speedup(base->speedup, &sb);
	kb_prompt_var(&v, "parent_speedup", sb.buf);
	strbuf_reset(prompt);
	rc = srch_render(s, T_TEMPLATIZE, &v, prompt);
	kb_prompt_vars_release(&v);
	strbuf_release(&sb);
	return rc;
}

int srch_tune_take(struct srch *s, const struct kb_search_cand *base, const char *key,
		   const struct kb_llm_reply *reply)
{
	struct strbuf code = STRBUF_INIT, why = STRBUF_INIT;
	struct srch_tune_base *b;
	struct kb_tparams tp;
	size_t radix[KB_TPARAM_MAX];
	int rc = 0;

	if (srch_extract(reply->text.buf, &code, &why)) {
		kb_progress_note(s->pg, "tuning #%lld: the reply has no kernel: %s", (long long)base->id, why.buf);
		goto out;
	}
	if (why.len)
		kb_progress_note(s->pg, "tuning #%lld: %s", (long long)base->id, why.buf);
	if (kb_tparams_parse(code.buf, &tp, &why)) {
		kb_progress_note(s->pg, "tuning #%lld: bad kb-tune parameters: %s", (long long)base->id, why.buf);
		goto out;
	}
	if (!tp.nr) {
		kb_progress_note(s->pg, "tuning #%lld: the rewrite has no kb-tune parameters", (long long)base->id);
		goto out;
	}
	if (s->tuner.nr == s->tuner.alloc) {
		s->tuner.alloc = s->tuner.alloc ? 2 * s->tuner.alloc : 4;
		s->tuner.q = xrealloc(s->tuner.q, s->tuner.alloc * sizeof(*s->tuner.q));
	}
	b = &s->tuner.q[s->tuner.nr];
	memset(b, 0, sizeof(*b));
	for (size_t i = 0; i < tp.nr; i++)
		radix[i] = tp.p[i].nr_values;
	/* the whole space when it fits the point budget: the points use the harness's idle time */
	if (kb_search_init(&b->ks, radix, tp.nr, (size_t)s->cfg->search_tune_points, (size_t)s->cfg->search_tune_points,
			   (size_t)s->cfg->tune_refine_rounds, s->seed ^ 0x74756e655f6c6c6dULL)) {
		rc = -1;
		goto out;
	}
	s->tuner.nr++;
	b->base_id = base->id;
	b->base_fit = base->speedup;
	b->g = s->generation;
	b->tp = tp;
	b->code = strbuf_detach(&code, NULL);
	b->key = xstrdup(key);
	b->model = xstrdup(reply->model);
	b->points = xcalloc(b->ks.max_points, sizeof(*b->points));
	b->best_index = SIZE_MAX;
	kb_progress_note(s->pg, "tuning #%lld: rewritten with %zu parameter%s, %zu point%s", (long long)base->id,
			 tp.nr, tp.nr == 1 ? "" : "s", b->ks.total, b->ks.total == 1 ? "" : "s");
out:
	strbuf_release(&code);
	strbuf_release(&why);
	return rc;
}

bool srch_tune_ready(struct srch *s)
{
	return s->tuner.nr && !s->cut_short && kb_budget_may_start(&s->clock, kb_now_ms(), 1);
}

/* A verified point of b: the best one so far moves up. */
static void note_point(struct srch_tune_base *b, const struct kb_search_cand *c)
{
	if (!strcmp(c->verdict, "verified") && isfinite(c->speedup) && c->speedup > b->best_fit) {
		b->best_fit = c->speedup;
		b->best_index = (size_t)c->slot;
	}
}

/* b's space is done: its best point named, b out of the queue. */
static void base_done(struct srch *s, size_t bi)
{
	struct srch_tune_base *b = &s->tuner.q[bi];

	if (b->best_index != SIZE_MAX) {
		struct strbuf name = STRBUF_INIT;
		size_t digits[KB_TPARAM_MAX];

		kb_search_digits(&b->ks, b->best_index, digits);
		kb_tparams_point_name(&b->tp, digits, &name);
		kb_progress_note(s->pg, "tuning #%lld: best point %s, %.2fx", (long long)b->base_id, name.buf,
				 b->best_fit);
		strbuf_release(&name);
	} else if (b->fresh) {
		kb_progress_note(s->pg, "tuning #%lld: no point verified", (long long)b->base_id);
	} else {
		kb_progress_note(s->pg, "tuning #%lld: every point is a kernel the search holds already",
				 (long long)b->base_id);
	}
	base_release(b);
	memmove(b, b + 1, (s->tuner.nr - bi - 1) * sizeof(*b));
	s->tuner.nr--;
}

/* The next point of b not decided yet, registered; NULL when b's space is done. -1 on a store error. */
static int next_point(struct srch *s, struct srch_tune_base *b, struct kb_search_cand **out)
{
	struct strbuf src = STRBUF_INIT, ckey = STRBUF_INIT;
	size_t digits[KB_TPARAM_MAX];
	int rc = 0;

	*out = NULL;
	while (!*out && !rc) {
		struct kb_search_cand *c, *got = NULL;
		size_t point;

		if (b->at == b->nr_points) {
			b->nr_points = kb_search_next(&b->ks, b->best_index, b->points);
			b->at = 0;
			if (!b->nr_points)
				break;
		}
		point = b->points[b->at++];
		kb_search_digits(&b->ks, point, digits);
		strbuf_reset(&src);
		kb_tparams_render(b->code, &b->tp, digits, &src);
		c = srch_cand_new(s, "tune", src.buf, b->g, 0, (int64_t)point, 0);
		strbuf_reset(&ckey);
		strbuf_addf(&ckey, "%s/p%zu", b->key, point);
		c->call_key = xstrdup(ckey.buf);
		c->model = xstrdup(b->model);
		c->parent_id = b->base_id;
		c->prompt_id = srch_cand(s, b->base_id) ? srch_cand(s, b->base_id)->prompt_id : 0;
		rc = srch_register(s, c, &got);
		if (rc || !got)
			continue; /* a duplicate of another kernel: nothing to learn */
		b->fresh++;
		if (strcmp(got->verdict, "pending"))
			note_point(b, got); /* decided by an earlier run */
		else
			*out = got;
	}
	strbuf_release(&src);
	strbuf_release(&ckey);
	return rc;
}

/* Points one step evaluates at once: one per harness worker of the backend. */
static size_t step_width(const struct srch *s)
{
	size_t n = s->vf->pool ? s->vf->pool->nr : 1;

	if (s->o->backend == KB_BACKEND_CPU && n > (size_t)s->cfg->workers_per_device)
		n = (size_t)s->cfg->workers_per_device; /* cpu requests use the first device's workers */
	return n ? n : 1;
}

int srch_tune_step(struct srch *s)
{
	size_t width = step_width(s), m = 0;
	struct kb_search_cand **batch = xcalloc(width, sizeof(*batch));
	struct srch_tune_base *b = NULL;
	int rc = 0;

	/* the fittest base's points first */
	while (s->tuner.nr && !m && !rc) {
		size_t bi = 0;

		for (size_t i = 1; i < s->tuner.nr; i++)
			if (s->tuner.q[i].base_fit > s->tuner.q[bi].base_fit)
				bi = i;
		b = &s->tuner.q[bi];
		while (m < width && !rc) {
			struct kb_search_cand *c;

			/* a refinement round waits for the batch it refines */
			if (m && b->at == b->nr_points)
				break;
			rc = next_point(s, b, &c);
			if (rc || !c)
				break;
			batch[m++] = c;
		}
		if (!rc && !m)
			base_done(s, bi);
	}
	if (!rc && m) {
		kb_progress_activity(s->pg, "tuning #%lld in the model's waits: %zu point%s", (long long)b->base_id,
				     m, m == 1 ? "" : "s");
		int64_t base_id = b->base_id;

		rc = srch_run_points(s, batch, m);
		/* replies taken meanwhile (kb_eval_opts.idle) may have queued bases: the queue moved */
		b = NULL;
		for (size_t i = 0; i < s->tuner.nr && !b; i++)
			if (s->tuner.q[i].base_id == base_id)
				b = &s->tuner.q[i];
		for (size_t i = 0; i < m && !rc && b; i++)
			note_point(b, batch[i]);
	}
	free(batch);
	return rc;
}

int srch_tune_await(struct srch *s, struct kb_llm_pool_done *done)
{
	int rc;

	while (srch_tune_ready(s)) {
		rc = kb_llm_pool_next(s->pool, 0, done);
		if (rc != KB_ETIMEOUT)
			return rc;
		if (kb_stop_requested())
			return KB_ECANCELLED;
		rc = srch_tune_step(s);
		if (rc)
			return rc;
		/* replies taken during the step left work for the flow: it goes first */
		if (s->flow_waits && s->flow_waits(s->flow))
			return KB_ETIMEOUT;
	}
	return kb_llm_pool_next(s->pool, -1, done);
}

int srch_template_step(struct srch *s, int64_t g)
{
	struct kb_search_cand *best = srch_best(s, NULL, 0, true);
	struct strbuf prompt = STRBUF_INIT, key = STRBUF_INIT;
	struct kb_llm_reply reply;
	int rc = 0;

	kb_llm_reply_init(&reply);
	s->generation = g;
	if (!best && !s->tuner.nr) {
		kb_progress_note(s->pg, "template step: no verified LLM kernel to templatize");
		goto out;
	}
	kb_progress_stage(s->pg, "templates", 0);
	if (best && !asked(s, best->id)) {
		if (srch_tune_prompt(s, best, &prompt)) {
			rc = -1;
			goto out;
		}
		rc = srch_ask(s, best->generation, best->island, best->slot, "templatize", best->round, SIZE_MAX,
			      prompt.buf, &reply, &key);
		if (rc == KB_ECANCELLED || rc == -1)
			goto out;
		rc = rc ? 0 : srch_tune_take(s, best, key.buf, &reply);
	}
	while (!rc && s->tuner.nr && !s->cut_short) {
		if (!kb_budget_may_start(&s->clock, kb_now_ms(), 1)) {
			srch_cut_short(s, "the time budget ran out while tuning (the final check would take about %lld s)",
				       (long long)(kb_budget_reserve_ms(&s->clock) / 1000));
			break;
		}
		rc = srch_tune_step(s);
	}
out:
	kb_llm_reply_release(&reply);
	strbuf_release(&prompt);
	strbuf_release(&key);
	return rc;
}
