/*
 * .kernelbot.ini's [operator NAME] sections (repo_operators.h). The INI
 * handler only stores each key's raw value (a key given again, or
 * continued on an indented line, continues its list); everything is
 * parsed and checked once the whole file is read, when the sizes a value
 * refers to are known. The repository is untrusted: every value is read
 * by a strict grammar, every count and size is capped, and what reaches
 * the generated operator (modop.c) is text this file produced from the
 * parsed tokens, never the value as written.
 */
#include "core/common.h"
#include "core/util.h"
#include "jobs/jobs.h"
#include "jobs/repo_operators.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>

#define MAX_TESTS 8
#define MAX_TEST_TEXT 200
#define MAX_LITERAL_DEPTH 3
#define MAX_STRING 64
#define QUOTE_CAP 80

static const char *const list_keys[] = { "init", "inputs", "sizes", "dtypes", "tests", "requires_grad" };
static const char *const float_dtypes[] = { "float32", "float16", "bfloat16", "float64" };
static const char *const other_dtypes[] = { "int64", "int32", "int16", "int8", "uint8", "bool" };
/* Python's keywords and the names the generated operator file uses itself */
static const char *const reserved[] = {
	"False", "None", "True", "and", "as", "assert", "async", "await", "break", "class",
	"continue", "def", "del", "elif", "else", "except", "finally", "for", "from", "global",
	"if", "import", "in", "is", "lambda", "nonlocal", "not", "or", "pass", "raise", "return",
	"try", "while", "with", "yield", "torch", "Model", "get_inputs", "get_init_inputs",
	"init_kwargs", "getattr", "super", "dict", "list", "tuple", "int", "float"
};

/* "[operator NAME] KEY: " + the message + "\n" into why. */
KB_PRINTF(4, 5)
static void say(struct strbuf *why, const struct kb_repo_operator *op, const char *key,
		const char *fmt, ...)
{
	va_list ap;

	strbuf_addf(why, "[operator %s]%s%s: ", op->name, key ? " " : "", key ? key : "");
	va_start(ap, fmt);
	strbuf_vaddf(why, fmt, ap);
	va_end(ap);
	strbuf_addch(why, '\n');
}

/* An error: the section is left out. */
KB_PRINTF(4, 5)
static int fail(struct strbuf *why, struct kb_repo_operator *op, const char *key, const char *fmt, ...)
{
	struct strbuf msg = STRBUF_INIT;
	va_list ap;

	va_start(ap, fmt);
	strbuf_vaddf(&msg, fmt, ap);
	va_end(ap);
	say(why, op, key, "%s; the operator is left out", msg.buf);
	strbuf_release(&msg);
	op->bad = true;
	return -1;
}

/* s capped for a message (the file's own text, quoted back). */
static const char *capped(struct strbuf *sb, const char *s, size_t len)
{
	strbuf_reset(sb);
	strbuf_add(sb, s, len > QUOTE_CAP ? QUOTE_CAP : len);
	if (len > QUOTE_CAP)
		strbuf_addstr(sb, "...");
	return sb->buf;
}

static bool is_ident_start(int c)
{
	return isalpha(c) || c == '_';
}

static size_t ident_len(const char *s)
{
	size_t n = 0;

	if (!is_ident_start((unsigned char)s[0]))
		return 0;
	while (isalnum((unsigned char)s[n]) || s[n] == '_')
		n++;
	return n;
}

static bool in_list(const char *s, size_t n, const char *const *list, size_t nr)
{
	for (size_t i = 0; i < nr; i++)
		if (strlen(list[i]) == n && !strncmp(list[i], s, n))
			return true;
	return false;
}

bool kb_repo_size_name_ok(const char *s, size_t n)
{
	return n && n < KB_OPSEC_NAME && ident_len(s) >= n && s[0] != '_' && strncmp(s, "KB_", 3) &&
	       !in_list(s, n, reserved, ARRAY_SIZE(reserved));
}

static const char *dtype_of(const char *s, size_t n, bool *floating)
{
	for (size_t i = 0; i < ARRAY_SIZE(float_dtypes); i++)
		if (strlen(float_dtypes[i]) == n && !strncmp(s, float_dtypes[i], n)) {
			*floating = true;
			return float_dtypes[i];
		}
	for (size_t i = 0; i < ARRAY_SIZE(other_dtypes); i++)
		if (strlen(other_dtypes[i]) == n && !strncmp(s, other_dtypes[i], n)) {
			*floating = false;
			return other_dtypes[i];
		}
	return NULL;
}

