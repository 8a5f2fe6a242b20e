#include "core/common.h"
#include "core/json.h"
#include "templates/template.h"
#include "templates/tmpl_priv.h"
#include "core/log.h"
#include "core/strbuf.h"
#include "core/util.h"
#include "verifier/datadir.h"

#include <math.h>

#define TEXT_MAX (1u << 20)

/* --- dtypes --- */

static const struct {
	const char *name;
	enum tdtype d;
} dtype_names[] = {
	{ "float32", TD_F32 }, { "float", TD_F32 }, { "float16", TD_F16 }, { "half", TD_F16 },
	{ "bfloat16", TD_BF16 }, { "float64", TD_F64 }, { "double", TD_F64 },
	{ "int64", TD_I64 }, { "long", TD_I64 }, { "int32", TD_I32 }, { "int", TD_I32 },
	{ "bool", TD_BOOL }, { "uint8", TD_U8 },
};

static enum tdtype parse_dtype(const char *s)
{
	if (!s)
		return TD_OTHER;
	if (!strncmp(s, "torch.", 6))
		s += 6;
	for (size_t i = 0; i < ARRAY_SIZE(dtype_names); i++)
		if (!strcmp(s, dtype_names[i].name))
			return dtype_names[i].d;
	return TD_OTHER;
}

const char *tmpl_dtype_name(enum tdtype d)
{
	switch (d) {
	case TD_F32: return "float32";
	case TD_F16: return "float16";
	case TD_BF16: return "bfloat16";
	case TD_F64: return "float64";
	case TD_I64: return "int64";
	case TD_I32: return "int32";
	case TD_BOOL: return "bool";
	case TD_U8: return "uint8";
	default: return "unknown";
	}
}

const char *tmpl_ctype(enum tdtype d)
{
	switch (d) {
	case TD_F32: return "float";
	case TD_F16: return "kb_f16";
	case TD_BF16: return "kb_bf16";
	case TD_F64: return "double";
	case TD_I64: return "int64_t";
	case TD_I32: return "int32_t";
	case TD_BOOL: case TD_U8: return "uint8_t";
	default: return "void";
	}
}

int tmpl_dtype_size(enum tdtype d)
{
	switch (d) {
	case TD_F32: case TD_I32: return 4;
	case TD_F16: case TD_BF16: return 2;
	case TD_F64: case TD_I64: return 8;
	default: return 1;
	}
}

bool tmpl_is_float(enum tdtype d)
{
	return d == TD_F32 || d == TD_F16 || d == TD_BF16 || d == TD_F64;
}

void tmpl_dtype_check(struct strbuf *out, enum tdtype d, const char *tensor)
{
	switch (d) {
	case TD_F32: strbuf_addf(out, "kb_is(%s, kDLFloat, 32)", tensor); break;
	case TD_F16: strbuf_addf(out, "kb_is(%s, kDLFloat, 16)", tensor); break;
	case TD_BF16: strbuf_addf(out, "kb_is(%s, kDLBfloat, 16)", tensor); break;
	case TD_F64: strbuf_addf(out, "kb_is(%s, kDLFloat, 64)", tensor); break;
	case TD_I64: strbuf_addf(out, "kb_is(%s, kDLInt, 64)", tensor); break;
	case TD_I32: strbuf_addf(out, "kb_is(%s, kDLInt, 32)", tensor); break;
	case TD_BOOL: case TD_U8: strbuf_addf(out, "kb_is(%s, kDLUInt, 8)", tensor); break;
	default: strbuf_addstr(out, "0"); break;
	}
}

bool tmpl_wants_grad(const struct tinput *in)
{
	return in->kind != TK_SCALAR && tmpl_is_float(in->dtype);
}

