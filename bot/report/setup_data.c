#include "core/common.h"
#include "core/strvec.h"
#include "core/util.h"
#include "report/module_patch.h"
#include "report/module_patch_priv.h"

/*
 * kb_setup_package_data (module_patch.h): the operator's folder, inside the
 * repository's package, installed with it by a setup.py. Only literal
 * arguments of the one setup() call are edited; anything computed is left
 * to the maintainer, with the lines to add.
 */

void kb_package_data_list(struct strbuf *sb, const struct kb_package_data *pd)
{
	strbuf_addch(sb, '[');
	for (size_t i = 0; i < pd->nr_patterns; i++)
		strbuf_addf(sb, "%s\"%s\"", i ? ", " : "", pd->patterns[i]);
	strbuf_addch(sb, ']');
}

/* The '(' of the file's one setup(...) call (setuptools.setup too), or SIZE_MAX with why. */
static size_t setup_call(const struct kb_pylines *pl, struct strbuf *why)
{
	const char *c = pl->code.buf;
	size_t at = SIZE_MAX, k = 0, n = 0;

	while ((k = kb_pyview_word(pl, k, "setup", true)) != SIZE_MAX) {
		size_t p = k + 5, b = k;

		while (p < pl->code.len && strchr(" \t", c[p]))
			p++;
		while (b && strchr(" \t", c[b - 1]))
			b--;
		/* a call, not `def setup(` */
		if (p < pl->code.len && c[p] == '(' && !(b >= 3 && !strncmp(c + b - 3, "def", 3))) {
			at = p;
			n++;
		}
		k += 5;
	}
	if (n != 1) {
		strbuf_addstr(why, n ? "setup.py calls setup() more than once" : "setup.py calls no setup()");
		return SIZE_MAX;
	}
	return at;
}

/* The offset just past the ',' or at the ')' that ends the argument starting at v of a call closing at close. */
static size_t arg_end(const struct kb_pylines *pl, size_t v, size_t close)
{
	int depth = 0;

	for (; v < close; v++) {
		char ch = pl->code.buf[v];

		if (strchr("([{", ch))
			depth++;
		else if (strchr(")]}", ch))
			depth--;
		else if (ch == ',' && !depth)
			return v + 1;
	}
	return close;
}

/* The offset of keyword argument name of the call (open, close), its value's in *value; SIZE_MAX when none. */
static size_t kwarg(const struct kb_pylines *pl, size_t open, size_t close, const char *name, size_t *value)
{
	const char *c = pl->code.buf;
	size_t n = strlen(name);

	for (size_t k = open + 1; k < close; k = arg_end(pl, k, close)) {
		size_t v;

		while (k < close && strchr(" \t\r\n\\", c[k]))
			k++;
		if (k + n > close || strncmp(c + k, name, n))
			continue;
		for (v = k + n; v < close && strchr(" \t\r\n\\", c[v]); v++)
			;
		if (v + 1 >= close || c[v] != '=' || c[v + 1] == '=')
			continue;
		for (v++; v < close && strchr(" \t\r\n\\", c[v]); v++)
			;
		*value = v;
		return k;
	}
	return SIZE_MAX;
}

/* Does the text between from and to hold the string literal name ("name" or 'name')? */
static bool lists(const char *text, size_t from, size_t to, const char *name)
{
	struct strbuf q = STRBUF_INIT;
	bool yes;

	strbuf_addf(&q, "\"%s\"", name);
	yes = memmem(text + from, to - from, q.buf, q.len);
	strbuf_reset(&q);
	strbuf_addf(&q, "'%s'", name);
	yes = yes || memmem(text + from, to - from, q.buf, q.len);
	strbuf_release(&q);
	return yes;
}

/*
 * packages=: a list literal gets the packages it lacks at its head (ins);
 * find_packages() without include= finds them; anything else: why.
 */
static int packages_arg(const struct kb_pylines *pl, const char *text, size_t open, size_t close,
			const struct kb_package_data *pd, struct patch_insert *ins, struct strbuf *why)
{
	const char *c = pl->code.buf;
	struct strvec missing = STRVEC_INIT;
	size_t v, end;

	if (kwarg(pl, open, close, "packages", &v) == SIZE_MAX)
		return 0; /* setuptools' discovery finds them */
	if (c[v] == '[' && (end = kb_pyview_match(pl, v, close)) != SIZE_MAX) {
		for (size_t i = 0; i < pd->nr_packages; i++)
			if (!lists(text, v, end, pd->packages[i]))
				strvec_pushf(&missing, "\"%s\"", pd->packages[i]);
		kb_patch_head(ins, c, text, v, end, (const char *const *)missing.v, missing.nr);
		strvec_clear(&missing);
		return 0;
	}
	end = arg_end(pl, v, close);
	if (kb_pyview_word(pl, v, "find_packages", true) < end ||
	    kb_pyview_word(pl, v, "find_namespace_packages", true) < end) {
		if (kb_pyview_word(pl, v, "include", false) >= end)
			return 0;
		strbuf_addstr(why, "setup.py's find_packages() takes include=, which may leave the kernel's "
			      "packages out");
		return KB_ENOTSUPPORTED;
	}
	strbuf_addstr(why, "setup.py computes its packages (no list literal, no find_packages())");
	return KB_ENOTSUPPORTED;
}

