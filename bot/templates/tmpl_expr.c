#include "core/common.h"
#include "templates/tmpl_priv.h"
#include "core/strbuf.h"
#include "core/util.h"

#include <math.h>

/*
 * Pointwise expressions, forward and reverse mode, as C++ text that
 * compiles in CUDA device code and in host C++ alike (float math from
 * <math.h>). The formulas follow torch's own kernels (ATen's
 * UnaryOps/Activation code), so results agree to an ulp or two.
 */

static const struct {
	const char *name;
	enum top op;
	int min, max;           /* tensor/const arguments after resolution */
	bool deriv;
} ops[] = {
	{ "add", OP_ADD, 2, 2, true }, { "sub", OP_SUB, 2, 2, true },
	{ "mul", OP_MUL, 2, 2, true }, { "div", OP_DIV, 2, 2, true },
	{ "neg", OP_NEG, 1, 1, true }, { "abs", OP_ABS, 1, 1, true },
	{ "exp", OP_EXP, 1, 1, true }, { "log", OP_LOG, 1, 1, true },
	{ "sqrt", OP_SQRT, 1, 1, true }, { "rsqrt", OP_RSQRT, 1, 1, true },
	{ "pow", OP_POW, 2, 2, true }, { "relu", OP_RELU, 1, 1, true },
	{ "leaky_relu", OP_LEAKY_RELU, 1, 1, true }, { "gelu", OP_GELU, 1, 1, true },
	{ "silu", OP_SILU, 1, 1, true }, { "sigmoid", OP_SIGMOID, 1, 1, true },
	{ "tanh", OP_TANH, 1, 1, true }, { "softplus", OP_SOFTPLUS, 1, 1, true },
	{ "elu", OP_ELU, 1, 1, true }, { "selu", OP_SELU, 1, 1, true },
	{ "hardtanh", OP_HARDTANH, 1, 1, true }, { "hardsigmoid", OP_HARDSIGMOID, 1, 1, true },
	{ "hardswish", OP_HARDSWISH, 1, 1, true }, { "clamp", OP_CLAMP, 1, 1, true },
	{ "minimum", OP_MINIMUM, 2, 2, true }, { "maximum", OP_MAXIMUM, 2, 2, true },
	{ "where", OP_WHERE, 3, 3, true }, { "square", OP_SQUARE, 1, 1, true },
	{ "reciprocal", OP_RECIPROCAL, 1, 1, true }, { "log1p", OP_LOG1P, 1, 1, true },
	{ "expm1", OP_EXPM1, 1, 1, true }, { "sin", OP_SIN, 1, 1, true },
	{ "cos", OP_COS, 1, 1, true }, { "erf", OP_ERF, 1, 1, true },
	{ "relu6", OP_RELU6, 1, 1, true }, { "mish", OP_MISH, 1, 1, true },
	{ "sign", OP_SIGN, 1, 1, true }, { "gt", OP_GT, 2, 2, true }, { "lt", OP_LT, 2, 2, true },
	{ "ge", OP_GE, 2, 2, true }, { "le", OP_LE, 2, 2, true }, { "eq", OP_EQ, 2, 2, true },
	{ "ne", OP_NE, 2, 2, true }, { "identity", OP_IDENTITY, 1, 1, true },
	{ "(squared difference)", OP_SQDIFF, 2, 2, true }, { "(huber)", OP_HUBER, 2, 2, true },
};

static const struct {
	const char *alias;
	enum top op;
} aliases[] = {
	{ "swish", OP_SILU }, { "multiply", OP_MUL }, { "divide", OP_DIV },
	{ "true_divide", OP_DIV }, { "subtract", OP_SUB }, { "negative", OP_NEG },
	{ "clip", OP_CLAMP }, { "clamp_min", OP_CLAMP }, { "clamp_max", OP_CLAMP },
	{ "max_elementwise", OP_MAXIMUM }, { "min_elementwise", OP_MINIMUM },
	{ "fmax", OP_MAXIMUM }, { "fmin", OP_MINIMUM }, { "greater", OP_GT }, { "less", OP_LT },
	{ "clone", OP_IDENTITY }, { "contiguous", OP_IDENTITY }, { "to", OP_IDENTITY },
	{ "_to_copy", OP_IDENTITY }, { "type_as", OP_IDENTITY }, { "positive", OP_IDENTITY },
	{ "sgn", OP_SIGN },
};

int texpr_op_from_name(const char *name)
{
	char buf[64];
	size_t len;
	char *dot;

	if (!strncmp(name, "aten.", 5))
		name = name + 5;
	else if (!strncmp(name, "aten::", 6))
		name = name + 6;
	kb_strlcpy(buf, name, sizeof(buf));
	dot = strchr(buf, '.'); /* overload: add.Tensor, gelu.default */
	if (dot)
		*dot = '\0';
	len = strlen(buf);
	if (len > 1 && buf[len - 1] == '_' && buf[0] != '_')
		buf[len - 1] = '\0'; /* in-place spelling relu_ */
	for (size_t i = 0; i < ARRAY_SIZE(ops); i++)
		if (!strcmp(buf, ops[i].name))
			return (int)ops[i].op;
	for (size_t i = 0; i < ARRAY_SIZE(aliases); i++)
		if (!strcmp(buf, aliases[i].alias))
			return (int)aliases[i].op;
	return -1;
}

