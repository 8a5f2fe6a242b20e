#include "core/common.h"
#include "core/log.h"
#include "core/strbuf.h"
#include "core/util.h"
#include "search/archive.h"
#include "core/rng.h"

#include <math.h>
#include <setjmp.h>
#include <cmocka.h>

static int quiet(void **state)
{
	log_set_level(KB_LOG_OFF); /* the refused arguments below log errors */
	return 0;
}

static int cell_of(int m, int c, int p)
{
	struct kb_behavior b = { m, c, p, "" };

	return kb_behavior_cell(&b);
}

static void test_init(void **state)
{
	struct kb_archive a;

	assert_int_equal(kb_archive_init(&a, 0), -1);
	assert_int_equal(kb_archive_init(&a, 65), -1);
	assert_int_equal(kb_archive_init(&a, 64), 0);
	assert_int_equal(a.nr_islands, 64);
	assert_int_equal(kb_archive_filled(&a, SIZE_MAX), 0);
	kb_archive_release(&a);
	assert_null(a.cells);
}

static void test_offer(void **state)
{
	struct kb_archive a;
	const struct kb_elite *e;
	int c = cell_of(1, 2, 3);

	assert_int_equal(kb_archive_init(&a, 2), 0);
	assert_null(kb_archive_get(&a, 0, c));
	/* empty cell */
	assert_int_equal(kb_archive_offer(&a, 0, c, 10, 1.5), 1);
	e = kb_archive_get(&a, 0, c);
	assert_non_null(e);
	assert_int_equal(e->candidate_id, 10);
	assert_true(e->fitness == 1.5);
	/* worse and tie keep the older */
	assert_int_equal(kb_archive_offer(&a, 0, c, 11, 1.2), 0);
	assert_int_equal(kb_archive_offer(&a, 0, c, 12, 1.5), 0);
	assert_int_equal(kb_archive_get(&a, 0, c)->candidate_id, 10);
	/* refused fitness, the cell unchanged */
	assert_int_equal(kb_archive_offer(&a, 0, c, 13, NAN), 0);
	assert_int_equal(kb_archive_offer(&a, 0, c, 13, INFINITY), 0);
	assert_int_equal(kb_archive_offer(&a, 0, c, 13, 0.0), 0);
	assert_int_equal(kb_archive_offer(&a, 0, c, 13, -2.0), 0);
	assert_int_equal(kb_archive_offer(&a, 0, c + 1, 13, NAN), 0);
	assert_null(kb_archive_get(&a, 0, c + 1));
	assert_int_equal(kb_archive_get(&a, 0, c)->candidate_id, 10);
	/* strictly better replaces, and chosen restarts */
	a.cells[c].chosen = 5;
	assert_int_equal(kb_archive_offer(&a, 0, c, 14, 1.5000001), 1);
	assert_int_equal(kb_archive_get(&a, 0, c)->candidate_id, 14);
	assert_int_equal(kb_archive_get(&a, 0, c)->chosen, 0);
	/* the other island is separate */
	assert_null(kb_archive_get(&a, 1, c));
	/* bad arguments */
	assert_int_equal(kb_archive_offer(&a, 2, c, 15, 2.0), -1);
	assert_int_equal(kb_archive_offer(&a, 0, -1, 15, 2.0), -1);
	assert_int_equal(kb_archive_offer(&a, 0, KB_BEHAVIOR_CELLS, 15, 2.0), -1);
	assert_int_equal(kb_archive_offer(&a, 0, c, 0, 2.0), -1);
	assert_null(kb_archive_get(&a, 5, c));
	assert_null(kb_archive_get(&a, 0, 64));
	kb_archive_release(&a);
}

