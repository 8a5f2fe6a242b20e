#include "core/common.h"
#include "templates/tmpl_priv.h"
#include "templates/tmpl_ew.h"
#include "core/strbuf.h"
#include "core/util.h"

/*
 * The elementwise generator: one struct of kernel arguments and a few
 * per-element hooks (load, body, store; their vector forms) that the
 * family-independent kernels in <backend>/ew.<ext>.in drive. The pointwise
 * family uses it whole; the matmul family for its epilogue (the product is
 * then slot "product", read from the output in place).
 *
 * Every tensor the elements read is a slot p<j>; a slot broadcasts as
 * (i / d<j>) % m<j> (kb_bcast at run time) unless the analysis says it is
 * full, which the host code checks. Scalars are floats s<i> by value.
 */

static int out_dtype_of(const struct tgraph *g, const struct targ *a, enum tdtype *d)
{
	if (a->kind == TA_NODE)
		*d = g->nodes[a->idx].dtype;
	else
		*d = g->in[a->idx].dtype;
	return 0;
}

void ew_init(struct ew *e, const struct kb_template *t)
{
	memset(e, 0, sizeof(*e));
	e->t = t;
	e->want = xcalloc(t->g.nr_nodes + 1, sizeof(*e->want));
	e->node_expr = xcalloc(t->g.nr_nodes + 1, sizeof(*e->node_expr));
	e->slot_of = xcalloc(t->g.nr_in + 1, sizeof(*e->slot_of));
	for (size_t i = 0; i < t->g.nr_in; i++)
		e->slot_of[i] = -1;
	e->product_slot = -1;
}

void ew_release(struct ew *e)
{
	if (e->node_expr)
		for (size_t k = 0; k < e->t->g.nr_nodes; k++)
			free(e->node_expr[k]);
	free(e->node_expr);
	free(e->want);
	free(e->slot_of);
	memset(e, 0, sizeof(*e));
}

static int add_slot(struct ew *e, int input, enum tdtype dt, bool full)
{
	int j = e->nslot;

	if (j >= EW_MAX_SLOTS)
		return -1;
	e->slot_input[j] = input;
	e->slot_dt[j] = dt;
	e->slot_full[j] = full;
	e->nslot++;
	if (input >= 0)
		e->slot_of[input] = j;
	return j;
}

/* the slots and scalars the wanted nodes and outputs read */
static int collect(struct ew *e, struct strbuf *why)
{
	const struct tgraph *g = &e->t->g;
	bool *used = xcalloc(g->nr_in + 1, sizeof(*used));
	int rc = 0;

	for (size_t k = 0; k < g->nr_nodes; k++) {
		if (!e->want[k] || e->node_expr[k] || g->nodes[k].op == OP_MAIN)
			continue;
		for (int a = 0; a < g->nodes[k].nargs; a++)
			if (g->nodes[k].args[a].kind == TA_INPUT)
				used[g->nodes[k].args[a].idx] = true;
	}
	for (int k = 0; k < e->nout; k++)
		if (e->out_val[k].kind == TA_INPUT)
			used[e->out_val[k].idx] = true;
	for (size_t i = 0; i < g->nr_in; i++) {
		const struct tinput *in = &g->in[i];

		if (!used[i] || (int)i == e->skip_input)
			continue;
		if (in->kind == TK_SCALAR)
			continue;
		if (in->dtype == TD_F64 || in->dtype == TD_OTHER) {
			rc = KB_ENOTFOUND;
			if (why) {
				strbuf_reset(why);
				strbuf_addf(why, "input '%s' has dtype '%s', which the templates do not cover",
					    in->name, tmpl_dtype_name(in->dtype));
			}
			goto out;
		}
		if (add_slot(e, (int)i, in->dtype, in->pattern == TP_FULL) < 0) {
			rc = KB_ENOTFOUND;
			if (why) {
				strbuf_reset(why);
				strbuf_addf(why, "more than %d tensors in one pointwise chain", EW_MAX_SLOTS);
			}
			goto out;
		}
	}
out:
	free(used);
	return rc;
}