bool kb_repo_operator_split(const char *job_path, char **path, char **target)
{
	const char *colon = strrchr(job_path, ':');
	size_t n;

	*path = *target = NULL;
	if (!colon || colon - job_path < 4 || strncmp(colon - 3, ".py", 3) || !colon[1])
		return false;
	for (const char *t = colon + 1; *t; t += n + (t[n] == '.')) {
		n = ident_len(t);
		if (!n || (t[n] && t[n] != '.') || (t[n] == '.' && !t[n + 1]))
			return false;
	}
	*path = xstrndup(job_path, (size_t)(colon - job_path));
	*target = xstrdup(colon + 1);
	return true;
}

void kb_repo_operator_job_path(struct strbuf *out, const struct kb_repo_operator *op)
{
	strbuf_reset(out);
	strbuf_addf(out, "%s:%s", op->path, op->target);
}

/* --- the INI handler's side --- */

static bool section_name_ok(const char *s)
{
	size_t n = 0;

	for (; s[n]; n++)
		if (!isalnum((unsigned char)s[n]) && s[n] != '_' && s[n] != '-')
			return false;
	return n && n <= 48;
}

static bool list_key(const char *key)
{
	if (!strncmp(key, "inputs.", 7))
		return true;
	for (size_t i = 0; i < ARRAY_SIZE(list_keys); i++)
		if (!strcmp(key, list_keys[i]))
			return true;
	return false;
}

void kb_repo_operator_key(struct kb_repo_config *rc, const char *section, const char *key,
			  const char *value, struct strbuf *why)
{
	struct kb_repo_operator *op = NULL;
	struct strbuf q = STRBUF_INIT;

	for (size_t i = 0; i < rc->nr_ops && !op; i++)
		if (!strcmp(rc->ops[i].name, section))
			op = &rc->ops[i];
	if (!op) {
		if (rc->nr_ops >= KB_OPSEC_MAX_SECTIONS) {
			if (rc->nr_ops == KB_OPSEC_MAX_SECTIONS && !strstr(why->buf, "[operator] sections"))
				strbuf_addf(why, "more than %d [operator] sections; the others are ignored\n",
					    KB_OPSEC_MAX_SECTIONS);
			goto out;
		}
		rc->ops = xrealloc(rc->ops, (rc->nr_ops + 1) * sizeof(*rc->ops));
		op = &rc->ops[rc->nr_ops++];
		memset(op, 0, sizeof(*op));
		op->name = xstrdup(section);
		strvec_init(&op->init);
		strvec_init(&op->tests);
		strvec_init(&op->keys);
		strvec_init(&op->values);
		if (!section_name_ok(section))
			fail(why, op, NULL, "the name '%s' is not 1 to 48 letters, digits, '_' or '-'",
			     capped(&q, section, strlen(section)));
	}
	for (size_t i = 0; i < op->keys.nr; i++) {
		if (strcmp(op->keys.v[i], key))
			continue;
		if (list_key(key)) {
			/* a continuation line, or the key again: its list goes on */
			const char *old = op->values.v[i];
			size_t n = strlen(old);
			char *joined;

			while (n && isspace((unsigned char)old[n - 1]))
				n--;
			strbuf_addf(&q, "%.*s%s%s", (int)n, old, n && old[n - 1] == ',' ? " " : ", ", value);
			joined = strbuf_detach(&q, NULL);
			free((char *)op->values.v[i]);
			op->values.v[i] = joined;
		} else {
			say(why, op, key, "given twice; the first value is used");
		}
		goto out;
	}
	strvec_push(&op->keys, key);
	strvec_push(&op->values, value);
out:
	strbuf_release(&q);
}

static const char *value_of(const struct kb_repo_operator *op, const char *key)
{
	for (size_t i = 0; i < op->keys.nr; i++)
		if (!strcmp(op->keys.v[i], key))
			return op->values.v[i];
	return NULL;
}

/* --- values --- */

struct cur {
	const char *s;
	size_t i;
};

static void skip_sp(struct cur *c)
{
	while (c->s[c->i] == ' ' || c->s[c->i] == '\t')
		c->i++;
}