static void test_put_filled_best(void **state)
{
	struct kb_archive a;
	struct kb_elite e = { 7, 0.5, 3 };
	size_t island = 99;
	int cell = -5;

	assert_int_equal(kb_archive_init(&a, 3), 0);
	assert_int_equal(kb_archive_best(&a, SIZE_MAX, &island, &cell), KB_ENOTFOUND);
	assert_int_equal(kb_archive_best(&a, 0, NULL, NULL), KB_ENOTFOUND);
	/* put stores as given, no comparison */
	kb_archive_offer(&a, 1, 5, 1, 3.0);
	kb_archive_put(&a, 1, 5, &e);
	assert_int_equal(kb_archive_get(&a, 1, 5)->candidate_id, 7);
	assert_int_equal(kb_archive_get(&a, 1, 5)->chosen, 3);
	kb_archive_put(&a, 9, 5, &e); /* ignored */
	kb_archive_put(&a, 0, 64, &e);

	kb_archive_offer(&a, 0, 5, 2, 1.0);
	kb_archive_offer(&a, 0, 6, 3, 2.5);
	kb_archive_offer(&a, 2, 40, 4, 1.7);
	assert_int_equal(kb_archive_filled(&a, 0), 2);
	assert_int_equal(kb_archive_filled(&a, 1), 1);
	assert_int_equal(kb_archive_filled(&a, 2), 1);
	assert_int_equal(kb_archive_filled(&a, SIZE_MAX), 3); /* cell 5 on two islands counts once */
	assert_int_equal(kb_archive_best(&a, SIZE_MAX, &island, &cell), 0);
	assert_int_equal(island, 0);
	assert_int_equal(cell, 6);
	assert_int_equal(kb_archive_best(&a, 2, &island, &cell), 0);
	assert_int_equal(island, 2);
	assert_int_equal(cell, 40);
	assert_int_equal(kb_archive_best(&a, 7, &island, &cell), KB_ENOTFOUND);
	kb_archive_release(&a);
}

static void test_select_exploit(void **state)
{
	struct kb_archive a;
	struct kb_select_mix mix = { 0.0, 1.0, 0 };
	uint64_t rng = 42;
	int counts[KB_BEHAVIOR_CELLS] = { 0 }, cell;
	enum kb_select_kind how;
	const int draws = 20000;

	assert_int_equal(kb_archive_init(&a, 1), 0);
	assert_int_equal(kb_archive_select(&a, 0, &mix, &rng, &cell, &how), KB_ENOTFOUND);
	assert_int_equal(kb_archive_select(&a, 1, &mix, &rng, &cell, &how), -1);
	/* ten elites, fitness 1..10 in cells 0, 6, 12, ...; the best is cell 54 */
	for (int i = 0; i < 10; i++)
		assert_int_equal(kb_archive_offer(&a, 0, i * 6, 100 + i, 1.0 + i), 1);
	for (int d = 0; d < draws; d++) {
		assert_int_equal(kb_archive_select(&a, 0, &mix, &rng, &cell, &how), 0);
		assert_int_equal(how, KB_SELECT_EXPLOIT);
		counts[cell]++;
	}
	/* the best wins most often but not always; the weaker half never */
	for (int i = 0; i < 9; i++)
		assert_true(counts[54] > counts[i * 6]);
	assert_true(counts[54] < draws);
	/* tournament of 3 over the top five: 1 - (4/5)^3 = 0.488 */
	assert_true(fabs((double)counts[54] / draws - 0.488) < 0.02);
	for (int i = 0; i < 5; i++)
		assert_int_equal(counts[i * 6], 0);
	assert_int_equal(kb_archive_get(&a, 0, 54)->chosen, (uint64_t)counts[54]);

	/* tournament 1: uniform over the top half */
	memset(counts, 0, sizeof(counts));
	mix.tournament = 1;
	for (int d = 0; d < draws; d++) {
		kb_archive_select(&a, 0, &mix, &rng, &cell, &how);
		counts[cell]++;
	}
	for (int i = 5; i < 10; i++)
		assert_true(fabs((double)counts[i * 6] / draws - 0.2) < 0.02);
	/* a large tournament: nearly always the best */
	memset(counts, 0, sizeof(counts));
	mix.tournament = 40;
	for (int d = 0; d < 2000; d++) {
		kb_archive_select(&a, 0, &mix, &rng, &cell, &how);
		counts[cell]++;
	}
	assert_true(counts[54] > 1990);
	kb_archive_release(&a);
}