void tmpl_emit_upstream_grad(struct strbuf *out, enum tdtype dt, size_t nr_in, int k,
			     const char *numel)
{
	struct strbuf chk = STRBUF_INIT, tn = STRBUF_INIT;

	strbuf_addf(&tn, "&inputs[%zu]", nr_in + (size_t)k);
	tmpl_dtype_check(&chk, dt, tn.buf);
	strbuf_addf(out, "\tif (!%s || kb_numel(%s) != %s)\n\t\treturn 2;\n", chk.buf, tn.buf, numel);
	strbuf_addf(out, "\ta.go%d = (const %s *)kb_data(%s);\n", k, tmpl_ctype(dt), tn.buf);
	strbuf_release(&chk);
	strbuf_release(&tn);
}

void tmpl_emit_grad_output(struct strbuf *out, const struct tinput *in, size_t i, int q,
			   const char *field, const char *numel)
{
	struct strbuf chk = STRBUF_INIT, tn = STRBUF_INIT;

	strbuf_addf(&tn, "&outputs[%d]", q);
	tmpl_dtype_check(&chk, in->dtype, tn.buf);
	strbuf_addf(out, "\tif (!%s || kb_numel(%s) != kb_numel(&inputs[%zu]))\n\t\treturn 2;\n",
		    chk.buf, tn.buf, i);
	if (field)
		strbuf_addf(out, "\ta.%s = (%s *)kb_data(%s);\n", field, tmpl_ctype(in->dtype), tn.buf);
	strbuf_addf(out, "\tif (%s%s == 0)\n\t\trc |= kb_bw_zero(kb_data(%s), (size_t)kb_numel(%s) * %d, s);\n",
		    field ? "" : "1 || ", numel, tn.buf, tn.buf, tmpl_dtype_size(in->dtype));
	strbuf_release(&chk);
	strbuf_release(&tn);
}

const char *tmpl_pattern_name(enum tpattern p)
{
	switch (p) {
	case TP_FULL: return "full";
	case TP_ROW: return "row";
	case TP_COL: return "col";
	default: return "scalar";
	}
}

/* --- text substitution --- */

void tvars_init(struct tvars *vs)
{
	memset(vs, 0, sizeof(*vs));
}

void tvars_release(struct tvars *vs)
{
	for (size_t i = 0; i < vs->nr; i++)
		free(vs->v[i].value);
	free(vs->v);
	memset(vs, 0, sizeof(*vs));
}

void tvars_set(struct tvars *vs, const char *name, const char *value)
{
	for (size_t i = 0; i < vs->nr; i++)
		if (!strcmp(vs->v[i].name, name)) {
			free(vs->v[i].value);
			vs->v[i].value = xstrdup(value);
			return;
		}
	if (vs->nr == vs->alloc) {
		vs->alloc = vs->alloc ? 2 * vs->alloc : 16;
		vs->v = xrealloc(vs->v, vs->alloc * sizeof(*vs->v));
	}
	vs->v[vs->nr].name = name;
	vs->v[vs->nr].value = xstrdup(value);
	vs->nr++;
}

void tvars_setf(struct tvars *vs, const char *name, const char *fmt, ...)
{
	struct strbuf sb = STRBUF_INIT;
	va_list ap;

	va_start(ap, fmt);
	strbuf_vaddf(&sb, fmt, ap);
	va_end(ap);
	tvars_set(vs, name, sb.buf);
	strbuf_release(&sb);
}

/*
 * {{NAME}} (letters, digits, '_') is replaced by its value; any other "{{"
 * is copied as is, so C++ braces in template text need no escaping.
 */
int tmpl_subst(struct strbuf *out, const char *text, const struct tvars *vs)
{
	const char *p = text;

	for (;;) {
		const char *open = strstr(p, "{{");
		const char *q;
		size_t len;
		bool found = false;

		if (!open) {
			strbuf_addstr(out, p);
			return 0;
		}
		strbuf_add(out, p, (size_t)(open - p));
		q = open + 2;
		while ((*q >= 'A' && *q <= 'Z') || (*q >= '0' && *q <= '9') || *q == '_')
			q++;
		len = (size_t)(q - open - 2);
		if (!len || q[0] != '}' || q[1] != '}') {
			strbuf_addstr(out, "{{");
			p = open + 2;
			continue;
		}
		for (size_t i = 0; i < vs->nr; i++)
			if (strlen(vs->v[i].name) == len && !memcmp(vs->v[i].name, open + 2, len)) {
				strbuf_addstr(out, vs->v[i].value);
				found = true;
				break;
			}
		if (!found)
			return error("template variable '%.*s' has no value", (int)len, open + 2);
		p = q + 2;
	}
}