/* A Python int or float literal at c into out (as written, checked). */
static int number(struct cur *c, struct strbuf *out, bool *is_int)
{
	size_t a = c->i, n;
	char *tok;
	const char *digits;
	double d;
	int rc = 0;

	if (c->s[c->i] == '-' || c->s[c->i] == '+')
		c->i++;
	while (isdigit((unsigned char)c->s[c->i]) || c->s[c->i] == '.' ||
	       ((c->s[c->i] == 'e' || c->s[c->i] == 'E') && c->i > a) ||
	       ((c->s[c->i] == '-' || c->s[c->i] == '+') && (c->s[c->i - 1] == 'e' || c->s[c->i - 1] == 'E')))
		c->i++;
	n = c->i - a;
	tok = xstrndup(c->s + a, n);
	*is_int = !strpbrk(tok, ".eE");
	digits = tok + (tok[0] == '-' || tok[0] == '+');
	/* 007 is no Python literal, 1e999 no finite one */
	if (!n || n > 40 || !strpbrk(tok, "0123456789") || kb_parse_double(tok, &d) || !isfinite(d) ||
	    (*is_int && digits[0] == '0' && digits[1]))
		rc = -1;
	else
		strbuf_addstr(out, tok);
	free(tok);
	return rc;
}

static int literal(struct cur *c, struct strbuf *out, struct strvec *syms, int depth);

/* ( ... ) or [ ... ] of literals. */
static int sequence(struct cur *c, struct strbuf *out, struct strvec *syms, int depth)
{
	char open = c->s[c->i], close = open == '(' ? ')' : ']';
	size_t n = 0;

	if (depth >= MAX_LITERAL_DEPTH)
		return -1;
	c->i++;
	strbuf_addch(out, open);
	for (;;) {
		skip_sp(c);
		if (c->s[c->i] == close)
			break;
		if (n)
			strbuf_addstr(out, ", ");
		if (literal(c, out, syms, depth + 1) || ++n > 16)
			return -1;
		skip_sp(c);
		if (c->s[c->i] == ',')
			c->i++;
		else if (c->s[c->i] != close)
			return -1;
	}
	c->i++;
	if (open == '(' && n == 1)
		strbuf_addch(out, ',');
	strbuf_addch(out, close);
	return 0;
}

/*
 * One Python literal at c (a number, string, True/False/None, a size's
 * name, a tuple or list of them) into out as Python text; the sizes it
 * names into syms. -1 when it is none.
 */
static int literal(struct cur *c, struct strbuf *out, struct strvec *syms, int depth)
{
	char ch;
	size_t n;
	bool is_int;

	skip_sp(c);
	ch = c->s[c->i];
	if (ch == '(' || ch == '[')
		return sequence(c, out, syms, depth);
	if (ch == '"' || ch == '\'') {
		size_t a = ++c->i;

		while (c->s[c->i] && c->s[c->i] != ch) {
			if ((unsigned char)c->s[c->i] < 0x20 || (unsigned char)c->s[c->i] > 0x7e ||
			    c->s[c->i] == '\\')
				return -1;
			c->i++;
		}
		if (c->s[c->i] != ch || c->i - a > MAX_STRING)
			return -1;
		c->i++;
		strbuf_add(out, c->s + a - 1, c->i - a + 1);
		return 0;
	}
	if (isdigit((unsigned char)ch) || ch == '-' || ch == '+' || ch == '.')
		return number(c, out, &is_int);
	n = ident_len(c->s + c->i);
	if (!n)
		return -1;
	if ((n == 4 && !strncmp(c->s + c->i, "True", 4)) || (n == 5 && !strncmp(c->s + c->i, "False", 5)) ||
	    (n == 4 && !strncmp(c->s + c->i, "None", 4))) {
		strbuf_add(out, c->s + c->i, n);
	} else {
		char *sym = xstrndup(c->s + c->i, n);

		strbuf_addstr(out, sym);
		strvec_push(syms, sym);
		free(sym);
	}
	c->i += n;
	return 0;
}

/* Call fn on each top-level comma-separated item of s (brackets and quotes kept whole). */
static int each_item(const char *s, int (*fn)(const char *item, size_t n, void *payload), void *payload)
{
	int depth = 0;
	char quote = 0;
	size_t start = 0;

	for (size_t i = 0;; i++) {
		char ch = s[i];

		if (quote) {
			if (ch == quote)
				quote = 0;
			else if (!ch)
				return fn(s + start, i - start, payload);
			continue;
		}
		if (ch == '"' || ch == '\'')
			quote = ch;
		else if (ch == '(' || ch == '[' || ch == '{')
			depth++;
		else if ((ch == ')' || ch == ']' || ch == '}') && depth)
			depth--;
		if ((ch == ',' && !depth) || !ch) {
			size_t a = start, b = i;
			int rc;

			while (a < b && isspace((unsigned char)s[a]))
				a++;
			while (b > a && isspace((unsigned char)s[b - 1]))
				b--;
			if ((rc = fn(s + a, b - a, payload)))
				return rc;
			if (!ch)
				return 0;
			start = i + 1;
		}
	}
}

