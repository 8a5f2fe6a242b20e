#include "core/common.h"
#include "templates/tmpl_priv.h"
#include "templates/tmpl_row.h"
#include "core/strbuf.h"
#include "core/util.h"

#include <float.h>
#include <math.h>

/*
 * Row-wise reductions over the last dimension(s): the element space is
 * [R, C]. Generated hooks the kernels in <backend>/rowwise.<ext>.in call:
 *
 *   kb_x(a, r, c)          the value the reduction reads at (r, c): the
 *                          prologue applied, then the kind's transform
 *                          (|x|, x^2, (x - t)^2, huber(x - t))
 *   kb_xv<V>(a, r, c, v)   V of them from column c (vector loads)
 *   kb_wbv<V>(a, c, w, b)  layer/rms norm weight and bias (1 and 0 when absent)
 *   kb_yv<V>(a, r, c, y)   map kinds: epilogue on y, store at (r, c)
 *   kb_yr(a, r, y)         one value per row: epilogue, store at r
 *   kb_yi(a, r, i)         argmax/argmin: store the column
 *
 * Tensors read per element are t<i> (input index i) with a pattern against
 * [R, C]: full (r * C + c), row (c), col (r), scalar (0).
 */

static const char *const kind_names[] = {
	"softmax", "log_softmax", "layer_norm", "rms_norm", "sum", "mean", "max", "min", "argmax",
	"argmin", "norm_l1", "norm_l2", "norm_fro", "cross_entropy", "mse", "huber",
};

static bool map_kind(enum rkind k)
{
	return k <= RK_RMS_NORM;
}

static int64_t numel_of(const int64_t *shape, int ndim)
{
	int64_t n = 1;

	for (int d = 0; d < ndim; d++)
		n *= shape[d];
	return n;
}

/* t's pattern against space S (sn dims, the last K reduced); -1: none fits */
static int infer_pattern(const struct tinput *in, const int64_t *S, int sn, int K, bool all,
			 enum tpattern *p)
{
	int64_t n = numel_of(in->shape, in->ndim), total = numel_of(S, sn);
	int64_t cn = numel_of(S + sn - K, K);
	int lo = 0, m;

	if (n == total && (in->ndim == sn || in->ndim == 0 || sn == 0)) {
		*p = TP_FULL;
		return 0;
	}
	if (n == total) {
		/* same count, other rank: full unless a dim disagrees */
		*p = TP_FULL;
		return 0;
	}
	if (n == 1) {
		*p = TP_SCALAR;
		return 0;
	}
	if (all)
		return -1;
	while (lo < in->ndim && in->shape[lo] == 1)
		lo++;
	m = in->ndim - lo;
	/* row: its dims are S's trailing K (right-aligned) */
	if (n == cn && m <= K) {
		bool ok = true;

		for (int j = 0; j < m; j++)
			ok &= in->shape[in->ndim - 1 - j] == S[sn - 1 - j];
		if (ok) {
			*p = TP_ROW;
			return 0;
		}
	}
	/* col: trailing K dims are 1, the rest match S's leading dims */
	if (in->ndim >= K && n == total / (cn ? cn : 1)) {
		bool ok = true;

		for (int j = 0; j < K; j++)
			ok &= in->shape[in->ndim - 1 - j] == 1;
		for (int j = K; j < in->ndim && ok; j++) {
			int sd = sn - 1 - j;

			ok &= sd >= 0 ? in->shape[in->ndim - 1 - j] == S[sd] : in->shape[in->ndim - 1 - j] == 1;
		}
		if (ok) {
			*p = TP_COL;
			return 0;
		}
	}
	return -1;
}

static const char *name_list_item(const cJSON *it)
{
	if (cJSON_IsString(it))
		return it->valuestring;
	if (cJSON_IsObject(it)) {
		const cJSON *r = cJSON_GetObjectItemCaseSensitive(it, "ref");

		return cJSON_IsString(r) ? r->valuestring : NULL;
	}
	return NULL;
}

static void mark_list(const struct tgraph *g, const cJSON *arr, bool *set)
{
	const cJSON *it;

	cJSON_ArrayForEach(it, arr) {
		const char *name = name_list_item(it);
		struct targ a;

		if (name && !tmpl_lookup(g, name, &a) && a.kind == TA_NODE)
			set[a.idx] = true;
	}
}

static int input_field(const struct tgraph *g, const cJSON *o, const char *key, int *idx,
		       struct strbuf *why)
{
	const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
	struct targ a;
	int rc = tmpl_field_ref(g, o, key, "rowwise", &a, why);

	*idx = -1;
	if (rc <= 0)
		return rc;
	if (a.kind != TA_INPUT) {
		strbuf_reset(why);
		strbuf_addf(why, "rowwise '%s' ('%s') is computed, not an input: not supported", key,
			    it->valuestring);
		return KB_ENOTFOUND;
	}
	*idx = a.idx;
	return 0;
}

static double attr_num(const cJSON *attrs, const char *key, double def, bool *given)
{
	const cJSON *it = attrs ? cJSON_GetObjectItemCaseSensitive(attrs, key) : NULL;

	if (given)
		*given = cJSON_IsNumber(it);
	return cJSON_IsNumber(it) ? it->valuedouble : def;
}

/* attr_refs[key]: the scalar input an attribute comes from, -1: none */
static int attr_ref(const struct tgraph *g, const cJSON *refs, const char *key)
{
	const cJSON *it = refs ? cJSON_GetObjectItemCaseSensitive(refs, key) : NULL;
	struct targ a;

	if (cJSON_IsString(it) && !tmpl_lookup(g, it->valuestring, &a) && a.kind == TA_INPUT &&
	    g->in[a.idx].kind == TK_SCALAR)
		return a.idx;
	return -1;
}

/* mse/huber with reduction "none" are pointwise: the node becomes one */
static int to_pointwise(struct kb_template *t, struct strbuf *why)
{
	struct trow *rw = &t->row;
	struct tnode *n;

	if (rw->main < 0) {
		strbuf_reset(why);
		strbuf_addf(why, "'%s' with reduction 'none' needs its node in the analysis",
			    kind_names[rw->kind]);
		return KB_ENOTFOUND;
	}
	n = &t->g.nodes[rw->main];
	n->op = rw->kind == RK_MSE ? OP_SQDIFF : OP_HUBER;
	n->nargs = 2;
	n->args[0] = rw->input;
	n->args[1].kind = TA_INPUT;
	n->args[1].idx = rw->target;
	n->p[0] = rw->delta;
	n->pref[0] = rw->delta_ref;
	free(rw->prologue);
	free(rw->epilogue);
	rw->prologue = rw->epilogue = NULL;
	t->family = TF_POINTWISE;
	return tmpl_pointwise_prepare(t, why);
}

