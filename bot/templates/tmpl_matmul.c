#include "core/common.h"
#include "templates/tmpl_priv.h"
#include "templates/tmpl_ew.h"
#include "core/strbuf.h"
#include "core/util.h"

/*
 * Matrix products with a pointwise epilogue. The product (with a bias
 * vector, and on CUDA relu or tanh-gelu when that is all the epilogue
 * does) comes from cuBLASLt (CUDA) or a blocked GEMM (CPU); whatever
 * epilogue is left runs as the elementwise kernel over the output, in
 * place: the "product" slot reads the output, the last node writes it.
 */

static const char *const kind_names[] = { "linear", "matmul", "bmm", "addmm" };

#define LT_NONE 0
#define LT_RELU 1
#define LT_GELU 2

/* the only node reading node k, or -1 (also -1 when an output reads k) */
static int sole_user(const struct tgraph *g, const bool *epi, int k)
{
	int user = -1;

	for (size_t o = 0; o < g->nr_outs; o++)
		if (g->outs[o].kind == TA_NODE && g->outs[o].idx == k)
			return -1;
	for (size_t n = 0; n < g->nr_nodes; n++) {
		if (!epi[n])
			continue;
		for (int j = 0; j < g->nodes[n].nargs; j++)
			if (g->nodes[n].args[j].kind == TA_NODE && g->nodes[n].args[j].idx == k) {
				if (user >= 0 && user != (int)n)
					return -1;
				user = (int)n;
			}
	}
	return user;
}

static int input_ref(const struct tgraph *g, const cJSON *o, const char *key, int *idx,
		     struct strbuf *why)
{
	const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
	struct targ a;
	int rc = tmpl_field_ref(g, o, key, "matmul", &a, why);

	*idx = -1;
	if (rc <= 0)
		return rc;
	if (a.kind != TA_INPUT || g->in[a.idx].kind == TK_SCALAR) {
		strbuf_reset(why);
		strbuf_addf(why, "matmul operand '%s' ('%s') is computed before the product: a prologue is not supported",
			    key, it->valuestring);
		return KB_ENOTFOUND;
	}
	*idx = a.idx;
	return 0;
}

/* the product's kind from mo's "kind"; *kind is its name for messages */
static int mm_parse_kind(struct tmatmul *mm, const cJSON *mo, const char **kind, struct strbuf *why)
{
	const cJSON *it = cJSON_GetObjectItemCaseSensitive(mo, "kind");

	*kind = cJSON_IsString(it) ? it->valuestring : "?";
	mm->kind = (enum mkind)-1;
	for (size_t i = 0; i < ARRAY_SIZE(kind_names); i++)
		if (!strcmp(*kind, kind_names[i]))
			mm->kind = (enum mkind)i;
	if ((int)mm->kind < 0) {
		strbuf_reset(why);
		strbuf_addf(why, "matrix product '%s' is not supported by the templates", *kind);
		return KB_ENOTFOUND;
	}
	return 0;
}

/* operands a, b and bias, whether b is transposed, and alpha and beta (constant or read from a scalar input) */
static int mm_read_operands(const struct tgraph *g, struct tmatmul *mm, const cJSON *mo, const char *kind,
			    struct strbuf *why)
{
	const cJSON *it, *attrs;
	int rc;

	if ((rc = input_ref(g, mo, "a", &mm->a, why)) || (rc = input_ref(g, mo, "b", &mm->b, why)) ||
	    (rc = input_ref(g, mo, "bias", &mm->bias, why)))
		return rc;
	if (mm->a < 0 || mm->b < 0) {
		strbuf_reset(why);
		strbuf_addstr(why, "analysis: matmul without operands");
		return -1;
	}
	it = cJSON_GetObjectItemCaseSensitive(mo, "b_transposed");
	mm->b_t = mm->kind == MK_LINEAR ? !cJSON_IsFalse(it) : cJSON_IsTrue(it);
	attrs = cJSON_GetObjectItemCaseSensitive(mo, "attrs");
	it = attrs ? cJSON_GetObjectItemCaseSensitive(attrs, "alpha") : NULL;
	mm->alpha = cJSON_IsNumber(it) ? it->valuedouble : 1.0;
	it = attrs ? cJSON_GetObjectItemCaseSensitive(attrs, "beta") : NULL;
	mm->beta = cJSON_IsNumber(it) ? it->valuedouble : 1.0;
	mm->alpha_ref = mm->beta_ref = -1;
	it = cJSON_GetObjectItemCaseSensitive(mo, "attr_refs");
	for (int k = 0; k < 2 && it; k++) {
		const cJSON *r = cJSON_GetObjectItemCaseSensitive(it, k ? "beta" : "alpha");
		struct targ a;

		if (cJSON_IsString(r) && !tmpl_lookup(g, r->valuestring, &a) && a.kind == TA_INPUT &&
		    g->in[a.idx].kind == TK_SCALAR)
			*(k ? &mm->beta_ref : &mm->alpha_ref) = a.idx;
	}
	if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(mo, "a_transposed"))) {
		strbuf_reset(why);
		strbuf_addf(why, "'%s' with a transposed first operand is not supported", kind);
		return KB_ENOTFOUND;
	}
	return 0;
}

