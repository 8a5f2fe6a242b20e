#include "core/common.h"
#include "templates/tmpl_priv.h"
#include "templates/tmpl_row.h"
#include "core/strbuf.h"
#include "core/util.h"

/*
 * kb_backward for softmax, log_softmax, layer_norm and rms_norm with their
 * prologue and epilogue. Hooks for <backend>/rowwise_bwd.<ext>.in:
 *
 *   kb_by(a, r, c, y, gc)    the epilogue at (r, c) forward and back from the
 *                            upstream gradient: returns dL/dy (y: the norm's
 *                            output), adds the epilogue inputs' parts to gc
 *   kb_bx(a, r, c, gp, gc)   the prologue back from gp = dL/d(norm input)
 *   kb_gfull / kb_gcol_* / kb_grow_*   where each input's gradient goes:
 *                            full inputs per element, per-row inputs summed
 *                            over the row, per-column inputs (and the norm's
 *                            weight and bias) summed over rows
 *
 * gc is indexed by input number.
 */

enum gpath { GP_NONE, GP_FULL, GP_COL, GP_ROW };

/* how input i's gradient is gathered */
static enum gpath grad_path(const struct kb_template *t, const bool *used, int i)
{
	const struct tinput *in = &t->g.in[i];

	if (!tmpl_wants_grad(in))
		return GP_NONE;
	if (i == t->row.weight || i == t->row.bias)
		return GP_ROW;
	if (!used[i])
		return GP_NONE;
	switch (in->pattern) {
	case TP_FULL: return GP_FULL;
	case TP_COL: return GP_COL;
	case TP_ROW: return GP_ROW;
	default: return GP_NONE;
	}
}

static void used_inputs(const struct kb_template *t, bool *used)
{
	row_x_inputs(t, used);
	row_y_inputs(t, used);
}

/* kb_args fields of the backward */
void row_bwd_fields(const struct kb_template *t, struct strbuf *out)
{
	const struct tgraph *g = &t->g;
	bool *used = xcalloc(g->nr_in + 1, sizeof(bool));

	used_inputs(t, used);
	strbuf_addf(out, "\tconst %s *go0; /* upstream gradient */\n", tmpl_ctype(t->out_dtype));
	for (size_t i = 0; i < g->nr_in; i++)
		if (grad_path(t, used, (int)i) != GP_NONE)
			strbuf_addf(out, "\t%s *g%zu; /* gradient of %s */\n", tmpl_ctype(g->in[i].dtype), i,
				    g->in[i].name);
	free(used);
}

/* checks made when the analysis asks for a backward */
int row_bwd_check(const struct kb_template *t, const bool *pro, const bool *epi, struct strbuf *why)
{
	const struct tgraph *g = &t->g;
	bool *used = xcalloc(g->nr_in + 1, sizeof(bool));
	int rc = 0;

	for (size_t k = 0; k < g->nr_nodes && !rc; k++)
		if (pro[k] && epi[k]) {
			strbuf_reset(why);
			strbuf_addf(why, "the backward of '%s' with node '%s' both before and after it is not supported",
				    row_kind_name(t->row.kind), g->nodes[k].name);
			rc = KB_ENOTFOUND;
		}
	used_inputs(t, used);
	for (size_t i = 0; i < g->nr_in && !rc; i++)
		if (used[i] && tmpl_wants_grad(&g->in[i]) && g->in[i].pattern == TP_SCALAR &&
		    (int)i != t->row.weight && (int)i != t->row.bias) {
			strbuf_reset(why);
			strbuf_addf(why, "the gradient of one-element tensor '%s' is not supported", g->in[i].name);
			rc = KB_ENOTFOUND;
		}
	free(used);
	return rc;
}

/* gi<i> for the inputs in used that take a gradient */
static void decl_gi(const struct kb_template *t, const bool *used, bool *ginput, struct strbuf *out)
{
	for (size_t i = 0; i < t->g.nr_in; i++) {
		ginput[i] = used[i] && tmpl_wants_grad(&t->g.in[i]);
		if (ginput[i])
			strbuf_addf(out, "\tfloat gi%zu = 0.0f;\n", i);
	}
}

/* "(void)" for forward values and loads the reverse mode may not read */
static void unused_locals(const struct kb_template *t, const bool *nodes, const bool *used,
			  struct strbuf *out)
{
	for (size_t k = 0; k < t->g.nr_nodes; k++)
		if (nodes[k] && (int)k != t->row.main)
			strbuf_addf(out, "\t(void)n%zu;\n", k);
	for (size_t i = 0; i < t->g.nr_in; i++)
		if (used[i] && t->g.in[i].kind != TK_SCALAR)
			strbuf_addf(out, "\t(void)x%zu;\n", i);
}

