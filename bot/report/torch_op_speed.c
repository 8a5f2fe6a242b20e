#include "core/common.h"
#include "core/json.h"
#include "core/util.h"
#include "report/torch_op.h"

#include <math.h>

/*
 * The speed gate of ops.py (report/torch_op.h): a module that calls a
 * kernel slower than its own code is worse off for the pull request, so
 * the patched forward calls it only on the sizes and dtypes where the
 * evidence timed it at least min_speedup x the original (eager) code.
 */

struct timed {
	const char *dtype;
	const char *name;
	int64_t numel;
	double speedup;
};

/* Total elements of a config's tensor arguments (the ABI's; what supported(*args) sees). */
static int64_t config_numel(const cJSON *inputs, const char **dtype)
{
	const cJSON *in, *d;
	int64_t total = 0;

	*dtype = NULL;
	cJSON_ArrayForEach(in, inputs) {
		int64_t n = 1;

		if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(in, "scalar")))
			continue;
		if (!*dtype)
			*dtype = kb_json_str(in, "dtype");
		cJSON_ArrayForEach(d, cJSON_GetObjectItemCaseSensitive(in, "shape"))
			n *= cJSON_IsNumber(d) && d->valuedouble >= 0 ? kb_i64_from_double(d->valuedouble) : 0;
		total += n;
	}
	return total;
}

static int by_dtype_then_numel(const void *a, const void *b)
{
	const struct timed *x = a, *y = b;
	int c = strcmp(x->dtype, y->dtype);

	if (c)
		return c;
	return x->numel < y->numel ? -1 : x->numel > y->numel;
}

static struct kb_op_speed *speed_of(struct kb_torch_op *op, const char *dtype)
{
	struct kb_op_speed *sp;

	for (size_t i = 0; i < op->nr_speed; i++)
		if (!strcmp(op->speed[i].dtype, dtype))
			return &op->speed[i];
	op->speed = xrealloc(op->speed, (op->nr_speed + 1) * sizeof(*op->speed));
	sp = &op->speed[op->nr_speed++];
	memset(sp, 0, sizeof(*sp));
	sp->dtype = xstrdup(dtype);
	return sp;
}

static void add_range(struct kb_op_speed *sp, int64_t lo, int64_t hi)
{
	sp->ranges = xrealloc(sp->ranges, (sp->nr_ranges + 1) * sizeof(*sp->ranges));
	sp->ranges[sp->nr_ranges].lo = lo;
	sp->ranges[sp->nr_ranges].hi = hi;
	sp->nr_ranges++;
}

/*
 * One dtype's configs t[0..n) (sorted by numel): runs of sizes whose every
 * config is fast. A size is one numel value (configs of equal numel decide together).
 */
static void dtype_ranges(struct kb_torch_op *op, const struct timed *t, size_t n, double min)
{
	size_t i = 0;
	int64_t run_lo = -1, run_hi = -1;
	bool run_first = false;

	while (i < n) {
		size_t j = i;
		bool fast = true;

		for (; j < n && t[j].numel == t[i].numel; j++)
			fast = fast && t[j].speedup >= min;
		if (fast) {
			if (run_lo < 0) {
				run_lo = t[i].numel;
				run_first = i == 0;
			}
			run_hi = t[i].numel;
		}
		if (run_lo >= 0 && (!fast || j == n))
			add_range(speed_of(op, t[i].dtype), run_first ? 0 : run_lo,
				  fast && j == n ? -1 : run_hi);
		if (!fast)
			run_lo = -1;
		i = j;
	}
}

int kb_torch_op_speed_gate(struct kb_torch_op *op, const cJSON *evidence, double min_speedup,
			   struct strbuf *why)
{
	const cJSON *c;
	struct timed *t, *best = NULL;
	size_t n = 0, start = why->len;
	int rc = 0;

	op->min_speedup = min_speedup > 0 ? min_speedup : 0;
	if (!(min_speedup > 0))
		return 0;
	t = xcalloc((size_t)cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(evidence, "configs")) + 1,
		    sizeof(*t));
	cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(evidence, "configs")) {
		const cJSON *timing = cJSON_GetObjectItemCaseSensitive(c, "timing");
		double s = kb_json_num(timing, "speedup_eager", NAN);
		const char *dtype;
		int64_t numel = config_numel(cJSON_GetObjectItemCaseSensitive(c, "inputs"), &dtype);

		if (!isfinite(s) || !(s > 0) || !dtype)
			continue;
		t[n].dtype = dtype;
		t[n].name = kb_json_str(c, "name") ? kb_json_str(c, "name") : "?";
		t[n].numel = numel;
		t[n].speedup = s;
		n++;
	}
	if (!n) {
		strbuf_addstr(why, "no config of the evidence was timed, so nothing shows the kernel is faster "
			      "than the module's own code (a run with timing, or [bot] wire_min_speedup = 0, "
			      "wires it)");
		rc = KB_ENOTSUPPORTED;
		goto out;
	}
	best = t;
	for (size_t i = 1; i < n; i++)
		if (t[i].speedup > best->speedup)
			best = &t[i];
	strbuf_addf(why, "it measured below %.2fx the module's own code on every timed config (best "
		    "%.2fx at '%s'; [bot] wire_min_speedup)", min_speedup,
		    best->speedup, best->name);
	qsort(t, n, sizeof(*t), by_dtype_then_numel);
	for (size_t i = 0, j; i < n; i = j) {
		for (j = i; j < n && !strcmp(t[j].dtype, t[i].dtype); j++)
			;
		dtype_ranges(op, t + i, j - i, min_speedup);
	}
	if (op->nr_speed)
		strbuf_setlen(why, start);
	else
		rc = KB_ENOTSUPPORTED;
out:
	free(t);
	return rc;
}

cJSON *kb_torch_op_speed_json(const struct kb_torch_op *op)
{
	cJSON *o, *faster;

	if (!(op->min_speedup > 0))
		return NULL;
	o = cJSON_CreateObject();
	cJSON_AddNumberToObject(o, "min_speedup", op->min_speedup);
	faster = cJSON_AddObjectToObject(o, "faster");
	for (size_t i = 0; i < op->nr_speed; i++) {
		cJSON *list = cJSON_AddArrayToObject(faster, op->speed[i].dtype);

		for (size_t k = 0; k < op->speed[i].nr_ranges; k++) {
			cJSON *r = cJSON_CreateArray();

			cJSON_AddItemToArray(r, cJSON_CreateNumber((double)op->speed[i].ranges[k].lo));
			cJSON_AddItemToArray(r, op->speed[i].ranges[k].hi < 0
						? cJSON_CreateNull()
						: cJSON_CreateNumber((double)op->speed[i].ranges[k].hi));
			cJSON_AddItemToArray(list, r);
		}
	}
	return o;
}
