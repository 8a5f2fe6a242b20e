#include "core/common.h"
#include "templates/tmpl_priv.h"
#include "templates/tmpl_ew.h"
#include "core/strbuf.h"
#include "core/util.h"

/*
 * kb_backward for pointwise chains. kb_bwd_elem(a, i, gin) recomputes the
 * chain at element i, takes the upstream gradients there and runs reverse
 * mode (tmpl_expr.c) down to the inputs: gin[j] is slot j's contribution.
 * Full inputs store it at i; a broadcast input's gradient sums the
 * contributions of every element that read each of its entries, in a
 * fixed order (kb_bw_reduce in the backend's pointwise_bwd text).
 */

void pw_bwd_fields(const struct kb_template *t, const struct ew *e, struct strbuf *out)
{
	const struct tgraph *g = &t->g;

	for (int k = 0; k < e->nout; k++)
		strbuf_addf(out, "\tconst %s *go%d; /* upstream gradient of output %d */\n",
			    tmpl_ctype(e->out_dt[k]), k, k);
	for (int j = 0; j < e->nslot; j++)
		if (e->slot_input[j] >= 0 && tmpl_wants_grad(&g->in[e->slot_input[j]]))
			strbuf_addf(out, "\t%s *g%d; /* gradient of %s */\n", tmpl_ctype(e->slot_dt[j]), j,
				    g->in[e->slot_input[j]].name);
}

static bool slot_grad(const struct kb_template *t, const struct ew *e, int j)
{
	return e->slot_input[j] >= 0 && tmpl_wants_grad(&t->g.in[e->slot_input[j]]);
}

static int emit_hooks(const struct kb_template *t, const struct ew *e, struct strbuf *out)
{
	const struct tgraph *g = &t->g;
	struct texpr_env env = { 0 };
	bool *ginput = xcalloc(g->nr_in + 1, sizeof(bool));
	char **inputs = ew_input_exprs(e, "in");
	int rc = -1;

	env.input = (const char *const *)inputs;
	for (int j = 0; j < e->nslot; j++)
		if (slot_grad(t, e, j))
			ginput[e->slot_input[j]] = true;

	strbuf_addstr(out, "template <typename I>\nKB_FN void kb_bwd_elem(const kb_args &a, I i, float *gin)\n{\n"
		      "\tfloat in[KB_NIN];\n\n\tkb_load1<I>(a, i, in);\n");
	if (texpr_emit(out, g, e->want, &env, "\t"))
		goto out;
	for (size_t k = 0; k < g->nr_nodes; k++)
		if (e->want[k])
			strbuf_addf(out, "\tfloat g%zu = 0.0f;\n", k);
	for (size_t i = 0; i < g->nr_in; i++)
		if (ginput[i])
			strbuf_addf(out, "\tfloat gi%zu = 0.0f;\n", i);
	for (int k = 0; k < e->nout; k++) {
		const struct targ *o = &e->out_val[k];

		strbuf_addf(out, "\tconst float go%d = kb_ld(a.go%d + i);\n", k, k);
		if (o->kind == TA_NODE)
			strbuf_addf(out, "\tg%d += go%d;\n", o->idx, k);
		else if (o->kind == TA_INPUT && ginput[o->idx])
			strbuf_addf(out, "\tgi%d += go%d;\n", o->idx, k);
	}
	if (texpr_emit_backward(out, g, e->want, NULL, ginput, &env, "\t"))
		goto out;
	for (size_t k = 0; k < g->nr_nodes; k++)
		if (e->want[k] && !e->node_expr[k])
			strbuf_addf(out, "\t(void)v%zu;\n", k);
	for (int j = 0; j < e->nslot; j++) {
		if (slot_grad(t, e, j))
			strbuf_addf(out, "\tgin[%d] = gi%d;\n", j, e->slot_input[j]);
		else
			strbuf_addf(out, "\tgin[%d] = 0.0f;\n", j);
	}
	strbuf_addstr(out, "\t(void)a;\n}\n\n");

	/* stores: full inputs at i; entry k of broadcast input j */
	strbuf_addstr(out, "template <typename I>\nKB_FN void kb_bwd_store(const kb_args &a, I i, const float *gin)\n{\n");
	for (int j = 0; j < e->nslot; j++)
		if (slot_grad(t, e, j) && e->slot_full[j])
			strbuf_addf(out, "\tkb_st(a.g%d + i, gin[%d]);\n", j, j);
	strbuf_addstr(out, "\t(void)a;\n\t(void)i;\n\t(void)gin;\n}\n\n");
	strbuf_addstr(out, "KB_FN void kb_bwd_put(const kb_args &a, int j, int64_t k, float v)\n{\n\tswitch (j) {\n");
	for (int j = 0; j < e->nslot; j++)
		if (slot_grad(t, e, j) && !e->slot_full[j])
			strbuf_addf(out, "\tcase %d:\n\t\tkb_st(a.g%d + k, v);\n\t\tbreak;\n", j, j);
	strbuf_addstr(out, "\tdefault:\n\t\tbreak;\n\t}\n\t(void)a;\n\t(void)k;\n\t(void)v;\n}\n\n");
	rc = 0;
out:
	ew_free_exprs(e, inputs);
	free(ginput);
	return rc;
}

