#ifndef KB_SEARCH_ARCHIVE_H
#define KB_SEARCH_ARCHIVE_H
/*
 * The MAP-Elites archive: per island, 64 cells (behavior.h), each holding
 * its elite (the fittest verified kernel seen in that cell). Fitness is
 * the geometric-mean speedup over eager; only verified kernels enter.
 * Pure in-memory logic: bot/search/search_db.c stores every change, and a
 * resumed search rebuilds the archive from the store with kb_archive_put.
 *
 * Parent selection mixes three ways, by the shares in kb_select_mix:
 *   exploit  a tournament among the island's top elites (the best wins
 *            most often, not always);
 *   explore  an elite of a sparsely visited region: a filled cell with the
 *            fewest filled neighbours (cells one level away on one axis),
 *            ties by fewest times chosen;
 *   random   a filled cell uniformly.
 * Islands evolve apart; every migration interval, kb_archive_migrate
 * copies each island's best elite into the next island (a ring), where it
 * is offered like any new kernel.
 */
#include "core/common.h"
#include "search/behavior.h"

struct strbuf;

struct kb_elite {
	int64_t candidate_id;   /* 0: empty cell */
	double fitness;
	uint64_t chosen;        /* times picked as a parent */
};

struct kb_archive {
	size_t nr_islands;
	struct kb_elite *cells; /* nr_islands * KB_BEHAVIOR_CELLS, [island][cell] */
};

enum kb_select_kind { KB_SELECT_EXPLOIT, KB_SELECT_EXPLORE, KB_SELECT_RANDOM };
/* "exploit", "explore", "random" */
const char *kb_select_kind_name(enum kb_select_kind k);

struct kb_select_mix {
	double explore, exploit;  /* shares; random gets 1 - explore - exploit */
	size_t tournament;        /* exploit: tournament size (0: 3) */
};

/* 0, or -1 (logged) when nr_islands is 0 or too large (> 64). */
int kb_archive_init(struct kb_archive *a, size_t nr_islands);
void kb_archive_release(struct kb_archive *a);

/*
 * Offer a verified kernel. Returns 1 when it became the cell's elite (the
 * cell was empty or it is strictly fitter; a tie keeps the older; chosen
 * restarts at 0), 0 when not, -1 (logged) for a bad island or cell or a
 * candidate_id <= 0. Non-finite or non-positive fitness is refused (0).
 */
int kb_archive_offer(struct kb_archive *a, size_t island, int cell, int64_t candidate_id,
		     double fitness);
/* Set a cell as stored (resume); no comparison. A bad island or cell is logged and ignored. */
void kb_archive_put(struct kb_archive *a, size_t island, int cell, const struct kb_elite *e);
/* The cell's elite; NULL when the cell is empty or out of range. */
const struct kb_elite *kb_archive_get(const struct kb_archive *a, size_t island, int cell);

/* Filled cells of island, or of all islands together when island is SIZE_MAX (a cell filled on any island counts once). */
size_t kb_archive_filled(const struct kb_archive *a, size_t island);
/*
 * The fittest elite of island (SIZE_MAX: all); 0 and its island/cell
 * (either out pointer may be NULL; ties: the lowest island, then cell),
 * or KB_ENOTFOUND when empty.
 */
int kb_archive_best(const struct kb_archive *a, size_t island, size_t *island_out, int *cell_out);

/*
 * Choose a parent on island with *rng. 0 with *cell_out and *how, or
 * KB_ENOTFOUND when the island is empty, -1 (logged) for a bad island.
 * Increments the elite's chosen. mix NULL: explore 0.2, exploit 0.7;
 * shares summing over 1 are scaled down. The exploit tournament draws
 * `tournament` times (with replacement) from the fitter half of the
 * island's elites and keeps the fittest drawn.
 */
int kb_archive_select(struct kb_archive *a, size_t island, const struct kb_select_mix *mix,
		      uint64_t *rng, int *cell_out, enum kb_select_kind *how);

/*
 * Up to n inspirations for a child of (island, parent_cell): first the
 * island's top elites other than the parent (about half of n), then
 * elites of other cells of any island, drawn with *rng; no candidate
 * twice, never the parent. Candidate ids into out; returns how many.
 */
size_t kb_archive_inspirations(const struct kb_archive *a, size_t island, int parent_cell, size_t n,
			       uint64_t *rng, int64_t *out);

/* One ring-migration move: the best of island `from` offered to island `to`. */
struct kb_migration {
	size_t from, to;
	int cell;
	int64_t candidate_id;
	double fitness;
	bool accepted;          /* it became the elite there */
};

/* Migrate every island's best to the next island; moves (room for nr_islands) get what happened; returns how many were made. */
size_t kb_archive_migrate(struct kb_archive *a, struct kb_migration *moves);

/*
 * A small markdown grid of the archive (all islands): rows memory 0-3,
 * columns compute 0-3, each cell the number of parallelism levels filled
 * ("·" when none) and the best fitness marked with "*", then one line
 * "N of 64 cells filled, best 1.83x". For the progress comment.
 */
void kb_archive_grid(const struct kb_archive *a, struct strbuf *out);

#endif
