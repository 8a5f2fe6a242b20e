#ifndef KB_FINAL_CHECK_H
#define KB_FINAL_CHECK_H
/*
 * The final walk: what a run publishes is the best candidate that passes
 * its final check (a fresh harness process, the full seeds, timing), not
 * merely the best the screening saw. Candidates are tried best first; one
 * that fails is skipped and the next is tried, as long as the time budget
 * lets one more check start: the first try always runs, a try whose
 * verdict is already known (cached) always, any other only while
 * kb_budget_may_check says it ends by the deadline. Without a budget the
 * walk goes on until a candidate passes or none is left, so an honest
 * verified kernel is published whenever one exists, however many kernels
 * the screening wrongly ranked above it.
 *
 * The caller names candidates by id and keeps them; the walk keeps the
 * ids it rejected (skip) and the evidence of the one that passed.
 */
#include "core/budget.h"
#include "core/common.h"

#include <cjson/cJSON.h>

struct kb_final_walk {
	/* --- set by the caller --- */
	void *ctx;
	/* The best candidate whose id is not in skip; -1 when none is left. */
	int64_t (*next)(void *ctx, const int64_t *skip, size_t nr_skip);
	/* Whether id's final verdict is known without a check (may be NULL: never). */
	bool (*known)(void *ctx, int64_t id);
	/*
	 * id's final check (kb_final_check_pass's contract): 0 with *evidence
	 * (the walk owns it), *cached and *fwd_failed; else -1 or
	 * KB_ECANCELLED, which end the walk.
	 */
	int (*check)(void *ctx, int64_t id, cJSON **evidence, bool *cached, bool *fwd_failed);
	/* Told of each failed try (may be NULL), before the next one. */
	void (*failed)(void *ctx, int64_t id, const cJSON *evidence, bool fwd_failed);
	/* The clock (may be NULL: kb_now_ms); tests give their own. */
	int64_t (*now)(void *ctx);
	const struct kb_budget *budget; /* NULL: no budget */
	int checks_per_try;             /* final checks one try takes (backward: 2) */

	/* --- results --- */
	int64_t passed;                 /* the id that passed, -1: none */
	cJSON *evidence;                /* its evidence (kb_final_walk_release frees it unless taken) */
	bool cached;                    /* its verdict came from the cache */
	int64_t *skip;                  /* the ids that failed, in the order tried */
	size_t nr_skip, alloc_skip;
	bool out_of_time;               /* the budget stopped the walk with candidates left */
};

/* Walk w's candidates (its results reset first). 0, or the first non-zero return of check. */
int kb_final_walk(struct kb_final_walk *w);

void kb_final_walk_release(struct kb_final_walk *w);

#endif
