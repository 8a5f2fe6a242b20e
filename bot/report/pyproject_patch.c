#include "core/common.h"
#include "core/strvec.h"
#include "core/util.h"
#include "report/module_patch.h"
#include "report/module_patch_priv.h"

#include <fnmatch.h>

/*
 * kb_pyproject_package_data (module_patch.h): the operator's folder, inside
 * the repository's package, installed with it by a setuptools build that
 * pyproject.toml configures. Read line by line over a code view in which
 * comments and the contents of strings are blanked (as report/pylines.h
 * does for Python), so a bracket or '=' found in it is TOML's own; only
 * what this needs is understood: table headers, a key's name and where its
 * value starts and ends.
 */

struct toml {
	const char *text;
	size_t len;
	struct strbuf code;           /* the code view: same length and offsets as text */
	struct strbuf backend;        /* [build-system] build-backend, empty when none */
	bool setuptools_table;        /* some [tool.setuptools...] table */
	size_t packages;              /* [tool.setuptools] packages' value, SIZE_MAX: none */
	bool inline_data;             /* [tool.setuptools] sets package-data itself */
	size_t data_at;               /* past the [tool.setuptools.package-data] header, SIZE_MAX: none */
	bool data_names;              /* that table has the package's key */
	size_t include, exclude;      /* [tool.setuptools.packages.find]'s arrays, SIZE_MAX: none */
};

/* Blank comments and the contents of strings ("...", '...', and their triple forms); newlines stay. */
static void code_view(struct toml *t)
{
	const char *s = t->text;
	char *c;

	strbuf_add(&t->code, s, t->len);
	c = t->code.buf;
	for (size_t k = 0; k < t->len;) {
		char q = s[k];
		bool triple;

		if (q == '#') {
			while (k < t->len && s[k] != '\n' && s[k] != '\r')
				c[k++] = ' ';
			continue;
		}
		if (q != '"' && q != '\'') {
			k++;
			continue;
		}
		triple = k + 2 < t->len && s[k + 1] == q && s[k + 2] == q;
		for (k += triple ? 3 : 1; k < t->len; k++) {
			if (s[k] == q && (!triple || (k + 2 < t->len && s[k + 1] == q && s[k + 2] == q))) {
				k += triple ? 3 : 1;
				break;
			}
			if (!triple && s[k] == '\n')
				break; /* unterminated: the line ends it */
			if (q == '"' && s[k] == '\\' && k + 1 < t->len && s[k + 1] != '\n')
				c[k++] = ' ';
			if (s[k] != '\n' && s[k] != '\r')
				c[k] = ' ';
		}
	}
}

/* The bracket closing the one at open in the code view, or SIZE_MAX. */
static size_t match(const struct toml *t, size_t open)
{
	int depth = 0;

	for (size_t k = open; k < t->len; k++) {
		char ch = t->code.buf[k];

		if (ch == '[' || ch == '{')
			depth++;
		else if ((ch == ']' || ch == '}') && --depth == 0)
			return k;
	}
	return SIZE_MAX;
}

/* text[from, to) less blanks and quotes: a table's or key's name as compared here. */
static void name_of(struct strbuf *out, const struct toml *t, size_t from, size_t to)
{
	strbuf_reset(out);
	for (size_t k = from; k < to; k++)
		if (!strchr(" \t\"'", t->text[k]))
			strbuf_addch(out, t->text[k]);
}

/* The string elements of the array at open (its contents from text), into out. */
static void strings_of(struct strvec *out, const struct toml *t, size_t open)
{
	size_t end = match(t, open);

	for (size_t k = open + 1; end != SIZE_MAX && k < end; k++) {
		const char *q = t->code.buf + k;
		size_t j = k + 1;

		if (*q != '"' && *q != '\'')
			continue;
		while (j < end && t->code.buf[j] != *q)
			j++;
		strvec_pushf(out, "%.*s", (int)(j - k - 1), t->text + k + 1);
		k = j;
	}
}

