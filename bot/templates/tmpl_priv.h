#ifndef KB_TMPL_PRIV_H
#define KB_TMPL_PRIV_H
/*
 * Inside the template generator: the parsed analysis (a small graph), the
 * pointwise expression emitter shared by every family, the text
 * substitution engine and the per-family renderers.
 */
#include "core/common.h"
#include "core/config.h"
#include "core/strbuf.h"
#include "templates/template.h"

#define TMAX_DIMS 8
#define TMAX_ARGS 4
#define TMAX_PARAMS 8
#define TMAX_VALUES 16

enum tdtype { TD_F32, TD_F16, TD_BF16, TD_F64, TD_I64, TD_I32, TD_BOOL, TD_U8, TD_OTHER };
enum tkind { TK_TENSOR, TK_PARAM, TK_BUFFER, TK_SCALAR };
enum tpattern { TP_FULL, TP_ROW, TP_COL, TP_SCALAR };

/* ops: pointwise ones first, then the "main" ops of the other families */
enum top {
	OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_NEG, OP_ABS, OP_EXP, OP_LOG, OP_SQRT, OP_RSQRT,
	OP_POW, OP_RELU, OP_LEAKY_RELU, OP_GELU, OP_SILU, OP_SIGMOID, OP_TANH, OP_SOFTPLUS,
	OP_ELU, OP_SELU, OP_HARDTANH, OP_HARDSIGMOID, OP_HARDSWISH, OP_CLAMP, OP_MINIMUM,
	OP_MAXIMUM, OP_WHERE, OP_SQUARE, OP_RECIPROCAL, OP_LOG1P, OP_EXPM1, OP_SIN, OP_COS,
	OP_ERF, OP_RELU6, OP_MISH, OP_SIGN, OP_GT, OP_LT, OP_GE, OP_LE, OP_EQ, OP_NE,
	OP_IDENTITY,
	OP_SQDIFF, OP_HUBER,    /* internal: mse / huber with reduction "none" */
	OP_NR_POINTWISE,
	OP_MAIN = OP_NR_POINTWISE, /* the family's own node (softmax, linear, ...) */
};

enum targ_kind { TA_NONE, TA_INPUT, TA_NODE, TA_CONST };

struct targ {
	enum targ_kind kind;
	int idx;        /* input or node index */
	double value;   /* TA_CONST */
};

struct tinput {
	char *name;
	int index;              /* ABI position */
	enum tkind kind;
	enum tdtype dtype;
	int ndim;
	int64_t shape[TMAX_DIMS];
	double value;           /* scalars */
	enum tpattern pattern;  /* against the family's element space */
	bool has_pattern;       /* given by the analysis */
};

struct tnode {
	char *name;
	char *opname;           /* as written, for messages */
	enum top op;
	int nargs;
	struct targ args[TMAX_ARGS];
	double p[4];            /* resolved op parameters (see tmpl_expr.c) */
	int pref[4];            /* a parameter taken from a scalar input (attr_refs), -1: p[k] */
	enum tdtype dtype;
	int ndim;
	int64_t shape[TMAX_DIMS];
};

struct tgraph {
	struct tinput *in;
	size_t nr_in;
	struct tnode *nodes;
	size_t nr_nodes;
	struct targ *outs;
	size_t nr_outs;
	bool backward;
};

enum tfamily { TF_POINTWISE, TF_ROWWISE, TF_MATMUL };

enum rkind {
	RK_SOFTMAX, RK_LOG_SOFTMAX, RK_LAYER_NORM, RK_RMS_NORM, RK_SUM, RK_MEAN, RK_MAX,
	RK_MIN, RK_ARGMAX, RK_ARGMIN, RK_NORM_L1, RK_NORM_L2, RK_NORM_FRO, RK_CROSS_ENTROPY,
	RK_MSE, RK_HUBER,
};

enum rreduction { RR_NONE, RR_MEAN, RR_SUM };

