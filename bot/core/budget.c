#include "core/budget.h"
#include "core/util.h"

void kb_budget_init(struct kb_budget *b, int64_t deadline_ms, int checks, int64_t final_seeds,
		    int64_t screen_seeds)
{
	double ratio = screen_seeds > 0 && final_seeds > screen_seeds ?
		       (double)final_seeds / (double)screen_seeds : 1.0;

	b->deadline_ms = deadline_ms > 0 ? deadline_ms : 0;
	b->spent_ms = 0;
	b->items = 0;
	b->check_items = ratio * KB_BUDGET_FRESH_FACTOR;
	b->final_items = checks > 0 ? checks * b->check_items : 0.0;
	b->span_ms = 0;
	b->min_items = 0.0;
}

void kb_budget_cap_reserve(struct kb_budget *b, int64_t span_ms, int min_checks)
{
	double floor = (min_checks > 0 ? min_checks : 1) * b->check_items;

	b->span_ms = span_ms > 0 ? span_ms : 0;
	b->min_items = floor < b->final_items ? floor : b->final_items;
}

void kb_budget_spent(struct kb_budget *b, int64_t ms, size_t n)
{
	if (ms < 0 || !n)
		return;
	b->spent_ms = kb_sat_add_i64(b->spent_ms, ms);
	b->items = kb_sat_add_i64(b->items, (int64_t)(n < INT64_MAX ? n : INT64_MAX));
}

int64_t kb_budget_estimate_ms(const struct kb_budget *b, size_t n)
{
	int64_t per;

	if (!b->items)
		return 0;
	per = b->spent_ms / b->items;
	return kb_sat_mul_i64(per, (int64_t)(n < INT64_MAX ? n : INT64_MAX));
}

static int64_t items_ms(const struct kb_budget *b, double items)
{
	double ms = (double)kb_budget_estimate_ms(b, 1) * items;

	return ms < (double)INT64_MAX / 2 ? (int64_t)ms : INT64_MAX / 2;
}

int64_t kb_budget_reserve_ms(const struct kb_budget *b)
{
	int64_t all = items_ms(b, b->final_items), one, cap;

	if (!b->span_ms)
		return all;
	one = items_ms(b, b->min_items);
	cap = (int64_t)((double)b->span_ms * KB_BUDGET_RESERVE_SHARE);
	if (cap < one)
		cap = one;
	return all < cap ? all : cap;
}

int64_t kb_budget_check_ms(const struct kb_budget *b)
{
	return items_ms(b, b->check_items);
}

bool kb_budget_may_check(const struct kb_budget *b, int64_t now_ms, int checks)
{
	if (!b->deadline_ms)
		return true;
	if (now_ms >= b->deadline_ms)
		return false;
	return kb_sat_add_i64(now_ms, kb_sat_mul_i64(kb_budget_check_ms(b), checks > 0 ? checks : 0)) <=
	       b->deadline_ms;
}

bool kb_budget_may_start(const struct kb_budget *b, int64_t now_ms, size_t n)
{
	int64_t need;

	if (!b->deadline_ms)
		return true;
	if (now_ms >= b->deadline_ms)
		return false;
	need = kb_sat_add_i64(kb_budget_estimate_ms(b, n), kb_budget_reserve_ms(b));
	return kb_sat_add_i64(now_ms, need) <= b->deadline_ms;
}