/* node k and what it needs, stopping at given values and the family's own node */
static void ew_need(struct ew *e, int k)
{
	const struct tnode *n = &e->t->g.nodes[k];

	if (e->want[k])
		return;
	e->want[k] = true;
	if (e->node_expr[k] || n->op == OP_MAIN)
		return;
	for (int j = 0; j < n->nargs; j++)
		if (n->args[j].kind == TA_NODE)
			ew_need(e, n->args[j].idx);
}

int ew_setup(struct ew *e, struct strbuf *why)
{
	const struct tgraph *g = &e->t->g;
	int maxsize = 1;

	if (e->product_slot == -2) {
		/* matmul: the product read in place from output 0 */
		e->product_slot = add_slot(e, -1, e->out_dt[0], true);
		if (e->product_node >= 0) {
			struct strbuf sb = STRBUF_INIT;

			strbuf_addf(&sb, "in[%d]", e->product_slot);
			e->node_expr[e->product_node] = strbuf_detach(&sb, NULL);
		}
	}
	for (int k = 0; k < e->nout; k++)
		if (e->out_val[k].kind == TA_NODE)
			ew_need(e, e->out_val[k].idx);
	if (e->product_node >= 0)
		e->want[e->product_node] = true;
	if (collect(e, why))
		return KB_ENOTFOUND;
	for (int j = 0; j < e->nslot; j++)
		if (e->slot_full[j] && tmpl_dtype_size(e->slot_dt[j]) > maxsize)
			maxsize = tmpl_dtype_size(e->slot_dt[j]);
	for (int k = 0; k < e->nout; k++)
		if (tmpl_dtype_size(e->out_dt[k]) > maxsize)
			maxsize = tmpl_dtype_size(e->out_dt[k]);
	e->V = 16 / maxsize;
	if (e->V < 1)
		e->V = 1;
	(void)g;
	return 0;
}

/* --- code --- */

static const char *slot_ctype(const struct ew *e, int j)
{
	return tmpl_ctype(e->slot_dt[j]);
}

void ew_emit_struct(const struct ew *e, struct strbuf *out, const char *extra)
{
	const struct tgraph *g = &e->t->g;

	strbuf_addstr(out, "struct kb_args {\n");
	for (int j = 0; j < e->nslot; j++) {
		strbuf_addf(out, "\tconst %s *p%d; /* %s */\n", slot_ctype(e, j), j,
			    e->slot_input[j] >= 0 ? g->in[e->slot_input[j]].name : "product");
		if (!e->slot_full[j])
			strbuf_addf(out, "\tint64_t d%d, m%d; int bv%d;\n", j, j, j);
	}
	for (size_t i = 0; i < g->nr_in; i++)
		if (g->in[i].kind == TK_SCALAR)
			strbuf_addf(out, "\tfloat s%zu; /* %s */\n", i, g->in[i].name);
	for (int k = 0; k < e->nout; k++)
		strbuf_addf(out, "\t%s *o%d;\n", tmpl_ctype(e->out_dt[k]), k);
	if (extra)
		strbuf_addstr(out, extra);
	strbuf_addstr(out, "\tint64_t n;\n};\n\n");
	strbuf_addf(out, "#define KB_NIN %d\n#define KB_NOUT %d\n#define KB_V %d\n\n",
		    e->nslot ? e->nslot : 1, e->nout, e->V);
}

/* input expressions for the body: in[j] for slots, a.s<i> for scalars */
char **ew_input_exprs(const struct ew *e, const char *arr)
{
	const struct tgraph *g = &e->t->g;
	char **v = xcalloc(g->nr_in + 1, sizeof(*v));

	for (size_t i = 0; i < g->nr_in; i++) {
		struct strbuf sb = STRBUF_INIT;

		if (g->in[i].kind == TK_SCALAR)
			strbuf_addf(&sb, "a.s%zu", i);
		else if (e->slot_of[i] >= 0)
			strbuf_addf(&sb, "%s[%d]", arr, e->slot_of[i]);
		else
			continue;
		v[i] = strbuf_detach(&sb, NULL);
	}
	return v;
}

