#include "core/common.h"
#include "search/archive.h"
#include "core/rng.h"
#include "core/strbuf.h"
#include "core/util.h"

#include <math.h>

#define MAX_ISLANDS 64

const char *kb_select_kind_name(enum kb_select_kind k)
{
	switch (k) {
	case KB_SELECT_EXPLOIT: return "exploit";
	case KB_SELECT_EXPLORE: return "explore";
	case KB_SELECT_RANDOM: return "random";
	}
	return "random";
}

int kb_archive_init(struct kb_archive *a, size_t nr_islands)
{
	memset(a, 0, sizeof(*a));
	if (!nr_islands || nr_islands > MAX_ISLANDS)
		return error("archive cannot have '%zu' islands (1 to %d)", nr_islands, MAX_ISLANDS);
	a->nr_islands = nr_islands;
	a->cells = xcalloc(nr_islands * KB_BEHAVIOR_CELLS, sizeof(*a->cells));
	return 0;
}

void kb_archive_release(struct kb_archive *a)
{
	free(a->cells);
	memset(a, 0, sizeof(*a));
}

static struct kb_elite *cell_at(const struct kb_archive *a, size_t island, int cell)
{
	if (!a->cells || island >= a->nr_islands || cell < 0 || cell >= KB_BEHAVIOR_CELLS)
		return NULL;
	return &a->cells[island * KB_BEHAVIOR_CELLS + (size_t)cell];
}

int kb_archive_offer(struct kb_archive *a, size_t island, int cell, int64_t candidate_id,
		     double fitness)
{
	struct kb_elite *e = cell_at(a, island, cell);

	if (!e)
		return error("archive has no island '%zu' cell '%d'", island, cell);
	if (candidate_id <= 0)
		return error("archive offered candidate id '%lld'", (long long)candidate_id);
	if (!isfinite(fitness) || fitness <= 0)
		return 0;
	if (e->candidate_id && !(fitness > e->fitness))
		return 0;
	e->candidate_id = candidate_id;
	e->fitness = fitness;
	e->chosen = 0;
	return 1;
}

void kb_archive_put(struct kb_archive *a, size_t island, int cell, const struct kb_elite *e)
{
	struct kb_elite *slot = cell_at(a, island, cell);

	if (!slot) {
		error("archive has no island '%zu' cell '%d'", island, cell);
		return;
	}
	*slot = *e;
}

const struct kb_elite *kb_archive_get(const struct kb_archive *a, size_t island, int cell)
{
	const struct kb_elite *e = cell_at(a, island, cell);

	return e && e->candidate_id ? e : NULL;
}

size_t kb_archive_filled(const struct kb_archive *a, size_t island)
{
	size_t n = 0;

	for (int c = 0; c < KB_BEHAVIOR_CELLS; c++) {
		if (island == SIZE_MAX) {
			for (size_t i = 0; i < a->nr_islands; i++)
				if (a->cells[i * KB_BEHAVIOR_CELLS + (size_t)c].candidate_id) {
					n++;
					break;
				}
		} else if (kb_archive_get(a, island, c)) {
			n++;
		}
	}
	return n;
}

int kb_archive_best(const struct kb_archive *a, size_t island, size_t *island_out, int *cell_out)
{
	size_t from = island == SIZE_MAX ? 0 : island, to = island == SIZE_MAX ? a->nr_islands : island + 1;
	const struct kb_elite *best = NULL;
	size_t bi = 0;
	int bc = -1;

	if (island != SIZE_MAX && island >= a->nr_islands)
		return KB_ENOTFOUND;
	for (size_t i = from; i < to; i++)
		for (int c = 0; c < KB_BEHAVIOR_CELLS; c++) {
			const struct kb_elite *e = kb_archive_get(a, i, c);

			if (e && (!best || e->fitness > best->fitness)) {
				best = e;
				bi = i;
				bc = c;
			}
		}
	if (!best)
		return KB_ENOTFOUND;
	if (island_out)
		*island_out = bi;
	if (cell_out)
		*cell_out = bc;
	return 0;
}