const char *texpr_op_name(enum top op)
{
	for (size_t i = 0; i < ARRAY_SIZE(ops); i++)
		if (ops[i].op == op)
			return ops[i].name;
	return "?";
}

void texpr_op_arity(enum top op, int *min, int *max)
{
	*min = *max = 0;
	for (size_t i = 0; i < ARRAY_SIZE(ops); i++)
		if (ops[i].op == op) {
			*min = ops[i].min;
			*max = ops[i].max;
		}
}

bool texpr_has_derivative(enum top op)
{
	for (size_t i = 0; i < ARRAY_SIZE(ops); i++)
		if (ops[i].op == op)
			return ops[i].deriv;
	return false;
}

/* --- op parameters --- */

/*
 * A parameter from attrs[key] (a number; "inf" strings; null means
 * "absent"), else positional argument pos when it is a const, else def.
 * *given reports whether it was present.
 */
static const cJSON *cur_refs;         /* texpr_resolve's attr_refs, for param() */
static const struct tgraph *cur_graph;

/* parameter k of n named key: does a scalar input give it? */
static void param_ref(struct tnode *n, int k, const char *key)
{
	const cJSON *it = cur_refs ? cJSON_GetObjectItemCaseSensitive(cur_refs, key) : NULL;
	struct targ a;

	if (cJSON_IsString(it) && !tmpl_lookup(cur_graph, it->valuestring, &a) && a.kind == TA_INPUT &&
	    cur_graph->in[a.idx].kind == TK_SCALAR)
		n->pref[k] = a.idx;
}

static int param(const struct tnode *n, const cJSON *attrs, const char *key, int pos, double def,
		 double *out, bool *given, struct strbuf *why)
{
	const cJSON *it = attrs ? cJSON_GetObjectItemCaseSensitive(attrs, key) : NULL;

	*out = def;
	if (given)
		*given = false;
	if (it && !cJSON_IsNull(it)) {
		if (cJSON_IsNumber(it))
			*out = it->valuedouble;
		else if (cJSON_IsBool(it))
			*out = cJSON_IsTrue(it) ? 1 : 0;
		else if (cJSON_IsString(it) && !strcmp(it->valuestring, "inf"))
			*out = INFINITY;
		else if (cJSON_IsString(it) && !strcmp(it->valuestring, "-inf"))
			*out = -INFINITY;
		else
			goto bad;
		if (given)
			*given = true;
		return 0;
	}
	if (pos >= 0 && pos < n->nargs && pos < TMAX_ARGS) {
		const struct targ *a = &n->args[pos];

		if (a->kind == TA_CONST) {
			*out = a->value;
			if (given)
				*given = true;
		} else if (a->kind != TA_NONE) {
			goto bad;
		}
	}
	return 0;
bad:
	if (why) {
		strbuf_reset(why);
		strbuf_addf(why, "op '%s' (node '%s'): parameter '%s' must be a constant number",
			    n->opname, n->name, key);
	}
	return KB_ENOTFOUND;
}