void ew_free_exprs(const struct ew *e, char **v)
{
	for (size_t i = 0; i < e->t->g.nr_in; i++)
		free(v[i]);
	free(v);
}

static void slot_index(const struct ew *e, int j, struct strbuf *out)
{
	if (e->slot_full[j])
		strbuf_addstr(out, "i");
	else
		strbuf_addf(out, "kb_bidx<I>(i, (I)a.d%d, (I)a.m%d)", j, j);
}

int ew_emit_hooks(const struct ew *e, struct strbuf *out)
{
	const struct tgraph *g = &e->t->g;
	struct texpr_env env = { 0 };
	char **inputs;
	int rc;

	/* one element's inputs */
	strbuf_addstr(out, "template <typename I>\nKB_FN void kb_load1(const kb_args &a, I i, float *v)\n{\n");
	for (int j = 0; j < e->nslot; j++) {
		strbuf_addf(out, "\tv[%d] = kb_ld(a.p%d + ", j, j);
		slot_index(e, j, out);
		strbuf_addstr(out, ");\n");
	}
	if (!e->nslot)
		strbuf_addstr(out, "\tv[0] = 0.0f;\n");
	strbuf_addstr(out, "\t(void)a;\n\t(void)i;\n}\n\n");

	/* KB_V consecutive elements from i (i % KB_V == 0, alignment checked on the host) */
	strbuf_addstr(out, "template <typename I>\nKB_FN void kb_loadv(const kb_args &a, I i, float (*v)[KB_V])\n{\n");
	for (int j = 0; j < e->nslot; j++) {
		bool vec = e->V * tmpl_dtype_size(e->slot_dt[j]) <= 16;

		if (e->slot_full[j]) {
			if (vec)
				strbuf_addf(out, "\tkb_ldv<KB_V>(a.p%d + i, v[%d]);\n", j, j);
			else
				strbuf_addf(out, "\tfor (int k = 0; k < KB_V; k++)\n\t\tv[%d][k] = kb_ld(a.p%d + i + k);\n",
					    j, j);
			continue;
		}
		strbuf_addf(out, "\tif (a.bv%d) {\n", j);
		if (vec)
			strbuf_addf(out, "\t\tkb_ldv<KB_V>(a.p%d + kb_bidx<I>(i, (I)1, (I)a.m%d), v[%d]);\n",
				    j, j, j);
		else
			strbuf_addf(out, "\t\tfor (int k = 0; k < KB_V; k++)\n"
				    "\t\t\tv[%d][k] = kb_ld(a.p%d + kb_bidx<I>(i, (I)1, (I)a.m%d) + k);\n",
				    j, j, j);
		strbuf_addf(out, "\t} else {\n\t\tconst float s = kb_ld(a.p%d + kb_bidx<I>(i, (I)a.d%d, (I)a.m%d));\n"
			    "\t\tfor (int k = 0; k < KB_V; k++)\n\t\t\tv[%d][k] = s;\n\t}\n", j, j, j, j);
	}
	if (!e->nslot)
		strbuf_addstr(out, "\tfor (int k = 0; k < KB_V; k++)\n\t\tv[0][k] = 0.0f;\n");
	strbuf_addstr(out, "\t(void)a;\n\t(void)i;\n}\n\n");

	/* the chain */
	inputs = ew_input_exprs(e, "in");
	env.input = (const char *const *)inputs;
	env.node = (const char *const *)e->node_expr;
	strbuf_addstr(out, "KB_FN void kb_body(const kb_args &a, const float *in, float *out)\n{\n");
	rc = texpr_emit(out, g, e->want, &env, "\t");
	for (int k = 0; k < e->nout && !rc; k++) {
		strbuf_addf(out, "\tout[%d] = ", k);
		texpr_arg(out, g, &e->out_val[k], &env);
		strbuf_addstr(out, ";\n");
	}
	strbuf_addstr(out, "\t(void)a;\n\t(void)in;\n}\n\n");
	ew_free_exprs(e, inputs);
	if (rc)
		return rc;

	strbuf_addstr(out, "template <typename I>\nKB_FN void kb_store1(const kb_args &a, I i, const float *o)\n{\n");
	for (int k = 0; k < e->nout; k++)
		strbuf_addf(out, "\tkb_st(a.o%d + i, o[%d]);\n", k, k);
	strbuf_addstr(out, "}\n\n");
	strbuf_addstr(out, "template <typename I>\nKB_FN void kb_storev(const kb_args &a, I i, float (*o)[KB_V])\n{\n");
	for (int k = 0; k < e->nout; k++) {
		if (e->V * tmpl_dtype_size(e->out_dt[k]) <= 16)
			strbuf_addf(out, "\tkb_stv<KB_V>(a.o%d + i, o[%d]);\n", k, k);
		else
			strbuf_addf(out, "\tfor (int k = 0; k < KB_V; k++)\n\t\tkb_st(a.o%d + i + k, o[%d][k]);\n",
				    k, k);
	}
	strbuf_addstr(out, "}\n\n");
	return 0;
}