/* --- one key each --- */

struct pctx {
	struct kb_repo_operator *op;
	struct strbuf *why;
	const char *key;
	struct strvec syms;       /* the sizes the values name */
	struct kb_op_form *form;  /* inputs: the form being read */
	bool seen_kw;
	struct strvec names;      /* init's keywords, or the sizes' names, seen */
	struct strbuf q;          /* quoting for messages */
};

static int empty_item(struct pctx *x)
{
	return fail(x->why, x->op, x->key, "an empty item (two commas in a row, or one at the end)");
}

static int init_item(const char *s, size_t n, void *p)
{
	struct pctx *x = p;
	char *item = xstrndup(s, n);
	struct cur c = { item, 0 };
	struct strbuf out = STRBUF_INIT;
	size_t id = ident_len(item), k = id;
	int rc = -1;

	if (!n) {
		rc = empty_item(x);
		goto out;
	}
	while (id && (item[k] == ' ' || item[k] == '\t'))
		k++;
	if (id && item[k] == '=' && item[k + 1] != '=') {
		strbuf_add(&out, item, id);
		for (size_t i = 0; i < x->names.nr; i++)
			if (!strcmp(x->names.v[i], out.buf)) {
				fail(x->why, x->op, x->key, "the keyword '%s' is given twice", out.buf);
				goto out;
			}
		strvec_push(&x->names, out.buf);
		strbuf_addch(&out, '=');
		c.i = k + 1;
		x->seen_kw = true;
	} else if (x->seen_kw) {
		fail(x->why, x->op, x->key, "the positional argument '%s' follows a keyword argument",
		     capped(&x->q, s, n));
		goto out;
	}
	if (literal(&c, &out, &x->syms, 0) || (skip_sp(&c), item[c.i])) {
		fail(x->why, x->op, x->key, "'%s' is not a Python literal (a number, a string, True, False, "
		     "None, a size of 'sizes', or a tuple or list of them)", capped(&x->q, s, n));
		goto out;
	}
	strvec_push(&x->op->init, out.buf);
	rc = 0;
out:
	free(item);
	strbuf_release(&out);
	return rc;
}

/* The dims of "[8, H]" at c (just past the '['). */
static int dims(struct pctx *x, struct cur *c, struct kb_op_arg *a, const char *item, size_t n)
{
	skip_sp(c);
	while (c->s[c->i] != ']') {
		struct kb_op_dim *d = &a->dims[a->rank];
		size_t id = ident_len(c->s + c->i);
		int64_t v;

		if (a->rank >= KB_OPSEC_MAX_RANK)
			return fail(x->why, x->op, x->key, "'%s' has more than %d dimensions",
				    capped(&x->q, item, n), KB_OPSEC_MAX_RANK);
		if (id) {
			if (id >= KB_OPSEC_NAME)
				return fail(x->why, x->op, x->key, "the size name in '%s' is too long",
					    capped(&x->q, item, n));
			memcpy(d->sym, c->s + c->i, id);
			d->sym[id] = '\0';
			strvec_push(&x->syms, d->sym);
			c->i += id;
		} else {
			size_t a0 = c->i;
			char *tok;

			while (isdigit((unsigned char)c->s[c->i]))
				c->i++;
			tok = xstrndup(c->s + a0, c->i - a0);
			if (kb_parse_i64(tok, &v) || v < 1 || v > KB_OPSEC_MAX_DIM) {
				free(tok);
				return fail(x->why, x->op, x->key, "'%s': a dimension is not a size from 1 to 2^31 "
					    "or the name of one in 'sizes'", capped(&x->q, item, n));
			}
			free(tok);
			d->value = v;
		}
		a->rank++;
		skip_sp(c);
		if (c->s[c->i] == ',') {
			c->i++;
			skip_sp(c);
		} else if (c->s[c->i] != ']') {
			return fail(x->why, x->op, x->key, "'%s' is not dtype[dims]: the dims are sizes "
				    "between commas", capped(&x->q, item, n));
		}
	}
	c->i++;
	return 0;
}

