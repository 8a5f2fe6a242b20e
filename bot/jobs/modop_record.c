/*
 * The shapes the repository's tests called a module with, as
 * kernelbot_harness/record_shapes.py wrote them in the sandbox: untrusted
 * text, read by a strict schema. Every value is tagged by its Python
 * type ["int", 4096], ["float", "1e-06"], ["str", "gelu"], ["tuple",
 * [...]] ...; only what can be written back as a plain literal is used,
 * and it is written by this file, never copied from the record.
 *
 *   {"version": 1, "target": "models/mlp.py:FusedMLP", "collected": 3,
 *    "passed": 3, "failed": 0, "skipped": 0, "errors": 0, "calls": 12,
 *    "import_error": null, "truncated": false,
 *    "records": [{"count": 10,
 *                 "init": {"args": [["int", 4096]], "kwargs": {"eps": ["float", "1e-06"]}},
 *                 "inputs": [{"tensor": {"shape": [8, 4096], "dtype": "float32",
 *                                        "requires_grad": false}}, ["int", 2]],
 *                 "unbound": false}]}
 */
#include "core/common.h"
#include "core/json.h"
#include "core/util.h"
#include "jobs/modop.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <inttypes.h>
#include <math.h>

#define MAX_RECORDS 64
#define MAX_ITEMS 16
#define MAX_DEPTH 3
#define MAX_REASONS 4
#define MAX_COUNT ((int64_t)1 << 40)
#define TEXT_CAP 300

static const char *const dtypes[] = { "float32", "float16", "bfloat16", "float64", "int64", "int32",
				      "int16", "int8", "uint8", "bool" };

/* A count: an integral JSON number in [0, MAX_COUNT]; -1 otherwise. */
static int64_t count_of(const cJSON *o, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);

	if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0) || v->valuedouble > (double)MAX_COUNT ||
	    v->valuedouble != floor(v->valuedouble))
		return -1;
	return (int64_t)v->valuedouble;
}

/* Untrusted text for a message: printable ASCII, capped. */
static void plain(struct strbuf *out, const char *s)
{
	size_t n = 0;

	for (; s && *s && n < TEXT_CAP; s++, n++)
		strbuf_addch(out, (unsigned char)*s >= 0x20 && (unsigned char)*s < 0x7f ? *s : '?');
	if (s && *s)
		strbuf_addstr(out, "...");
}

/* Why a record cannot be used: the first of each kind is kept for the message. */
struct reasons {
	char text[MAX_REASONS][160];
	int64_t calls[MAX_REASONS];
	size_t nr;
};

static void reason(struct reasons *r, int64_t calls, const char *what, const char *detail)
{
	struct strbuf sb = STRBUF_INIT;

	strbuf_addstr(&sb, what);
	if (detail && *detail) {
		strbuf_addstr(&sb, " (");
		plain(&sb, detail);
		strbuf_addch(&sb, ')');
	}
	for (size_t i = 0; i < r->nr; i++)
		if (!strcmp(r->text[i], sb.buf)) {
			r->calls[i] += calls;
			goto out;
		}
	if (r->nr < MAX_REASONS) {
		kb_strlcpy(r->text[r->nr], sb.buf, sizeof(r->text[0]));
		r->calls[r->nr++] = calls;
	}
out:
	strbuf_release(&sb);
}

/* The shortest text that reads back as d. */
static void float_text(struct strbuf *out, double d)
{
	char buf[40];

	for (int prec = 1; prec <= 17; prec++) {
		xsnprintf(buf, sizeof(buf), "%.*g", prec, d);
		if (strtod(buf, NULL) == d)
			break;
	}
	strbuf_addstr(out, buf);
	if (!strpbrk(buf, ".eE"))
		strbuf_addstr(out, ".0");
}