int texpr_resolve(struct tnode *n, const cJSON *attrs, const cJSON *attr_refs,
		  const struct tgraph *g, struct strbuf *why)
{
	int min, max, rc = 0, keep;
	bool g1 = false, g2 = false;
	const cJSON *it;

	texpr_op_arity(n->op, &min, &max);
	keep = max;
	memset(n->p, 0, sizeof(n->p));
	for (int k = 0; k < 4; k++)
		n->pref[k] = -1;
	cur_refs = attr_refs;
	cur_graph = g;
	switch (n->op) {
	case OP_ADD:
	case OP_SUB:
		rc = param(n, attrs, "alpha", 2, 1.0, &n->p[0], NULL, why);
		param_ref(n, 0, "alpha");
		break;
	case OP_DIV:
		it = attrs ? cJSON_GetObjectItemCaseSensitive(attrs, "rounding_mode") : NULL;
		if (it && !cJSON_IsNull(it)) {
			strbuf_reset(why);
			strbuf_addf(why, "op 'div' with rounding_mode (node '%s') is not supported", n->name);
			return KB_ENOTFOUND;
		}
		break;
	case OP_LEAKY_RELU:
		rc = param(n, attrs, "negative_slope", 1, 0.01, &n->p[0], NULL, why);
		param_ref(n, 0, "negative_slope");
		break;
	case OP_GELU:
		it = attrs ? cJSON_GetObjectItemCaseSensitive(attrs, "approximate") : NULL;
		if (cJSON_IsString(it) && !strcmp(it->valuestring, "tanh"))
			n->p[0] = 1;
		else if (cJSON_IsString(it) && strcmp(it->valuestring, "none")) {
			strbuf_reset(why);
			strbuf_addf(why, "op 'gelu' with approximate '%s' is not supported", it->valuestring);
			return KB_ENOTFOUND;
		}
		break;
	case OP_SOFTPLUS:
		rc = param(n, attrs, "beta", 1, 1.0, &n->p[0], NULL, why) ||
		     param(n, attrs, "threshold", 2, 20.0, &n->p[1], NULL, why) ? KB_ENOTFOUND : 0;
		param_ref(n, 0, "beta");
		param_ref(n, 1, "threshold");
		break;
	case OP_ELU:
		rc = param(n, attrs, "alpha", 1, 1.0, &n->p[0], NULL, why) ||
		     param(n, attrs, "scale", 2, 1.0, &n->p[1], NULL, why) ||
		     param(n, attrs, "input_scale", 3, 1.0, &n->p[2], NULL, why) ? KB_ENOTFOUND : 0;
		param_ref(n, 0, "alpha");
		param_ref(n, 1, "scale");
		param_ref(n, 2, "input_scale");
		break;
	case OP_HARDTANH:
		rc = param(n, attrs, "min_val", 1, -1.0, &n->p[0], NULL, why) ||
		     param(n, attrs, "max_val", 2, 1.0, &n->p[1], NULL, why) ? KB_ENOTFOUND : 0;
		param_ref(n, 0, "min_val");
		param_ref(n, 1, "max_val");
		break;
	case OP_RELU6:
		n->p[0] = 0;
		n->p[1] = 6;
		break;
	case OP_CLAMP: {
		const char *lo = strstr(n->opname, "clamp_max") ? NULL : "min";
		const char *hi = strstr(n->opname, "clamp_min") ? NULL : "max";

		/* clamp_min(x, v) / clamp_max(x, v): the one bound is argument 1 */
		if (lo)
			rc = param(n, attrs, lo, 1, -INFINITY, &n->p[0], &g1, why);
		if (!rc && hi)
			rc = param(n, attrs, hi, lo ? 2 : 1, INFINITY, &n->p[1], &g2, why);
		if (rc) {
			strbuf_reset(why);
			strbuf_addf(why, "op 'clamp' with tensor bounds (node '%s') is not supported", n->name);
			return KB_ENOTFOUND;
		}
		if (!lo)
			n->p[0] = -INFINITY;
		if (lo)
			param_ref(n, 0, lo);
		if (hi)
			param_ref(n, 1, hi);
		n->p[2] = g1 || n->pref[0] >= 0;
		n->p[3] = g2 || n->pref[1] >= 0;
		break;
	}
	default:
		break;
	}
	cur_refs = NULL;
	cur_graph = NULL;
	if (rc)
		return KB_ENOTFOUND;
	if (n->nargs < min) {
		strbuf_reset(why);
		strbuf_addf(why, "op '%s' (node '%s') has %d arguments, it needs %d", n->opname,
			    n->name, n->nargs, min);
		return KB_ENOTFOUND;
	}
	/* the remaining (consumed) arguments are parameters, not values */
	if (n->nargs > keep)
		n->nargs = keep;
	for (int i = 0; i < n->nargs; i++)
		if (n->args[i].kind == TA_NONE) {
			strbuf_reset(why);
			strbuf_addf(why, "op '%s' (node '%s'): argument %d is neither a ref nor a number",
				    n->opname, n->name, i);
			return KB_ENOTFOUND;
		}
	return 0;
}

/* --- helper functions (emitted once per source) --- */

static const char helpers[] =
	"KB_FN float kb_clampf(float x, float lo, float hi)\n"
	"{\n"
	"\treturn x < lo ? lo : (x > hi ? hi : x); /* NaN stays NaN, as torch.clamp */\n"
	"}\n"
	"KB_FN float kb_relu(float x) { return x <= 0.0f ? 0.0f : x; }\n"
	"KB_FN float kb_leaky(float x, float s) { return x > 0.0f ? x : x * s; }\n"
	"KB_FN float kb_gelu(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752440f)); }\n"
	"KB_FN float kb_gelu_tanh(float x)\n"
	"{\n"
	"\tconst float beta = 0.7978845608028654f, kappa = 0.044715f; /* sqrt(2/pi) */\n"
	"\treturn 0.5f * x * (1.0f + kb_tanh(beta * (x + kappa * x * x * x)));\n"
	"}\n"
	"KB_FN float kb_sigmoid(float x) { return KB_QDIV(1.0f, 1.0f + expf(-x)); }\n"
	"KB_FN float kb_silu(float x) { return KB_QDIV(x, 1.0f + expf(-x)); }\n"
	"KB_FN float kb_softplus(float x, float beta, float th)\n"
	"{\n"
	"\treturn x * beta > th ? x : log1pf(expf(x * beta)) / beta;\n"
	"}\n"
	"KB_FN float kb_elu(float x, float alpha, float scale, float iscale)\n"
	"{\n"
	"\treturn x > 0.0f ? x * scale : expm1f(x * iscale) * alpha * scale;\n"
	"}\n"
	"KB_FN float kb_hardsigmoid(float x) { return kb_clampf(x + 3.0f, 0.0f, 6.0f) / 6.0f; }\n"
	"KB_FN float kb_hardswish(float x) { return x * kb_clampf(x + 3.0f, 0.0f, 6.0f) / 6.0f; }\n"
	"KB_FN float kb_min2(float a, float b) { return a < b ? a : (a == a ? b : a); }\n"
	"KB_FN float kb_max2(float a, float b) { return a > b ? a : (a == a ? b : a); }\n"
	"KB_FN float kb_sign(float x) { return (float)((0.0f < x) - (x < 0.0f)); }\n"
	"KB_FN float kb_mish(float x) { return x * kb_tanh(log1pf(expf(x))); }\n"
	"KB_FN float kb_huber(float d, float delta)\n"
	"{\n"
	"\tconst float z = fabsf(d);\n"
	"\treturn z < delta ? 0.5f * d * d : delta * (z - 0.5f * delta);\n"
	"}\n"
	"KB_FN float kb_gelu_bwd(float g, float x)\n"
	"{\n"
	"\tconst float cdf = 0.5f * (1.0f + erff(x * 0.70710678118654752440f));\n"
	"\tconst float pdf = expf(-0.5f * x * x) * 0.39894228040143267794f;\n"
	"\treturn g * (cdf + x * pdf);\n"
	"}\n"
	"KB_FN float kb_gelu_tanh_bwd(float g, float x)\n"
	"{\n"
	"\tconst float beta = 0.7978845608028654f, kappa = 0.044715f;\n"
	"\tconst float x2 = x * x, inner = beta * (x + kappa * x2 * x), t = kb_tanh(inner);\n"
	"\tconst float left = 0.5f * x, right = 1.0f + t;\n"
	"\tconst float dleft = 0.5f * right;\n"
	"\tconst float dright = left * (1.0f - t * t) * beta * (1.0f + 3.0f * kappa * x2);\n"
	"\treturn g * (dleft + dright);\n"
	"}\n"
	"KB_FN float kb_mish_bwd(float g, float x)\n"
	"{\n"
	"\tconst float s = 1.0f / (1.0f + expf(-x)), t = kb_tanh(log1pf(expf(x)));\n"
	"\treturn g * (t + x * s * (1.0f - t * t));\n"
	"}\n";