static int input_item(const char *s, size_t n, void *p)
{
	struct pctx *x = p;
	char *item = xstrndup(s, n);
	struct cur c = { item, 0 };
	struct kb_op_arg *a;
	size_t id = ident_len(item);
	bool floating = true, is_int;
	struct strbuf num = STRBUF_INIT;
	int rc = -1;

	if (!n) {
		rc = empty_item(x);
		goto out;
	}
	if (x->form->nr >= KB_OPSEC_MAX_ARGS) {
		fail(x->why, x->op, x->key, "more than %d arguments", KB_OPSEC_MAX_ARGS);
		goto out;
	}
	a = &x->form->args[x->form->nr];
	memset(a, 0, sizeof(*a));
	if (isdigit((unsigned char)item[0]) || item[0] == '-' || item[0] == '+' || item[0] == '.') {
		if (number(&c, &num, &is_int) || item[c.i] || num.len >= sizeof(a->value)) {
			fail(x->why, x->op, x->key, "'%s' is not a number", capped(&x->q, s, n));
			goto out;
		}
		kb_strlcpy(a->value, num.buf, sizeof(a->value));
	} else {
		const char *dt = id ? dtype_of(item, id, &floating) : "float32";

		if (!dt) {
			fail(x->why, x->op, x->key, "'%.*s' is not a dtype (float32, float16, bfloat16, float64, "
			     "int64, int32, int16, int8, uint8 or bool)", (int)(id > QUOTE_CAP ? QUOTE_CAP : id), item);
			goto out;
		}
		c.i = id;
		skip_sp(&c);
		if (item[c.i] != '[') {
			fail(x->why, x->op, x->key, "'%s' is not dtype[dims] (float32[8,4096]) or a number",
			     capped(&x->q, s, n));
			goto out;
		}
		c.i++;
		a->tensor = true;
		kb_strlcpy(a->dtype, dt, sizeof(a->dtype));
		if (dims(x, &c, a, s, n))
			goto out;
		skip_sp(&c);
		if (item[c.i]) {
			fail(x->why, x->op, x->key, "'%s' has more after its ']'", capped(&x->q, s, n));
			goto out;
		}
	}
	x->form->nr++;
	rc = 0;
out:
	free(item);
	strbuf_release(&num);
	return rc;
}

static int size_item(const char *s, size_t n, void *p)
{
	struct pctx *x = p;
	struct kb_op_size *sz;
	size_t id = ident_len(s), i;

	if (!n)
		return empty_item(x);
	if (x->op->nr_sizes >= KB_OPSEC_MAX_SIZES)
		return fail(x->why, x->op, x->key, "more than %d sizes", KB_OPSEC_MAX_SIZES);
	sz = &x->op->sizes[x->op->nr_sizes];
	memset(sz, 0, sizeof(*sz));
	for (i = id; i < n && (s[i] == ' ' || s[i] == '\t'); i++)
		;
	if (!kb_repo_size_name_ok(s, id) || i >= n || s[i] != '=')
		return fail(x->why, x->op, x->key, "'%s' is not NAME=SIZE (NAME an identifier that is not a "
			    "Python keyword and does not start with '_' or 'KB_')", capped(&x->q, s, n));
	memcpy(sz->name, s, id);
	for (size_t k = 0; k < x->op->nr_sizes; k++)
		if (!strcmp(x->op->sizes[k].name, sz->name))
			return fail(x->why, x->op, x->key, "the size '%s' is given twice", sz->name);
	for (i++; i <= n;) {
		size_t a = i;
		char *tok;
		int64_t v;
		int bad;

		while (i < n && s[i] != '|')
			i++;
		tok = xstrndup(s + a, i - a);
		strbuf_reset(&x->q);
		strbuf_addstr(&x->q, tok);
		strbuf_trim(&x->q);
		free(tok);
		bad = kb_parse_i64(x->q.buf, &v) || v < 1 || v > KB_OPSEC_MAX_DIM;
		if (bad || sz->nr >= KB_OPSEC_MAX_ALTS)
			return fail(x->why, x->op, x->key, bad ? "'%s': a size is a whole number from 1 to 2^31, "
				    "alternatives separated by '|'" : "'%s' has more than 8 alternatives",
				    capped(&x->q, s, n));
		sz->values[sz->nr++] = v;
		i++;
	}
	x->op->nr_sizes++;
	return 0;
}