/* the product's node (mo's "node", else the first main op); one output, no backward */
static int mm_find_main(struct tgraph *g, struct tmatmul *mm, const cJSON *mo, const char *kind,
			struct strbuf *why)
{
	const cJSON *it = cJSON_GetObjectItemCaseSensitive(mo, "node");

	mm->main = -1;
	if (cJSON_IsString(it)) {
		struct targ a;

		if (!tmpl_lookup(g, it->valuestring, &a) && a.kind == TA_NODE)
			mm->main = a.idx;
	}
	for (size_t k = 0; k < g->nr_nodes && mm->main < 0; k++)
		if (g->nodes[k].op == OP_MAIN)
			mm->main = (int)k;
	if (mm->main < 0) {
		strbuf_reset(why);
		strbuf_addf(why, "analysis: no node for the '%s' product", kind);
		return -1;
	}
	g->nodes[mm->main].op = OP_MAIN;
	if (g->nr_outs != 1 || g->outs[0].kind != TA_NODE) {
		strbuf_reset(why);
		strbuf_addf(why, "'%s' with %zu outputs is not supported", kind, g->nr_outs);
		return KB_ENOTFOUND;
	}
	if (g->backward) {
		strbuf_reset(why);
		strbuf_addf(why, "the backward of '%s' is not supported by the templates", kind);
		return KB_ENOTFOUND;
	}
	return 0;
}

/* dtypes: one floating dtype for operands and output */
static int mm_check_dtypes(struct kb_template *t, const char *kind, struct strbuf *why)
{
	const struct tgraph *g = &t->g;
	const struct tmatmul *mm = &t->mm;
	enum tdtype dt = g->in[mm->a].dtype;

	t->out_dtype = g->nodes[g->outs[0].idx].dtype == TD_OTHER ? dt : g->nodes[g->outs[0].idx].dtype;
	if ((dt != TD_F32 && dt != TD_F16 && dt != TD_BF16) || g->in[mm->b].dtype != dt ||
	    t->out_dtype != dt || (mm->bias >= 0 && g->in[mm->bias].dtype != dt)) {
		strbuf_reset(why);
		strbuf_addf(why, "'%s' on dtype '%s' (operands, bias and output must share float32, float16 or bfloat16) is not supported",
			    kind, tmpl_dtype_name(dt));
		return KB_ENOTFOUND;
	}
	return 0;
}

/* the epilogue: what the output needs past the product, into mm->epilogue; and the bias's shape */
static int mm_epilogue(const struct tgraph *g, struct tmatmul *mm, const char *kind, struct strbuf *why)
{
	bool *epi = xcalloc(g->nr_nodes + 1, sizeof(bool));
	int rc = KB_ENOTFOUND, n_dim;

	texpr_need_arg(g, epi, &g->outs[0]);
	if (!epi[mm->main]) {
		strbuf_reset(why);
		strbuf_addf(why, "the output of '%s' does not come from its product", kind);
		goto out;
	}
	epi[mm->main] = false;
	for (size_t k = 0; k < g->nr_nodes; k++)
		if (epi[k] && g->nodes[k].op == OP_MAIN) {
			strbuf_reset(why);
			strbuf_addf(why, "op '%s' (node '%s') is not supported after a '%s' product",
				    g->nodes[k].opname, g->nodes[k].name, kind);
			goto out;
		}
	n_dim = g->nodes[mm->main].ndim;
	/* addmm's bias: a vector over N (cuBLASLt's bias), or the whole [M, N] (its C) */
	mm->bias_full = false;
	if (mm->bias >= 0 && n_dim > 0) {
		int64_t nb = 1;

		for (int d = 0; d < g->in[mm->bias].ndim; d++)
			nb *= g->in[mm->bias].shape[d];
		mm->bias_full = nb != g->nodes[mm->main].shape[n_dim - 1] && nb != 1;
	}
	if (mm->bias >= 0 && !mm->bias_full && (mm->beta != 1.0 || mm->beta_ref >= 0)) {
		strbuf_reset(why);
		strbuf_addf(why, "'%s' with a bias vector scaled by beta %g is not supported", kind, mm->beta);
		goto out;
	}
	if (mm->bias < 0 && (mm->alpha != 1.0 || mm->alpha_ref >= 0) && mm->kind != MK_ADDMM) {
		strbuf_reset(why);
		strbuf_addf(why, "'%s' with alpha is not supported", kind);
		goto out;
	}
	mm->epilogue = epi;
	epi = NULL;
	rc = 0;
out:
	free(epi);
	return rc;
}

