#include "core/common.h"
#include "core/json.h"
#include "core/util.h"
#include "report/pytext.h"
#include "report/torch_op.h"
#include "report/torch_op_priv.h"

#include <inttypes.h>

/* dtype names the evidence may give a tensor, and the only ones ops.py names (torch.<name>) */
static const char *const dtypes_known[] = {
	"float32", "float64", "float16", "bfloat16", "int8", "int16", "int32", "int64", "uint8", "bool",
};

static const char *const keywords[] = {
	"False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue",
	"def", "del", "elif", "else", "except", "finally", "for", "from", "global", "if", "import", "in",
	"is", "lambda", "nonlocal", "not", "or", "pass", "raise", "return", "try", "while", "with", "yield",
};

void kb_torch_op_init(struct kb_torch_op *op)
{
	memset(op, 0, sizeof(*op));
}

void kb_torch_op_release(struct kb_torch_op *op)
{
	for (size_t i = 0; i < op->nr_inputs; i++) {
		free(op->inputs[i].name);
		free(op->inputs[i].arg);
		strvec_clear(&op->inputs[i].dtypes);
	}
	for (size_t i = 0; i < op->nr_speed; i++) {
		free(op->speed[i].dtype);
		free(op->speed[i].ranges);
	}
	free(op->speed);
	cJSON_Delete(op->attributes);
	free(op->inputs);
	free(op->name);
	memset(op, 0, sizeof(*op));
}

void kb_torch_op_ident(struct strbuf *out, const char *name)
{
	size_t start = out->len;

	if (name && *name >= '0' && *name <= '9')
		strbuf_addstr(out, "op_");
	for (const char *p = name; p && *p; p++) {
		char c = *p;

		strbuf_addch(out, (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
					  ? c : '_');
	}
	if (out->len == start)
		strbuf_addstr(out, "op");
	for (size_t k = 0; k < ARRAY_SIZE(keywords); k++)
		if (!strcmp(out->buf + start, keywords[k])) {
			strbuf_addch(out, '_');
			break;
		}
}

static bool known_dtype(const char *d)
{
	for (size_t k = 0; k < ARRAY_SIZE(dtypes_known); k++)
		if (!strcmp(d, dtypes_known[k]))
			return true;
	return false;
}

static void add_unique(struct strvec *v, const char *s)
{
	for (size_t i = 0; i < v->nr; i++)
		if (!strcmp(v->v[i], s))
			return;
	strvec_push(v, s);
}

/* The first config's inputs: names, identifiers (made unique), kinds. */
static int first_config(struct kb_torch_op *op, const cJSON *inputs, struct strbuf *why)
{
	const cJSON *in;
	size_t i = 0;

	op->nr_inputs = (size_t)cJSON_GetArraySize(inputs);
	op->inputs = xcalloc(op->nr_inputs ? op->nr_inputs : 1, sizeof(*op->inputs));
	cJSON_ArrayForEach(in, inputs) {
		struct kb_op_input *x = &op->inputs[i];
		const char *name = kb_json_str(in, "name"), *dtype = kb_json_str(in, "dtype");
		struct strbuf id = STRBUF_INIT;

		strvec_init(&x->dtypes);
		if (!name || !dtype)
			return strbuf_addf(why, "the evidence's input %zu has no name or dtype", i), -1;
		x->name = xstrdup(name);
		kb_torch_op_ident(&id, name);
		for (size_t k = 0; k < i; k++)
			if (!strcmp(op->inputs[k].arg, id.buf)) {
				strbuf_addf(&id, "_%zu", i);
				break;
			}
		x->arg = strbuf_detach(&id, NULL);
		if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(in, "scalar")))
			x->kind = !strncmp(dtype, "float", 5) ? KB_OP_FLOAT : KB_OP_INT;
		for (size_t k = 0; k < KB_TORCH_OP_MAX_RANK; k++)
			x->fixed[k] = -1;
		i++;
	}
	return 0;
}