static int dtype_item(const char *s, size_t n, void *p)
{
	struct pctx *x = p;
	bool floating = false;
	const char *dt = n ? dtype_of(s, n, &floating) : NULL;

	if (!n)
		return empty_item(x);
	if (!dt || !floating)
		return fail(x->why, x->op, x->key, "'%s' is not a floating-point dtype (float32, float16, "
			    "bfloat16 or float64)", capped(&x->q, s, n));
	for (size_t i = 0; i < x->op->nr_dtypes; i++)
		if (!strcmp(x->op->dtypes[i], dt))
			return fail(x->why, x->op, x->key, "'%s' is given twice", dt);
	if (x->op->nr_dtypes >= KB_OPSEC_MAX_DTYPES)
		return fail(x->why, x->op, x->key, "more than %d dtypes", KB_OPSEC_MAX_DTYPES);
	kb_strlcpy(x->op->dtypes[x->op->nr_dtypes++], dt, KB_OPSEC_NAME);
	return 0;
}

/* A pytest node id: a path, then "::name" parts (a parametrisation in brackets). */
static bool test_id_ok(const char *s, size_t n)
{
	const char *sep = memmem(s, n, "::", 2);
	size_t plen = sep ? (size_t)(sep - s) : n;
	char *path = xstrndup(s, plen);
	bool ok = n <= MAX_TEST_TEXT && s[0] != '-' && kb_repo_path_ok(path);

	free(path);
	for (size_t i = plen; ok && i < n;) {
		size_t id;

		i += 2;
		id = ident_len(s + i);
		if (!id || i + id > n)
			return false;
		i += id;
		if (i < n && s[i] == '[') {
			while (i < n && s[i] != ']') {
				ok = ok && (isalnum((unsigned char)s[i]) || strchr("[_.,=+-", s[i]));
				i++;
			}
			if (i >= n)
				return false;
			i++;
		}
		ok = ok && (i == n || !strncmp(s + i, "::", 2));
	}
	return ok;
}

static int test_item(const char *s, size_t n, void *p)
{
	struct pctx *x = p;
	char *id;

	if (!n)
		return empty_item(x);
	if (!test_id_ok(s, n))
		return fail(x->why, x->op, x->key, "'%s' is not a pytest selection of the repository "
			    "(tests/test_x.py, tests/test_x.py::test_name, or ::Class::test_name after it)",
			    capped(&x->q, s, n));
	if (x->op->tests.nr >= MAX_TESTS)
		return fail(x->why, x->op, x->key, "more than %d selections", MAX_TESTS);
	id = xstrndup(s, n);
	strvec_push(&x->op->tests, id);
	free(id);
	return 0;
}

/* --- a section as a whole --- */

static int parse_target(struct kb_repo_operator *op, struct strbuf *why)
{
	const char *mod = value_of(op, "module"), *fn = value_of(op, "function");
	const char *key = mod ? "module" : "function", *v = mod ? mod : fn;
	struct strbuf q = STRBUF_INIT;
	int rc = 0;

	if (mod && fn)
		return fail(why, op, NULL, "both 'module' and 'function' are given; one names the operator");
	if (!v)
		return fail(why, op, NULL, "no 'module = path.py:Class' or 'function = path.py:function'");
	if (!kb_repo_operator_split(v, &op->path, &op->target))
		rc = fail(why, op, key, "'%s' is not path.py:%s", capped(&q, v, strlen(v)),
			  mod ? "Class (Outer.Inner for a nested class)" : "function");
	else if (!kb_repo_path_ok(op->path))
		rc = fail(why, op, key, "'%s' is not a path in the repository", capped(&q, op->path, strlen(op->path)));
	else if (fn && strchr(op->target, '.'))
		rc = fail(why, op, key, "'%s' is not a module-level function", op->target);
	op->is_function = !mod;
	strbuf_release(&q);
	return rc;
}

/* Parse key's value with fn per item (nothing when the key is absent or blank). */
static int items(struct pctx *x, const char *key, int (*fn)(const char *, size_t, void *))
{
	const char *v = value_of(x->op, key);
	const char *p = v;

	if (!v)
		return 0;
	while (isspace((unsigned char)*p))
		p++;
	if (!*p)
		return fail(x->why, x->op, key, "no value");
	x->key = key;
	return each_item(v, fn, x);
}