/* A tagged value as a Python literal; what it is otherwise into *bad. */
static int literal(struct strbuf *out, const cJSON *v, int depth, const char **bad)
{
	const cJSON *tag = cJSON_GetArrayItem(v, 0), *val = cJSON_GetArrayItem(v, 1);
	const char *t = cJSON_IsString(tag) ? tag->valuestring : "";
	double d;

	*bad = "";
	if (!cJSON_IsArray(v) || depth > MAX_DEPTH)
		return -1;
	if (!strcmp(t, "int") && cJSON_IsNumber(val) && fabs(val->valuedouble) < 9007199254740992.0 &&
	    val->valuedouble == floor(val->valuedouble)) {
		strbuf_addf(out, "%" PRId64, (int64_t)val->valuedouble);
	} else if (!strcmp(t, "float") && cJSON_IsString(val) && strlen(val->valuestring) < 40 &&
		   strspn(val->valuestring, "0123456789.eE+-") == strlen(val->valuestring) &&
		   !kb_parse_double(val->valuestring, &d) && isfinite(d)) {
		float_text(out, d);
	} else if (!strcmp(t, "bool") && cJSON_IsBool(val)) {
		strbuf_addstr(out, cJSON_IsTrue(val) ? "True" : "False");
	} else if (!strcmp(t, "none")) {
		strbuf_addstr(out, "None");
	} else if (!strcmp(t, "str") && cJSON_IsString(val) && strlen(val->valuestring) <= 64) {
		for (const char *p = val->valuestring; *p; p++)
			if ((unsigned char)*p < 0x20 || (unsigned char)*p > 0x7e || *p == '\'' || *p == '\\')
				return -1;
		strbuf_addf(out, "'%s'", val->valuestring);
	} else if ((!strcmp(t, "tuple") || !strcmp(t, "list")) && cJSON_IsArray(val) &&
		   cJSON_GetArraySize(val) <= MAX_ITEMS) {
		int n = cJSON_GetArraySize(val);

		strbuf_addch(out, t[0] == 't' ? '(' : '[');
		for (int i = 0; i < n; i++) {
			strbuf_addstr(out, i ? ", " : "");
			if (literal(out, cJSON_GetArrayItem(val, i), depth + 1, bad))
				return -1;
		}
		strbuf_addstr(out, t[0] == 't' ? (n == 1 ? ",)" : ")") : "]");
	} else {
		if (!strcmp(t, "object") && cJSON_IsString(val))
			*bad = val->valuestring;
		return -1;
	}
	return 0;
}

/*
 * A value literal() took, as JSON for the wiring check's init (a tuple as
 * a list): made here from the checked value, never copied from the record.
 */
static cJSON *json_value(const cJSON *v)
{
	const cJSON *tag = cJSON_GetArrayItem(v, 0), *val = cJSON_GetArrayItem(v, 1), *item;
	const char *t = cJSON_IsString(tag) ? tag->valuestring : "";
	cJSON *out;
	double d = 0;

	if (!strcmp(t, "int"))
		return cJSON_CreateNumber(val->valuedouble);
	if (!strcmp(t, "float")) {
		kb_parse_double(val->valuestring, &d);
		return cJSON_CreateNumber(d);
	}
	if (!strcmp(t, "bool"))
		return cJSON_CreateBool(cJSON_IsTrue(val));
	if (!strcmp(t, "str"))
		return cJSON_CreateString(val->valuestring);
	if (strcmp(t, "tuple") && strcmp(t, "list"))
		return cJSON_CreateNull();
	out = cJSON_CreateArray();
	cJSON_ArrayForEach(item, val)
		cJSON_AddItemToArray(out, json_value(item));
	return out;
}

static int record_init(struct kb_modop_form *f, const cJSON *init, const char **bad)
{
	const cJSON *args = cJSON_GetObjectItemCaseSensitive(init, "args");
	const cJSON *kwargs = cJSON_GetObjectItemCaseSensitive(init, "kwargs");
	struct strbuf sb = STRBUF_INIT;
	cJSON *json = cJSON_CreateObject();
	cJSON *jargs = cJSON_AddArrayToObject(json, "args"), *jkw = cJSON_AddObjectToObject(json, "kwargs");
	const cJSON *v;
	int rc = -1;

	*bad = "";
	if (!cJSON_IsArray(args) || !cJSON_IsObject(kwargs) ||
	    cJSON_GetArraySize(args) + cJSON_GetArraySize(kwargs) > MAX_ITEMS)
		goto out;
	cJSON_ArrayForEach(v, args) {
		strbuf_reset(&sb);
		if (literal(&sb, v, 0, bad))
			goto out;
		strvec_push(&f->init, sb.buf);
		cJSON_AddItemToArray(jargs, json_value(v));
	}
	cJSON_ArrayForEach(v, kwargs) {
		size_t n = strlen(v->string);

		if (!n || n > 64 || strspn(v->string, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
					   "0123456789_") != n || isdigit((unsigned char)v->string[0]))
			goto out;
		strbuf_reset(&sb);
		strbuf_addf(&sb, "%s=", v->string);
		if (literal(&sb, v, 0, bad))
			goto out;
		strvec_push(&f->init, sb.buf);
		cJSON_AddItemToObject(jkw, v->string, json_value(v));
	}
	f->init_json = cJSON_PrintUnformatted(json);
	if (!f->init_json)
		die("out of memory");
	rc = 0;
out:
	cJSON_Delete(json);
	strbuf_release(&sb);
	return rc;
}