void texpr_helpers(struct strbuf *out)
{
	strbuf_addstr(out, helpers);
}

void texpr_float(struct strbuf *out, double v)
{
	if (isnan(v))
		strbuf_addstr(out, "NAN");
	else if (isinf(v))
		strbuf_addstr(out, v > 0 ? "INFINITY" : "(-INFINITY)");
	else if (v < 0 || (v == 0 && signbit(v)))
		strbuf_addf(out, "(%.9ef)", v);
	else
		strbuf_addf(out, "%.9ef", v);
}

/* --- forward --- */

/* op parameter k: the scalar input it comes from, else the literal */
static void ptext(struct strbuf *out, const struct tnode *n, int k, const struct texpr_env *env)
{
	if (n->pref[k] >= 0 && env->input && env->input[n->pref[k]])
		strbuf_addf(out, "((float)%s)", env->input[n->pref[k]]);
	else
		texpr_float(out, n->p[k]);
}

static void local_name(struct strbuf *out, const struct texpr_env *env, int k)
{
	strbuf_addf(out, "%s%d", env->prefix ? env->prefix : "v", k);
}

void texpr_arg(struct strbuf *out, const struct tgraph *g, const struct targ *a,
	       const struct texpr_env *env)
{
	switch (a->kind) {
	case TA_CONST:
		texpr_float(out, a->value);
		break;
	case TA_INPUT:
		strbuf_addstr(out, env->input && env->input[a->idx] ? env->input[a->idx] : "0.0f");
		break;
	case TA_NODE:
		if (env->node && env->node[a->idx])
			strbuf_addstr(out, env->node[a->idx]);
		else
			local_name(out, env, a->idx);
		break;
	default:
		strbuf_addstr(out, "0.0f");
		break;
	}
	(void)g;
}

void texpr_need(const struct tgraph *g, bool *want, int k)
{
	if (want[k])
		return;
	want[k] = true;
	for (int i = 0; i < g->nodes[k].nargs && g->nodes[k].op != OP_MAIN; i++)
		if (g->nodes[k].args[i].kind == TA_NODE)
			texpr_need(g, want, g->nodes[k].args[i].idx);
}

void texpr_need_arg(const struct tgraph *g, bool *want, const struct targ *a)
{
	if (a->kind == TA_NODE)
		texpr_need(g, want, a->idx);
}

/* pow: a constant exponent as torch computes it, else powf */
static void emit_pow(struct strbuf *out, const struct tnode *n, char **A)
{
	if (n->args[1].kind == TA_CONST) {
		double e = n->args[1].value;

		/* torch's pow special-cases these exponents */
		if (e == 2)
			strbuf_addf(out, "(%s * %s)", A[0], A[0]);
		else if (e == 3)
			strbuf_addf(out, "(%s * %s * %s)", A[0], A[0], A[0]);
		else if (e == 1)
			strbuf_addf(out, "(%s)", A[0]);
		else if (e == 0)
			strbuf_addstr(out, "1.0f");
		else if (e == 0.5)
			strbuf_addf(out, "sqrtf(%s)", A[0]);
		else if (e == -0.5)
			strbuf_addf(out, "(1.0f / sqrtf(%s))", A[0]);
		else if (e == -1)
			strbuf_addf(out, "(1.0f / %s)", A[0]);
		else if (e == -2)
			strbuf_addf(out, "(1.0f / (%s * %s))", A[0], A[0]);
		else
			strbuf_addf(out, "powf(%s, %s)", A[0], A[1]);
	} else {
		strbuf_addf(out, "powf(%s, %s)", A[0], A[1]);
	}
}