static void test_select_explore(void **state)
{
	struct kb_archive a;
	struct kb_select_mix mix = { 1.0, 0.0, 0 };
	uint64_t rng = 7;
	int counts[KB_BEHAVIOR_CELLS] = { 0 }, cell;
	enum kb_select_kind how;
	int lone1 = cell_of(3, 3, 3), lone2 = cell_of(3, 0, 0);

	assert_int_equal(kb_archive_init(&a, 1), 0);
	/* a cluster around (0,0,0), fitter than the two lone cells */
	kb_archive_offer(&a, 0, cell_of(0, 0, 0), 1, 5.0);
	kb_archive_offer(&a, 0, cell_of(1, 0, 0), 2, 5.0);
	kb_archive_offer(&a, 0, cell_of(0, 1, 0), 3, 5.0);
	kb_archive_offer(&a, 0, cell_of(0, 0, 1), 4, 5.0);
	kb_archive_offer(&a, 0, cell_of(1, 1, 0), 5, 5.0);
	kb_archive_offer(&a, 0, lone1, 6, 1.0);
	for (int d = 0; d < 100; d++) {
		assert_int_equal(kb_archive_select(&a, 0, &mix, &rng, &cell, &how), 0);
		assert_int_equal(how, KB_SELECT_EXPLORE);
		assert_int_equal(cell, lone1);
	}
	/* two isolated cells: the less chosen goes next: lone2 catches up (100 draws), then they alternate */
	kb_archive_offer(&a, 0, lone2, 7, 1.0);
	for (int d = 0; d < 1000; d++) {
		kb_archive_select(&a, 0, &mix, &rng, &cell, &how);
		counts[cell]++;
	}
	assert_int_equal(counts[lone1] + counts[lone2], 1000);
	assert_int_equal(counts[lone1], 450);
	assert_int_equal(counts[lone2], 550);
	assert_int_equal(kb_archive_get(&a, 0, lone1)->chosen, kb_archive_get(&a, 0, lone2)->chosen);
	kb_archive_release(&a);
}

static void test_select_random_and_mix(void **state)
{
	struct kb_archive a;
	struct kb_select_mix mix = { 0.0, 0.0, 0 };
	uint64_t rng = 1234, r1 = 99, r2 = 99;
	int counts[KB_BEHAVIOR_CELLS] = { 0 }, kinds[3] = { 0 }, cell, c2;
	enum kb_select_kind how, h2;
	const int draws = 16000;

	assert_int_equal(kb_archive_init(&a, 2), 0);
	for (int i = 0; i < 8; i++)
		kb_archive_offer(&a, 1, i * 8, 1 + i, 1.0 + i);
	for (int d = 0; d < draws; d++) {
		assert_int_equal(kb_archive_select(&a, 1, &mix, &rng, &cell, &how), 0);
		assert_int_equal(how, KB_SELECT_RANDOM);
		counts[cell]++;
	}
	for (int i = 0; i < 8; i++)
		assert_true(fabs((double)counts[i * 8] / draws - 0.125) < 0.02);

	/* shares: exploit 0.5, explore 0.3, random 0.2 */
	mix.explore = 0.3;
	mix.exploit = 0.5;
	for (int d = 0; d < draws; d++) {
		kb_archive_select(&a, 1, &mix, &rng, &cell, &how);
		kinds[how]++;
	}
	assert_true(fabs((double)kinds[KB_SELECT_EXPLOIT] / draws - 0.5) < 0.02);
	assert_true(fabs((double)kinds[KB_SELECT_EXPLORE] / draws - 0.3) < 0.02);
	assert_true(fabs((double)kinds[KB_SELECT_RANDOM] / draws - 0.2) < 0.02);
	assert_string_equal(kb_select_kind_name(KB_SELECT_EXPLOIT), "exploit");
	assert_string_equal(kb_select_kind_name(KB_SELECT_EXPLORE), "explore");
	assert_string_equal(kb_select_kind_name(KB_SELECT_RANDOM), "random");

	/* deterministic for a given rng state (and the same chosen counts) */
	{
		struct kb_archive b;

		assert_int_equal(kb_archive_init(&b, 2), 0);
		memcpy(b.cells, a.cells, 2 * KB_BEHAVIOR_CELLS * sizeof(*a.cells));
		for (int d = 0; d < 500; d++) {
			kb_archive_select(&a, 1, &mix, &r1, &cell, &how);
			kb_archive_select(&b, 1, &mix, &r2, &c2, &h2);
			assert_int_equal(cell, c2);
			assert_int_equal(how, h2);
		}
		assert_true(r1 == r2);
		kb_archive_release(&b);
	}
	/* shares summing over 1 are scaled; NULL mix works */
	mix.explore = 3;
	mix.exploit = 1;
	memset(kinds, 0, sizeof(kinds));
	for (int d = 0; d < 4000; d++) {
		kb_archive_select(&a, 1, &mix, &rng, &cell, &how);
		kinds[how]++;
	}
	assert_int_equal(kinds[KB_SELECT_RANDOM], 0);
	assert_true(fabs(kinds[KB_SELECT_EXPLORE] / 4000.0 - 0.75) < 0.03);
	assert_int_equal(kb_archive_select(&a, 1, NULL, &rng, &cell, NULL), 0);
	kb_archive_release(&a);
}