/* the tuning space, defaults first */
static void mm_add_params(struct kb_template *t)
{
	if (t->backend == KB_BACKEND_CUDA) {
		static const int64_t algo[] = { 0, 1, 2, 3, 4, 5, 6, 7 };
		static const int64_t ws[] = { 32, 4 };

		tmpl_add_param(t, "algo", algo, ARRAY_SIZE(algo));
		tmpl_add_param(t, "workspace_mb", ws, ARRAY_SIZE(ws));
	} else {
		static const int64_t mb[] = { 16, 4, 64 };
		static const int64_t nb[] = { 64, 16, 256 };

		tmpl_add_param(t, "mb", mb, ARRAY_SIZE(mb));
		tmpl_add_param(t, "nb", nb, ARRAY_SIZE(nb));
	}
}

int tmpl_matmul_prepare(struct kb_template *t, const cJSON *mo, struct strbuf *why)
{
	const char *kind;
	int rc;

	if (!cJSON_IsObject(mo)) {
		strbuf_reset(why);
		strbuf_addstr(why, "analysis: family 'matmul' without a 'matmul' object");
		return -1;
	}
	if ((rc = mm_parse_kind(&t->mm, mo, &kind, why)) ||
	    (rc = mm_read_operands(&t->g, &t->mm, mo, kind, why)) ||
	    (rc = mm_find_main(&t->g, &t->mm, mo, kind, why)) ||
	    (rc = mm_check_dtypes(t, kind, why)) ||
	    (rc = mm_epilogue(&t->g, &t->mm, kind, why)))
		return rc;
	mm_add_params(t);
	return 0;
}

/*
 * How the product and the epilogue split for this backend: bias_in (the
 * bias vector the product adds, -1: none), lt (the activation cuBLASLt
 * fuses) and prod (the node whose value the product leaves in the output).
 */
struct mm_split {
	int bias_in;
	int lt;
	int prod;
};

static void split_epilogue(const struct kb_template *t, struct mm_split *sp)
{
	const struct tgraph *g = &t->g;
	const struct tmatmul *mm = &t->mm;
	const bool *epi = mm->epilogue;
	int u;

	sp->bias_in = mm->bias_full ? -1 : mm->bias;
	sp->lt = LT_NONE;
	sp->prod = mm->main;
	/* x @ w + b written as a separate add of a vector: the product's bias */
	if (sp->bias_in < 0 && (u = sole_user(g, epi, sp->prod)) >= 0 && g->nodes[u].op == OP_ADD &&
	    g->nodes[u].p[0] == 1.0) {
		for (int j = 0; j < 2; j++) {
			const struct targ *a = &g->nodes[u].args[j], *o = &g->nodes[u].args[1 - j];
			const struct tinput *in;
			int64_t n = 1;
			int nd = g->nodes[mm->main].ndim;

			if (a->kind != TA_NODE || a->idx != sp->prod || o->kind != TA_INPUT)
				continue;
			in = &g->in[o->idx];
			for (int d = 0; d < in->ndim; d++)
				n *= in->shape[d];
			if (in->kind != TK_SCALAR && in->dtype == t->out_dtype && nd > 0 && in->ndim == 1 &&
			    n == g->nodes[mm->main].shape[nd - 1]) {
				sp->bias_in = o->idx;
				sp->prod = u;
			}
			break;
		}
	}
	if (t->backend != KB_BACKEND_CUDA)
		return;
	/* relu, or gelu's tanh form (cuBLASLt's GELU is that one), as the last step */
	u = sole_user(g, epi, sp->prod);
	if (u >= 0 && g->outs[0].kind == TA_NODE && g->outs[0].idx == u && g->nodes[u].nargs == 1 &&
	    g->nodes[u].args[0].kind == TA_NODE &&
	    ((g->nodes[u].op == OP_RELU) || (g->nodes[u].op == OP_GELU && g->nodes[u].p[0] == 1)))
		sp->lt = g->nodes[u].op == OP_RELU ? LT_RELU : LT_GELU;
}