/* --- space --- */

void tmpl_add_param(struct kb_template *t, const char *name, const int64_t *values, size_t nr)
{
	size_t k = t->space.nr;

	if (k >= TMAX_PARAMS || nr > TMAX_VALUES || !nr)
		die("template parameter '%s' does not fit", name);
	memcpy(t->values[k], values, nr * sizeof(*values));
	t->params[k].name = name;
	t->params[k].nr = nr;
	t->params[k].values = t->values[k];
	t->space.nr = k + 1;
	t->space.params = t->params;
}

int64_t tmpl_param(const struct kb_template *t, const int64_t *point, const char *name, int64_t def)
{
	for (size_t i = 0; i < t->space.nr; i++)
		if (!strcmp(t->params[i].name, name))
			return point[i];
	return def;
}

const struct kb_template_space *kb_template_space(const struct kb_template *t)
{
	return &t->space;
}

size_t kb_template_space_size(const struct kb_template *t)
{
	size_t n = 1;

	for (size_t i = 0; i < t->space.nr; i++)
		n *= t->params[i].nr;
	return n;
}

void kb_template_point_at(const struct kb_template *t, size_t k, int64_t *point)
{
	for (size_t i = t->space.nr; i-- > 0;) {
		point[i] = t->params[i].values[k % t->params[i].nr];
		k /= t->params[i].nr;
	}
}

size_t kb_template_point_canonical(const struct kb_template *t, size_t k)
{
	int64_t *point = xcalloc(t->space.nr ? t->space.nr : 1, sizeof(*point));
	size_t index = 0;

	kb_template_point_at(t, k, point);
	if (t->family == TF_ROWWISE)
		row_canonical(t, point);
	for (size_t i = 0; i < t->space.nr; i++) {
		size_t d = 0;

		while (d + 1 < t->params[i].nr && t->params[i].values[d] != point[i])
			d++;
		index = index * t->params[i].nr + d;
	}
	free(point);
	return index;
}

void kb_template_point_name(const struct kb_template *t, const int64_t *point, struct strbuf *out)
{
	for (size_t i = 0; i < t->space.nr; i++)
		strbuf_addf(out, "%s%s=%lld", i ? " " : "", t->params[i].name, (long long)point[i]);
}

const char *kb_template_family(const struct kb_template *t)
{
	switch (t->family) {
	case TF_POINTWISE: return "pointwise";
	case TF_ROWWISE: return "rowwise";
	default: return "matmul";
	}
}

static const char *const rkind_names[] = {
	[RK_SOFTMAX] = "softmax", [RK_LOG_SOFTMAX] = "log_softmax",
	[RK_LAYER_NORM] = "layer_norm", [RK_RMS_NORM] = "rms_norm", [RK_SUM] = "sum",
	[RK_MEAN] = "mean", [RK_MAX] = "max", [RK_MIN] = "min", [RK_ARGMAX] = "argmax",
	[RK_ARGMIN] = "argmin", [RK_NORM_L1] = "norm_l1", [RK_NORM_L2] = "norm_l2",
	[RK_NORM_FRO] = "norm_fro", [RK_CROSS_ENTROPY] = "cross_entropy", [RK_MSE] = "mse",
	[RK_HUBER] = "huber",
};

static const char *const mkind_names[] = {
	[MK_LINEAR] = "linear", [MK_MATMUL] = "matmul", [MK_BMM] = "bmm", [MK_ADDMM] = "addmm",
};

const char *kb_template_kind(const struct kb_template *t)
{
	switch (t->family) {
	case TF_ROWWISE: return rkind_names[t->row.kind];
	case TF_MATMUL: return mkind_names[t->mm.kind];
	default: return "pointwise";
	}
}