/* package_data=: an entry at the head of a dict literal; none: the argument after packages= (else first). */
static int data_arg(const struct kb_pylines *pl, const char *text, size_t open, size_t close,
		    const struct kb_package_data *pd, struct patch_insert *ins, struct strbuf *why)
{
	const char *c = pl->code.buf;
	struct strbuf entry = STRBUF_INIT, arg = STRBUF_INIT;
	const char *el;
	size_t v, end, k, line;
	int rc = 0;

	strbuf_addf(&entry, "\"%s\": ", pd->package);
	kb_package_data_list(&entry, pd);
	if (kwarg(pl, open, close, "package_data", &v) != SIZE_MAX) {
		end = c[v] == '{' ? kb_pyview_match(pl, v, close) : SIZE_MAX;
		rc = KB_ENOTSUPPORTED;
		el = entry.buf;
		if (end == SIZE_MAX)
			strbuf_addstr(why, "setup.py's package_data is no dict literal");
		else if (lists(text, v, end, pd->package))
			strbuf_addf(why, "setup.py's package_data names %s already", pd->package);
		else
			rc = 0;
		if (!rc)
			kb_patch_head(ins, c, text, v, end, &el, 1);
		goto out;
	}
	strbuf_addf(&arg, "package_data={%s}", entry.buf);
	el = arg.buf;
	k = kwarg(pl, open, close, "packages", &v);
	end = k == SIZE_MAX ? close : arg_end(pl, v, close);
	for (line = k; line != SIZE_MAX && line && strchr(" \t", text[line - 1]); line--)
		;
	for (v = end; v < close && strchr(" \t", c[v]); v++)
		;
	if (end == close || c[end - 1] != ',') {
		kb_patch_head(ins, c, text, open, close, &el, 1);
	} else if (v < close && strchr("\r\n", c[v]) && (!line || text[line - 1] == '\n')) {
		/* `packages=...,` ends a line of its own: the new argument on the next, indented alike */
		while (text[v] != '\n')
			v++;
		ins->at = v + 1;
		strbuf_addf(&ins->text, "%.*s%s,%s", (int)(k - line), text + line, arg.buf,
			    text[v - 1] == '\r' ? "\r\n" : "\n");
	} else {
		ins->at = end;
		strbuf_addf(&ins->text, " %s,", arg.buf);
	}
out:
	strbuf_release(&entry);
	strbuf_release(&arg);
	return rc;
}

int kb_setup_package_data(struct strbuf *out, const char *text, size_t len, const struct kb_package_data *pd,
			  struct strbuf *why)
{
	struct patch_insert ins[2] = { { 0, false, STRBUF_INIT }, { 0, false, STRBUF_INIT } };
	struct kb_pylines pl;
	size_t open, close = SIZE_MAX;
	int rc = KB_ENOTSUPPORTED;

	kb_pylines_init(&pl, text, len);
	strbuf_reset(out);
	open = setup_call(&pl, why);
	if (open != SIZE_MAX && (close = kb_pyview_match(&pl, open, pl.code.len)) == SIZE_MAX)
		strbuf_addstr(why, "setup.py's setup( is never closed");
	if (close == SIZE_MAX)
		goto out;
	if (memmem(pl.code.buf + open, close - open, "**", 2)) {
		strbuf_addstr(why, "setup.py passes setup() a **dict, which may set package_data itself");
		goto out;
	}
	if ((rc = packages_arg(&pl, text, open, close, pd, &ins[0], why)) ||
	    (rc = data_arg(&pl, text, open, close, pd, &ins[1], why)))
		goto out;
	if (ins[0].at > ins[1].at) {
		struct patch_insert t = ins[0];

		ins[0] = ins[1];
		ins[1] = t;
	}
	kb_patch_apply(out, text, len, ins, 2);
out:
	strbuf_release(&ins[0].text);
	strbuf_release(&ins[1].text);
	kb_pylines_release(&pl);
	return rc;
}