static void emit_shapes(const struct kb_template *t, const struct mm_split *sp, struct strbuf *out)
{
	const struct tmatmul *mm = &t->mm;
	struct strbuf chk = STRBUF_INIT;

	tmpl_dtype_check(&chk, t->out_dtype, "X");
	strbuf_addf(out, "\tif (!%s || ", chk.buf);
	strbuf_reset(&chk);
	tmpl_dtype_check(&chk, t->out_dtype, "W");
	strbuf_addf(out, "!%s || ", chk.buf);
	strbuf_reset(&chk);
	tmpl_dtype_check(&chk, t->out_dtype, "Y");
	strbuf_addf(out, "!%s || X->ndim < 1 || W->ndim < 2)\n\t\treturn 2;\n", chk.buf);
	strbuf_addstr(out,
		      "\tK = X->shape[X->ndim - 1];\n"
		      "\tif (W->ndim == 2) {\n"
		      "\t\tN = KB_BT ? W->shape[0] : W->shape[1];\n"
		      "\t\tif ((KB_BT ? W->shape[1] : W->shape[0]) != K)\n\t\t\treturn 2;\n"
		      "\t\tM = 1;\n"
		      "\t\tfor (int d = 0; d + 1 < X->ndim; d++)\n\t\t\tM *= X->shape[d];\n"
		      "\t} else {\n"
		      "\t\tconst int nd = W->ndim;\n\n"
		      "\t\tif (X->ndim != nd)\n\t\t\treturn 2;\n"
		      "\t\tfor (int d = 0; d < nd - 2; d++) {\n"
		      "\t\t\tif (X->shape[d] != W->shape[d])\n\t\t\t\treturn 2;\n"
		      "\t\t\tbatch *= X->shape[d];\n\t\t}\n"
		      "\t\tM = X->shape[nd - 2];\n"
		      "\t\tN = KB_BT ? W->shape[nd - 2] : W->shape[nd - 1];\n"
		      "\t\tif ((KB_BT ? W->shape[nd - 1] : W->shape[nd - 2]) != K)\n\t\t\treturn 2;\n"
		      "\t\tsa = M * K;\n\t\tsb = K * N;\n\t}\n");
	if (sp->bias_in >= 0) {
		strbuf_reset(&chk);
		strbuf_addf(&chk, "&inputs[%d]", sp->bias_in);
		strbuf_addf(out, "\tif (kb_numel(%s) != N || !", chk.buf);
		tmpl_dtype_check(out, t->out_dtype, chk.buf);
		strbuf_addf(out, ")\n\t\treturn 2;\n\tbias = kb_data(%s);\n", chk.buf);
	}
	if (mm->bias_full) {
		strbuf_reset(&chk);
		strbuf_addf(&chk, "&inputs[%d]", mm->bias);
		strbuf_addf(out, "\tif (kb_numel(%s) != batch * M * N || !", chk.buf);
		tmpl_dtype_check(out, t->out_dtype, chk.buf);
		strbuf_addf(out, ")\n\t\treturn 2;\n\tcmat = kb_data(%s);\n", chk.buf);
	}
	strbuf_release(&chk);
}

static const char *cuda_dt(enum tdtype d)
{
	return d == TD_F16 ? "CUDA_R_16F" : d == TD_BF16 ? "CUDA_R_16BF" : "CUDA_R_32F";
}