enum kb_backend kb_template_backend(const struct kb_template *t)
{
	return t->backend;
}

const char *kb_template_ext(const struct kb_template *t)
{
	return t->backend == KB_BACKEND_CUDA ? ".cu" : ".cpp";
}

bool kb_template_has_backward(const struct kb_template *t)
{
	return t->g.backward;
}

/* --- parsing the analysis --- */

static int refuse(struct strbuf *why, const char *fmt, ...) KB_PRINTF(2, 3);
static int refuse(struct strbuf *why, const char *fmt, ...)
{
	va_list ap;

	if (why) {
		strbuf_reset(why);
		va_start(ap, fmt);
		strbuf_vaddf(why, fmt, ap);
		va_end(ap);
	}
	return KB_ENOTFOUND;
}

/* a malformed analysis: logged, and the reason in why too */
static int bad(struct strbuf *why, const char *fmt, ...) KB_PRINTF(2, 3);
static int bad(struct strbuf *why, const char *fmt, ...)
{
	struct strbuf sb = STRBUF_INIT;
	va_list ap;

	va_start(ap, fmt);
	strbuf_vaddf(&sb, fmt, ap);
	va_end(ap);
	if (why) {
		strbuf_reset(why);
		strbuf_addstr(why, sb.buf);
	}
	error("%s", sb.buf);
	strbuf_release(&sb);
	return -1;
}

static int parse_shape(const cJSON *arr, int *ndim, int64_t *shape)
{
	const cJSON *it;
	int n = 0;

	*ndim = 0;
	if (!arr || cJSON_IsNull(arr))
		return 0;
	if (!cJSON_IsArray(arr))
		return -1;
	cJSON_ArrayForEach(it, arr) {
		if (!cJSON_IsNumber(it) || n >= TMAX_DIMS)
			return -1;
		shape[n++] = (int64_t)it->valuedouble;
	}
	*ndim = n;
	return 0;
}

static int find_input(const struct tgraph *g, const char *name)
{
	for (size_t i = 0; i < g->nr_in; i++)
		if (!strcmp(g->in[i].name, name))
			return (int)i;
	return -1;
}

static int find_node(const struct tgraph *g, const char *name, size_t upto)
{
	for (size_t i = 0; i < upto; i++)
		if (!strcmp(g->nodes[i].name, name))
			return (int)i;
	return -1;
}

/* a ref (by name) to an input or an earlier node */
static int resolve_ref(const struct tgraph *g, const char *name, size_t upto, struct targ *a)
{
	int k = find_node(g, name, upto);

	if (k >= 0) {
		a->kind = TA_NODE;
		a->idx = k;
		return 0;
	}
	k = find_input(g, name);
	if (k >= 0) {
		a->kind = TA_INPUT;
		a->idx = k;
		return 0;
	}
	return -1;
}

static int parse_arg(const struct tgraph *g, const cJSON *it, size_t upto, struct targ *a,
		     struct strbuf *why)
{
	const cJSON *c;

	memset(a, 0, sizeof(*a));
	if (cJSON_IsNull(it))
		return 0;
	if (cJSON_IsNumber(it) || cJSON_IsBool(it)) {
		a->kind = TA_CONST;
		a->value = cJSON_IsNumber(it) ? it->valuedouble : (cJSON_IsTrue(it) ? 1 : 0);
		return 0;
	}
	if (cJSON_IsString(it)) {
		if (resolve_ref(g, it->valuestring, upto, a))
			return bad(why, "analysis: unknown ref '%s'", it->valuestring);
		return 0;
	}
	if (!cJSON_IsObject(it))
		return bad(why, "analysis: node argument is neither a ref nor a const");
	if ((c = cJSON_GetObjectItemCaseSensitive(it, "ref"))) {
		if (!cJSON_IsString(c) || resolve_ref(g, c->valuestring, upto, a))
			return bad(why, "analysis: unknown ref '%s'",
				   cJSON_IsString(c) ? c->valuestring : "?");
		return 0;
	}
	c = cJSON_GetObjectItemCaseSensitive(it, "const");
	if (cJSON_IsNumber(c)) {
		a->kind = TA_CONST;
		a->value = c->valuedouble;
	} else if (cJSON_IsBool(c)) {
		a->kind = TA_CONST;
		a->value = cJSON_IsTrue(c) ? 1 : 0;
	} else if (cJSON_IsString(c)) {
		/* "inf", "-inf", "nan" as strings (JSON has no such numbers) */
		a->kind = TA_CONST;
		if (!strcmp(c->valuestring, "inf"))
			a->value = INFINITY;
		else if (!strcmp(c->valuestring, "-inf"))
			a->value = -INFINITY;
		else if (!strcmp(c->valuestring, "nan"))
			a->value = NAN;
		else
			a->kind = TA_NONE; /* a non-numeric const (a dim list, a string option) */
	}
	/* null or a list const: no value (the op's resolver decides) */
	return 0;
}