/* One config's input into x: its dtype, rank and sizes. first: the first config seen. */
static int merge_input(struct kb_op_input *x, const cJSON *in, bool first, struct strbuf *why)
{
	const cJSON *shape = cJSON_GetObjectItemCaseSensitive(in, "shape"), *d;
	const char *dtype = kb_json_str(in, "dtype");
	int rank = cJSON_GetArraySize(shape), axis = 0;
	bool seen = false;

	if (x->kind != KB_OP_TENSOR)
		return 0;
	if (!dtype || !known_dtype(dtype))
		return strbuf_addf(why, "input '%s' has the dtype '%s', which ops.py cannot name", x->name,
				   dtype ? dtype : "?"), -1;
	if (!cJSON_IsArray(shape) || rank > KB_TORCH_OP_MAX_RANK)
		return strbuf_addf(why, "input '%s' has no shape of at most %d dimensions", x->name,
				   KB_TORCH_OP_MAX_RANK), -1;
	add_unique(&x->dtypes, dtype);
	for (size_t k = 0; k < x->nr_ranks; k++)
		seen = seen || x->ranks[k] == rank;
	if (!seen)
		x->ranks[x->nr_ranks++] = rank;
	cJSON_ArrayForEach(d, shape) {
		int64_t size = cJSON_IsNumber(d) ? kb_i64_from_double(d->valuedouble) : -1;

		if (first)
			x->fixed[axis] = size;
		else if (x->fixed[axis] != size)
			x->fixed[axis] = -1;
		axis++;
	}
	if (x->nr_ranks > 1)
		for (size_t k = 0; k < KB_TORCH_OP_MAX_RANK; k++)
			x->fixed[k] = -1;
	return 0;
}

int kb_torch_op_from_evidence(struct kb_torch_op *op, const cJSON *evidence, const char *name,
			      struct strbuf *why)
{
	const cJSON *configs = cJSON_GetObjectItemCaseSensitive(evidence, "configs"), *c;
	const cJSON *opj = cJSON_GetObjectItemCaseSensitive(evidence, "operator");
	const char *pass = kb_json_str(opj, "pass");
	struct strbuf id = STRBUF_INIT;
	bool first = true;

	kb_torch_op_release(op);
	kb_torch_op_ident(&id, name);
	op->name = strbuf_detach(&id, NULL);
	if (pass && strcmp(pass, "forward"))
		return strbuf_addf(why, "the evidence is of the %s pass, not the forward", pass), -1;
	if (!cJSON_GetArraySize(configs))
		return strbuf_addstr(why, "the evidence holds no verified config"), -1;
	op->nr_outputs = (int)kb_json_i64(opj, "n_outputs", 0);
	if (op->nr_outputs < 1)
		op->nr_outputs = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(configs, 0),
										"outputs"));
	if (op->nr_outputs < 1)
		return strbuf_addstr(why, "the evidence does not say how many outputs the operator has"), -1;
	if (first_config(op, cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(configs, 0), "inputs"), why))
		return -1;
	cJSON_ArrayForEach(c, configs) {
		const cJSON *inputs = cJSON_GetObjectItemCaseSensitive(c, "inputs");
		size_t i = 0;
		const cJSON *in;

		if ((size_t)cJSON_GetArraySize(inputs) != op->nr_inputs)
			return strbuf_addstr(why, "the evidence's configs take different numbers of inputs"), -1;
		cJSON_ArrayForEach(in, inputs) {
			const char *n = kb_json_str(in, "name");

			if (!n || strcmp(n, op->inputs[i].name))
				return strbuf_addstr(why, "the evidence's configs name their inputs differently"), -1;
			if (merge_input(&op->inputs[i++], in, first, why))
				return -1;
		}
		first = false;
	}
	return 0;
}