static int record_tensor(struct kb_op_arg *a, const cJSON *t, const char **bad)
{
	const cJSON *shape = cJSON_GetObjectItemCaseSensitive(t, "shape");
	const char *dt = kb_json_str(t, "dtype");
	const cJSON *d;
	double numel = 1;

	*bad = "forward was called with a malformed tensor";
	if (!cJSON_IsArray(shape) || cJSON_GetArraySize(shape) > KB_OPSEC_MAX_RANK || !dt)
		return -1;
	for (size_t i = 0; i < ARRAY_SIZE(dtypes); i++)
		if (!strcmp(dt, dtypes[i]))
			kb_strlcpy(a->dtype, dt, sizeof(a->dtype));
	if (!a->dtype[0]) {
		*bad = "forward was called with a tensor of a dtype the verifier does not take";
		return -1;
	}
	cJSON_ArrayForEach(d, shape) {
		if (!cJSON_IsNumber(d) || d->valuedouble != floor(d->valuedouble) || d->valuedouble < 1 ||
		    d->valuedouble > (double)KB_OPSEC_MAX_DIM) {
			*bad = "forward was called with an empty tensor or one of a size beyond 2^31";
			return -1;
		}
		a->dims[a->rank++].value = (int64_t)d->valuedouble;
		numel *= d->valuedouble;
	}
	if (numel > (double)KB_OPSEC_MAX_DIM) {
		*bad = "forward was called with a tensor of more than 2^31 elements";
		return -1;
	}
	a->tensor = true;
	a->requires_grad = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(t, "requires_grad"));
	return 0;
}

static int record_inputs(struct kb_modop_form *f, const cJSON *inputs, const char **bad)
{
	const cJSON *v;

	*bad = "forward was called with malformed inputs";
	if (!cJSON_IsArray(inputs) || cJSON_GetArraySize(inputs) > KB_OPSEC_MAX_ARGS)
		return -1;
	cJSON_ArrayForEach(v, inputs) {
		struct kb_op_arg *a = &f->inputs.args[f->inputs.nr++];
		const cJSON *t = cJSON_GetObjectItemCaseSensitive(v, "tensor");
		const char *tag = cJSON_IsString(cJSON_GetArrayItem(v, 0)) ?
				  cJSON_GetArrayItem(v, 0)->valuestring : "";
		struct strbuf sb = STRBUF_INIT;
		int rc = 0;

		memset(a, 0, sizeof(*a));
		if (cJSON_IsObject(t)) {
			rc = record_tensor(a, t, bad);
		} else if (!strcmp(tag, "int") || !strcmp(tag, "float")) {
			const char *ignored;

			rc = literal(&sb, v, 0, &ignored);
			*bad = "forward was called with a number that is no literal";
			if (!rc && sb.len < sizeof(a->value))
				kb_strlcpy(a->value, sb.buf, sizeof(a->value));
			else
				rc = -1;
		} else {
			*bad = "forward was called with an argument that is neither a tensor nor a number";
			rc = -1;
		}
		strbuf_release(&sb);
		if (rc)
			return -1;
	}
	return 0;
}

/* One record (count calls) into a form of m; *what (and *detail) say why when it cannot be used. */
static int record(struct kb_modop *m, const cJSON *rec, int64_t count, const struct kb_repo_operator *op,
		  const char **what, const char **detail)
{
	struct kb_modop_form *f;

	*detail = "";
	if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(rec, "unbound"))) {
		*what = "forward was called with arguments that cannot be given by position";
		return -1;
	}
	m->forms = xrealloc(m->forms, (m->nr_forms + 1) * sizeof(*m->forms));
	f = &m->forms[m->nr_forms++];
	memset(f, 0, sizeof(*f));
	strvec_init(&f->init);
	f->calls = count;
	if (op->init.nr) {
		strvec_pushv(&f->init, op->init.v);
	} else if (record_init(f, cJSON_GetObjectItemCaseSensitive(rec, "init"), detail)) {
		*what = "the module was built with an argument that is not a literal";
		goto drop;
	}
	if (record_inputs(f, cJSON_GetObjectItemCaseSensitive(rec, "inputs"), what)) {
		goto drop;
	}
	return 0;
drop:
	strvec_clear(&f->init);
	free(f->init_json);
	m->nr_forms--;
	return -1;
}