/* Filled cells of island, fittest first (ties: lower cell first). */
static size_t ranked(const struct kb_archive *a, size_t island, int *cells)
{
	size_t n = 0;

	for (int c = 0; c < KB_BEHAVIOR_CELLS; c++)
		if (kb_archive_get(a, island, c))
			cells[n++] = c;
	/* insertion sort: 64 at most */
	for (size_t i = 1; i < n; i++) {
		int c = cells[i];
		double f = kb_archive_get(a, island, c)->fitness;
		size_t j = i;

		while (j > 0 && kb_archive_get(a, island, cells[j - 1])->fitness < f) {
			cells[j] = cells[j - 1];
			j--;
		}
		cells[j] = c;
	}
	return n;
}

/* Filled cells one level away on one axis. */
static int filled_neighbours(const struct kb_archive *a, size_t island, int cell)
{
	struct kb_behavior b;
	int n = 0;

	kb_behavior_from_cell(cell, &b);
	for (int axis = 0; axis < 3; axis++)
		for (int d = -1; d <= 1; d += 2) {
			struct kb_behavior nb = b;
			int *v = axis == 0 ? &nb.memory : axis == 1 ? &nb.compute : &nb.parallel;

			*v += d;
			if (*v < 0 || *v >= KB_BEHAVIOR_LEVELS)
				continue;
			if (kb_archive_get(a, island, kb_behavior_cell(&nb)))
				n++;
		}
	return n;
}

int kb_archive_select(struct kb_archive *a, size_t island, const struct kb_select_mix *mix,
		      uint64_t *rng, int *cell_out, enum kb_select_kind *how)
{
	int cells[KB_BEHAVIOR_CELLS];
	size_t n;
	double explore = mix ? mix->explore : 0.2, exploit = mix ? mix->exploit : 0.7, r, sum;
	enum kb_select_kind kind;
	int chosen;

	if (island >= a->nr_islands)
		return error("archive has no island '%zu'", island);
	n = ranked(a, island, cells);
	if (!n)
		return KB_ENOTFOUND;
	explore = isfinite(explore) && explore > 0 ? explore : 0;
	exploit = isfinite(exploit) && exploit > 0 ? exploit : 0;
	sum = explore + exploit;
	if (sum > 1) {
		explore /= sum;
		exploit /= sum;
	}
	r = kb_rng_double(rng);
	kind = r < exploit ? KB_SELECT_EXPLOIT : r < exploit + explore ? KB_SELECT_EXPLORE : KB_SELECT_RANDOM;

	if (kind == KB_SELECT_EXPLOIT) {
		/* a tournament among the top half: the best wins whenever it is drawn */
		size_t pool = (n + 1) / 2, t = mix && mix->tournament ? mix->tournament : 3;
		size_t win = pool;

		for (size_t k = 0; k < t; k++) {
			size_t d = kb_rng_below(rng, pool);

			if (d < win)
				win = d;
		}
		chosen = cells[win];
	} else if (kind == KB_SELECT_EXPLORE) {
		/* fewest filled neighbours, then fewest times chosen; ties drawn */
		int cand[KB_BEHAVIOR_CELLS], nc = 0, best_nb = 7;
		uint64_t best_ch = UINT64_MAX;

		for (size_t k = 0; k < n; k++) {
			int nbrs = filled_neighbours(a, island, cells[k]);
			uint64_t ch = kb_archive_get(a, island, cells[k])->chosen;

			if (nbrs < best_nb || (nbrs == best_nb && ch < best_ch)) {
				best_nb = nbrs;
				best_ch = ch;
				nc = 0;
			}
			if (nbrs == best_nb && ch == best_ch)
				cand[nc++] = cells[k];
		}
		chosen = cand[kb_rng_below(rng, (size_t)nc)];
	} else {
		chosen = cells[kb_rng_below(rng, n)];
	}
	cell_at(a, island, chosen)->chosen++;
	if (cell_out)
		*cell_out = chosen;
	if (how)
		*how = kind;
	return 0;
}

static bool has_id(const int64_t *ids, size_t n, int64_t id)
{
	for (size_t i = 0; i < n; i++)
		if (ids[i] == id)
			return true;
	return false;
}