/* the reduction's kind from ro's "kind"; *kind is its name for messages */
static int row_parse_kind(struct trow *rw, const cJSON *ro, const char **kind, struct strbuf *why)
{
	*kind = cJSON_IsString(cJSON_GetObjectItemCaseSensitive(ro, "kind")) ?
		cJSON_GetObjectItemCaseSensitive(ro, "kind")->valuestring : "?";
	rw->kind = (enum rkind)-1;
	for (size_t i = 0; i < ARRAY_SIZE(kind_names); i++)
		if (!strcmp(*kind, kind_names[i]))
			rw->kind = (enum rkind)i;
	if ((int)rw->kind < 0) {
		strbuf_reset(why);
		strbuf_addf(why, "row-wise reduction '%s' is not supported by the templates", *kind);
		return KB_ENOTFOUND;
	}
	return 0;
}

/* the reduction's own node: ro's "node", else the first main op, else the first node not listed as a hook */
static int row_find_main(struct tgraph *g, struct trow *rw, const cJSON *ro, const bool *listed,
			 const char *kind, struct strbuf *why)
{
	const cJSON *it = cJSON_GetObjectItemCaseSensitive(ro, "node");

	rw->main = -1;
	if (cJSON_IsString(it)) {
		struct targ a;

		if (tmpl_lookup(g, it->valuestring, &a) || a.kind != TA_NODE) {
			strbuf_reset(why);
			strbuf_addf(why, "analysis: rowwise node '%s' is not a node", it->valuestring);
			return -1;
		}
		rw->main = a.idx;
	}
	for (size_t k = 0; k < g->nr_nodes && rw->main < 0; k++)
		if (g->nodes[k].op == OP_MAIN && !listed[k])
			rw->main = (int)k;
	for (size_t k = 0; k < g->nr_nodes && rw->main < 0; k++)
		if (!listed[k])
			rw->main = (int)k;
	if (rw->main < 0) {
		strbuf_reset(why);
		strbuf_addf(why, "analysis: no node for the '%s' reduction", kind);
		return -1;
	}
	g->nodes[rw->main].op = OP_MAIN;
	return 0;
}

/* what the reduction reads: its input, weight, bias, target (class weights for cross-entropy) */
static int row_find_inputs(const struct tgraph *g, struct trow *rw, const cJSON *ro, struct strbuf *why)
{
	const cJSON *it = cJSON_GetObjectItemCaseSensitive(ro, "input");
	int rc;

	if (cJSON_IsString(it)) {
		if (tmpl_lookup(g, it->valuestring, &rw->input)) {
			strbuf_reset(why);
			strbuf_addf(why, "analysis: rowwise input '%s' is unknown", it->valuestring);
			return -1;
		}
	} else if (g->nodes[rw->main].nargs > 0) {
		rw->input = g->nodes[rw->main].args[0];
	} else {
		strbuf_reset(why);
		strbuf_addstr(why, "analysis: rowwise without an input");
		return -1;
	}
	if (rw->input.kind == TA_NODE && rw->input.idx >= rw->main) {
		strbuf_reset(why);
		strbuf_addstr(why, "analysis: rowwise input comes after the reduction");
		return -1;
	}
	if ((rc = input_field(g, ro, "weight", &rw->weight, why)) ||
	    (rc = input_field(g, ro, "bias", &rw->bias, why)) ||
	    (rc = input_field(g, ro, "target", &rw->target, why)))
		return rc;
	rw->class_weight = -1;
	if (rw->kind == RK_CROSS_ENTROPY) {
		rw->class_weight = rw->weight;
		rw->weight = -1;
	}
	return 0;
}

/* the attributes (constant or read from an input), the reduction mode and whether it covers all elements */
static int row_read_attrs(const struct tgraph *g, struct trow *rw, const cJSON *ro, const cJSON *attrs,
			  const char *kind, struct strbuf *why)
{
	const cJSON *it;

	rw->eps = attr_num(attrs, "eps", rw->kind == RK_RMS_NORM ? FLT_EPSILON : 1e-5, &rw->eps_given);
	rw->delta = attr_num(attrs, "delta", 1.0, NULL);
	rw->label_smoothing = attr_num(attrs, "label_smoothing", 0.0, NULL);
	rw->ignore_index = (int64_t)attr_num(attrs, "ignore_index", -100, NULL);
	it = cJSON_GetObjectItemCaseSensitive(ro, "attr_refs");
	rw->eps_ref = attr_ref(g, it, "eps");
	rw->delta_ref = attr_ref(g, it, "delta");
	rw->ls_ref = attr_ref(g, it, "label_smoothing");
	rw->ignore_ref = attr_ref(g, it, "ignore_index");
	rw->reduction = RR_MEAN;
	it = attrs ? cJSON_GetObjectItemCaseSensitive(attrs, "reduction") : NULL;
	if (cJSON_IsString(it)) {
		if (!strcmp(it->valuestring, "none"))
			rw->reduction = RR_NONE;
		else if (!strcmp(it->valuestring, "sum"))
			rw->reduction = RR_SUM;
		else if (strcmp(it->valuestring, "mean")) {
			strbuf_reset(why);
			strbuf_addf(why, "'%s' with reduction '%s' is not supported", kind, it->valuestring);
			return KB_ENOTFOUND;
		}
	}
	it = cJSON_GetObjectItemCaseSensitive(ro, "rows");
	rw->all = (cJSON_IsString(it) && !strcmp(it->valuestring, "all")) ||
		  cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(ro, "dim"));
	return 0;
}

/* what each kind needs of its target and rows (a loss with reduction 'none' is left to the caller) */
static int row_check_kind(const struct tgraph *g, struct trow *rw, const char *kind, struct strbuf *why)
{
	if (rw->kind == RK_MSE || rw->kind == RK_HUBER) {
		if (rw->target < 0) {
			strbuf_reset(why);
			strbuf_addf(why, "'%s' without a target is not supported", kind);
			return KB_ENOTFOUND;
		}
		rw->all = true;
	}
	if (map_kind(rw->kind) && rw->all) {
		strbuf_reset(why);
		strbuf_addf(why, "'%s' over all elements is not supported", kind);
		return KB_ENOTFOUND;
	}
	if (rw->kind == RK_CROSS_ENTROPY) {
		if (rw->target < 0 || g->in[rw->target].dtype != TD_I64) {
			strbuf_reset(why);
			strbuf_addstr(why, "'cross_entropy' needs int64 class targets (probabilities are not supported)");
			return KB_ENOTFOUND;
		}
		if (rw->class_weight >= 0 && rw->label_smoothing != 0) {
			strbuf_reset(why);
			strbuf_addstr(why, "'cross_entropy' with class weights and label smoothing is not supported");
			return KB_ENOTFOUND;
		}
		rw->all = false;
	}
	return 0;
}