/*
 * Host code: fill kb_args a from inputs/outputs, set vec_ok. out0 names the
 * DLTensor whose shape is the element space (a "const DLTensor *" in
 * scope); product (may be NULL) the expression of the product's data.
 */
void ew_emit_setup(const struct ew *e, struct strbuf *out, const char *product, const char *ind,
		   bool with_outputs)
{
	const struct tgraph *g = &e->t->g;
	struct strbuf chk = STRBUF_INIT;

	strbuf_addf(out, "%sa.n = kb_numel(out0);\n", ind);
	for (int k = 0; k < e->nout && with_outputs; k++) {
		struct strbuf tn = STRBUF_INIT;

		strbuf_addf(&tn, "&outputs[%d]", k);
		strbuf_reset(&chk);
		tmpl_dtype_check(&chk, e->out_dt[k], tn.buf);
		strbuf_addf(out, "%sif (!%s || kb_numel(&outputs[%d]) != a.n)\n%s\treturn 2;\n", ind,
			    chk.buf, k, ind);
		strbuf_addf(out, "%sa.o%d = (%s *)kb_data(&outputs[%d]);\n", ind, k,
			    tmpl_ctype(e->out_dt[k]), k);
		if (e->V * tmpl_dtype_size(e->out_dt[k]) <= 16)
			strbuf_addf(out, "%svec_ok &= kb_aligned(a.o%d, KB_V * (int)sizeof(*a.o%d));\n",
				    ind, k, k);
		strbuf_release(&tn);
	}
	for (int j = 0; j < e->nslot; j++) {
		int i = e->slot_input[j];
		struct strbuf tn = STRBUF_INIT;
		bool vec = e->V * tmpl_dtype_size(e->slot_dt[j]) <= 16;

		if (i < 0) {
			strbuf_addf(out, "%sa.p%d = (const %s *)(%s);\n", ind, j, slot_ctype(e, j),
				    product ? product : "kb_data(&outputs[0])");
			if (vec)
				strbuf_addf(out, "%svec_ok &= kb_aligned(a.p%d, KB_V * (int)sizeof(*a.p%d));\n",
					    ind, j, j);
			strbuf_release(&tn);
			continue;
		}
		strbuf_addf(&tn, "&inputs[%d]", i);
		strbuf_reset(&chk);
		tmpl_dtype_check(&chk, e->slot_dt[j], tn.buf);
		strbuf_addf(out, "%sif (!%s)\n%s\treturn 2;\n", ind, chk.buf, ind);
		strbuf_addf(out, "%sa.p%d = (const %s *)kb_data(&inputs[%d]);\n", ind, j, slot_ctype(e, j), i);
		if (e->slot_full[j]) {
			strbuf_addf(out, "%sif (kb_numel(&inputs[%d]) != a.n)\n%s\treturn 2;\n", ind, i, ind);
			if (vec)
				strbuf_addf(out, "%svec_ok &= kb_aligned(a.p%d, KB_V * (int)sizeof(*a.p%d));\n",
					    ind, j, j);
		} else {
			strbuf_addf(out, "%sif (kb_bcast(out0->shape, out0->ndim, &inputs[%d], &a.d%d, &a.m%d))\n%s\treturn 2;\n",
				    ind, i, j, j, ind);
			/* a vector group reads one value (d % V == 0), or V consecutive ones */
			strbuf_addf(out, "%sa.bv%d = a.d%d == 1 && a.m%d > 1 && a.m%d %% KB_V == 0",
				    ind, j, j, j, j);
			if (vec)
				strbuf_addf(out, " && kb_aligned(a.p%d, KB_V * (int)sizeof(*a.p%d))", j, j);
			else
				strbuf_addstr(out, " && 1");
			strbuf_addf(out, ";\n%svec_ok &= a.bv%d || a.m%d == 1 || a.d%d %% KB_V == 0;\n",
				    ind, j, j, j);
		}
		strbuf_release(&tn);
	}
	for (size_t i = 0; i < g->nr_in; i++) {
		if (g->in[i].kind != TK_SCALAR)
			continue;
		strbuf_addf(out, "%sif (!kb_is_scalar(&inputs[%zu]))\n%s\treturn 2;\n", ind, i, ind);
		strbuf_addf(out, "%sa.s%zu = (float)kb_scalar_f64(&inputs[%zu]);\n", ind, i, i);
	}
	strbuf_release(&chk);
}