struct trow {
	enum rkind kind;
	struct targ input;      /* what the reduction reads (a node or an input) */
	int main;               /* the reduction's node index, -1: none in "nodes" */
	int weight, bias, target, class_weight; /* input indices, -1: none */
	bool all;               /* reduce every element to one value */
	int norm_ndim;          /* layer_norm: trailing dims normalised */
	double eps, delta, label_smoothing;
	bool eps_given;
	int eps_ref, delta_ref, ls_ref, ignore_ref; /* scalar inputs they come from, -1: constant */
	int64_t ignore_index;
	enum rreduction reduction;
	bool *prologue, *epilogue; /* per node */
};

enum mkind { MK_LINEAR, MK_MATMUL, MK_BMM, MK_ADDMM };

struct tmatmul {
	enum mkind kind;
	int a, b, bias;         /* input indices (bias -1: none) */
	bool b_t;               /* b is [N, K] (linear's weight) */
	int main;               /* the product's node index, -1: none */
	double alpha, beta;     /* addmm */
	int alpha_ref, beta_ref; /* scalar inputs they come from, -1: constant */
	bool *epilogue;         /* per node */
	int lt_epilogue;        /* 0 none, 1 relu, 2 gelu (tanh): fused in cuBLASLt */
	bool bias_full;         /* addmm's bias is [M, N] (cuBLASLt's C) */
};

/* template text files */
enum ttext { TT_PRELUDE, TT_EW, TT_POINTWISE, TT_POINTWISE_BWD, TT_ROWWISE, TT_ROWWISE_BWD,
	     TT_MATMUL, TT_NR };

struct kb_template {
	enum tfamily family;
	enum kb_backend backend;
	struct tgraph g;
	struct trow row;
	struct tmatmul mm;
	enum tdtype out_dtype;  /* the family's main floating dtype */
	/* space */
	struct kb_tparam params[TMAX_PARAMS];
	int64_t values[TMAX_PARAMS][TMAX_VALUES];
	struct kb_template_space space;
	/* template text, loaded once: <backend>/<name>.<ext>.in */
	char *text[TT_NR];
};

/* --- template.c: text substitution --- */

struct tvar {
	const char *name;       /* static */
	char *value;            /* owned */
};

struct tvars {
	struct tvar *v;
	size_t nr, alloc;
};

void tvars_init(struct tvars *vs);
void tvars_release(struct tvars *vs);
/* Set name (a static string) to a copy of value. */
void tvars_set(struct tvars *vs, const char *name, const char *value);
void tvars_setf(struct tvars *vs, const char *name, const char *fmt, ...) KB_PRINTF(3, 4);
/* Append text with every {{NAME}} replaced; -1 (logged) on an unknown name. */
int tmpl_subst(struct strbuf *out, const char *text, const struct tvars *vs);

/* the graph's input or node by name (for the family objects' fields); -1: none */
int tmpl_lookup(const struct tgraph *g, const char *name, struct targ *a);
/*
 * The field key of a family object (family names it in messages): 0 when
 * absent or null, 1 with *a when it names an input or node, -1 with why
 * when it names nothing known.
 */
int tmpl_field_ref(const struct tgraph *g, const cJSON *o, const char *key, const char *family,
		   struct targ *a, struct strbuf *why);

/* point value of parameter name; def when the space has no such parameter */
int64_t tmpl_param(const struct kb_template *t, const int64_t *point, const char *name, int64_t def);
/* a row-wise point with its clamped values set to what the render uses */
void row_canonical(const struct kb_template *t, int64_t *point);
/* add a parameter to t's space; the first value is the default */
void tmpl_add_param(struct kb_template *t, const char *name, const int64_t *values, size_t nr);

/* --- tmpl_expr.c: pointwise expressions --- */

/* name -> op; -1 when unknown (aten spellings and in-place "_" accepted) */
int texpr_op_from_name(const char *name);
const char *texpr_op_name(enum top op);
/* number of tensor/const arguments an op takes (min, max) */
void texpr_op_arity(enum top op, int *min, int *max);
/*
 * Resolve op parameters from attrs/args, and which come from scalar inputs
 * (attr_refs: {"attr": "input name"}, may be NULL); KB_ENOTFOUND with why set.
 */
int texpr_resolve(struct tnode *n, const cJSON *attrs, const cJSON *attr_refs,
		  const struct tgraph *g, struct strbuf *why);
/* true when the op has a derivative the backward emitter knows */
bool texpr_has_derivative(enum top op);