/* the element space: the shape of what the reduction reads */
static void row_space(const struct tgraph *g, const struct trow *rw, const int64_t **S, int *sn)
{
	if (rw->input.kind == TA_NODE) {
		*S = g->nodes[rw->input.idx].shape;
		*sn = g->nodes[rw->input.idx].ndim;
	} else {
		*S = g->in[rw->input.idx].shape;
		*sn = g->in[rw->input.idx].ndim;
	}
}

/* the reduced (trailing) dims into rw->norm_ndim: row_ndim, else normalized_shape, else the weight's */
static int row_reduced_dims(const struct tgraph *g, struct trow *rw, const cJSON *ro, const cJSON *attrs,
			    int sn, const char *kind, struct strbuf *why)
{
	const cJSON *it = cJSON_GetObjectItemCaseSensitive(ro, "row_ndim");
	int K = 1;

	if (cJSON_IsNumber(it) && !rw->all) {
		K = (int)it->valuedouble;
	} else if (rw->kind == RK_LAYER_NORM || rw->kind == RK_RMS_NORM) {
		it = attrs ? cJSON_GetObjectItemCaseSensitive(attrs, "normalized_shape") : NULL;
		if (cJSON_IsArray(it))
			K = cJSON_GetArraySize(it);
		else if (rw->weight >= 0)
			K = g->in[rw->weight].ndim;
	} else if (!rw->all) {
		const cJSON *dim = cJSON_GetObjectItemCaseSensitive(ro, "dim");
		int d = cJSON_IsNumber(dim) ? (int)dim->valuedouble : -1;

		if (cJSON_IsArray(dim) && cJSON_GetArraySize(dim) == 1 &&
		    cJSON_IsNumber(cJSON_GetArrayItem(dim, 0)))
			d = (int)cJSON_GetArrayItem(dim, 0)->valuedouble;
		else if (cJSON_IsArray(dim)) {
			strbuf_reset(why);
			strbuf_addf(why, "'%s' over several dims is not supported", kind);
			return KB_ENOTFOUND;
		}
		if (rw->kind == RK_CROSS_ENTROPY && sn == 2 && d == 1)
			d = -1;
		if (sn > 0 && d != -1 && d != sn - 1) {
			strbuf_reset(why);
			strbuf_addf(why, "'%s' over dim %d of %d dims (not the last) is not supported",
				    kind, d, sn);
			return KB_ENOTFOUND;
		}
	}
	if (K < 1)
		K = 1;
	if (rw->kind == RK_CROSS_ENTROPY && sn != 2) {
		strbuf_reset(why);
		strbuf_addf(why, "'cross_entropy' on %d-d logits (only [N, C]) is not supported", sn);
		return KB_ENOTFOUND;
	}
	if (K > sn)
		K = sn > 0 ? sn : 1;
	rw->norm_ndim = K;
	return 0;
}

/*
 * prologue (pro): what the input needs; epilogue (epi): what the outputs
 * need past the reduction. Both are marked here and checked; rw keeps a copy.
 */
static int row_mark_hooks(struct tgraph *g, struct trow *rw, bool *pro, bool *epi, const char *kind,
			  struct strbuf *why)
{
	texpr_need_arg(g, pro, &rw->input);
	if (g->nr_outs != 1) {
		strbuf_reset(why);
		strbuf_addf(why, "'%s' with %zu outputs is not supported", kind, g->nr_outs);
		return KB_ENOTFOUND;
	}
	texpr_need_arg(g, epi, &g->outs[0]);
	if (g->outs[0].kind != TA_NODE || !epi[rw->main]) {
		strbuf_reset(why);
		strbuf_addf(why, "the output of '%s' does not come from its reduction", kind);
		return KB_ENOTFOUND;
	}
	for (size_t k = 0; k < g->nr_nodes; k++) {
		if (k == (size_t)rw->main)
			continue;
		if ((pro[k] || epi[k]) && g->nodes[k].op == OP_MAIN) {
			strbuf_reset(why);
			strbuf_addf(why, "op '%s' (node '%s') is not supported around a '%s' reduction",
				    g->nodes[k].opname, g->nodes[k].name, kind);
			return KB_ENOTFOUND;
		}
		if (epi[k] && (size_t)rw->main > k && !map_kind(rw->kind)) {
			strbuf_reset(why);
			strbuf_addf(why, "the epilogue of '%s' reads per-element node '%s'", kind,
				    g->nodes[k].name);
			return KB_ENOTFOUND;
		}
	}
	if (!map_kind(rw->kind) && (rw->kind == RK_ARGMAX || rw->kind == RK_ARGMIN) &&
	    g->outs[0].idx != rw->main) {
		strbuf_reset(why);
		strbuf_addf(why, "an epilogue after '%s' is not supported", kind);
		return KB_ENOTFOUND;
	}
	memcpy(rw->prologue, pro, g->nr_nodes * sizeof(bool));
	memcpy(rw->epilogue, epi, g->nr_nodes * sizeof(bool));
	rw->epilogue[rw->main] = false;
	return 0;
}

/* the pattern of input in, which the prologue (used_pro) or the epilogue (used_epi) reads */
static int row_input_pattern(const struct trow *rw, const struct tinput *in, bool used_pro, bool used_epi,
			     const int64_t *S, int sn, const char *kind, struct strbuf *why)
{
	const int K = rw->norm_ndim;
	enum tpattern p;

	if (in->dtype == TD_F64 || in->dtype == TD_OTHER) {
		strbuf_reset(why);
		strbuf_addf(why, "input '%s' has dtype '%s', which the templates do not cover",
			    in->name, tmpl_dtype_name(in->dtype));
		return KB_ENOTFOUND;
	}
	if (used_pro || map_kind(rw->kind)) {
		if (infer_pattern(in, S, sn, K, rw->all, &p)) {
			strbuf_reset(why);
			strbuf_addf(why, "input '%s' broadcasts against the rows of '%s' in a way the templates do not cover",
				    in->name, kind);
			return KB_ENOTFOUND;
		}
	} else {
		int64_t n = numel_of(in->shape, in->ndim);
		int64_t rows = rw->all || (rw->kind == RK_CROSS_ENTROPY && rw->reduction != RR_NONE) ?
			       1 : numel_of(S, sn - K);

		if (n == rows)
			p = TP_FULL;
		else if (n == 1)
			p = TP_SCALAR;
		else {
			strbuf_reset(why);
			strbuf_addf(why, "input '%s' after '%s' does not match its output", in->name, kind);
			return KB_ENOTFOUND;
		}
	}
	if (used_pro && used_epi && !map_kind(rw->kind) && p != TP_SCALAR) {
		strbuf_reset(why);
		strbuf_addf(why, "input '%s' is read both before and after '%s'", in->name, kind);
		return KB_ENOTFOUND;
	}
	if (rw->all && p != TP_FULL && p != TP_SCALAR && used_pro) {
		strbuf_reset(why);
		strbuf_addf(why, "input '%s' broadcasts inside a full reduction", in->name);
		return KB_ENOTFOUND;
	}
	return (int)p;
}