static void graph_release(struct tgraph *g)
{
	for (size_t i = 0; i < g->nr_in; i++)
		free(g->in[i].name);
	free(g->in);
	for (size_t i = 0; i < g->nr_nodes; i++) {
		free(g->nodes[i].name);
		free(g->nodes[i].opname);
	}
	free(g->nodes);
	free(g->outs);
	memset(g, 0, sizeof(*g));
}

static int parse_inputs(struct tgraph *g, const cJSON *arr, struct strbuf *why)
{
	const cJSON *it;
	size_t n = 0;

	if (!cJSON_IsArray(arr))
		return bad(why, "analysis: 'inputs' is not a list");
	g->in = xcalloc((size_t)cJSON_GetArraySize(arr) + 1, sizeof(*g->in));
	cJSON_ArrayForEach(it, arr) {
		struct tinput *in = &g->in[n];
		const char *name = kb_json_str(it, "name");
		const char *kind = kb_json_str(it, "kind");
		const cJSON *idx = cJSON_GetObjectItemCaseSensitive(it, "index");
		const cJSON *val = cJSON_GetObjectItemCaseSensitive(it, "value");

		if (!name)
			return bad(why, "analysis: input %zu has no name", n);
		if (find_input(g, name) >= 0)
			return bad(why, "analysis: input '%s' appears twice", name);
		in->name = xstrdup(name);
		g->nr_in = ++n;
		in->index = cJSON_IsNumber(idx) ? (int)idx->valuedouble : (int)n - 1;
		if (in->index != (int)n - 1)
			return bad(why, "analysis: input '%s' has index %d at position %zu",
				   name, in->index, n - 1);
		if (!kind || !strcmp(kind, "tensor"))
			in->kind = TK_TENSOR;
		else if (!strcmp(kind, "param"))
			in->kind = TK_PARAM;
		else if (!strcmp(kind, "buffer"))
			in->kind = TK_BUFFER;
		else if (!strcmp(kind, "scalar"))
			in->kind = TK_SCALAR;
		else
			return bad(why, "analysis: input '%s' has unknown kind '%s'", name, kind);
		in->dtype = parse_dtype(kb_json_str(it, "dtype"));
		if (in->kind == TK_SCALAR) {
			if (in->dtype == TD_OTHER)
				in->dtype = TD_F64;
			in->value = cJSON_IsNumber(val) ? val->valuedouble :
				    cJSON_IsTrue(val) ? 1 : 0;
		} else if (!kb_json_str(it, "dtype")) {
			return bad(why, "analysis: input '%s' has no dtype", name);
		} else if (in->dtype == TD_OTHER) {
			return refuse(why, "input '%s' has dtype '%s', which the templates do not cover",
				      name, kb_json_str(it, "dtype"));
		}
		if (parse_shape(cJSON_GetObjectItemCaseSensitive(it, "shape"), &in->ndim, in->shape))
			return bad(why, "analysis: input '%s' has a bad shape", name);
	}
	return 0;
}