static void emit_expr(struct strbuf *out, const struct tnode *n, char **A, const struct texpr_env *env)
{
	switch (n->op) {
	case OP_ADD:
		if (n->p[0] == 1 && n->pref[0] < 0)
			strbuf_addf(out, "(%s + %s)", A[0], A[1]);
		else {
			strbuf_addf(out, "(%s + ", A[0]);
			ptext(out, n, 0, env);
			strbuf_addf(out, " * %s)", A[1]);
		}
		break;
	case OP_SUB:
		if (n->p[0] == 1 && n->pref[0] < 0)
			strbuf_addf(out, "(%s - %s)", A[0], A[1]);
		else {
			strbuf_addf(out, "(%s - ", A[0]);
			ptext(out, n, 0, env);
			strbuf_addf(out, " * %s)", A[1]);
		}
		break;
	case OP_MUL: strbuf_addf(out, "(%s * %s)", A[0], A[1]); break;
	case OP_DIV: strbuf_addf(out, "(%s / %s)", A[0], A[1]); break;
	case OP_NEG: strbuf_addf(out, "(-%s)", A[0]); break;
	case OP_ABS: strbuf_addf(out, "fabsf(%s)", A[0]); break;
	case OP_EXP: strbuf_addf(out, "expf(%s)", A[0]); break;
	case OP_LOG: strbuf_addf(out, "logf(%s)", A[0]); break;
	case OP_SQRT: strbuf_addf(out, "sqrtf(%s)", A[0]); break;
	case OP_RSQRT: strbuf_addf(out, "(1.0f / sqrtf(%s))", A[0]); break;
	case OP_POW: emit_pow(out, n, A); break;
	case OP_RELU: strbuf_addf(out, "kb_relu(%s)", A[0]); break;
	case OP_LEAKY_RELU:
		strbuf_addf(out, "kb_leaky(%s, ", A[0]);
		ptext(out, n, 0, env);
		strbuf_addch(out, ')');
		break;
	case OP_GELU:
		strbuf_addf(out, "%s(%s)", n->p[0] ? "kb_gelu_tanh" : "kb_gelu", A[0]);
		break;
	case OP_SILU: strbuf_addf(out, "kb_silu(%s)", A[0]); break;
	case OP_SIGMOID: strbuf_addf(out, "kb_sigmoid(%s)", A[0]); break;
	case OP_TANH: strbuf_addf(out, "kb_tanh(%s)", A[0]); break;
	case OP_SOFTPLUS:
		strbuf_addf(out, "kb_softplus(%s, ", A[0]);
		ptext(out, n, 0, env);
		strbuf_addstr(out, ", ");
		ptext(out, n, 1, env);
		strbuf_addch(out, ')');
		break;
	case OP_ELU:
		strbuf_addf(out, "kb_elu(%s, ", A[0]);
		ptext(out, n, 0, env);
		strbuf_addstr(out, ", ");
		ptext(out, n, 1, env);
		strbuf_addstr(out, ", ");
		ptext(out, n, 2, env);
		strbuf_addch(out, ')');
		break;
	case OP_SELU:
		strbuf_addf(out, "kb_elu(%s, 1.6732632423543772848170429916717f, "
			    "1.0507009873554804934193349852946f, 1.0f)", A[0]);
		break;
	case OP_HARDTANH:
	case OP_RELU6:
	case OP_CLAMP:
		strbuf_addf(out, "kb_clampf(%s, ", A[0]);
		ptext(out, n, 0, env);
		strbuf_addstr(out, ", ");
		ptext(out, n, 1, env);
		strbuf_addch(out, ')');
		break;
	case OP_HARDSIGMOID: strbuf_addf(out, "kb_hardsigmoid(%s)", A[0]); break;
	case OP_HARDSWISH: strbuf_addf(out, "kb_hardswish(%s)", A[0]); break;
	case OP_MINIMUM: strbuf_addf(out, "kb_min2(%s, %s)", A[0], A[1]); break;
	case OP_MAXIMUM: strbuf_addf(out, "kb_max2(%s, %s)", A[0], A[1]); break;
	case OP_WHERE: strbuf_addf(out, "(%s != 0.0f ? %s : %s)", A[0], A[1], A[2]); break;
	case OP_SQUARE: strbuf_addf(out, "(%s * %s)", A[0], A[0]); break;
	case OP_RECIPROCAL: strbuf_addf(out, "(1.0f / %s)", A[0]); break;
	case OP_LOG1P: strbuf_addf(out, "log1pf(%s)", A[0]); break;
	case OP_EXPM1: strbuf_addf(out, "expm1f(%s)", A[0]); break;
	case OP_SIN: strbuf_addf(out, "sinf(%s)", A[0]); break;
	case OP_COS: strbuf_addf(out, "cosf(%s)", A[0]); break;
	case OP_ERF: strbuf_addf(out, "erff(%s)", A[0]); break;
	case OP_MISH: strbuf_addf(out, "kb_mish(%s)", A[0]); break;
	case OP_SIGN: strbuf_addf(out, "kb_sign(%s)", A[0]); break;
	case OP_GT: strbuf_addf(out, "(%s > %s ? 1.0f : 0.0f)", A[0], A[1]); break;
	case OP_LT: strbuf_addf(out, "(%s < %s ? 1.0f : 0.0f)", A[0], A[1]); break;
	case OP_GE: strbuf_addf(out, "(%s >= %s ? 1.0f : 0.0f)", A[0], A[1]); break;
	case OP_LE: strbuf_addf(out, "(%s <= %s ? 1.0f : 0.0f)", A[0], A[1]); break;
	case OP_EQ: strbuf_addf(out, "(%s == %s ? 1.0f : 0.0f)", A[0], A[1]); break;
	case OP_NE: strbuf_addf(out, "(%s != %s ? 1.0f : 0.0f)", A[0], A[1]); break;
	case OP_IDENTITY: strbuf_addf(out, "(%s)", A[0]); break;
	case OP_SQDIFF: strbuf_addf(out, "((%s - %s) * (%s - %s))", A[0], A[1], A[0], A[1]); break;
	case OP_HUBER:
		strbuf_addf(out, "kb_huber(%s - %s, ", A[0], A[1]);
		ptext(out, n, 0, env);
		strbuf_addch(out, ')');
		break;
	default: strbuf_addstr(out, "NAN"); break;
	}
}