/* every tensor the hooks read gets a pattern; weight, bias and class weights must be float32/16 */
static int row_input_patterns(struct tgraph *g, const struct trow *rw, const bool *pro, const bool *epi,
			      const char *kind, struct strbuf *why)
{
	const int64_t *S;
	int sn;

	row_space(g, rw, &S, &sn);
	for (size_t i = 0; i < g->nr_in; i++) {
		struct tinput *in = &g->in[i];
		bool used_pro = false, used_epi = false;
		int p;

		if (in->kind == TK_SCALAR)
			continue;
		for (size_t k = 0; k < g->nr_nodes; k++)
			for (int j = 0; j < g->nodes[k].nargs && k != (size_t)rw->main; j++)
				if (g->nodes[k].args[j].kind == TA_INPUT && g->nodes[k].args[j].idx == (int)i) {
					used_pro |= pro[k] && k < (size_t)rw->main;
					used_epi |= epi[k];
				}
		if (rw->input.kind == TA_INPUT && rw->input.idx == (int)i)
			used_pro = true;
		if ((rw->kind == RK_MSE || rw->kind == RK_HUBER) && rw->target == (int)i)
			used_pro = true;
		if (g->outs[0].kind == TA_INPUT && g->outs[0].idx == (int)i)
			used_epi = true;
		if (!used_pro && !used_epi)
			continue;
		p = row_input_pattern(rw, in, used_pro, used_epi, S, sn, kind, why);
		if (p < 0)
			return p;
		in->pattern = (enum tpattern)p;
	}
	for (int k = 0; k < 4; k++) {
		int i = k == 0 ? rw->weight : k == 1 ? rw->bias : k == 2 ? rw->class_weight : -1;

		if (i >= 0 && !tmpl_is_float(g->in[i].dtype)) {
			strbuf_reset(why);
			strbuf_addf(why, "input '%s' of '%s' is not floating point", g->in[i].name, kind);
			return KB_ENOTFOUND;
		}
		if (i >= 0 && g->in[i].dtype == TD_F64) {
			strbuf_reset(why);
			strbuf_addf(why, "input '%s' has dtype 'float64', which the templates do not cover",
				    g->in[i].name);
			return KB_ENOTFOUND;
		}
	}
	return 0;
}

/* the output dtype, the backward and the row space */
static int row_check_output(struct kb_template *t, const bool *pro, const bool *epi, const char *kind,
			    struct strbuf *why)
{
	const struct tgraph *g = &t->g;
	const struct trow *rw = &t->row;

	t->out_dtype = g->nodes[g->outs[0].idx].dtype;
	if (rw->kind == RK_ARGMAX || rw->kind == RK_ARGMIN)
		t->out_dtype = TD_I64;
	else if (t->out_dtype == TD_OTHER)
		t->out_dtype = TD_F32;
	if (rw->kind != RK_ARGMAX && rw->kind != RK_ARGMIN &&
	    (!tmpl_is_float(t->out_dtype) || t->out_dtype == TD_F64)) {
		strbuf_reset(why);
		strbuf_addf(why, "'%s' with output dtype '%s' is not supported", kind,
			    tmpl_dtype_name(t->out_dtype));
		return KB_ENOTFOUND;
	}
	if (g->backward && !map_kind(rw->kind)) {
		strbuf_reset(why);
		strbuf_addf(why, "the backward of '%s' is not supported (softmax, log_softmax, layer_norm, rms_norm are)",
			    kind);
		return KB_ENOTFOUND;
	}
	if (g->backward && row_bwd_check(t, pro, epi, why))
		return KB_ENOTFOUND;
	if (row_space_input(t) < 0) {
		strbuf_reset(why);
		strbuf_addf(why, "'%s' reads no tensor of its full row space (a broadcast input only)", kind);
		return KB_ENOTFOUND;
	}
	return 0;
}

/* the tuning space, defaults first */
static void row_add_params(struct kb_template *t)
{
	if (t->backend == KB_BACKEND_CUDA) {
		/*
		 * The first values are the defaults, the tuner's first point:
		 * the best measured on the H200 (bench-templates, micro
		 * benchmarks). A map kind keeps its row in registers with
		 * threads_per_row 0, "auto": picked at launch from the row
		 * length, 5-8 vectors per thread (the fixed values are for
		 * the tuner to try, and for rows auto does not cover); a
		 * reduction streams its row, two warps per row, 8 vectors in
		 * flight per thread.
		 */
		static const int64_t tpr_map[] = { 0, 128, 32, 8, 16, 64, 256, 512, 1024 };
		static const int64_t tpb_map[] = { 128, 256, 512, 1024 };
		static const int64_t ept_map[] = { 2, 4, 1, 8 };
		static const int64_t tpr_red[] = { 64, 32, 8, 16, 128, 256, 512, 1024 };
		static const int64_t tpb_red[] = { 256, 128, 512, 1024 };
		static const int64_t ept_red[] = { 8, 4, 2, 1 };
		static const int64_t vec[] = { 4, 1 };
		static const int64_t split[] = { 1, 0 };
		const bool map = map_kind(t->row.kind);

		if (map)
			tmpl_add_param(t, "threads_per_row", tpr_map, ARRAY_SIZE(tpr_map));
		else
			tmpl_add_param(t, "threads_per_row", tpr_red, ARRAY_SIZE(tpr_red));
		tmpl_add_param(t, "threads", map ? tpb_map : tpb_red, ARRAY_SIZE(tpb_map));
		tmpl_add_param(t, "ept", map ? ept_map : ept_red, ARRAY_SIZE(ept_map));
		tmpl_add_param(t, "vec", vec, ARRAY_SIZE(vec));
		tmpl_add_param(t, "split", split, ARRAY_SIZE(split));
	} else {
		static const int64_t rows[] = { 4, 1, 16, 64 };
		static const int64_t simd[] = { 1, 0 };

		tmpl_add_param(t, "rows_per_task", rows, ARRAY_SIZE(rows));
		tmpl_add_param(t, "simd", simd, ARRAY_SIZE(simd));
	}
}