/* One `key = value` line of table: what it tells; the offset past the value. */
static size_t key_line(struct toml *t, const char *table, size_t at, size_t eq, const char *package)
{
	struct strbuf key = STRBUF_INIT;
	const char *c = t->code.buf;
	size_t v = eq + 1, end;

	while (v < t->len && strchr(" \t", c[v]))
		v++;
	name_of(&key, t, at, eq);
	if (!strcmp(table, "build-system") && !strcmp(key.buf, "build-backend") && strchr("\"'", c[v])) {
		end = v + 1 + strcspn(c + v + 1, c[v] == '"' ? "\"\n" : "'\n");
		strbuf_add(&t->backend, t->text + v + 1, end - v - 1);
	}
	if (!strcmp(table, "tool.setuptools") && !strcmp(key.buf, "packages"))
		t->packages = v;
	if (!strcmp(table, "tool.setuptools") && !strncmp(key.buf, "package-data", 12))
		t->inline_data = true;
	if (!strcmp(table, "tool.setuptools.package-data") && !strcmp(key.buf, package))
		t->data_names = true;
	if (!strcmp(table, "tool.setuptools.packages.find") && !strcmp(key.buf, "include"))
		t->include = c[v] == '[' ? v : SIZE_MAX;
	if (!strcmp(table, "tool.setuptools.packages.find") && !strcmp(key.buf, "exclude"))
		t->exclude = c[v] == '[' ? v : SIZE_MAX;
	strbuf_release(&key);
	/* an array may span lines, and a line of it may start with '[' */
	end = c[v] == '[' || c[v] == '{' ? match(t, v) : v;
	return end == SIZE_MAX ? t->len : end;
}

static void scan(struct toml *t, const char *package)
{
	struct strbuf table = STRBUF_INIT;
	const char *c = t->code.buf;
	size_t k = 0;

	t->packages = t->data_at = t->include = t->exclude = SIZE_MAX;
	while (k < t->len) {
		size_t at = k, eol = k + strcspn(c + k, "\n"), e;

		while (at < eol && strchr(" \t\r", c[at]))
			at++;
		if (at < eol && c[at] == '[') {
			e = at + strcspn(c + at, "]\n");
			name_of(&table, t, at + 1, e);
			if (c[at + 1] == '[') /* an array of tables: none this reads */
				strbuf_addstr(&table, "[]");
			t->setuptools_table |= !strncmp(table.buf, "tool.setuptools", 15);
			if (!strcmp(table.buf, "tool.setuptools.package-data"))
				t->data_at = eol < t->len ? eol + 1 : t->len;
		} else if (at < eol && (e = at + strcspn(c + at, "=\n")) < eol) {
			eol = key_line(t, table.buf, at, e, package);
			eol += strcspn(c + eol, "\n");
		}
		k = eol < t->len ? eol + 1 : t->len;
	}
	strbuf_release(&table);
}

/* Read text (which must outlive t): the code view, then what this file needs to know. */
static void toml_init(struct toml *t, const char *text, size_t len, const char *package)
{
	memset(t, 0, sizeof(*t));
	t->text = text;
	t->len = len;
	strbuf_init(&t->code, len);
	strbuf_init(&t->backend, 0);
	code_view(t);
	scan(t, package);
}

static void toml_release(struct toml *t)
{
	strbuf_release(&t->code);
	strbuf_release(&t->backend);
}

/* Does every package fall within the find's include patterns and out of its exclude ones? */
static bool found(const struct toml *t, const struct kb_package_data *pd, struct strbuf *why)
{
	struct strvec inc = STRVEC_INIT, exc = STRVEC_INIT;
	bool ok = true;

	if (t->include != SIZE_MAX)
		strings_of(&inc, t, t->include);
	if (t->exclude != SIZE_MAX)
		strings_of(&exc, t, t->exclude);
	for (size_t i = 0; ok && i < pd->nr_packages; i++) {
		bool in = t->include == SIZE_MAX;

		for (size_t j = 0; j < inc.nr; j++)
			in = in || !fnmatch(inc.v[j], pd->packages[i], 0);
		for (size_t j = 0; j < exc.nr; j++)
			in = in && fnmatch(exc.v[j], pd->packages[i], 0);
		if (!in) {
			strbuf_addf(why, "pyproject.toml's [tool.setuptools.packages.find] leaves %s out "
				    "(its include or exclude)", pd->packages[i]);
			ok = false;
		}
	}
	strvec_clear(&inc);
	strvec_clear(&exc);
	return ok;
}