/* the elementwise kernels' parameter macros */
void ew_emit_params(const struct kb_template *t, const int64_t *point, struct strbuf *out)
{
	if (t->backend == KB_BACKEND_CUDA) {
		strbuf_addf(out, "#define KB_TPB %lld\n#define KB_EPT %lld\n#define KB_VEC_ON %d\n#define KB_WAVES 16\n\n",
			    (long long)tmpl_param(t, point, "threads", 256),
			    (long long)tmpl_param(t, point, "ept", 4),
			    tmpl_param(t, point, "vec", 4) > 1 ? 1 : 0);
	} else {
		strbuf_addf(out, "#define KB_GRAIN %lld\n#define KB_SIMD %d\n\n",
			    (long long)tmpl_param(t, point, "grain", 32768),
			    (int)tmpl_param(t, point, "simd", 1));
	}
}

/* --- the pointwise family --- */

int tmpl_pointwise_prepare(struct kb_template *t, struct strbuf *why)
{
	struct tgraph *g = &t->g;
	const int64_t *shape = NULL;
	int ndim = 0;
	int64_t numel = 1;

	for (size_t k = 0; k < g->nr_nodes; k++)
		if (g->nodes[k].op == OP_MAIN) {
			strbuf_reset(why);
			strbuf_addf(why, "op '%s' (node '%s') is not supported by the pointwise templates",
				    g->nodes[k].opname, g->nodes[k].name);
			return KB_ENOTFOUND;
		}
	for (size_t k = 0; k < g->nr_outs; k++) {
		const struct targ *o = &g->outs[k];
		enum tdtype d;

		out_dtype_of(g, o, &d);
		if (d == TD_OTHER && o->kind == TA_NODE)
			d = TD_F32;
		if (!(tmpl_is_float(d) || d == TD_BOOL) || d == TD_F64) {
			strbuf_reset(why);
			strbuf_addf(why, "output %zu has dtype '%s', which the pointwise templates do not produce",
				    k, tmpl_dtype_name(d));
			return KB_ENOTFOUND;
		}
		if (k == 0) {
			shape = o->kind == TA_NODE ? g->nodes[o->idx].shape : g->in[o->idx].shape;
			ndim = o->kind == TA_NODE ? g->nodes[o->idx].ndim : g->in[o->idx].ndim;
			t->out_dtype = d;
		}
	}
	for (int d = 0; d < ndim; d++)
		numel *= shape[d];
	/* a tensor with the output's element count is full unless the analysis says otherwise */
	for (size_t i = 0; i < g->nr_in; i++) {
		struct tinput *in = &g->in[i];
		int64_t n = 1;

		if (in->kind == TK_SCALAR || in->has_pattern)
			continue;
		for (int d = 0; d < in->ndim; d++)
			n *= in->shape[d];
		in->pattern = n == numel && in->ndim <= ndim ? TP_FULL : n == 1 ? TP_SCALAR : TP_ROW;
		if (n == numel && in->ndim > ndim)
			in->pattern = TP_FULL;
	}
	if (t->backend == KB_BACKEND_CUDA) {
		static const int64_t threads[] = { 256, 128, 512, 1024 };
		static const int64_t ept[] = { 4, 1, 2, 8 };
		static const int64_t vec[] = { 4, 1 };

		tmpl_add_param(t, "threads", threads, ARRAY_SIZE(threads));
		tmpl_add_param(t, "ept", ept, ARRAY_SIZE(ept));
		tmpl_add_param(t, "vec", vec, ARRAY_SIZE(vec));
	} else {
		static const int64_t grain[] = { 32768, 4096, 262144 };
		static const int64_t simd[] = { 1, 0 };

		tmpl_add_param(t, "grain", grain, ARRAY_SIZE(grain));
		tmpl_add_param(t, "simd", simd, ARRAY_SIZE(simd));
	}
	return 0;
}