int tmpl_rowwise_prepare(struct kb_template *t, const cJSON *ro, struct strbuf *why)
{
	struct tgraph *g = &t->g;
	struct trow *rw = &t->row;
	const cJSON *attrs;
	const char *kind;
	bool *pro = NULL, *epi = NULL, *listed = NULL;
	int sn, rc;
	const int64_t *S;

	if (!cJSON_IsObject(ro)) {
		strbuf_reset(why);
		strbuf_addstr(why, "analysis: family 'rowwise' without a 'rowwise' object");
		return -1;
	}
	if ((rc = row_parse_kind(rw, ro, &kind, why)))
		return rc;
	attrs = cJSON_GetObjectItemCaseSensitive(ro, "attrs");
	rw->prologue = xcalloc(g->nr_nodes + 1, sizeof(bool));
	rw->epilogue = xcalloc(g->nr_nodes + 1, sizeof(bool));
	listed = xcalloc(g->nr_nodes + 1, sizeof(bool));
	mark_list(g, cJSON_GetObjectItemCaseSensitive(ro, "prologue"), listed);
	mark_list(g, cJSON_GetObjectItemCaseSensitive(ro, "epilogue"), listed);

	if ((rc = row_find_main(g, rw, ro, listed, kind, why)) ||
	    (rc = row_find_inputs(g, rw, ro, why)) ||
	    (rc = row_read_attrs(g, rw, ro, attrs, kind, why)))
		goto out;
	/* a loss per element is a pointwise chain */
	if ((rw->kind == RK_MSE || rw->kind == RK_HUBER) && rw->target >= 0 && rw->reduction == RR_NONE) {
		rc = to_pointwise(t, why);
		goto out;
	}
	if ((rc = row_check_kind(g, rw, kind, why)))
		goto out;
	row_space(g, rw, &S, &sn);
	if ((rc = row_reduced_dims(g, rw, ro, attrs, sn, kind, why)))
		goto out;
	pro = xcalloc(g->nr_nodes + 1, sizeof(bool));
	epi = xcalloc(g->nr_nodes + 1, sizeof(bool));
	if ((rc = row_mark_hooks(g, rw, pro, epi, kind, why)) ||
	    (rc = row_input_patterns(g, rw, pro, epi, kind, why)) ||
	    (rc = row_check_output(t, pro, epi, kind, why)))
		goto out;
	row_add_params(t);
out:
	free(pro);
	free(epi);
	free(listed);
	return rc;
}

/* --- rendering --- */

const char *row_kind_name(enum rkind k)
{
	return kind_names[k];
}

/* inputs read by the node set want (not the main node's own arguments) */
static void inputs_of(const struct kb_template *t, const bool *want, bool *used)
{
	const struct tgraph *g = &t->g;

	for (size_t k = 0; k < g->nr_nodes; k++) {
		if (!want[k] || (int)k == t->row.main)
			continue;
		for (int j = 0; j < g->nodes[k].nargs; j++)
			if (g->nodes[k].args[j].kind == TA_INPUT)
				used[g->nodes[k].args[j].idx] = true;
	}
}

/* the tensors kb_x reads */
void row_x_inputs(const struct kb_template *t, bool *used)
{
	const struct trow *rw = &t->row;

	inputs_of(t, rw->prologue, used);
	if (rw->input.kind == TA_INPUT)
		used[rw->input.idx] = true;
	if (rw->kind == RK_MSE || rw->kind == RK_HUBER)
		used[rw->target] = true;
}

/* the tensors the epilogue reads (map kinds: prologue nodes it needs included) */
void row_y_inputs(const struct kb_template *t, bool *used)
{
	const struct tgraph *g = &t->g;

	inputs_of(t, t->row.epilogue, used);
	if (g->outs[0].kind == TA_INPUT)
		used[g->outs[0].idx] = true;
}

/* "x3 = kb_ld(...)" style loads of the inputs in used, for one element or V of them */
void row_emit_loads(const struct kb_template *t, const bool *used, bool vec, bool per_row,
		    struct strbuf *out)
{
	const struct tgraph *g = &t->g;

	for (size_t i = 0; i < g->nr_in; i++) {
		const struct tinput *in = &g->in[i];
		const char *idx;

		if (!used[i] || in->kind == TK_SCALAR)
			continue;
		if (per_row)
			idx = in->pattern == TP_SCALAR ? NULL : "r";
		else
			idx = in->pattern == TP_FULL ? "i" : in->pattern == TP_ROW ? "c" :
			      in->pattern == TP_COL ? "r" : NULL;
		if (vec && (in->pattern == TP_FULL || in->pattern == TP_ROW) && !per_row)
			strbuf_addf(out, "\tfloat x%zu[V];\n\tkb_ldn<V>(a.t%zu + %s, x%zu);\n", i, i, idx, i);
		else if (idx)
			strbuf_addf(out, "\tconst float x%zu = kb_ld(a.t%zu + %s);\n", i, i, idx);
		else
			strbuf_addf(out, "\tconst float x%zu = kb_ld(a.t%zu);\n", i, i);
	}
}

/* expressions of the inputs for texpr: x<i>[k] (vector) or x<i>; a.s<i> */
char **row_input_exprs(const struct kb_template *t, const bool *used, bool vec, bool per_row)
{
	const struct tgraph *g = &t->g;
	char **v = xcalloc(g->nr_in + 1, sizeof(*v));

	for (size_t i = 0; i < g->nr_in; i++) {
		const struct tinput *in = &g->in[i];
		struct strbuf sb = STRBUF_INIT;

		if (in->kind == TK_SCALAR)
			strbuf_addf(&sb, "a.s%zu", i);
		else if (!used[i])
			continue;
		else if (vec && !per_row && (in->pattern == TP_FULL || in->pattern == TP_ROW))
			strbuf_addf(&sb, "x%zu[k]", i);
		else
			strbuf_addf(&sb, "x%zu", i);
		v[i] = strbuf_detach(&sb, NULL);
	}
	return v;
}

void row_free_exprs(const struct kb_template *t, char **v)
{
	for (size_t i = 0; i < t->g.nr_in; i++)
		free(v[i]);
	free(v);
}

/* the value kb_x returns, from p (the reduction's input value) */
static void emit_transform(const struct kb_template *t, const char *p, const char *tgt,
			   struct strbuf *out)
{
	const struct trow *rw = &t->row;