static void test_inspirations(void **state)
{
	struct kb_archive a;
	int64_t out[16];
	uint64_t rng = 5;
	size_t n;
	int parent = 10;

	assert_int_equal(kb_archive_init(&a, 3), 0);
	assert_int_equal(kb_archive_inspirations(&a, 0, parent, 4, &rng, out), 0);
	/* island 0: the parent (id 1, the best) and four more; islands 1, 2: others */
	kb_archive_offer(&a, 0, parent, 1, 9.0);
	kb_archive_offer(&a, 0, 11, 2, 5.0);
	kb_archive_offer(&a, 0, 12, 3, 4.0);
	kb_archive_offer(&a, 0, 13, 4, 3.0);
	kb_archive_offer(&a, 0, 14, 5, 2.0);
	kb_archive_offer(&a, 1, 20, 6, 1.0);
	kb_archive_offer(&a, 1, parent, 7, 8.0);  /* the parent's cell elsewhere: not an inspiration */
	kb_archive_offer(&a, 2, 30, 1, 9.0);      /* the parent migrated: never */
	kb_archive_offer(&a, 2, 31, 2, 5.0);      /* a duplicate of id 2: once */
	kb_archive_offer(&a, 2, 32, 8, 1.5);

	for (int round = 0; round < 50; round++) {
		n = kb_archive_inspirations(&a, 0, parent, 4, &rng, out);
		assert_int_equal(n, 4);
		/* the top of the island first */
		assert_int_equal(out[0], 2);
		assert_int_equal(out[1], 3);
		for (size_t i = 0; i < n; i++) {
			assert_true(out[i] != 1);
			assert_true(out[i] != 7);
			for (size_t j = i + 1; j < n; j++)
				assert_true(out[i] != out[j]);
		}
	}
	/* asking for more than there is: every other candidate once */
	n = kb_archive_inspirations(&a, 0, parent, 16, &rng, out);
	assert_int_equal(n, 6); /* 2 3 4 5 6 8 */
	for (size_t i = 0; i < n; i++)
		for (size_t j = i + 1; j < n; j++)
			assert_true(out[i] != out[j]);
	assert_int_equal(kb_archive_inspirations(&a, 0, parent, 0, &rng, out), 0);
	assert_int_equal(kb_archive_inspirations(&a, 9, parent, 4, &rng, out), 0);
	/* an empty parent cell excludes nothing but its cell */
	n = kb_archive_inspirations(&a, 1, 63, 2, &rng, out);
	assert_int_equal(n, 2);
	assert_int_equal(out[0], 7);
	kb_archive_release(&a);
}