/* the outputs of the graph as an ew */
static int pointwise_ew(const struct kb_template *t, struct ew *e, struct strbuf *why)
{
	const struct tgraph *g = &t->g;

	ew_init(e, t);
	e->product_node = -1;
	e->skip_input = -1;
	for (size_t k = 0; k < g->nr_outs && k < EW_MAX_OUTS; k++) {
		enum tdtype d;

		e->out_val[k] = g->outs[k];
		out_dtype_of(g, &g->outs[k], &d);
		e->out_dt[k] = d == TD_OTHER ? TD_F32 : d;
		e->nout++;
	}
	if (g->nr_outs > EW_MAX_OUTS) {
		if (why)
			strbuf_addf(why, "more than %d outputs", EW_MAX_OUTS);
		return KB_ENOTFOUND;
	}
	return ew_setup(e, why);
}

int tmpl_pointwise_render(const struct kb_template *t, const int64_t *point, struct strbuf *out)
{
	struct ew e;
	struct tvars vs;
	struct strbuf code = STRBUF_INIT, setup = STRBUF_INIT, why = STRBUF_INIT;
	int rc = -1;

	tvars_init(&vs);
	if (pointwise_ew(t, &e, &why)) {
		error("template: %s", why.buf);
		goto out;
	}
	if (tmpl_render_prelude(t, point, out))
		goto out;
	ew_emit_params(t, point, out);
	if (t->g.backward)
		pw_bwd_fields(t, &e, &code);
	ew_emit_struct(&e, out, code.len ? code.buf : NULL);
	if (ew_emit_hooks(&e, out))
		goto out;
	if (tmpl_subst(out, t->text[TT_EW], &vs))
		goto out;
	ew_emit_setup(&e, &setup, NULL, "\t", true);
	tvars_setf(&vs, "NIN", "%zu", t->g.nr_in);
	tvars_setf(&vs, "NOUT", "%zu", t->g.nr_outs);
	tvars_set(&vs, "SETUP", setup.buf);
	if (tmpl_subst(out, t->text[TT_POINTWISE], &vs))
		goto out;
	if (t->g.backward && tmpl_pointwise_render_bwd(t, &e, point, out))
		goto out;
	rc = 0;
out:
	ew_release(&e);
	tvars_release(&vs);
	strbuf_release(&code);
	strbuf_release(&setup);
	strbuf_release(&why);
	return rc;
}