	switch (rw->kind) {
	case RK_NORM_L1:
		strbuf_addf(out, "fabsf(%s)", p);
		break;
	case RK_NORM_L2:
	case RK_NORM_FRO:
		strbuf_addf(out, "(%s * %s)", p, p);
		break;
	case RK_MSE:
		strbuf_addf(out, "((%s - %s) * (%s - %s))", p, tgt, p, tgt);
		break;
	case RK_HUBER:
		strbuf_addf(out, "kb_huber(%s - %s, a.delta)", p, tgt);
		break;
	default:
		strbuf_addstr(out, p);
		break;
	}
}

/* kb_x and kb_xv */
static int emit_x(const struct kb_template *t, struct strbuf *out)
{
	const struct tgraph *g = &t->g;
	const struct trow *rw = &t->row;
	bool *used = xcalloc(g->nr_in + 1, sizeof(bool));
	struct texpr_env env = { .prefix = "n" };
	struct strbuf p = STRBUF_INIT, tg = STRBUF_INIT;
	int rc = -1;

	row_x_inputs(t, used);
	for (int vec = 0; vec < 2; vec++) {
		char **ex = row_input_exprs(t, used, vec, false);
		const char *ind = vec ? "\t\t" : "\t";

		env.input = (const char *const *)ex;
		if (vec)
			strbuf_addstr(out, "template <int V>\nKB_FN void kb_xv(const kb_args &a, int64_t r, int64_t c, float *v)\n{\n");
		else
			strbuf_addstr(out, "KB_FN float kb_x(const kb_args &a, int64_t r, int64_t c)\n{\n");
		strbuf_addstr(out, "\tconst int64_t i = r * a.C + c;\n");
		row_emit_loads(t, used, vec, false, out);
		if (vec)
			strbuf_addstr(out, "\tKB_UNROLL\n\tfor (int k = 0; k < V; k++) {\n");
		if (texpr_emit(out, g, rw->prologue, &env, ind)) {
			row_free_exprs(t, ex);
			goto out;
		}
		strbuf_reset(&p);
		strbuf_reset(&tg);
		texpr_arg(&p, g, &rw->input, &env);
		if (rw->target >= 0 && ex[rw->target])
			strbuf_addstr(&tg, ex[rw->target]);
		if (!vec)
			strbuf_addstr(out, "\t(void)a;\n\t(void)r;\n\t(void)c;\n\t(void)i;\n");
		strbuf_addf(out, "%s%s", ind, vec ? "v[k] = " : "return ");
		emit_transform(t, p.buf, tg.buf, out);
		strbuf_addstr(out, ";\n");
		if (vec)
			strbuf_addstr(out, "\t}\n\t(void)a;\n\t(void)r;\n\t(void)c;\n\t(void)i;\n");
		strbuf_addstr(out, "}\n\n");
		row_free_exprs(t, ex);
	}
	rc = 0;
out:
	free(used);
	strbuf_release(&p);
	strbuf_release(&tg);
	return rc;
}

/* kb_yv (map kinds), kb_yr / kb_yi (one value per row) */
static int emit_y(const struct kb_template *t, struct strbuf *out)
{
	const struct tgraph *g = &t->g;
	const struct trow *rw = &t->row;
	bool *used = xcalloc(g->nr_in + 1, sizeof(bool));
	char **node = xcalloc(g->nr_nodes + 1, sizeof(char *));
	struct texpr_env env = { .prefix = "n" };
	int rc = -1;

	row_y_inputs(t, used);
	env.node = (const char *const *)node;
	if (rw->kind == RK_ARGMAX || rw->kind == RK_ARGMIN) {
		strbuf_addstr(out, "KB_FN void kb_yi(const kb_args &a, int64_t r, int64_t idx)\n{\n\ta.o0[r] = idx;\n}\n\n");
		rc = 0;
		goto out;
	}
	if (map_kind(rw->kind)) {
		char **ex = row_input_exprs(t, used, true, false);

		node[rw->main] = xstrdup("y[k]");
		env.input = (const char *const *)ex;
		strbuf_addstr(out, "template <int V>\nKB_FN void kb_yv(const kb_args &a, int64_t r, int64_t c, const float *y)\n{\n");
		strbuf_addstr(out, "\tconst int64_t i = r * a.C + c;\n\tfloat o[V];\n");
		row_emit_loads(t, used, true, false, out);
		strbuf_addstr(out, "\tKB_UNROLL\n\tfor (int k = 0; k < V; k++) {\n");
		rc = texpr_emit(out, g, rw->epilogue, &env, "\t\t");
		if (!rc) {
			strbuf_addstr(out, "\t\to[k] = ");
			texpr_arg(out, g, &g->outs[0], &env);
			strbuf_addstr(out, ";\n\t}\n\tkb_stn<V>(a.o0 + i, o);\n\t(void)i;\n}\n\n");
		}
		row_free_exprs(t, ex);
		/* the norm's weight and bias */
		strbuf_addstr(out, "template <int V>\nKB_FN void kb_wbv(const kb_args &a, int64_t c, float *w, float *b)\n{\n");
		if (rw->weight >= 0)
			strbuf_addstr(out, "\tkb_ldn<V>(a.w + c, w);\n");
		else
			strbuf_addstr(out, "\tfor (int k = 0; k < V; k++)\n\t\tw[k] = 1.0f;\n");
		if (rw->bias >= 0)
			strbuf_addstr(out, "\tkb_ldn<V>(a.b + c, b);\n");
		else
			strbuf_addstr(out, "\tfor (int k = 0; k < V; k++)\n\t\tb[k] = 0.0f;\n");
		strbuf_addstr(out, "\t(void)a;\n\t(void)c;\n}\n\n");
	} else {
		char **ex = row_input_exprs(t, used, false, true);

		node[rw->main] = xstrdup("y");
		env.input = (const char *const *)ex;
		strbuf_addstr(out, "KB_FN void kb_yr(const kb_args &a, int64_t r, float y)\n{\n");
		row_emit_loads(t, used, false, true, out);
		rc = texpr_emit(out, g, rw->epilogue, &env, "\t");
		if (!rc) {
			strbuf_addstr(out, "\tkb_st(a.o0 + r, ");
			texpr_arg(out, g, &g->outs[0], &env);
			strbuf_addstr(out, ");\n}\n\n");
		}
		row_free_exprs(t, ex);
	}
out:
	for (size_t k = 0; k < g->nr_nodes; k++)
		free(node[k]);
	free(node);
	free(used);
	return rc;
}