size_t kb_archive_inspirations(const struct kb_archive *a, size_t island, int parent_cell, size_t n,
			       uint64_t *rng, int64_t *out)
{
	const struct kb_elite *parent = kb_archive_get(a, island, parent_cell);
	int64_t parent_id = parent ? parent->candidate_id : 0;
	int cells[KB_BEHAVIOR_CELLS];
	int64_t *pool;
	size_t got = 0, top, nr, np = 0;

	if (!n || island >= a->nr_islands)
		return 0;
	/* the island's best, about half */
	top = (n + 1) / 2;
	nr = ranked(a, island, cells);
	for (size_t k = 0; k < nr && got < top; k++) {
		int64_t id = kb_archive_get(a, island, cells[k])->candidate_id;

		if (cells[k] == parent_cell || id == parent_id || has_id(out, got, id))
			continue;
		out[got++] = id;
	}
	/* the rest drawn from other cells of every island */
	pool = xmalloc(a->nr_islands * KB_BEHAVIOR_CELLS * sizeof(*pool));
	for (size_t i = 0; i < a->nr_islands; i++)
		for (int c = 0; c < KB_BEHAVIOR_CELLS; c++) {
			const struct kb_elite *e = kb_archive_get(a, i, c);

			if (!e || c == parent_cell || e->candidate_id == parent_id ||
			    has_id(out, got, e->candidate_id) || has_id(pool, np, e->candidate_id))
				continue;
			pool[np++] = e->candidate_id;
		}
	while (got < n && np) {
		size_t k = kb_rng_below(rng, np);

		out[got++] = pool[k];
		pool[k] = pool[--np];
	}
	free(pool);
	return got;
}

size_t kb_archive_migrate(struct kb_archive *a, struct kb_migration *moves)
{
	size_t made = 0;
	struct kb_migration *plan;

	if (a->nr_islands < 2)
		return 0;
	/* every island's best as it was before any move, so a migrant travels one step */
	plan = xcalloc(a->nr_islands, sizeof(*plan));
	for (size_t i = 0; i < a->nr_islands; i++) {
		size_t bi;
		int bc;

		if (kb_archive_best(a, i, &bi, &bc) < 0)
			continue;
		plan[made].from = i;
		plan[made].to = (i + 1) % a->nr_islands;
		plan[made].cell = bc;
		plan[made].candidate_id = kb_archive_get(a, i, bc)->candidate_id;
		plan[made].fitness = kb_archive_get(a, i, bc)->fitness;
		made++;
	}
	for (size_t k = 0; k < made; k++) {
		plan[k].accepted = kb_archive_offer(a, plan[k].to, plan[k].cell, plan[k].candidate_id,
						    plan[k].fitness) == 1;
		if (moves)
			moves[k] = plan[k];
	}
	free(plan);
	return made;
}

void kb_archive_grid(const struct kb_archive *a, struct strbuf *out)
{
	size_t bi = 0;
	int bc = -1;
	bool have_best = kb_archive_best(a, SIZE_MAX, &bi, &bc) == 0;
	struct kb_behavior best;

	if (have_best)
		kb_behavior_from_cell(bc, &best);
	strbuf_addstr(out, "| memory \\ compute | 0 | 1 | 2 | 3 |\n");
	strbuf_addstr(out, "|---|---|---|---|---|\n");
	for (int m = 0; m < KB_BEHAVIOR_LEVELS; m++) {
		strbuf_addf(out, "| %d |", m);
		for (int c = 0; c < KB_BEHAVIOR_LEVELS; c++) {
			int levels = 0;

			for (int p = 0; p < KB_BEHAVIOR_LEVELS; p++)
				for (size_t i = 0; i < a->nr_islands; i++)
					if (kb_archive_get(a, i, m * 16 + c * 4 + p)) {
						levels++;
						break;
					}
			if (levels)
				strbuf_addf(out, " %d%s |", levels,
					    have_best && best.memory == m && best.compute == c ? "*" : "");
			else
				strbuf_addstr(out, " · |");
		}
		strbuf_addch(out, '\n');
	}
	strbuf_addf(out, "\n%zu of %d cells filled", kb_archive_filled(a, SIZE_MAX), KB_BEHAVIOR_CELLS);
	if (have_best)
		strbuf_addf(out, ", best %.2fx", kb_archive_get(a, bi, bc)->fitness);
	strbuf_addch(out, '\n');
}