/* the op helper functions (kb_gelu, ...), qualified by KB_FN */
void texpr_helpers(struct strbuf *out);
/* a float literal in C++: "(-1.5e+00f)", "INFINITY" */
void texpr_float(struct strbuf *out, double v);

/*
 * How the emitter names things. input[i]: the C++ expression of input i's
 * value at the current element (NULL: not available here). node[k]: when
 * set, node k's value is this expression (not computed from its args).
 * Node k otherwise becomes a local "v<k>" (prefix configurable).
 */
struct texpr_env {
	const char *const *input;
	const char *const *node;
	const char *prefix;     /* local name prefix, default "v" */
};

/*
 * Emit "const float v<k> = ...;" lines for every node in want (per node,
 * already closed under dependencies), in order. -1 when a needed input has
 * no expression (logged).
 */
int texpr_emit(struct strbuf *out, const struct tgraph *g, const bool *want,
	       const struct texpr_env *env, const char *indent);
/* expression text of arg a under env (a node: its local or env name) */
void texpr_arg(struct strbuf *out, const struct tgraph *g, const struct targ *a,
	       const struct texpr_env *env);
/* mark in want every node that node k (or arg a) depends on, k included */
void texpr_need(const struct tgraph *g, bool *want, int k);
void texpr_need_arg(const struct tgraph *g, bool *want, const struct targ *a);

/*
 * Reverse mode over the nodes in want, in reverse order. Before the call
 * the caller declares "float g<k> = ...;" for every node in want (the
 * upstream gradient or 0) and "float gi<i> = 0;" for every input with
 * ginput[i] set. The forward values v<k> must be in scope. Appends
 * accumulations into g<k> / gi<i>. Nodes in stop (may be NULL) pass their
 * gradient on to no argument (the caller handles them).
 */
int texpr_emit_backward(struct strbuf *out, const struct tgraph *g, const bool *want,
			const bool *stop, const bool *ginput, const struct texpr_env *env,
			const char *indent);

/* --- helpers shared by the families --- */

const char *tmpl_ctype(enum tdtype d);        /* "float", "kb_f16", "int64_t", ... */
int tmpl_dtype_size(enum tdtype d);
bool tmpl_is_float(enum tdtype d);
const char *tmpl_dtype_name(enum tdtype d);
/* host-side check of a DLTensor's dtype: "kb_is_f32(&inputs[0])" */
void tmpl_dtype_check(struct strbuf *out, enum tdtype d, const char *tensor);
/* pattern name */
const char *tmpl_pattern_name(enum tpattern p);
/* ABI: one gradient per floating-point tensor input */
bool tmpl_wants_grad(const struct tinput *in);
/*
 * Backward launcher lines, shared by the families. numel is the forward
 * element count expression ("a.n", "a.R * a.C"). Upstream gradient k
 * (inputs[nr_in + k], dtype dt, numel elements) checked and read as a.go<k>.
 */
void tmpl_emit_upstream_grad(struct strbuf *out, enum tdtype dt, size_t nr_in, int k,
			     const char *numel);
/*
 * Gradient output q, for input i (dtype and size of inputs[i]): checked,
 * stored as a.<field>, and zeroed when field is NULL (the chain ignores
 * the input) or numel is 0 (nothing to sum over).
 */
void tmpl_emit_grad_output(struct strbuf *out, const struct tinput *in, size_t i, int q,
			   const char *field, const char *numel);
/* input pointer expression "a.t<i>" etc.: every family names input i "t<i>" */

/* --- families --- */

int tmpl_pointwise_prepare(struct kb_template *t, struct strbuf *why);
int tmpl_pointwise_render(const struct kb_template *t, const int64_t *point, struct strbuf *out);
int tmpl_rowwise_prepare(struct kb_template *t, const cJSON *row, struct strbuf *why);
int tmpl_rowwise_render(const struct kb_template *t, const int64_t *point, struct strbuf *out);
int tmpl_matmul_prepare(struct kb_template *t, const cJSON *mm, struct strbuf *why);
int tmpl_matmul_render(const struct kb_template *t, const int64_t *point, struct strbuf *out);

/* shared by the renderers: prelude + header comment */
int tmpl_render_prelude(const struct kb_template *t, const int64_t *point, struct strbuf *out);

#endif
