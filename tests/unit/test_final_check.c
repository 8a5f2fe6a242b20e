/*
 * The final walk (templates/final_check.h): an honest kernel behind any
 * number of kernels that fail their final check is published; the time
 * budget stops the tries after the first, except ones already known.
 */
#include "core/budget.h"
#include "core/common.h"
#include "core/log.h"
#include "templates/final_check.h"

#include <setjmp.h>
#include <cmocka.h>

/* Candidates 1..nr, best first; honest[i] says whether id i+1 passes its check. */
struct fake {
	const bool *honest;
	size_t nr;
	const bool *known;      /* NULL: none known */
	int64_t clock_ms;       /* what now() says */
	int64_t check_ms;       /* how far a check moves the clock */
	int fail_at;            /* the check that returns -1 (1-based), 0: none */
	int checks, failures;
	int64_t tried[32];
};

static int64_t fake_next(void *ctx, const int64_t *skip, size_t nr_skip)
{
	struct fake *f = ctx;

	for (size_t i = 0; i < f->nr; i++) {
		bool skipped = false;

		for (size_t k = 0; k < nr_skip; k++)
			skipped = skipped || skip[k] == (int64_t)i + 1;
		if (!skipped)
			return (int64_t)i + 1;
	}
	return -1;
}

static bool fake_known(void *ctx, int64_t id)
{
	struct fake *f = ctx;

	return f->known && f->known[id - 1];
}

static int fake_check(void *ctx, int64_t id, cJSON **evidence, bool *cached, bool *fwd_failed)
{
	struct fake *f = ctx;

	f->tried[f->checks++] = id;
	if (f->checks == f->fail_at)
		return -1;
	*cached = fake_known(ctx, id);
	*fwd_failed = false;
	if (!*cached)
		f->clock_ms += f->check_ms;
	*evidence = cJSON_CreateObject();
	cJSON_AddStringToObject(*evidence, "verdict", f->honest[id - 1] ? "verified" : "rejected");
	return 0;
}

static void fake_failed(void *ctx, int64_t id, const cJSON *evidence, bool fwd_failed)
{
	struct fake *f = ctx;

	(void)id;
	(void)evidence;
	(void)fwd_failed;
	f->failures++;
}

static int64_t fake_now(void *ctx)
{
	return ((struct fake *)ctx)->clock_ms;
}

static struct kb_final_walk walk_of(struct fake *f, const struct kb_budget *b)
{
	struct kb_final_walk w = {
		.ctx = f, .next = fake_next, .known = fake_known, .check = fake_check, .failed = fake_failed,
		.now = fake_now, .budget = b, .checks_per_try = 1,
	};

	return w;
}

/* The finding of issue 16: six hacks on top, every one rejected; the honest kernel behind them ships. */
static void test_walks_past_every_failure(void **state)
{
	static const bool honest[] = { false, false, false, false, false, false, true, true };
	struct fake f = { .honest = honest, .nr = ARRAY_SIZE(honest) };
	struct kb_final_walk w = walk_of(&f, NULL);

	(void)state;
	assert_int_equal(kb_final_walk(&w), 0);
	assert_int_equal(w.passed, 7);
	assert_non_null(w.evidence);
	assert_int_equal(f.checks, 7);
	assert_int_equal(f.failures, 6);
	assert_int_equal(w.nr_skip, 6);
	for (size_t i = 0; i < 6; i++)
		assert_int_equal(w.skip[i], (int64_t)i + 1);
	assert_false(w.out_of_time);
	kb_final_walk_release(&w);
}

static void test_nothing_passes(void **state)
{
	static const bool honest[] = { false, false, false };
	struct fake f = { .honest = honest, .nr = ARRAY_SIZE(honest) };
	struct kb_final_walk w = walk_of(&f, NULL);

	(void)state;
	assert_int_equal(kb_final_walk(&w), 0);
	assert_int_equal(w.passed, -1);
	assert_null(w.evidence);
	assert_int_equal(w.nr_skip, 3);
	assert_false(w.out_of_time);
	kb_final_walk_release(&w);

	f.nr = 0; /* no candidate at all */
	assert_int_equal(kb_final_walk(&w), 0);
	assert_int_equal(w.passed, -1);
	assert_int_equal(w.nr_skip, 0);
	kb_final_walk_release(&w);
}

/*
 * 10 s a screened item, a check of 4 seeds after 2: 30 s a try. The first
 * try runs even past the deadline; later ones while one more fits, or
 * when their verdict is known.
 */
static void test_budget_bounds_the_tries(void **state)
{
	static const bool honest[] = { false, false, false, false, true };
	static const bool known[] = { false, false, false, true, false };
	struct kb_budget b;
	struct fake f = { .honest = honest, .nr = ARRAY_SIZE(honest), .check_ms = 30000 };
	struct kb_final_walk w = walk_of(&f, &b);

	(void)state;
	kb_budget_init(&b, 100000, 3, 4, 2);
	kb_budget_spent(&b, 10000, 1);
	f.clock_ms = 10000;  /* tries at 10 s, 40 s, 70 s fit; the fourth at 100 s does not */
	assert_int_equal(kb_final_walk(&w), 0);
	assert_int_equal(w.passed, -1);
	assert_int_equal(f.checks, 3);
	assert_true(w.out_of_time);
	kb_final_walk_release(&w);

	/* a cached verdict is tried past the budget; the honest kernel after it is not */
	f.known = known;
	f.checks = 0;
	f.clock_ms = 10000;
	assert_int_equal(kb_final_walk(&w), 0);
	assert_int_equal(f.checks, 4);
	assert_int_equal(f.tried[3], 4);
	assert_int_equal(w.passed, -1);
	assert_true(w.out_of_time);
	kb_final_walk_release(&w);

	/* the first try after the deadline still runs, and ships when it passes */
	f.honest = (const bool[]){ true };
	f.nr = 1;
	f.known = NULL;
	f.checks = 0;
	f.clock_ms = 200000;
	assert_int_equal(kb_final_walk(&w), 0);
	assert_int_equal(w.passed, 1);
	kb_final_walk_release(&w);

	/* without a measured item nothing is estimated: the walk goes on to the honest one */
	kb_budget_init(&b, 100000, 3, 4, 2);
	f.honest = honest;
	f.nr = ARRAY_SIZE(honest);
	f.checks = 0;
	f.clock_ms = 0;
	f.check_ms = 0;
	assert_int_equal(kb_final_walk(&w), 0);
	assert_int_equal(w.passed, 5);
	kb_final_walk_release(&w);
}

static void test_check_error_ends_the_walk(void **state)
{
	static const bool honest[] = { false, false, true };
	struct fake f = { .honest = honest, .nr = ARRAY_SIZE(honest), .fail_at = 2 };
	struct kb_final_walk w = walk_of(&f, NULL);

	(void)state;
	assert_int_equal(kb_final_walk(&w), -1);
	assert_int_equal(w.passed, -1);
	assert_int_equal(f.checks, 2);
	kb_final_walk_release(&w);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_walks_past_every_failure),
		cmocka_unit_test(test_nothing_passes),
		cmocka_unit_test(test_budget_bounds_the_tries),
		cmocka_unit_test(test_check_error_ends_the_walk),
	};

	log_set_level(KB_LOG_OFF);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