static void arg_texts(const struct tgraph *g, const struct tnode *n, const struct texpr_env *env,
		      char **A)
{
	for (int i = 0; i < TMAX_ARGS; i++) {
		struct strbuf sb = STRBUF_INIT;

		if (i < n->nargs)
			texpr_arg(&sb, g, &n->args[i], env);
		else
			strbuf_addstr(&sb, "0.0f");
		A[i] = strbuf_detach(&sb, NULL);
	}
}

static void free_texts(char **A)
{
	for (int i = 0; i < TMAX_ARGS; i++)
		free(A[i]);
}

static bool input_ok(const struct tgraph *g, const struct tnode *n, const struct texpr_env *env)
{
	for (int i = 0; i < n->nargs; i++)
		if (n->args[i].kind == TA_INPUT && (!env->input || !env->input[n->args[i].idx]))
			return error("template: input '%s' has no value where node '%s' needs it",
				     g->in[n->args[i].idx].name, n->name), false;
	return true;
}

int texpr_emit(struct strbuf *out, const struct tgraph *g, const bool *want,
	       const struct texpr_env *env, const char *indent)
{
	for (size_t k = 0; k < g->nr_nodes; k++) {
		const struct tnode *n = &g->nodes[k];
		char *A[TMAX_ARGS];

		if (!want[k] || (env->node && env->node[k]))
			continue;
		if (n->op == OP_MAIN)
			return error("template: node '%s' ('%s') is not pointwise", n->name, n->opname);
		if (!input_ok(g, n, env))
			return -1;
		arg_texts(g, n, env, A);
		strbuf_addf(out, "%sconst float ", indent);
		local_name(out, env, (int)k);
		strbuf_addstr(out, " = ");
		emit_expr(out, n, A, env);
		strbuf_addstr(out, ";\n");
		free_texts(A);
	}
	return 0;
}

/* --- reverse mode --- */

/* the gradient variable an argument accumulates into; false: none */
static bool grad_target(struct strbuf *out, const struct targ *a, const bool *ginput)
{
	if (a->kind == TA_NODE) {
		strbuf_addf(out, "g%d", a->idx);
		return true;
	}
	if (a->kind == TA_INPUT && ginput && ginput[a->idx]) {
		strbuf_addf(out, "gi%d", a->idx);
		return true;
	}
	return false;
}

/*
 * One node's step in reverse mode: its gradient G, its value V and the
 * texts of its arguments A; the steps below add to the gradients of its
 * arguments (acc).
 */
struct bwd_step {
	struct strbuf *out;
	const char *indent;
	const bool *ginput;
	const struct tnode *n;
	const struct texpr_env *env;
	char **A;
	const char *G, *V;
};

static void acc(const struct bwd_step *s, const struct targ *a, const char *fmt, ...) KB_PRINTF(3, 4);
static void acc(const struct bwd_step *s, const struct targ *a, const char *fmt, ...)
{
	struct strbuf target = STRBUF_INIT;
	va_list ap;

	if (grad_target(&target, a, s->ginput)) {
		strbuf_addf(s->out, "%s%s += ", s->indent, target.buf);
		va_start(ap, fmt);
		strbuf_vaddf(s->out, fmt, ap);
		va_end(ap);
		strbuf_addstr(s->out, ";\n");
	}
	strbuf_release(&target);
}