static int emit_by(const struct kb_template *t, struct strbuf *out)
{
	const struct tgraph *g = &t->g;
	const struct trow *rw = &t->row;
	bool *used = xcalloc(g->nr_in + 1, sizeof(bool));
	bool *ginput = xcalloc(g->nr_in + 1, sizeof(bool));
	char **node = xcalloc(g->nr_nodes + 1, sizeof(char *));
	char **ex;
	struct texpr_env env = { .prefix = "n" };
	int rc = -1;

	row_y_inputs(t, used);
	ex = row_input_exprs(t, used, false, false);
	node[rw->main] = xstrdup("y");
	env.input = (const char *const *)ex;
	env.node = (const char *const *)node;
	strbuf_addstr(out, "KB_FN float kb_by(const kb_args &a, int64_t r, int64_t c, float y, float *gc)\n{\n"
		      "\tconst int64_t i = r * a.C + c;\n");
	row_emit_loads(t, used, false, false, out);
	if (texpr_emit(out, g, rw->epilogue, &env, "\t"))
		goto out;
	for (size_t k = 0; k < g->nr_nodes; k++)
		if (rw->epilogue[k] || (int)k == rw->main)
			strbuf_addf(out, "\tfloat g%zu = 0.0f;\n", k);
	decl_gi(t, used, ginput, out);
	strbuf_addf(out, "\tg%d += kb_ld(a.go0 + i);\n", g->outs[0].idx);
	if (texpr_emit_backward(out, g, rw->epilogue, NULL, ginput, &env, "\t"))
		goto out;
	for (size_t i = 0; i < g->nr_in; i++)
		if (ginput[i])
			strbuf_addf(out, "\tgc[%zu] += gi%zu;\n", i, i);
	unused_locals(t, rw->epilogue, used, out);
	strbuf_addf(out, "\t(void)a;\n\t(void)gc;\n\t(void)i;\n\t(void)y;\n\treturn g%d;\n}\n\n", rw->main);
	rc = 0;
out:
	row_free_exprs(t, ex);
	for (size_t k = 0; k < g->nr_nodes; k++)
		free(node[k]);
	free(node);
	free(used);
	free(ginput);
	return rc;
}

static int emit_bx(const struct kb_template *t, struct strbuf *out)
{
	const struct tgraph *g = &t->g;
	const struct trow *rw = &t->row;
	bool *used = xcalloc(g->nr_in + 1, sizeof(bool));
	bool *ginput = xcalloc(g->nr_in + 1, sizeof(bool));
	char **ex;
	struct texpr_env env = { .prefix = "n" };
	int rc = -1;

	row_x_inputs(t, used);
	ex = row_input_exprs(t, used, false, false);
	env.input = (const char *const *)ex;
	strbuf_addstr(out, "KB_FN void kb_bx(const kb_args &a, int64_t r, int64_t c, float gp, float *gc)\n{\n"
		      "\tconst int64_t i = r * a.C + c;\n");
	row_emit_loads(t, used, false, false, out);
	if (texpr_emit(out, g, rw->prologue, &env, "\t"))
		goto out;
	for (size_t k = 0; k < g->nr_nodes; k++)
		if (rw->prologue[k])
			strbuf_addf(out, "\tfloat g%zu = 0.0f;\n", k);
	decl_gi(t, used, ginput, out);
	if (rw->input.kind == TA_NODE)
		strbuf_addf(out, "\tg%d += gp;\n", rw->input.idx);
	else if (ginput[rw->input.idx])
		strbuf_addf(out, "\tgi%d += gp;\n", rw->input.idx);
	if (texpr_emit_backward(out, g, rw->prologue, NULL, ginput, &env, "\t"))
		goto out;
	for (size_t i = 0; i < g->nr_in; i++)
		if (ginput[i])
			strbuf_addf(out, "\tgc[%zu] += gi%zu;\n", i, i);
	unused_locals(t, rw->prologue, used, out);
	strbuf_addstr(out, "\t(void)a;\n\t(void)gp;\n\t(void)gc;\n\t(void)i;\n}\n\n");
	rc = 0;
out:
	row_free_exprs(t, ex);
	free(used);
	free(ginput);
	return rc;
}