/* upstream gradients, gradient outputs (zeros for inputs the chain ignores) */
static void emit_bsetup(const struct kb_template *t, const struct ew *e, struct strbuf *out)
{
	const struct tgraph *g = &t->g;
	int q = 0;

	for (int k = 0; k < e->nout; k++)
		tmpl_emit_upstream_grad(out, e->out_dt[k], g->nr_in, k, "a.n");
	for (size_t i = 0; i < g->nr_in; i++) {
		int j = e->slot_of[i];
		char field[24];

		if (!tmpl_wants_grad(&g->in[i]))
			continue;
		xsnprintf(field, sizeof(field), "g%d", j);
		tmpl_emit_grad_output(out, &g->in[i], i, q++, j >= 0 ? field : NULL, "a.n");
	}
	strbuf_addstr(out, "\tif (a.n == 0 || rc)\n\t\treturn rc;\n");
}

static void emit_launch(const struct kb_template *t, const struct ew *e, struct strbuf *out)
{
	bool full = false;

	for (int j = 0; j < e->nslot; j++)
		full |= slot_grad(t, e, j) && e->slot_full[j];
	if (full)
		strbuf_addstr(out, "\trc |= kb_bw_full_launch(a, s);\n");
	for (int j = 0; j < e->nslot; j++)
		if (slot_grad(t, e, j) && !e->slot_full[j])
			strbuf_addf(out, "\trc |= kb_bw_reduce<%d>(a, a.d%d, a.m%d, s);\n", j, j, j);
}

static int count_grads(const struct kb_template *t)
{
	int n = 0;

	for (size_t i = 0; i < t->g.nr_in; i++)
		n += tmpl_wants_grad(&t->g.in[i]);
	return n;
}

int tmpl_pointwise_render_bwd(const struct kb_template *t, const struct ew *e, const int64_t *point,
			      struct strbuf *out)
{
	struct tvars vs;
	struct strbuf setup = STRBUF_INIT, bsetup = STRBUF_INIT, launch = STRBUF_INIT;
	int rc = -1;

	(void)point;
	tvars_init(&vs);
	if (emit_hooks(t, e, out))
		goto out;
	ew_emit_setup(e, &setup, NULL, "\t", false);
	emit_bsetup(t, e, &bsetup);
	emit_launch(t, e, &launch);
	tvars_setf(&vs, "NIN", "%zu", t->g.nr_in);
	tvars_setf(&vs, "NOUT", "%d", e->nout);
	tvars_setf(&vs, "NGRAD", "%d", count_grads(t));
	tvars_set(&vs, "SETUP", setup.buf);
	tvars_set(&vs, "BSETUP", bsetup.buf);
	tvars_set(&vs, "LAUNCH", launch.buf);
	rc = tmpl_subst(out, t->text[TT_POINTWISE_BWD], &vs);
out:
	tvars_release(&vs);
	strbuf_release(&setup);
	strbuf_release(&bsetup);
	strbuf_release(&launch);
	return rc;
}