static void test_migrate(void **state)
{
	struct kb_archive a;
	struct kb_migration moves[4];
	size_t n;

	assert_int_equal(kb_archive_init(&a, 1), 0);
	kb_archive_offer(&a, 0, 3, 1, 2.0);
	assert_int_equal(kb_archive_migrate(&a, moves), 0);
	kb_archive_release(&a);

	assert_int_equal(kb_archive_init(&a, 4), 0);
	kb_archive_offer(&a, 0, 3, 1, 2.0);
	kb_archive_offer(&a, 0, 4, 2, 1.0);
	kb_archive_offer(&a, 1, 3, 3, 3.0);   /* fitter in the cell island 0's best goes to */
	kb_archive_offer(&a, 1, 9, 4, 1.5);
	kb_archive_offer(&a, 3, 9, 5, 1.2);   /* island 2 is empty */
	n = kb_archive_migrate(&a, moves);
	assert_int_equal(n, 3);
	assert_int_equal(moves[0].from, 0);
	assert_int_equal(moves[0].to, 1);
	assert_int_equal(moves[0].cell, 3);
	assert_int_equal(moves[0].candidate_id, 1);
	assert_true(moves[0].fitness == 2.0);
	assert_false(moves[0].accepted);
	assert_int_equal(moves[1].from, 1);
	assert_int_equal(moves[1].to, 2);
	assert_int_equal(moves[1].candidate_id, 3); /* island 1's best before any move */
	assert_true(moves[1].accepted);
	assert_int_equal(moves[2].from, 3);
	assert_int_equal(moves[2].to, 0);
	assert_int_equal(moves[2].cell, 9);
	assert_true(moves[2].accepted);
	assert_int_equal(kb_archive_get(&a, 2, 3)->candidate_id, 3);
	assert_int_equal(kb_archive_get(&a, 0, 9)->candidate_id, 5);
	assert_int_equal(kb_archive_get(&a, 1, 3)->candidate_id, 3);
	/* again and again: the best spreads round the ring, one island a time, then nothing moves */
	n = kb_archive_migrate(&a, moves);
	assert_int_equal(n, 4);
	assert_true(moves[2].accepted);   /* island 2 -> 3 */
	assert_false(moves[3].accepted);  /* island 3 -> 0: id 5 is there already (a tie keeps it) */
	for (int round = 0; round < 4; round++)
		n = kb_archive_migrate(&a, NULL);
	n = kb_archive_migrate(&a, moves);
	for (size_t i = 0; i < n; i++) {
		assert_int_equal(moves[i].candidate_id, 3);
		assert_false(moves[i].accepted);
	}
	for (size_t i = 0; i < 4; i++)
		assert_int_equal(kb_archive_get(&a, i, 3)->candidate_id, 3);
	kb_archive_release(&a);
}

static void test_grid(void **state)
{
	struct kb_archive a;
	struct strbuf sb = STRBUF_INIT;

	assert_int_equal(kb_archive_init(&a, 2), 0);
	kb_archive_grid(&a, &sb);
	assert_string_equal(sb.buf,
			    "| memory \\ compute | 0 | 1 | 2 | 3 |\n"
			    "|---|---|---|---|---|\n"
			    "| 0 | · | · | · | · |\n"
			    "| 1 | · | · | · | · |\n"
			    "| 2 | · | · | · | · |\n"
			    "| 3 | · | · | · | · |\n"
			    "\n0 of 64 cells filled\n");
	strbuf_reset(&sb);
	kb_archive_offer(&a, 0, cell_of(0, 1, 0), 1, 1.1);
	kb_archive_offer(&a, 1, cell_of(0, 1, 2), 2, 1.3);
	kb_archive_offer(&a, 1, cell_of(0, 1, 0), 3, 1.2);    /* same cell, other island: counts once */
	kb_archive_offer(&a, 0, cell_of(2, 3, 1), 4, 1.834);
	kb_archive_offer(&a, 1, cell_of(3, 0, 3), 5, 0.9);
	kb_archive_grid(&a, &sb);
	assert_string_equal(sb.buf,
			    "| memory \\ compute | 0 | 1 | 2 | 3 |\n"
			    "|---|---|---|---|---|\n"
			    "| 0 | · | 2 | · | · |\n"
			    "| 1 | · | · | · | · |\n"
			    "| 2 | · | · | · | 1* |\n"
			    "| 3 | 1 | · | · | · |\n"
			    "\n4 of 64 cells filled, best 1.83x\n");
	strbuf_release(&sb);
	kb_archive_release(&a);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_init),
		cmocka_unit_test(test_offer),
		cmocka_unit_test(test_put_filled_best),
		cmocka_unit_test(test_select_exploit),
		cmocka_unit_test(test_select_explore),
		cmocka_unit_test(test_select_random_and_mix),
		cmocka_unit_test(test_inspirations),
		cmocka_unit_test(test_migrate),
		cmocka_unit_test(test_grid),
	};

	return cmocka_run_group_tests(tests, quiet, NULL);
}