/* the stores; *ncol / *nrow: how many per-row / per-column gradients */
static void emit_stores(const struct kb_template *t, struct strbuf *out, int *ncol, int *nrow)
{
	const struct tgraph *g = &t->g;
	bool *used = xcalloc(g->nr_in + 1, sizeof(bool));
	struct strbuf full = STRBUF_INIT, cacc = STRBUF_INIT, cst = STRBUF_INIT;
	struct strbuf racc = STRBUF_INIT, rst = STRBUF_INIT;
	int nc = 0, nr = 0;

	used_inputs(t, used);
	for (size_t i = 0; i < g->nr_in; i++) {
		switch (grad_path(t, used, (int)i)) {
		case GP_FULL:
			strbuf_addf(&full, "\tkb_st(a.g%zu + r * a.C + c, gc[%zu]);\n", i, i);
			break;
		case GP_COL:
			strbuf_addf(&cacc, "\tacc[%d] += gc[%zu];\n", nc, i);
			strbuf_addf(&cst, "\tkb_st(a.g%zu + r, acc[%d]);\n", i, nc);
			nc++;
			break;
		case GP_ROW:
			if (used[i])
				strbuf_addf(&racc, "\tacc[%d] += gc[%zu];\n", nr, i);
			if ((int)i == t->row.weight)
				strbuf_addf(&racc, "\tacc[%d] += gy * xhat;\n", nr);
			if ((int)i == t->row.bias)
				strbuf_addf(&racc, "\tacc[%d] += gy;\n", nr);
			strbuf_addf(&rst, "\tkb_st(a.g%zu + c, acc[%d]);\n", i, nr);
			nr++;
			break;
		default:
			break;
		}
	}
	strbuf_addf(out, "KB_FN void kb_gfull(const kb_args &a, int64_t r, int64_t c, const float *gc)\n{\n%s"
		    "\t(void)a;\n\t(void)r;\n\t(void)c;\n\t(void)gc;\n}\n\n", full.buf);
	strbuf_addf(out, "KB_FN void kb_gcol_acc(float *acc, const float *gc)\n{\n%s\t(void)acc;\n\t(void)gc;\n}\n\n",
		    cacc.buf);
	strbuf_addf(out, "KB_FN void kb_gcol_store(const kb_args &a, int64_t r, const float *acc)\n{\n%s"
		    "\t(void)a;\n\t(void)r;\n\t(void)acc;\n}\n\n", cst.buf);
	strbuf_addf(out, "KB_FN void kb_grow_acc(float *acc, const float *gc, float gy, float xhat)\n{\n%s"
		    "\t(void)acc;\n\t(void)gc;\n\t(void)gy;\n\t(void)xhat;\n}\n\n", racc.buf);
	strbuf_addf(out, "KB_FN void kb_grow_store(const kb_args &a, int64_t c, const float *acc)\n{\n%s"
		    "\t(void)a;\n\t(void)c;\n\t(void)acc;\n}\n\n", rst.buf);
	*ncol = nc;
	*nrow = nr;
	strbuf_release(&full);
	strbuf_release(&cacc);
	strbuf_release(&cst);
	strbuf_release(&racc);
	strbuf_release(&rst);
	free(used);
}

static void emit_bsetup(const struct kb_template *t, struct strbuf *out, int *ngrad)
{
	const struct tgraph *g = &t->g;
	bool *used = xcalloc(g->nr_in + 1, sizeof(bool));
	int q = 0;

	used_inputs(t, used);
	tmpl_emit_upstream_grad(out, t->out_dtype, g->nr_in, 0, "a.R * a.C");
	for (size_t i = 0; i < g->nr_in; i++) {
		char field[24];

		if (!tmpl_wants_grad(&g->in[i]))
			continue;
		xsnprintf(field, sizeof(field), "g%zu", i);
		tmpl_emit_grad_output(out, &g->in[i], i, q++,
				      grad_path(t, used, (int)i) != GP_NONE ? field : NULL, "a.R * a.C");
	}
	strbuf_addstr(out, "\tif (a.R * a.C == 0 || rc)\n\t\treturn rc;\n");
	*ngrad = q;
	free(used);
}

int tmpl_rowwise_render_bwd(const struct kb_template *t, const int64_t *point, struct strbuf *out)
{
	struct tvars vs;
	struct strbuf setup = STRBUF_INIT, bsetup = STRBUF_INIT;
	int ncol = 0, nrow = 0, ngrad = 0, rc = -1;

	(void)point;
	tvars_init(&vs);
	if (emit_by(t, out) || emit_bx(t, out))
		goto out;
	emit_stores(t, out, &ncol, &nrow);
	if (row_emit_setup(t, &setup, true))
		goto out;
	emit_bsetup(t, &bsetup, &ngrad);
	tvars_setf(&vs, "NIN", "%zu", t->g.nr_in);
	tvars_setf(&vs, "NI", "%zu", t->g.nr_in ? t->g.nr_in : 1);
	tvars_setf(&vs, "NCOL", "%d", ncol);
	tvars_setf(&vs, "NROW", "%d", nrow);
	tvars_setf(&vs, "NGRAD", "%d", ngrad);
	tvars_set(&vs, "SETUP", setup.buf);
	tvars_set(&vs, "BSETUP", bsetup.buf);
	rc = tmpl_subst(out, t->text[TT_ROWWISE_BWD], &vs);
out:
	tvars_release(&vs);
	strbuf_release(&setup);
	strbuf_release(&bsetup);
	return rc;
}