static int parse_nodes(struct tgraph *g, const cJSON *arr, struct strbuf *why)
{
	const cJSON *it;
	size_t n = 0;

	if (!arr)
		return 0;
	if (!cJSON_IsArray(arr))
		return bad(why, "analysis: 'nodes' is not a list");
	g->nodes = xcalloc((size_t)cJSON_GetArraySize(arr) + 1, sizeof(*g->nodes));
	cJSON_ArrayForEach(it, arr) {
		struct tnode *nd = &g->nodes[n];
		const char *name = kb_json_str(it, "name");
		const char *op = kb_json_str(it, "op");
		const cJSON *args = cJSON_GetObjectItemCaseSensitive(it, "args");
		const cJSON *a;
		int k, rc;

		if (!name || !op)
			return bad(why, "analysis: node %zu has no name or op", n);
		if (find_node(g, name, n) >= 0 || find_input(g, name) >= 0)
			return bad(why, "analysis: name '%s' is defined twice", name);
		nd->name = xstrdup(name);
		nd->opname = xstrdup(op);
		g->nr_nodes = ++n;
		k = texpr_op_from_name(op);
		nd->op = k < 0 ? OP_MAIN : (enum top)k;
		nd->dtype = parse_dtype(kb_json_str(it, "dtype"));
		if (parse_shape(cJSON_GetObjectItemCaseSensitive(it, "shape"), &nd->ndim, nd->shape))
			return bad(why, "analysis: node '%s' has a bad shape", name);
		if (args && !cJSON_IsArray(args))
			return bad(why, "analysis: node '%s' args is not a list", name);
		cJSON_ArrayForEach(a, args) {
			struct targ tmp;

			if (parse_arg(g, a, n - 1, &tmp, why)) {
				if (nd->op != OP_MAIN)
					return -1;
				continue; /* the family's own node: its args are read elsewhere */
			}
			if (nd->nargs < TMAX_ARGS)
				nd->args[nd->nargs] = tmp;
			nd->nargs++;
		}
		if (nd->nargs > TMAX_ARGS) {
			if (nd->op != OP_MAIN)
				return refuse(why, "op '%s' (node '%s') has %d arguments, more than the templates take",
					      op, name, nd->nargs);
			nd->nargs = TMAX_ARGS;
		}
		for (int q = 0; q < 4; q++)
			nd->pref[q] = -1;
		if (nd->op != OP_MAIN) {
			rc = texpr_resolve(nd, cJSON_GetObjectItemCaseSensitive(it, "attrs"),
					   cJSON_GetObjectItemCaseSensitive(it, "attr_refs"), g, why);
			if (rc)
				return rc;
		}
	}
	return 0;
}

static int parse_outputs(struct tgraph *g, const cJSON *arr, struct strbuf *why)
{
	const cJSON *it;
	size_t n = 0;

	if (!cJSON_IsArray(arr) || !cJSON_GetArraySize(arr))
		return bad(why, "analysis: 'outputs' is missing or empty");
	g->outs = xcalloc((size_t)cJSON_GetArraySize(arr), sizeof(*g->outs));
	cJSON_ArrayForEach(it, arr) {
		if (parse_arg(g, it, g->nr_nodes, &g->outs[n], why))
			return -1;
		if (g->outs[n].kind != TA_NODE && g->outs[n].kind != TA_INPUT)
			return refuse(why, "output %zu is a constant, which the templates do not produce", n);
		n++;
	}
	g->nr_outs = n;
	return 0;
}

int tmpl_lookup(const struct tgraph *g, const char *name, struct targ *a)
{
	memset(a, 0, sizeof(*a));
	if (!name)
		return -1;
	return resolve_ref(g, name, g->nr_nodes, a);
}

int tmpl_field_ref(const struct tgraph *g, const cJSON *o, const char *key, const char *family,
		   struct targ *a, struct strbuf *why)
{
	const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);

	memset(a, 0, sizeof(*a));
	if (!it || cJSON_IsNull(it))
		return 0;
	if (!cJSON_IsString(it) || tmpl_lookup(g, it->valuestring, a)) {
		strbuf_reset(why);
		strbuf_addf(why, "analysis: %s '%s' names nothing known", family, key);
		return -1;
	}
	return 1;
}