/* The INPUTS lines: ("input0", "tensor", ("float32",), (2,), {1: 256}), */
static void inputs_literal(struct strbuf *out, const struct kb_torch_op *op)
{
	static const char *const kinds[] = { "tensor", "float", "int" };

	for (size_t i = 0; i < op->nr_inputs; i++) {
		const struct kb_op_input *x = &op->inputs[i];
		bool any = false;

		strbuf_addstr(out, "    (");
		kb_pytext_json_string(out, x->name);
		strbuf_addf(out, ", \"%s\", (", kinds[x->kind]);
		for (size_t k = 0; k < x->dtypes.nr; k++)
			strbuf_addf(out, "\"%s\",", x->dtypes.v[k]);
		strbuf_addstr(out, "), (");
		for (size_t k = 0; k < x->nr_ranks; k++)
			strbuf_addf(out, "%d,", x->ranks[k]);
		strbuf_addstr(out, "), {");
		for (int k = 0; k < KB_TORCH_OP_MAX_RANK; k++)
			if (x->fixed[k] >= 0) {
				strbuf_addf(out, "%s%d: %" PRId64, any ? ", " : "", k, x->fixed[k]);
				any = true;
			}
		strbuf_addstr(out, "}),\n");
	}
}

void kb_torch_op_set_attributes(struct kb_torch_op *op, const cJSON *attributes)
{
	cJSON_Delete(op->attributes);
	op->attributes = attributes ? cJSON_Duplicate(attributes, true) : NULL;
}

/* One recorded value as Python: a number, True/False/None, a string, a tuple of those. */
static void py_literal(struct strbuf *out, const cJSON *v)
{
	const cJSON *x;

	if (cJSON_IsBool(v))
		strbuf_addstr(out, cJSON_IsTrue(v) ? "True" : "False");
	else if (cJSON_IsNumber(v))
		strbuf_addf(out, "%.17g", v->valuedouble);
	else if (cJSON_IsString(v))
		kb_pytext_json_string(out, v->valuestring);
	else if (cJSON_IsArray(v)) {
		int n = cJSON_GetArraySize(v);

		strbuf_addch(out, '(');
		cJSON_ArrayForEach(x, v) {
			py_literal(out, x);
			strbuf_addstr(out, ", ");
		}
		/* "(a, b)", "(a,)", "()" */
		if (n)
			strbuf_setlen(out, out->len - (n > 1 ? 2 : 1));
		strbuf_addch(out, ')');
	} else
		strbuf_addstr(out, "None");
}

/* ATTRIBUTES: {"": {"scale": 0.5}, "linear": {"in_features": 256}} or None */
static void attributes_literal(struct strbuf *out, const cJSON *attrs)
{
	const cJSON *sub, *a;

	if (!cJSON_IsObject(attrs)) {
		strbuf_addstr(out, "None");
		return;
	}
	strbuf_addstr(out, "{\n");
	cJSON_ArrayForEach(sub, attrs) {
		strbuf_addstr(out, "    ");
		kb_pytext_json_string(out, sub->string);
		strbuf_addstr(out, ": {");
		cJSON_ArrayForEach(a, sub) {
			kb_pytext_json_string(out, a->string);
			strbuf_addstr(out, ": ");
			py_literal(out, a);
			strbuf_addstr(out, a->next ? ", " : "");
		}
		strbuf_addstr(out, "},\n");
	}
	strbuf_addstr(out, "}");
}

/* MIN_SPEEDUP and FASTER: {"float32": ((0, 16384), (65536, None)),} or None */
static void faster_literal(struct strbuf *min, struct strbuf *out, const struct kb_torch_op *op)
{
	strbuf_addf(min, "%.17g", op->min_speedup);
	if (!(op->min_speedup > 0)) {
		strbuf_addstr(out, "None");
		return;
	}
	strbuf_addstr(out, "{\n");
	for (size_t i = 0; i < op->nr_speed; i++) {
		strbuf_addstr(out, "    ");
		kb_pytext_json_string(out, op->speed[i].dtype);
		strbuf_addstr(out, ": (");
		for (size_t k = 0; k < op->speed[i].nr_ranges; k++) {
			const struct kb_op_range *r = &op->speed[i].ranges[k];

			strbuf_addf(out, "%s(%" PRId64 ", ", k ? ", " : "", r->lo);
			if (r->hi < 0)
				strbuf_addstr(out, "None)");
			else
				strbuf_addf(out, "%" PRId64 ")", r->hi);
		}
		strbuf_addstr(out, op->speed[i].nr_ranges == 1 ? ",),\n" : "),\n");
	}
	strbuf_addstr(out, "}");
}