static void emit_struct(const struct kb_template *t, struct strbuf *out)
{
	const struct tgraph *g = &t->g;
	const struct trow *rw = &t->row;
	bool *used = xcalloc(g->nr_in + 1, sizeof(bool));

	row_x_inputs(t, used);
	row_y_inputs(t, used);
	strbuf_addstr(out, "struct kb_args {\n");
	for (size_t i = 0; i < g->nr_in; i++) {
		if (g->in[i].kind == TK_SCALAR)
			strbuf_addf(out, "\tfloat s%zu; /* %s */\n", i, g->in[i].name);
		else if (used[i])
			strbuf_addf(out, "\tconst %s *t%zu; /* %s, %s */\n", tmpl_ctype(g->in[i].dtype), i,
				    g->in[i].name, tmpl_pattern_name(g->in[i].pattern));
	}
	strbuf_addf(out, "\t%s *o0;\n", tmpl_ctype(t->out_dtype));
	if (rw->weight >= 0)
		strbuf_addf(out, "\tconst %s *w;\n", tmpl_ctype(g->in[rw->weight].dtype));
	if (rw->bias >= 0)
		strbuf_addf(out, "\tconst %s *b;\n", tmpl_ctype(g->in[rw->bias].dtype));
	if (rw->kind == RK_CROSS_ENTROPY)
		strbuf_addstr(out, "\tconst int64_t *tgt;\n");
	if (rw->class_weight >= 0)
		strbuf_addf(out, "\tconst %s *cw;\n", tmpl_ctype(g->in[rw->class_weight].dtype));
	if (t->g.backward)
		row_bwd_fields(t, out);
	strbuf_addstr(out, "\tint64_t R, C, ignore;\n\tfloat eps, ls, delta;\n};\n\n");
	free(used);
}

/* the widest tensor streamed along the row sets the vector width */
static int row_vec(const struct kb_template *t)
{
	const struct tgraph *g = &t->g;
	const struct trow *rw = &t->row;
	bool *used = xcalloc(g->nr_in + 1, sizeof(bool));
	int maxsize = 1;

	row_x_inputs(t, used);
	if (map_kind(rw->kind))
		row_y_inputs(t, used);
	for (size_t i = 0; i < g->nr_in; i++)
		if (used[i] && g->in[i].kind != TK_SCALAR &&
		    (g->in[i].pattern == TP_FULL || g->in[i].pattern == TP_ROW) &&
		    tmpl_dtype_size(g->in[i].dtype) > maxsize)
			maxsize = tmpl_dtype_size(g->in[i].dtype);
	if (map_kind(rw->kind) && tmpl_dtype_size(t->out_dtype) > maxsize)
		maxsize = tmpl_dtype_size(t->out_dtype);
	free(used);
	return 16 / maxsize;
}

/* the first full tensor kb_x reads: it defines R and C */
int row_space_input(const struct kb_template *t)
{
	const struct tgraph *g = &t->g;
	bool *used = xcalloc(g->nr_in + 1, sizeof(bool));
	int space = -1;

	row_x_inputs(t, used);
	if (t->row.input.kind == TA_INPUT && g->in[t->row.input.idx].pattern == TP_FULL)
		space = t->row.input.idx;
	for (size_t i = 0; i < g->nr_in && space < 0; i++)
		if (used[i] && g->in[i].kind != TK_SCALAR && g->in[i].pattern == TP_FULL)
			space = (int)i;
	free(used);
	return space;
}

/* host code: R, C, pointers, checks, vec_ok */
int row_emit_setup(const struct kb_template *t, struct strbuf *out, bool backward)
{
	const struct tgraph *g = &t->g;
	const struct trow *rw = &t->row;
	bool *used = xcalloc(g->nr_in + 1, sizeof(bool));
	bool *xin = xcalloc(g->nr_in + 1, sizeof(bool));
	struct strbuf chk = STRBUF_INIT, tn = STRBUF_INIT;
	int space = row_space_input(t);
	bool one_out = rw->all || (rw->kind == RK_CROSS_ENTROPY && rw->reduction != RR_NONE);

	if (space < 0) {
		free(used);
		free(xin);
		return error("template: '%s' reads no full tensor", kind_names[rw->kind]);
	}
	row_x_inputs(t, xin);
	row_x_inputs(t, used);
	row_y_inputs(t, used);
	strbuf_addf(out, "\tconst DLTensor *xs = &inputs[%d];\n", space);
	tmpl_dtype_check(&chk, g->in[space].dtype, "xs");
	strbuf_addf(out, "\tif (!%s)\n\t\treturn 2;\n", chk.buf);
	if (rw->all) {
		strbuf_addstr(out, "\ta.R = 1;\n\ta.C = kb_numel(xs);\n");
	} else {
		strbuf_addf(out, "\tif (xs->ndim < %d)\n\t\treturn 2;\n", rw->norm_ndim);
		strbuf_addf(out, "\ta.R = 1;\n\ta.C = 1;\n\tfor (int d = 0; d < xs->ndim; d++) {\n"
			    "\t\tif (d < xs->ndim - %d)\n\t\t\ta.R *= xs->shape[d];\n\t\telse\n\t\t\ta.C *= xs->shape[d];\n\t}\n",
			    rw->norm_ndim);
	}
	for (size_t i = 0; i < g->nr_in; i++) {
		const struct tinput *in = &g->in[i];
		const char *want;

		if (in->kind == TK_SCALAR) {
			strbuf_addf(out, "\tif (!kb_is_scalar(&inputs[%zu]))\n\t\treturn 2;\n", i);
			strbuf_addf(out, "\ta.s%zu = (float)kb_scalar_f64(&inputs[%zu]);\n", i, i);
			continue;
		}
		if (!used[i])
			continue;
		strbuf_reset(&tn);
		strbuf_addf(&tn, "&inputs[%zu]", i);
		strbuf_reset(&chk);
		tmpl_dtype_check(&chk, in->dtype, tn.buf);
		if (!xin[i] && !map_kind(rw->kind))
			want = in->pattern == TP_SCALAR ? "1" : one_out ? "1" : "a.R";
		else
			want = in->pattern == TP_FULL ? "a.R * a.C" : in->pattern == TP_ROW ? "a.C" :
			       in->pattern == TP_COL ? "a.R" : "1";
		strbuf_addf(out, "\tif (!%s || kb_numel(%s) != %s)\n\t\treturn 2;\n", chk.buf, tn.buf, want);
		strbuf_addf(out, "\ta.t%zu = (const %s *)kb_data(%s);\n", i, tmpl_ctype(in->dtype), tn.buf);
		if ((xin[i] || map_kind(rw->kind)) && (in->pattern == TP_FULL || in->pattern == TP_ROW))
			strbuf_addf(out, "\tvec_ok &= kb_aligned(a.t%zu, KB_VALIGN(KB_V, *a.t%zu));\n", i, i);
	}
	for (int k = 0; k < 3; k++) {
		int i = k == 0 ? rw->weight : k == 1 ? rw->bias : rw->class_weight;
		const char *f = k == 0 ? "w" : k == 1 ? "b" : "cw";

		if (i < 0)
			continue;
		strbuf_reset(&tn);
		strbuf_addf(&tn, "&inputs[%d]", i);
		strbuf_reset(&chk);
		tmpl_dtype_check(&chk, g->in[i].dtype, tn.buf);
		strbuf_addf(out, "\tif (!%s || kb_numel(%s) != a.C)\n\t\treturn 2;\n", chk.buf, tn.buf);
		strbuf_addf(out, "\ta.%s = (const %s *)kb_data(%s);\n", f, tmpl_ctype(g->in[i].dtype), tn.buf);
		if (k < 2)
			strbuf_addf(out, "\tvec_ok &= kb_aligned(a.%s, KB_VALIGN(KB_V, *a.%s));\n", f, f);
	}
	if (rw->kind == RK_CROSS_ENTROPY) {
		strbuf_addf(out, "\tif (!kb_is(&inputs[%d], kDLInt, 64) || kb_numel(&inputs[%d]) != a.R)\n\t\treturn 2;\n",
			    rw->target, rw->target);
		strbuf_addf(out, "\ta.tgt = (const int64_t *)kb_data(&inputs[%d]);\n", rw->target);
	}
	if (!backward) {
		strbuf_reset(&chk);
		tmpl_dtype_check(&chk, t->out_dtype, "&outputs[0]");
		strbuf_addf(out, "\tif (!%s || kb_numel(&outputs[0]) != %s)\n\t\treturn 2;\n", chk.buf,
			    map_kind(rw->kind) ? "a.R * a.C" : one_out ? "1" : "a.R");
		strbuf_addf(out, "\ta.o0 = (%s *)kb_data(&outputs[0]);\n", tmpl_ctype(t->out_dtype));
		if (map_kind(rw->kind))
			strbuf_addstr(out, "\tvec_ok &= kb_aligned(a.o0, KB_VALIGN(KB_V, *a.o0));\n");
	}
	/* attributes: constants, or the scalar inputs they come from (they may change per call) */
	{
		const char *names[3] = { "eps", "ls", "delta" };
		const double vals[3] = { rw->eps, rw->label_smoothing, rw->delta };
		const int refs[3] = { rw->eps_ref, rw->ls_ref, rw->delta_ref };

		for (int k = 0; k < 3; k++) {
			strbuf_addf(out, "\ta.%s = ", names[k]);
			if (refs[k] >= 0)
				strbuf_addf(out, "(float)kb_scalar_f64(&inputs[%d]);\n", refs[k]);
			else {
				strbuf_addstr(out, "(float)");
				texpr_float(out, vals[k]);
				strbuf_addstr(out, ";\n");
			}
		}
		if (rw->ignore_ref >= 0)
			strbuf_addf(out, "\ta.ignore = kb_scalar_i64(&inputs[%d]);\n", rw->ignore_ref);
		else
			strbuf_addf(out, "\ta.ignore = %lld;\n", (long long)rw->ignore_index);
	}
	strbuf_release(&chk);
	strbuf_release(&tn);
	free(used);
	free(xin);
	return 0;
}

