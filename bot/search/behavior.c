#include "core/common.h"
#include "search/behavior_priv.h"
#include "core/util.h"

/*
 * The public part: a kernel's behaviour descriptor (one level per axis,
 * with its evidence) and its cell in the archive. How each level is
 * found: behavior_priv.h.
 */

static int level_of(const struct ev *e, int axis)
{
	for (int l = KB_BEHAVIOR_LEVELS - 1; l > 0; l--)
		if (e->lv[axis][l][0])
			return l;
	return 0;
}

void kb_behavior_score(const char *source, enum kb_backend backend, struct kb_behavior *out)
{
	static const char *const axis_name[AX_NR] = { "memory", "compute", "parallel" };
	struct scan s;
	struct ev e;
	struct strbuf why = STRBUF_INIT;

	memset(&e, 0, sizeof(e));
	memset(out, 0, sizeof(*out));
	if (!source)
		source = "";
	bh_scan_init(&s, source);

	if (backend == KB_BACKEND_CPU)
		bh_score_cpu(&s, &e);
	else
		bh_score_cuda(&s, &e);

	out->memory = level_of(&e, AX_MEM);
	out->compute = level_of(&e, AX_COMP);
	out->parallel = level_of(&e, AX_PAR);
	for (int a = 0; a < AX_NR; a++) {
		int top = level_of(&e, a);

		/* "memory 3: cp.async, 2: __shared__ tile xs[][]" */
		strbuf_addf(&why, "%s%s %d", a ? "; " : "", axis_name[a], top);
		if (e.lv[a][top][0])
			strbuf_addf(&why, ": %s", e.lv[a][top]);
		for (int l = top - 1; l > 0; l--)
			if (e.lv[a][l][0])
				strbuf_addf(&why, ", %d: %s", l, e.lv[a][l]);
	}
	if (why.len >= sizeof(out->why)) {
		/* cut at the last separator that fits */
		size_t cut = sizeof(out->why) - 4;

		while (cut > 0 && why.buf[cut] != ',' && why.buf[cut] != ';')
			cut--;
		strbuf_setlen(&why, cut);
		strbuf_addstr(&why, "...");
	}
	kb_strlcpy(out->why, why.buf, sizeof(out->why));

	strbuf_release(&why);
	bh_scan_release(&s);
}

int kb_behavior_cell(const struct kb_behavior *b)
{
	int m = b->memory, c = b->compute, p = b->parallel;

	m = m < 0 ? 0 : m > 3 ? 3 : m;
	c = c < 0 ? 0 : c > 3 ? 3 : c;
	p = p < 0 ? 0 : p > 3 ? 3 : p;
	return m * 16 + c * 4 + p;
}

void kb_behavior_from_cell(int cell, struct kb_behavior *out)
{
	memset(out, 0, sizeof(*out));
	if (cell < 0 || cell >= KB_BEHAVIOR_CELLS)
		cell = 0;
	out->memory = cell / 16;
	out->compute = cell / 4 % 4;
	out->parallel = cell % 4;
}
