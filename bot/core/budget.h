#ifndef KB_BUDGET_H
#define KB_BUDGET_H
/*
 * A run's wall-time budget (--time-budget, a job's time budget): whether a
 * unit of work (a chunk of tuning points, a batch of search candidates)
 * may still start, so that it and the final check held in reserve end by
 * the deadline. The cost of a unit is estimated from the units measured so
 * far (per item: a point, a candidate), so a slow or loaded machine gets
 * fewer units, not a later end.
 *
 * Nothing is measured before the first unit: it may start while the
 * deadline has not passed (the caller decides whether the very first unit
 * always runs: a budget too short for one unit has nothing to publish).
 */
#include "core/common.h"

/* A final check starts a fresh process and adds the compile baseline: it
 * costs about this many times a screened item of the same seeds. */
#define KB_BUDGET_FRESH_FACTOR 1.5

/* The most of a run's span that the reserve of several final checks may
 * hold (never less than one try): a short budget still searches. */
#define KB_BUDGET_RESERVE_SHARE 0.34

struct kb_budget {
	int64_t deadline_ms;  /* kb_now_ms()'s clock; 0: no budget */
	int64_t spent_ms;     /* wall time of the units measured */
	int64_t items;        /* items in those units */
	double check_items;   /* one final check, in screened items */
	double final_items;   /* the final checks held in reserve, in screened items */
	int64_t span_ms;      /* the run's whole budget, when known (kb_budget_cap_reserve); else 0 */
	double min_items;     /* the reserve's floor under that cap, in screened items */
};

/*
 * checks: final checks to hold in reserve (a caller that tries the next
 * best when the best fails its check holds several); final_seeds and screen_seeds:
 * the seeds of a final check and of a screened item (a final check costs
 * their ratio x KB_BUDGET_FRESH_FACTOR screened items).
 */
void kb_budget_init(struct kb_budget *b, int64_t deadline_ms, int checks, int64_t final_seeds,
		    int64_t screen_seeds);

/*
 * Holds the reserve of several final checks to KB_BUDGET_RESERVE_SHARE of
 * span_ms (the time the run had when its budget began), never below
 * min_checks (one try's checks): with 3 tries in reserve a 4-minute budget
 * once searched for 60 s of it. The tries past the reserve still run while
 * they fit (kb_budget_may_check); the first always runs.
 */
void kb_budget_cap_reserve(struct kb_budget *b, int64_t span_ms, int min_checks);

/* Estimated wall ms of the final checks held in reserve. */
int64_t kb_budget_reserve_ms(const struct kb_budget *b);

/* Record a unit of n items that took ms of wall time. */
void kb_budget_spent(struct kb_budget *b, int64_t ms, size_t n);

/* Estimated wall ms of n items (0 before anything was measured). */
int64_t kb_budget_estimate_ms(const struct kb_budget *b, size_t n);

/* Whether a unit of n items started at now_ms ends, with the reserve,
 * by the deadline. Always true without a budget. */
bool kb_budget_may_start(const struct kb_budget *b, int64_t now_ms, size_t n);

/* Estimated wall ms of one final check (0 before anything was measured). */
int64_t kb_budget_check_ms(const struct kb_budget *b);

/*
 * Whether `checks` more final checks started at now_ms end by the
 * deadline: the reserve is spent on them one try after another, as far
 * as it goes (a final check that fails leaves room for the next best).
 * Always true without a budget; false once the deadline has passed.
 */
bool kb_budget_may_check(const struct kb_budget *b, int64_t now_ms, int checks);

#endif