/* What the tests did, for the message: "3 tests ran (3 passed)". */
static int test_counts(const cJSON *root, struct strbuf *why)
{
	int64_t collected = count_of(root, "collected"), passed = count_of(root, "passed");
	int64_t failed = count_of(root, "failed"), skipped = count_of(root, "skipped");
	int64_t errors = count_of(root, "errors");

	if (collected < 0 || passed < 0 || failed < 0 || skipped < 0 || errors < 0) {
		strbuf_addstr(why, "the recorder's output has no valid test counts\n");
		return -1;
	}
	if (!collected) {
		strbuf_addf(why, "the test selection found no test%s\n",
			    errors ? " (pytest could not collect it: a missing file or an import error)" : "");
		return -1;
	}
	strbuf_addf(why, "%" PRId64 " test%s selected: %" PRId64 " passed, %" PRId64 " failed, %" PRId64
		    " skipped, %" PRId64 " errors\n", collected, collected == 1 ? "" : "s", passed, failed,
		    skipped, errors);
	return 0;
}

static int usable_records(struct kb_modop *m, const cJSON *records, size_t max_sets,
			  const struct kb_repo_operator *op, struct strbuf *why)
{
	struct reasons r = { .nr = 0 };
	const cJSON *rec;
	int64_t last = MAX_COUNT, total = 0, skipped_calls = 0;
	size_t distinct = 0;

	cJSON_ArrayForEach(rec, records) {
		int64_t count = count_of(rec, "count");
		const char *what, *detail;

		distinct++;
		if (count < 1 || count > last) {
			strbuf_addstr(why, "the recorder's records are not counts in decreasing order\n");
			return -1;
		}
		last = count;
		total += count;
		if (m->nr_forms >= max_sets) {
			skipped_calls += count;
			continue;
		}
		if (record(m, rec, count, op, &what, &detail))
			reason(&r, count, what, detail);
	}
	for (size_t i = 0; i < r.nr; i++)
		strbuf_addf(why, "left out: %" PRId64 " call%s where %s\n", r.calls[i], r.calls[i] == 1 ? "" : "s",
			    r.text[i]);
	if (!m->nr_forms) {
		strbuf_addf(why, "%s: no call the tests made can be written as shapes and literals\n", op->target);
		return -1;
	}
	strbuf_addf(why, "%" PRId64 " calls of %s recorded, %zu distinct; the %zu most frequent are the "
		    "shape sets%s\n", total, op->target, distinct, m->nr_forms,
		    skipped_calls ? " (the rest left out)" : "");
	m->recorded_calls = (size_t)total;
	return 0;
}

int kb_modop_from_record(struct kb_modop *m, const char *json, size_t len, size_t max_sets,
			 const struct kb_repo_operator *op, struct strbuf *why)
{
	cJSON *root = NULL;
	const cJSON *records, *imp;
	int rc = -1;

	memset(m, 0, sizeof(*m));
	if (max_sets > KB_OPSEC_MAX_SETS)
		max_sets = KB_OPSEC_MAX_SETS;
	if (len > KB_MODOP_MAX_RECORD) {
		strbuf_addstr(why, "the recorder's output is larger than 256 KiB\n");
		goto out;
	}
	root = cJSON_ParseWithLength(json, len);
	records = cJSON_GetObjectItemCaseSensitive(root, "records");
	imp = cJSON_GetObjectItemCaseSensitive(root, "import_error");
	if (!cJSON_IsObject(root) || kb_json_i64(root, "version", 0) != 1 || !cJSON_IsArray(records) ||
	    cJSON_GetArraySize(records) > MAX_RECORDS) {
		strbuf_addstr(why, "the recorder's output is not what record_shapes.py writes\n");
		goto out;
	}
	if (cJSON_IsString(imp)) {
		strbuf_addf(why, "%s could not be imported: ", op->target);
		plain(why, imp->valuestring);
		strbuf_addch(why, '\n');
		goto out;
	}
	if (test_counts(root, why) || usable_records(m, records, max_sets, op, why))
		goto out;
	for (size_t f = 0; f < m->nr_forms; f++) {
		m->sets = xrealloc(m->sets, (m->nr_sets + 1) * sizeof(*m->sets));
		memset(&m->sets[m->nr_sets], 0, sizeof(*m->sets));
		m->sets[m->nr_sets++].form = f;
	}
	rc = 0;
out:
	cJSON_Delete(root);
	if (rc)
		kb_modop_release(m);
	return rc;
}

const char *kb_modop_recorded_init(const struct kb_modop *m)
{
	const char *best = NULL;
	int64_t most = 0;

	for (size_t i = 0; i < m->nr_forms; i++) {
		int64_t calls = 0;

		if (!m->forms[i].init_json)
			continue;
		for (size_t k = 0; k < m->nr_forms; k++)
			if (m->forms[k].init_json && !strcmp(m->forms[k].init_json, m->forms[i].init_json))
				calls += m->forms[k].calls;
		/* ties: the init of the most frequent call, the first form */
		if (calls > most) {
			most = calls;
			best = m->forms[i].init_json;
		}
	}
	return best;
}