static int parse_forms(struct pctx *x)
{
	struct strbuf key = STRBUF_INIT;
	int rc = 0;

	for (int k = 1; k <= KB_OPSEC_MAX_FORMS && !rc; k++) {
		strbuf_reset(&key);
		strbuf_addf(&key, "inputs.%d", k);
		if (k == 1 && value_of(x->op, "inputs") && value_of(x->op, "inputs.1")) {
			rc = fail(x->why, x->op, "inputs.1", "'inputs' is given too; they are the same shape set");
			break;
		}
		if (k == 1 && value_of(x->op, "inputs"))
			strbuf_setlen(&key, 6);
		if (!value_of(x->op, key.buf))
			continue;
		x->op->forms = xrealloc(x->op->forms, (x->op->nr_forms + 1) * sizeof(*x->op->forms));
		x->form = &x->op->forms[x->op->nr_forms++];
		memset(x->form, 0, sizeof(*x->form));
		rc = items(x, key.buf, input_item);
	}
	strbuf_release(&key);
	return rc;
}

static int parse_bool(const char *s, size_t n, bool *out)
{
	static const char *const yes[] = { "true", "yes", "1" }, *const no[] = { "false", "no", "0" };

	for (size_t i = 0; i < ARRAY_SIZE(yes); i++) {
		if (strlen(yes[i]) == n && !strncasecmp(s, yes[i], n))
			return *out = true, 0;
		if (strlen(no[i]) == n && !strncasecmp(s, no[i], n))
			return *out = false, 0;
	}
	return -1;
}

struct grad_ctx {
	struct pctx *x;
	bool flags[KB_OPSEC_MAX_ARGS];
	size_t nr;
};

static int grad_item(const char *s, size_t n, void *p)
{
	struct grad_ctx *g = p;

	if (g->nr >= KB_OPSEC_MAX_ARGS || parse_bool(s, n, &g->flags[g->nr]))
		return fail(g->x->why, g->x->op, "requires_grad", "'%s' is not true or false (one for "
			    "all inputs, or one per input)", capped(&g->x->q, s, n));
	g->nr++;
	return 0;
}

static int parse_grad(struct pctx *x)
{
	struct grad_ctx g = { .x = x };
	const char *v = value_of(x->op, "requires_grad");

	if (!v)
		return 0;
	if (each_item(v, grad_item, &g))
		return -1;
	for (size_t f = 0; f < x->op->nr_forms; f++) {
		struct kb_op_form *form = &x->op->forms[f];

		if (g.nr > 1 && g.nr != form->nr)
			return fail(x->why, x->op, "requires_grad", "%zu values for %zu inputs (shape set %zu)",
				    g.nr, form->nr, f + 1);
		for (size_t i = 0; i < form->nr; i++) {
			struct kb_op_arg *a = &form->args[i];
			bool want = g.flags[g.nr > 1 ? i : 0], floating = false;

			if (a->tensor)
				dtype_of(a->dtype, strlen(a->dtype), &floating);
			if (want && g.nr > 1 && !floating)
				return fail(x->why, x->op, "requires_grad", "input %zu is not a floating-point "
					    "tensor; only those can require grad", i + 1);
			a->requires_grad = want && floating;
			x->op->requires_grad |= a->requires_grad;
		}
	}
	if (!x->op->nr_forms)
		x->op->requires_grad = g.flags[0];
	return 0;
}

static const struct kb_op_size *size_named(const struct kb_repo_operator *op, const char *name)
{
	for (size_t i = 0; i < op->nr_sizes; i++)
		if (!strcmp(op->sizes[i].name, name))
			return &op->sizes[i];
	return NULL;
}

static void unknown_keys(struct kb_repo_operator *op, struct strbuf *why)
{
	static const char *const known[] = { "module", "function", "init", "inputs", "sizes", "dtypes",
					     "requires_grad", "tests" };
	const char *best = NULL;
	size_t bestd = 3;
	int64_t k;

	for (size_t i = 0; i < op->keys.nr; i++) {
		const char *key = op->keys.v[i];

		if (in_list(key, strlen(key), known, ARRAY_SIZE(known)))
			continue;
		if (!strncmp(key, "inputs.", 7)) {
			if (kb_parse_i64(key + 7, &k) || k < 1 || k > KB_OPSEC_MAX_FORMS)
				fail(why, op, key, "shape sets are inputs, inputs.2 ... inputs.%d", KB_OPSEC_MAX_FORMS);
			continue;
		}
		for (size_t j = 0; j < ARRAY_SIZE(known); j++) {
			size_t d = kb_edit_distance(key, known[j]);

			if (d < bestd) {
				bestd = d;
				best = known[j];
			}
		}
		if (best)
			say(why, op, key, "unknown key (did you mean '%s'?); ignored", best);
		else
			say(why, op, key, "unknown key; ignored");
	}
}