/* --- template files --- */

static const char *const text_names[TT_NR] = {
	[TT_PRELUDE] = "prelude", [TT_EW] = "ew", [TT_POINTWISE] = "pointwise",
	[TT_POINTWISE_BWD] = "pointwise_bwd", [TT_ROWWISE] = "rowwise",
	[TT_ROWWISE_BWD] = "rowwise_bwd", [TT_MATMUL] = "matmul",
};

static int load_texts(struct kb_template *t, const char *data_dir, struct strbuf *why)
{
	struct kb_datadir dd;
	struct strbuf path = STRBUF_INIT, sb = STRBUF_INIT;
	const char *sub = t->backend == KB_BACKEND_CUDA ? "cuda" : "cpu";
	const char *ext = t->backend == KB_BACKEND_CUDA ? "cu" : "cpp";
	bool need[TT_NR] = { [TT_PRELUDE] = true };
	bool have_dd = false;
	int rc = -1;

	switch (t->family) {
	case TF_POINTWISE:
		need[TT_EW] = need[TT_POINTWISE] = true;
		need[TT_POINTWISE_BWD] = t->g.backward;
		break;
	case TF_ROWWISE:
		need[TT_ROWWISE] = true;
		need[TT_ROWWISE_BWD] = t->g.backward;
		break;
	case TF_MATMUL:
		need[TT_EW] = need[TT_MATMUL] = true;
		break;
	}
	if (!data_dir) {
		if (kb_datadir_find(NULL, &dd)) {
			kb_datadir_release(&dd);
			if (why)
				strbuf_addstr(why, "kernelbot data dir not found");
			return -1;
		}
		have_dd = true;
		data_dir = dd.root;
	}
	for (int i = 0; i < TT_NR; i++) {
		if (!need[i])
			continue;
		strbuf_reset(&path);
		strbuf_addf(&path, "%s/bot/templates/%s/%s.%s.in", data_dir, sub, text_names[i], ext);
		strbuf_reset(&sb);
		if (strbuf_read_file(&sb, path.buf, TEXT_MAX) < 0) {
			bad(why, "could not read template '%s'", path.buf);
			goto out;
		}
		t->text[i] = strbuf_detach(&sb, NULL);
	}
	rc = 0;
out:
	if (have_dd)
		kb_datadir_release(&dd);
	strbuf_release(&path);
	strbuf_release(&sb);
	return rc;
}

/* --- new / free --- */

void kb_template_free(struct kb_template *t)
{
	if (!t)
		return;
	graph_release(&t->g);
	free(t->row.prologue);
	free(t->row.epilogue);
	free(t->mm.epilogue);
	for (int i = 0; i < TT_NR; i++)
		free(t->text[i]);
	free(t);
}

