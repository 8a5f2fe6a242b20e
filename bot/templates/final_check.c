/*
 * The final check, shared by the tuner and the LLM search: the pass/forward
 * pairing (a backward kernel ships its forward too, so the forward must
 * verify as well before the kernel is published) and the walk over the
 * candidates, best first, until one passes (final_check.h).
 */
#include "templates/final_check.h"
#include "templates/tune.h"
#include "core/util.h"
#include "verifier/evidence.h"

int kb_final_check_pass(kb_final_check_fn check, void *ctx, const char *pass, cJSON **evidence,
			cJSON **forward, bool *cached, bool *fwd_failed)
{
	bool fwd_cached = true;
	int rc;

	*evidence = NULL;
	*forward = NULL;
	*fwd_failed = false;
	rc = check(ctx, pass, true, evidence, cached);
	if (rc || strcmp(kb_evidence_verdict(*evidence), "verified") || strcmp(pass, "backward"))
		return rc;
	rc = check(ctx, "forward", false, forward, &fwd_cached);
	if (rc)
		return rc;
	if (strcmp(kb_evidence_verdict(*forward), "verified")) {
		/* the forward's failure decides: the kernel cannot ship */
		cJSON_Delete(*evidence);
		*evidence = cJSON_Duplicate(*forward, true);
		*fwd_failed = true;
	}
	*cached = *cached && fwd_cached;
	return 0;
}

static void walk_skip(struct kb_final_walk *w, int64_t id)
{
	if (w->nr_skip == w->alloc_skip) {
		w->alloc_skip = w->alloc_skip ? 2 * w->alloc_skip : 8;
		w->skip = xrealloc(w->skip, w->alloc_skip * sizeof(*w->skip));
	}
	w->skip[w->nr_skip++] = id;
}

int kb_final_walk(struct kb_final_walk *w)
{
	int rc = 0;

	cJSON_Delete(w->evidence);
	w->evidence = NULL;
	w->passed = -1;
	w->cached = false;
	w->nr_skip = 0;
	w->out_of_time = false;
	for (;;) {
		int64_t id = w->next(w->ctx, w->skip, w->nr_skip);
		int64_t now;
		cJSON *ev = NULL;
		bool cached = false, fwd_failed = false;

		if (id < 0)
			break;
		now = w->now ? w->now(w->ctx) : kb_now_ms();
		/* the first try was held in reserve; a known verdict costs nothing */
		if (w->nr_skip && w->budget && !(w->known && w->known(w->ctx, id)) &&
		    !kb_budget_may_check(w->budget, now, w->checks_per_try)) {
			w->out_of_time = true;
			break;
		}
		rc = w->check(w->ctx, id, &ev, &cached, &fwd_failed);
		if (rc) {
			cJSON_Delete(ev);
			break;
		}
		if (!strcmp(kb_evidence_verdict(ev), "verified")) {
			w->passed = id;
			w->evidence = ev;
			w->cached = cached;
			break;
		}
		if (w->failed)
			w->failed(w->ctx, id, ev, fwd_failed);
		walk_skip(w, id);
		cJSON_Delete(ev);
	}
	return rc;
}

void kb_final_walk_release(struct kb_final_walk *w)
{
	cJSON_Delete(w->evidence);
	w->evidence = NULL;
	FREE_AND_NULL(w->skip);
	w->nr_skip = w->alloc_skip = 0;
}