/* arithmetic and elementary functions; false for an op it does not cover */
static bool bwd_arith(const struct bwd_step *s)
{
	const struct tnode *n = s->n;
	const struct targ *a0 = &n->args[0], *a1 = &n->args[1];
	const char *G = s->G, *V = s->V;
	char **A = s->A;
	const struct texpr_env *env = s->env;
	struct strbuf f = STRBUF_INIT;
	bool handled = true;

	switch (n->op) {
	case OP_ADD:
	case OP_SUB:
		acc(s, a0, "%s", G);
		ptext(&f, n, 0, env);
		acc(s, a1, "%s%s * %s", n->op == OP_SUB ? "-" : "", f.buf, G);
		break;
	case OP_MUL:
		acc(s, a0, "%s * %s", G, A[1]);
		acc(s, a1, "%s * %s", G, A[0]);
		break;
	case OP_DIV:
		acc(s, a0, "%s / %s", G, A[1]);
		acc(s, a1, "-%s * %s / (%s * %s)", G, A[0], A[1], A[1]);
		break;
	case OP_NEG:
		acc(s, a0, "-%s", G);
		break;
	case OP_ABS:
		acc(s, a0, "%s * kb_sign(%s)", G, A[0]);
		break;
	case OP_EXP:
		acc(s, a0, "%s * %s", G, V);
		break;
	case OP_LOG:
		acc(s, a0, "%s / %s", G, A[0]);
		break;
	case OP_SQRT:
		acc(s, a0, "%s / (2.0f * %s)", G, V);
		break;
	case OP_RSQRT:
		acc(s, a0, "-0.5f * %s * %s * %s * %s", G, V, V, V);
		break;
	case OP_SQUARE:
		acc(s, a0, "%s * 2.0f * %s", G, A[0]);
		break;
	case OP_RECIPROCAL:
		acc(s, a0, "-%s * (%s * %s)", G, V, V);
		break;
	case OP_LOG1P:
		acc(s, a0, "%s / (%s + 1.0f)", G, A[0]);
		break;
	case OP_EXPM1:
		acc(s, a0, "%s * (%s + 1.0f)", G, V);
		break;
	case OP_SIN:
		acc(s, a0, "%s * cosf(%s)", G, A[0]);
		break;
	case OP_COS:
		acc(s, a0, "-%s * sinf(%s)", G, A[0]);
		break;
	case OP_ERF:
		acc(s, a0, "%s * 1.12837916709551257390f * expf(-%s * %s)",
		    G, A[0], A[0]);
		break;
	case OP_IDENTITY:
		acc(s, a0, "%s", G);
		break;
	case OP_SQDIFF:
		acc(s, a0, "%s * 2.0f * (%s - %s)", G, A[0], A[1]);
		acc(s, a1, "-%s * 2.0f * (%s - %s)", G, A[0], A[1]);
		break;
	case OP_HUBER:
		ptext(&f, n, 0, env);
		acc(s, a0, "%s * (fabsf(%s - %s) < %s ? %s - %s : %s * kb_sign(%s - %s))",
		    G, A[0], A[1], f.buf, A[0], A[1], f.buf, A[0], A[1]);
		acc(s, a1, "-%s * (fabsf(%s - %s) < %s ? %s - %s : %s * kb_sign(%s - %s))",
		    G, A[0], A[1], f.buf, A[0], A[1], f.buf, A[0], A[1]);
		break;
	default:
		handled = false;
		break;
	}
	strbuf_release(&f);
	return handled;
}

/* pow: by its exponent, a constant or a tensor */
static void bwd_pow(const struct bwd_step *s)
{
	const struct targ *a0 = &s->n->args[0], *a1 = &s->n->args[1];
	const char *G = s->G, *V = s->V;
	char **A = s->A;
	struct strbuf f = STRBUF_INIT, em1 = STRBUF_INIT;
	double e;

	if (a1->kind != TA_CONST) {
		acc(s, a0, "%s * %s * powf(%s, %s - 1.0f)", G, A[1], A[0], A[1]);
		acc(s, a1, "%s * ((%s == 0.0f && %s >= 0.0f) ? 0.0f : %s * logf(%s))", G, A[0], A[1],
		    V, A[0]);
		return;
	}
	e = a1->value;
	if (e == 0)
		return;
	texpr_float(&f, e);
	if (e == 1) {
		acc(s, a0, "%s", G);
	} else if (e == 2) {
		acc(s, a0, "%s * 2.0f * %s", G, A[0]);
	} else {
		texpr_float(&em1, e - 1);
		acc(s, a0, "%s * %s * powf(%s, %s)", G, f.buf, A[0], em1.buf);
	}
	strbuf_release(&f);
	strbuf_release(&em1);
}

/* activations; false for an op it does not cover */
static bool bwd_activation(const struct bwd_step *s)
{
	const struct tnode *n = s->n;
	const struct targ *a0 = &n->args[0];
	const char *G = s->G, *V = s->V;
	char **A = s->A;
	const struct texpr_env *env = s->env;
	struct strbuf f = STRBUF_INIT;
	bool handled = true;

	switch (n->op) {
	case OP_RELU:
		acc(s, a0, "(%s <= 0.0f ? 0.0f : %s)", V, G);
		break;
	case OP_LEAKY_RELU:
		ptext(&f, n, 0, env);
		acc(s, a0, "(%s > 0.0f ? %s : %s * %s)", A[0], G, G, f.buf);
		break;
	case OP_GELU:
		acc(s, a0, "%s(%s, %s)",
		    n->p[0] ? "kb_gelu_tanh_bwd" : "kb_gelu_bwd", G, A[0]);
		break;
	case OP_SILU:
		acc(s, a0,
		    "%s * kb_sigmoid(%s) * (1.0f + %s * (1.0f - kb_sigmoid(%s)))", G, A[0],
		    A[0], A[0]);
		break;
	case OP_SIGMOID:
		acc(s, a0, "%s * (1.0f - %s) * %s", G, V, V);
		break;
	case OP_TANH:
		acc(s, a0, "%s * (1.0f - %s * %s)", G, V, V);
		break;
	case OP_SOFTPLUS: {
		struct strbuf beta = STRBUF_INIT, th = STRBUF_INIT;

		ptext(&beta, n, 0, env);
		ptext(&th, n, 1, env);
		acc(s, a0,
		    "(%s * %s > %s ? %s : %s * expf(%s * %s) / (expf(%s * %s) + 1.0f))", A[0],
		    beta.buf, th.buf, G, G, A[0], beta.buf, A[0], beta.buf);
		strbuf_release(&beta);
		strbuf_release(&th);
		break;
	}
	case OP_ELU:
	case OP_SELU: {
		struct strbuf s1 = STRBUF_INIT, s2 = STRBUF_INIT, s3 = STRBUF_INIT;

		if (n->op == OP_SELU) {
			texpr_float(&s1, 1.6732632423543772848170429916717);
			texpr_float(&s2, 1.0);
			texpr_float(&s3, 1.0507009873554804934193349852946);
		} else {
			ptext(&s1, n, 0, env);
			ptext(&s2, n, 2, env);
			ptext(&s3, n, 1, env);
		}
		/* x <= 0: g * input_scale * alpha * scale * exp(x * input_scale) */
		acc(s, a0,
		    "(%s <= 0.0f ? %s * %s * %s * %s * expf(%s * %s) : %s * %s)", A[0], G, s2.buf,
		    s1.buf, s3.buf, A[0], s2.buf, G, s3.buf);
		strbuf_release(&s1);
		strbuf_release(&s2);
		strbuf_release(&s3);
		break;
	}
	case OP_HARDSIGMOID:
		acc(s, a0, "((%s > -3.0f && %s < 3.0f) ? %s / 6.0f : 0.0f)",
		    A[0], A[0], G);
		break;
	case OP_HARDSWISH:
		acc(s, a0,
		    "(%s < -3.0f ? 0.0f : (%s <= 3.0f ? %s * (%s / 3.0f + 0.5f) : %s))", A[0],
		    A[0], G, A[0], G);
		break;
	case OP_MISH:
		acc(s, a0, "kb_mish_bwd(%s, %s)", G, A[0]);
		break;
	default:
		handled = false;
		break;
	}
	strbuf_release(&f);
	return handled;
}