int tmpl_matmul_render(const struct kb_template *t, const int64_t *point, struct strbuf *out)
{
	const struct tgraph *g = &t->g;
	const struct tmatmul *mm = &t->mm;
	bool cuda = t->backend == KB_BACKEND_CUDA;
	struct mm_split sp;
	struct ew e;
	struct tvars vs;
	struct strbuf shapes = STRBUF_INIT, epi = STRBUF_INIT, why = STRBUF_INIT, f = STRBUF_INIT;
	bool need_ew;
	int rc = -1;

	tvars_init(&vs);
	split_epilogue(t, &sp);
	/* an epilogue kernel: what the product leaves, or the fallback when
	 * cuBLASLt cannot fuse the activation (then from before it) */
	need_ew = !(g->outs[0].kind == TA_NODE && g->outs[0].idx == sp.prod);
	ew_init(&e, t);
	if (cuda)
		strbuf_addstr(out, "// kernelbot: link cublasLt\n");
	if (tmpl_render_prelude(t, point, out))
		goto out;
	if (need_ew) {
		e.out_val[0] = g->outs[0];
		e.out_dt[0] = t->out_dtype;
		e.nout = 1;
		e.product_slot = -2;
		e.product_node = sp.prod;
		e.skip_input = -1;
		if (ew_setup(&e, &why)) {
			error("template: %s", why.buf);
			goto out;
		}
		/* the epilogue kernel's own parameters: a fixed good point */
		if (cuda)
			strbuf_addstr(out, "#define KB_TPB 256\n#define KB_EPT 4\n#define KB_VEC_ON 1\n#define KB_WAVES 16\n\n");
		else
			strbuf_addstr(out, "#define KB_GRAIN 32768\n#define KB_SIMD 1\n\n");
		ew_emit_struct(&e, out, NULL);
		if (ew_emit_hooks(&e, out) || tmpl_subst(out, t->text[TT_EW], &vs))
			goto out;
		strbuf_addf(&epi, "\t%s{\n\t\tkb_args a = kb_args();\n\t\tint vec_ok = 1;\n\t\tconst DLTensor *out0 = Y;\n\n",
			    sp.lt != LT_NONE ? "if (!fused) " : "");
		ew_emit_setup(&e, &epi, "kb_data(Y)", "\t\t", true);
		strbuf_addf(&epi, "\t\tconst int erc = kb_ew_launch(a, vec_ok, %s);\n\n\t\tif (erc)\n\t\t\treturn erc;\n\t}\n",
			    cuda ? "s" : "stream");
	}
	emit_shapes(t, &sp, &shapes);
	tvars_setf(&vs, "NIN", "%zu", g->nr_in);
	tvars_setf(&vs, "IA", "%d", mm->a);
	tvars_setf(&vs, "IB", "%d", mm->b);
	tvars_set(&vs, "BT", mm->b_t ? "1" : "0");
	tvars_set(&vs, "SHAPES", shapes.buf);
	tvars_set(&vs, "EPILOGUE", epi.buf);
	if (mm->alpha_ref >= 0)
		strbuf_addf(&f, "(float)kb_scalar_f64(&inputs[%d])", mm->alpha_ref);
	else
		texpr_float(&f, mm->alpha);
	tvars_set(&vs, "ALPHA", f.buf);
	strbuf_reset(&f);
	if (mm->beta_ref >= 0)
		strbuf_addf(&f, "(float)kb_scalar_f64(&inputs[%d])", mm->beta_ref);
	else
		texpr_float(&f, mm->beta);
	tvars_set(&vs, "BETA", f.buf);
	if (cuda) {
		tvars_setf(&vs, "ALGO", "%lld", (long long)tmpl_param(t, point, "algo", 0));
		tvars_setf(&vs, "WS_MB", "%lld", (long long)tmpl_param(t, point, "workspace_mb", 32));
		tvars_set(&vs, "LT_EPI", sp.lt == LT_RELU ? "CUBLASLT_EPILOGUE_RELU" :
			  sp.lt == LT_GELU ? "CUBLASLT_EPILOGUE_GELU" : "CUBLASLT_EPILOGUE_DEFAULT");
		tvars_set(&vs, "CUDA_DT", cuda_dt(t->out_dtype));
	} else {
		tvars_setf(&vs, "MB", "%lld", (long long)tmpl_param(t, point, "mb", 16));
		tvars_setf(&vs, "NB", "%lld", (long long)tmpl_param(t, point, "nb", 64));
		tvars_set(&vs, "CTYPE", tmpl_ctype(t->out_dtype));
	}
	if (tmpl_subst(out, t->text[TT_MATMUL], &vs))
		goto out;
	rc = 0;
out:
	ew_release(&e);
	tvars_release(&vs);
	strbuf_release(&shapes);
	strbuf_release(&epi);
	strbuf_release(&why);
	strbuf_release(&f);
	return rc;
}