/* How many shape sets the cross products make. */
static size_t nr_sets(const struct kb_repo_operator *op)
{
	size_t n = op->nr_forms * (op->nr_dtypes ? op->nr_dtypes : 1);

	for (size_t i = 0; i < op->nr_sizes && n <= KB_OPSEC_MAX_SETS; i++)
		n *= op->sizes[i].nr;
	return n;
}

/* Sizes named but not given, sizes given but not used, more sets than kept. */
static int cross_checks(struct pctx *x, const struct strvec *init_syms)
{
	struct kb_repo_operator *op = x->op;

	for (size_t i = 0; i < x->syms.nr; i++)
		if (!size_named(op, x->syms.v[i]))
			return fail(x->why, op, i < init_syms->nr ? "init" : "inputs",
				    "the size '%s' is not given in 'sizes'", x->syms.v[i]);
	for (size_t i = 0; i < op->nr_sizes; i++) {
		bool used = false;

		for (size_t k = 0; k < x->syms.nr && !used; k++)
			used = !strcmp(x->syms.v[k], op->sizes[i].name);
		if (!used)
			say(x->why, op, "sizes", "'%s' is used by no input and no init argument; ignored",
			    op->sizes[i].name);
	}
	if (nr_sets(op) > KB_OPSEC_MAX_SETS)
		say(x->why, op, "sizes", "the inputs, dtypes and sizes make more than %d shape sets; the "
		    "first %d are used", KB_OPSEC_MAX_SETS, KB_OPSEC_MAX_SETS);
	if (op->nr_forms && op->tests.nr)
		say(x->why, op, "tests", "'inputs' gives the shapes already, so the tests are not run to "
		    "record them (two sources of shapes: remove one)");
	if (!op->nr_forms && !op->tests.nr) {
		op->needs_inputs = true;
		say(x->why, op, NULL, "no 'inputs' and no 'tests': kernelbot has nothing to call %s with "
		    "(the progress comment shows the lines to add)", op->target);
	}
	if (op->nr_dtypes && !op->nr_forms)
		say(x->why, op, "dtypes", "there are no 'inputs' to give these dtypes; ignored");
	return 0;
}

static void finish_one(struct kb_repo_config *rc, struct kb_repo_operator *op, struct strbuf *why)
{
	struct pctx x = { .op = op, .why = why, .syms = STRVEC_INIT, .names = STRVEC_INIT,
			  .q = STRBUF_INIT };
	struct strvec init_syms = STRVEC_INIT;

	unknown_keys(op, why);
	if (op->bad || parse_target(op, why))
		goto out;
	for (size_t i = 0; i < (size_t)(op - rc->ops); i++)
		if (!rc->ops[i].bad && !strcmp(rc->ops[i].path, op->path) &&
		    !strcmp(rc->ops[i].target, op->target)) {
			fail(why, op, op->is_function ? "function" : "module", "%s:%s is the operator of "
			     "[operator %s] already", op->path, op->target, rc->ops[i].name);
			goto out;
		}
	if (op->is_function && value_of(op, "init")) {
		fail(why, op, "init", "a function is not constructed: 'init' is for a module's class");
		goto out;
	}
	if (items(&x, "sizes", size_item) || items(&x, "dtypes", dtype_item) ||
	    items(&x, "init", init_item))
		goto out;
	strvec_pushv(&init_syms, x.syms.v);
	if (parse_forms(&x) || parse_grad(&x) || items(&x, "tests", test_item))
		goto out;
	cross_checks(&x, &init_syms);
out:
	strvec_clear(&x.syms);
	strvec_clear(&x.names);
	strvec_clear(&init_syms);
	strbuf_release(&x.q);
}

void kb_repo_operators_finish(struct kb_repo_config *rc, struct strbuf *why)
{
	for (size_t i = 0; i < rc->nr_ops; i++) {
		struct kb_repo_operator *op = &rc->ops[i];

		finish_one(rc, op, why);
		strvec_clear(&op->keys);
		strvec_clear(&op->values);
	}
}

void kb_repo_operators_release(struct kb_repo_config *rc)
{
	for (size_t i = 0; i < rc->nr_ops; i++) {
		struct kb_repo_operator *op = &rc->ops[i];

		free(op->name);
		free(op->path);
		free(op->target);
		free(op->forms);
		strvec_clear(&op->init);
		strvec_clear(&op->tests);
		strvec_clear(&op->keys);
		strvec_clear(&op->values);
	}
	free(rc->ops);
	rc->ops = NULL;
	rc->nr_ops = 0;
}