void row_canonical(const struct kb_template *t, int64_t *point)
{
	const struct kb_template_space *sp = &t->space;
	int64_t tpb = tmpl_param(t, point, "threads", 256);

	for (size_t i = 0; i < sp->nr; i++)
		if (!strcmp(sp->params[i].name, "threads_per_row") && point[i] > tpb)
			point[i] = tpb; /* a row never spans blocks (row_emit_params) */
}

void row_emit_params(const struct kb_template *t, const int64_t *point, struct strbuf *out)
{
	const struct trow *rw = &t->row;

	strbuf_addf(out, "#define KB_KIND %d\n", (int)rw->kind);
	if (t->backend == KB_BACKEND_CUDA) {
		int64_t tpb = tmpl_param(t, point, "threads", 256);
		int64_t tpr = tmpl_param(t, point, "threads_per_row", 32);

		/* a row never spans blocks; auto (0): the fixed mapping it
		 * falls back to is a row per block */
		if (tpr > tpb || tpr == 0)
			tpr = tpb;
		strbuf_addf(out, "#define KB_TPR_AUTO %d\n",
			    tmpl_param(t, point, "threads_per_row", 32) == 0);
		strbuf_addf(out, "#define KB_TPB %lld\n#define KB_TPR %lld\n#define KB_EPT %lld\n#define KB_VEC_ON %d\n#define KB_SPLIT %d\n",
			    (long long)tpb, (long long)tpr, (long long)tmpl_param(t, point, "ept", 4),
			    tmpl_param(t, point, "vec", 4) > 1 ? 1 : 0,
			    (int)tmpl_param(t, point, "split", 1));
	} else {
		strbuf_addf(out, "#define KB_ROWS_PER_TASK %lld\n#define KB_SIMD %d\n",
			    (long long)tmpl_param(t, point, "rows_per_task", 4),
			    (int)tmpl_param(t, point, "simd", 1));
	}
	strbuf_addf(out, "#define KB_V %d\n#define KB_HAS_W %d\n#define KB_HAS_B %d\n#define KB_CE_W %d\n"
		    "#define KB_CE_LS %d\n#define KB_RED %d\n#define KB_ALL %d\n\n",
		    row_vec(t), rw->weight >= 0, rw->bias >= 0, rw->class_weight >= 0,
		    rw->label_smoothing != 0, rw->kind == RK_CROSS_ENTROPY || rw->kind == RK_MSE ||
		    rw->kind == RK_HUBER ? (int)rw->reduction : 0, rw->all);
}

int row_emit_hooks(const struct kb_template *t, struct strbuf *out)
{
	emit_struct(t, out);
	if (emit_x(t, out) || emit_y(t, out))
		return -1;
	return 0;
}

int tmpl_rowwise_render(const struct kb_template *t, const int64_t *point, struct strbuf *out)
{
	struct tvars vs;
	struct strbuf setup = STRBUF_INIT;
	int rc = -1;

	tvars_init(&vs);
	if (tmpl_render_prelude(t, point, out))
		goto out;
	row_emit_params(t, point, out);
	if (row_emit_hooks(t, out) || row_emit_setup(t, &setup, false))
		goto out;
	tvars_setf(&vs, "NIN", "%zu", t->g.nr_in);
	tvars_set(&vs, "NOUT", "1");
	tvars_set(&vs, "SETUP", setup.buf);
	if (tmpl_subst(out, t->text[TT_ROWWISE], &vs))
		goto out;
	if (t->g.backward && tmpl_rowwise_render_bwd(t, point, out))
		goto out;
	rc = 0;
out:
	tvars_release(&vs);
	strbuf_release(&setup);
	return rc;
}