enum slot {
	DOC_NAME, DOC_SIG, VERSION, NAME, IDENT, INPUTS, N_OUTPUTS, ARGS, SIGNATURE, GRADS,
	GRAD_SIGNATURE, RETURNS, SCHEMA, MIN_SPEEDUP, FASTER, ATTRIBUTES, NR_SLOTS
};

static const char *const slot_names[NR_SLOTS] = {
	"DOC_NAME", "DOC_SIG", "VERSION", "NAME", "IDENT", "INPUTS", "N_OUTPUTS", "ARGS", "SIGNATURE",
	"GRADS", "GRAD_SIGNATURE", "RETURNS", "SCHEMA", "MIN_SPEEDUP", "FASTER", "ATTRIBUTES",
};

void kb_torch_op_render(struct strbuf *out, const struct kb_torch_op *op)
{
	static const char *const py_types[] = { "torch.Tensor", "float", "int" };
	static const char *const schema_types[] = { "Tensor", "float", "int" };
	struct strbuf v[NR_SLOTS], schema = STRBUF_INIT;

	for (size_t i = 0; i < NR_SLOTS; i++)
		strbuf_init(&v[i], 0);
	kb_pytext_doc_safe(&v[DOC_NAME], op->name, NULL);
	strbuf_addstr(&v[VERSION], KB_VERSION);
	kb_pytext_json_string(&v[NAME], op->name);
	strbuf_addstr(&v[IDENT], op->name);
	inputs_literal(&v[INPUTS], op);
	strbuf_addf(&v[N_OUTPUTS], "%d", op->nr_outputs);
	strbuf_addf(&schema, "%s(", op->name);
	for (size_t i = 0; i < op->nr_inputs; i++) {
		const struct kb_op_input *x = &op->inputs[i];
		const char *sep = i ? ", " : "";

		strbuf_addf(&v[ARGS], "%s%s", sep, x->arg);
		strbuf_addf(&v[SIGNATURE], "%s%s: %s", sep, x->arg, py_types[x->kind]);
		strbuf_addf(&schema, "%s%s %s", sep, schema_types[x->kind], x->arg);
		strbuf_addf(&v[DOC_SIG], "%s", sep);
		kb_pytext_doc_safe(&v[DOC_SIG], x->name, ":");
	}
	strbuf_addstr(&schema, op->nr_outputs == 1 ? ") -> Tensor" : ") -> (");
	strbuf_addstr(&v[RETURNS], op->nr_outputs == 1 ? "torch.Tensor" : "Tuple[");
	for (int k = 0; k < op->nr_outputs; k++) {
		strbuf_addf(&v[GRADS], "%sgrad%d", k ? ", " : "", k);
		strbuf_addf(&v[GRAD_SIGNATURE], "%sgrad%d: torch.Tensor", k ? ", " : "", k);
		if (op->nr_outputs > 1) {
			strbuf_addf(&schema, "%sTensor", k ? ", " : "");
			strbuf_addf(&v[RETURNS], "%storch.Tensor", k ? ", " : "");
		}
	}
	if (op->nr_outputs > 1) {
		strbuf_addch(&schema, ')');
		strbuf_addch(&v[RETURNS], ']');
	}
	kb_pytext_json_string(&v[SCHEMA], schema.buf);
	faster_literal(&v[MIN_SPEEDUP], &v[FASTER], op);
	attributes_literal(&v[ATTRIBUTES], op->attributes);
	kb_pytext_fill(out, kb_torch_op_py, slot_names, v, NR_SLOTS);
	for (size_t i = 0; i < NR_SLOTS; i++)
		strbuf_release(&v[i]);
	strbuf_release(&schema);
}