/* clamps, minimum, maximum and where: the gradient goes one way or none; false for an op it does not cover */
static bool bwd_select(const struct bwd_step *s)
{
	const struct tnode *n = s->n;
	const struct targ *a0 = &n->args[0], *a1 = &n->args[1], *a2 = &n->args[2];
	const char *G = s->G;
	char **A = s->A;
	const struct texpr_env *env = s->env;
	bool handled = true;

	switch (n->op) {
	case OP_HARDTANH:
	case OP_RELU6: {
		struct strbuf lo = STRBUF_INIT, hi = STRBUF_INIT;

		ptext(&lo, n, 0, env);
		ptext(&hi, n, 1, env);
		acc(s, a0, "((%s <= %s || %s >= %s) ? 0.0f : %s)", A[0],
		    lo.buf, A[0], hi.buf, G);
		strbuf_release(&lo);
		strbuf_release(&hi);
		break;
	}
	case OP_CLAMP: {
		struct strbuf lo = STRBUF_INIT, hi = STRBUF_INIT;

		ptext(&lo, n, 0, env);
		ptext(&hi, n, 1, env);
		if (n->p[2] && n->p[3])
			acc(s, a0, "((%s >= %s && %s <= %s) ? %s : 0.0f)", A[0],
			    lo.buf, A[0], hi.buf, G);
		else if (n->p[2])
			acc(s, a0, "(%s >= %s ? %s : 0.0f)", A[0], lo.buf, G);
		else if (n->p[3])
			acc(s, a0, "(%s <= %s ? %s : 0.0f)", A[0], hi.buf, G);
		else
			acc(s, a0, "%s", G);
		strbuf_release(&lo);
		strbuf_release(&hi);
		break;
	}
	case OP_MINIMUM:
		acc(s, a0, "(%s == %s ? %s * 0.5f : (%s < %s ? %s : 0.0f))",
		    A[0], A[1], G, A[0], A[1], G);
		acc(s, a1, "(%s == %s ? %s * 0.5f : (%s < %s ? %s : 0.0f))",
		    A[0], A[1], G, A[1], A[0], G);
		break;
	case OP_MAXIMUM:
		acc(s, a0, "(%s == %s ? %s * 0.5f : (%s > %s ? %s : 0.0f))",
		    A[0], A[1], G, A[0], A[1], G);
		acc(s, a1, "(%s == %s ? %s * 0.5f : (%s > %s ? %s : 0.0f))",
		    A[0], A[1], G, A[1], A[0], G);
		break;
	case OP_WHERE:
		acc(s, a1, "(%s != 0.0f ? %s : 0.0f)", A[0], G);
		acc(s, a2, "(%s != 0.0f ? 0.0f : %s)", A[0], G);
		break;
	default:
		handled = false;
		break;
	}
	return handled;
}

int texpr_emit_backward(struct strbuf *out, const struct tgraph *g, const bool *want,
			const bool *stop, const bool *ginput, const struct texpr_env *env,
			const char *indent)
{
	for (size_t k = g->nr_nodes; k-- > 0;) {
		const struct tnode *n = &g->nodes[k];
		struct strbuf gv = STRBUF_INIT, v = STRBUF_INIT;
		char *A[TMAX_ARGS];
		struct bwd_step s = { .out = out, .indent = indent, .ginput = ginput, .n = n, .env = env,
				      .A = A };

		if (!want[k] || (stop && stop[k]) || (env->node && env->node[k]))
			continue;
		if (n->op == OP_MAIN)
			return error("template: node '%s' ('%s') is not pointwise", n->name, n->opname);
		if (!input_ok(g, n, env))
			return -1;
		arg_texts(g, n, env, A);
		strbuf_addf(&gv, "g%zu", k);
		local_name(&v, env, (int)k);
		s.G = gv.buf;
		s.V = v.buf;
		/* sign and comparisons have a zero gradient: no step covers them */
		if (n->op == OP_POW)
			bwd_pow(&s);
		else if (!bwd_arith(&s) && !bwd_activation(&s))
			bwd_select(&s);
		free_texts(A);
		strbuf_release(&gv);
		strbuf_release(&v);
	}
	return 0;
}