int kb_template_new(struct kb_template **out, const cJSON *analysis, enum kb_backend backend,
		    const char *data_dir, struct strbuf *why)
{
	struct kb_template *t = NULL;
	const char *family, *reason;
	const cJSON *it;
	int rc = -1;

	*out = NULL;
	if (why)
		strbuf_reset(why);
	if (backend != KB_BACKEND_CUDA && backend != KB_BACKEND_CPU)
		return bad(why, "templates need a concrete backend (cuda or cpu)");
	if (!cJSON_IsObject(analysis))
		return bad(why, "analysis is not an object");
	family = kb_json_str(analysis, "family");
	reason = kb_json_str(analysis, "why");
	it = cJSON_GetObjectItemCaseSensitive(analysis, "traced");
	if (cJSON_IsFalse(it))
		return refuse(why, "operator could not be traced: %s", reason ? reason : "no reason given");
	if (!family)
		return bad(why, "analysis has no 'family'");
	if (strcmp(family, "pointwise") && strcmp(family, "rowwise") && strcmp(family, "matmul"))
		return refuse(why, "family '%s' has no template%s%s", family,
			      reason ? ": " : "", reason ? reason : "");

	t = xcalloc(1, sizeof(*t));
	t->backend = backend;
	t->family = !strcmp(family, "pointwise") ? TF_POINTWISE :
		    !strcmp(family, "rowwise") ? TF_ROWWISE : TF_MATMUL;
	t->g.backward = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(analysis, "backward"));
	if ((rc = parse_inputs(&t->g, cJSON_GetObjectItemCaseSensitive(analysis, "inputs"), why)) ||
	    (rc = parse_nodes(&t->g, cJSON_GetObjectItemCaseSensitive(analysis, "nodes"), why)) ||
	    (rc = parse_outputs(&t->g, cJSON_GetObjectItemCaseSensitive(analysis, "outputs"), why)))
		goto out;

	/* patterns the analysis gives (any family may carry the list) */
	it = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(analysis, "pointwise"),
					      "broadcast");
	if (it) {
		const cJSON *b;

		cJSON_ArrayForEach(b, it) {
			const char *ref = kb_json_str(b, "ref"), *pat = kb_json_str(b, "pattern");
			int k = ref ? find_input(&t->g, ref) : -1;

			if (k < 0 || !pat)
				continue;
			if (!strcmp(pat, "full"))
				t->g.in[k].pattern = TP_FULL;
			else if (!strcmp(pat, "row"))
				t->g.in[k].pattern = TP_ROW;
			else if (!strcmp(pat, "col"))
				t->g.in[k].pattern = TP_COL;
			else if (!strcmp(pat, "scalar"))
				t->g.in[k].pattern = TP_SCALAR;
			else {
				rc = refuse(why, "broadcast pattern '%s' of '%s' is not supported", pat, ref);
				goto out;
			}
			t->g.in[k].has_pattern = true;
		}
	}

	switch (t->family) {
	case TF_POINTWISE:
		rc = tmpl_pointwise_prepare(t, why);
		break;
	case TF_ROWWISE:
		rc = tmpl_rowwise_prepare(t, cJSON_GetObjectItemCaseSensitive(analysis, "rowwise"), why);
		break;
	case TF_MATMUL:
		rc = tmpl_matmul_prepare(t, cJSON_GetObjectItemCaseSensitive(analysis, "matmul"), why);
		break;
	}
	if (rc)
		goto out;
	if ((rc = load_texts(t, data_dir, why)))
		goto out;
	*out = t;
	t = NULL;
out:
	kb_template_free(t);
	return rc;
}

/* --- rendering --- */

int tmpl_render_prelude(const struct kb_template *t, const int64_t *point, struct strbuf *out)
{
	struct tvars vs;
	struct strbuf sb = STRBUF_INIT;
	int rc;

	tvars_init(&vs);
	kb_template_point_name(t, point, &sb);
	tvars_setf(&vs, "HEADER", "kernelbot built-in template: %s (%s), %s backend, %s",
		   kb_template_family(t), kb_template_kind(t),
		   t->backend == KB_BACKEND_CUDA ? "cuda" : "cpu", sb.buf);
	strbuf_reset(&sb);
	texpr_helpers(&sb);
	tvars_set(&vs, "OPS", sb.buf);
	rc = tmpl_subst(out, t->text[TT_PRELUDE], &vs);
	tvars_release(&vs);
	strbuf_release(&sb);
	return rc;
}

int kb_template_render(const struct kb_template *t, const int64_t *point, struct strbuf *source_out)
{
	for (size_t i = 0; i < t->space.nr; i++) {
		bool ok = false;

		for (size_t j = 0; j < t->params[i].nr; j++)
			ok |= t->params[i].values[j] == point[i];
		if (!ok)
			return error("template parameter '%s' has no value %lld", t->params[i].name,
				     (long long)point[i]);
	}
	switch (t->family) {
	case TF_POINTWISE:
		return tmpl_pointwise_render(t, point, source_out);
	case TF_ROWWISE:
		return tmpl_rowwise_render(t, point, source_out);
	default:
		return tmpl_matmul_render(t, point, source_out);
	}
}