/* Why the file is left alone, or "" when it can take the entry. */
static void refusal(const struct toml *t, const struct kb_package_data *pd, struct strbuf *why)
{
	size_t end = t->packages == SIZE_MAX ? SIZE_MAX : match(t, t->packages);

	if (end == SIZE_MAX)
		end = t->packages == SIZE_MAX ? 0 : t->len;
	if (t->backend.len && strncmp(t->backend.buf, "setuptools", 10))
		strbuf_addf(why, "pyproject.toml builds with %s, not setuptools", t->backend.buf);
	else if (t->inline_data)
		strbuf_addstr(why, "pyproject.toml sets package-data in [tool.setuptools] itself");
	else if (t->data_names)
		strbuf_addf(why, "pyproject.toml's [tool.setuptools.package-data] names %s already", pd->package);
	else if (t->packages != SIZE_MAX && t->code.buf[t->packages] == '{' &&
		 (memmem(t->text + t->packages, end - t->packages, "include", 7) ||
		  memmem(t->text + t->packages, end - t->packages, "exclude", 7)))
		strbuf_addstr(why, "pyproject.toml's [tool.setuptools] packages finds with include or exclude, "
			      "which may leave the kernel's packages out");
	else if (t->packages != SIZE_MAX && !strchr("[{", t->code.buf[t->packages]))
		strbuf_addstr(why, "pyproject.toml's [tool.setuptools] packages is no list");
	else
		found(t, pd, why);
}

int kb_pyproject_package_data(struct strbuf *out, const char *text, size_t len,
			      const struct kb_package_data *pd, struct strbuf *why)
{
	struct toml t;
	struct patch_insert ins[2] = { { 0, false, STRBUF_INIT }, { 0, false, STRBUF_INIT } };
	struct strvec missing = STRVEC_INIT;
	size_t why_len = why->len;
	const char *eol;
	int rc = KB_ENOTSUPPORTED;

	strbuf_reset(out);
	toml_init(&t, text, len, pd->package);
	eol = len && memmem(text, len, "\r\n", 2) ? "\r\n" : "\n";
	refusal(&t, pd, why);
	if (why->len > why_len)
		goto out;
	if (t.packages != SIZE_MAX && text[t.packages] == '[') {
		struct strvec listed = STRVEC_INIT;

		strings_of(&listed, &t, t.packages);
		for (size_t i = 0; i < pd->nr_packages; i++) {
			bool has = false;

			for (size_t j = 0; j < listed.nr; j++)
				has = has || !strcmp(listed.v[j], pd->packages[i]);
			if (!has)
				strvec_pushf(&missing, "\"%s\"", pd->packages[i]);
		}
		strvec_clear(&listed);
		kb_patch_head(&ins[0], t.code.buf, text, t.packages, match(&t, t.packages),
			      (const char *const *)missing.v, missing.nr);
	}
	ins[1].at = t.data_at == SIZE_MAX ? len : t.data_at;
	if (ins[1].at == len && len && text[len - 1] != '\n')
		strbuf_addstr(&ins[1].text, eol); /* the last line ends first */
	if (t.data_at == SIZE_MAX)
		strbuf_addf(&ins[1].text, "%s[tool.setuptools.package-data]%s", eol, eol);
	strbuf_addf(&ins[1].text, "\"%s\" = ", pd->package);
	kb_package_data_list(&ins[1].text, pd);
	strbuf_addstr(&ins[1].text, eol);
	if (ins[0].at > ins[1].at) {
		struct patch_insert x = ins[0];

		ins[0] = ins[1];
		ins[1] = x;
	}
	kb_patch_apply(out, text, len, ins, 2);
	rc = 0;
out:
	toml_release(&t);
	strbuf_release(&ins[0].text);
	strbuf_release(&ins[1].text);
	strvec_clear(&missing);
	return rc;
}

bool kb_pyproject_configures_setuptools(const char *text, size_t len)
{
	struct toml t;
	bool yes;

	toml_init(&t, text, len, "");
	yes = t.setuptools_table;
	toml_release(&t);
	return yes;
}
