#include "core/common.h"
#include "core/strvec.h"
#include "core/util.h"
#include "report/module_patch.h"
#include "report/module_patch_priv.h"

/*
 * The forward half of kb_module_patch (module_patch.h): find the class and
 * its forward, read forward's parameters, map the kernel's inputs to them
 * and to the module's tensors, and write the guarded call after the
 * docstring. The import half is module_import.c.
 */

struct param {
	char *name;
	char *def;          /* the default's text, NULL when none */
	bool kwonly;
};

struct forward {
	size_t line;        /* index of the def line */
	size_t open, close; /* forward's parentheses, in the text */
	struct param *params;
	size_t nr;
};

static bool ident_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

static void forward_release(struct forward *f)
{
	for (size_t i = 0; i < f->nr; i++) {
		free(f->params[i].name);
		free(f->params[i].def);
	}
	free(f->params);
}

/* Is line i `class NAME` (then '(' or ':')? */
static bool class_named(const struct kb_pylines *pl, size_t i, const char *name)
{
	const char *c = pl->code.buf;
	size_t k = pl->v[i].code + 5, n = strlen(name);

	if (!kb_pyline_starts(pl, &pl->v[i], "class"))
		return false;
	while (k < pl->v[i].body_end && (c[k] == ' ' || c[k] == '\t'))
		k++;
	if (k + n > pl->v[i].body_end || memcmp(c + k, name, n) || ident_char(c[k + n]))
		return false;
	return true;
}

/* The offset just past `def forward` on line i, or 0 when line i is no forward. */
static size_t def_forward(const struct kb_pylines *pl, size_t i)
{
	const char *c = pl->code.buf;
	size_t k;

	if (!kb_pyline_starts(pl, &pl->v[i], "def"))
		return 0;
	k = pl->v[i].code + 3;
	while (k < pl->v[i].body_end && (c[k] == ' ' || c[k] == '\t'))
		k++;
	if (k + 7 > pl->v[i].body_end || memcmp(c + k, "forward", 7) || ident_char(c[k + 7]))
		return 0;
	return k + 7;
}

/* Does one of the decorators right above line i say typing's overload? */
static bool overload_stub(const struct kb_pylines *pl, size_t i)
{
	while (i-- > 0 && (pl->v[i].blank || pl->code.buf[pl->v[i].code] == '@'))
		if (!pl->v[i].blank && memmem(pl->code.buf + pl->v[i].code,
					      pl->v[i].body_end - pl->v[i].code, "overload", 8))
			return true;
	return false;
}

/* The class's forward def line: the one at spec's line, else the class's last (no overload stub). */
static int find_forward(const struct kb_pylines *pl, const struct kb_module_patch_spec *s, size_t *out,
			struct strbuf *why)
{
	size_t cls = SIZE_MAX, end = 0, found = SIZE_MAX;

	for (size_t i = 0; i < pl->nr; i++) {
		if (!class_named(pl, i, s->class_name))
			continue;
		end = kb_pylines_block_end(pl, i);
		if (!s->forward_line || (s->forward_line > pl->v[i].lineno &&
					 kb_pylines_at(pl, s->forward_line) < end)) {
			cls = i;
			break;
		}
	}
	if (cls == SIZE_MAX) {
		strbuf_addf(why, "%s has no class %s%s", s->path, s->class_name,
			    s->forward_line ? " around the line given" : "");
		return KB_ENOTSUPPORTED;
	}
	if (s->forward_line) {
		size_t k = kb_pylines_at(pl, s->forward_line);

		while (k < end && (pl->v[k].blank || pl->code.buf[pl->v[k].code] == '@'))
			k++;
		if (k < end && def_forward(pl, k))
			found = k;
	} else {
		for (size_t k = cls + 1; k < end; k++)
			if (def_forward(pl, k) && !overload_stub(pl, k))
				found = k;
	}
	if (found == SIZE_MAX) {
		if (s->forward_line)
			strbuf_addf(why, "line %d of %s is not `def forward` of class %s, nor one of its decorators",
				    s->forward_line, s->path, s->class_name);
		else
			strbuf_addf(why, "class %s in %s has no forward method of its own", s->class_name, s->path);
		return KB_ENOTSUPPORTED;
	}
	*out = found;
	return 0;
}

/* One parameter's text [a, b) of the signature: name, default; or why not. */
static int read_param(const struct kb_pylines *pl, const char *text, size_t a, size_t b, bool kwonly,
		      struct param *p, struct strbuf *why)
{
	const char *c = pl->code.buf;
	size_t n = a, eq = SIZE_MAX;
	int depth = 0;

	while (n < b && ident_char(c[n]))
		n++;
	memset(p, 0, sizeof(*p));
	p->kwonly = kwonly;
	p->name = xstrndup(text + a, n - a);
	for (size_t k = n; k < b; k++) {
		if (c[k] == '(' || c[k] == '[' || c[k] == '{')
			depth++;
		else if (c[k] == ')' || c[k] == ']' || c[k] == '}')
			depth--;
		else if (c[k] == '=' && !depth && eq == SIZE_MAX)
			eq = k;
	}
	if (n == a) {
		strbuf_addf(why, "forward's parameter '%.*s' cannot be read", (int)(b - a), text + a);
		return KB_ENOTSUPPORTED;
	}
	if (eq != SIZE_MAX) {
		size_t d = eq + 1, e = b;

		while (d < e && strchr(" \t\r\n\\", text[d]))
			d++;
		while (e > d && strchr(" \t\r\n\\", text[e - 1]))
			e--;
		p->def = xstrndup(text + d, e - d);
	}
	return 0;
}

/* forward's parameters (self first) from its parentheses; *args and **kwargs refused. */
static int read_params(const struct kb_pylines *pl, const char *text, struct forward *f,
		       const struct kb_module_patch_spec *s, struct strbuf *why)
{
	const char *c = pl->code.buf;
	size_t a = f->open + 1;
	bool kwonly = false;
	int depth = 0, rc = 0;

	for (size_t k = f->open + 1; !rc && k <= f->close; k++) {
		size_t x = a, y = k;

		if (k < f->close && (c[k] == '(' || c[k] == '[' || c[k] == '{'))
			depth++;
		else if (k < f->close && (c[k] == ')' || c[k] == ']' || c[k] == '}'))
			depth--;
		if (k < f->close && (c[k] != ',' || depth))
			continue;
		a = k + 1;
		while (x < y && strchr(" \t\r\n\\", c[x]))
			x++;
		while (y > x && strchr(" \t\r\n\\", c[y - 1]))
			y--;
		if (x == y || (y - x == 1 && c[x] == '/'))
			continue;
		if (y - x == 1 && c[x] == '*') {
			kwonly = true;
			continue;
		}
		if (c[x] == '*') {
			strbuf_addf(why, "%s: %s.forward takes '%.*s': kernelbot cannot tell which argument is "
				    "which input of the kernel; give forward named parameters, or call the "
				    "operator by hand", s->path, s->class_name, (int)(y - x), text + x);
			return KB_ENOTSUPPORTED;
		}
		f->params = xrealloc(f->params, (f->nr + 1) * sizeof(*f->params));
		rc = read_param(pl, text, x, y, kwonly, &f->params[f->nr], why);
		f->nr++;
	}
	if (!rc && !f->nr) {
		strbuf_addf(why, "%s: %s.forward takes no self", s->path, s->class_name);
		rc = KB_ENOTSUPPORTED;
	}
	return rc;
}

/* Parse forward's def line i: parentheses, parameters, and a body on a line of its own. */
static int read_forward(const struct kb_pylines *pl, const char *text, size_t i, struct forward *f,
			const struct kb_module_patch_spec *s, struct strbuf *why)
{
	const char *c = pl->code.buf;
	size_t k = def_forward(pl, i);
	int depth = 0;

	memset(f, 0, sizeof(*f));
	f->line = i;
	while (k < pl->v[i].body_end && c[k] != '(')
		k++;
	f->open = k;
	f->close = kb_pyview_match(pl, k, pl->v[i].body_end);
	if (f->close == SIZE_MAX) {
		strbuf_addf(why, "%s: the signature of %s.forward cannot be read", s->path, s->class_name);
		return KB_ENOTSUPPORTED;
	}
	for (k = f->close + 1; k < pl->v[i].body_end; k++) {
		if (c[k] == '(' || c[k] == '[' || c[k] == '{')
			depth++;
		else if (c[k] == ')' || c[k] == ']' || c[k] == '}')
			depth--;
		else if (c[k] == ':' && !depth)
			break;
	}
	for (k++; k < pl->v[i].body_end; k++)
		if (!strchr(" \t\r\\", c[k])) {
			strbuf_addf(why, "%s: %s.forward has its body on the def line (line %d); put it on "
				    "lines of its own for kernelbot to add the kernel's call", s->path,
				    s->class_name, pl->v[i].lineno);
			return KB_ENOTSUPPORTED;
		}
	return read_params(pl, text, f, s, why);
}

/* self.fc.weight (or self.layers[0].weight) for the module path "fc.weight". */
static int tensor_expr(struct strbuf *out, const char *self, const char *path, struct strbuf *why)
{
	const char *p = path;

	strbuf_addstr(out, self);
	while (*p) {
		size_t n = strcspn(p, ".");
		bool digits = n > 0, ident = n > 0 && !(*p >= '0' && *p <= '9');

		for (size_t k = 0; k < n; k++) {
			digits = digits && p[k] >= '0' && p[k] <= '9';
			ident = ident && ident_char(p[k]);
		}
		if (digits)
			strbuf_addf(out, "[%.*s]", (int)n, p);
		else if (ident)
			strbuf_addf(out, ".%.*s", (int)n, p);
		else
			return strbuf_addf(why, "the module tensor '%s' has no attribute path", path),
			       KB_ENOTSUPPORTED;
		p += n;
		if (*p == '.')
			p++;
	}
	return 0;
}

/* The argument for ABI input name; its forward parameter is marked used. */
static int input_expr(struct strbuf *out, const struct forward *f, bool *used, const char *name,
		      const struct kb_module_patch_spec *s, struct strbuf *why)
{
	int64_t idx;
	size_t pos = 0;

	if (!strncmp(name, "param:", 6) || !strncmp(name, "buffer:", 7))
		return tensor_expr(out, f->params[0].name, strchr(name, ':') + 1, why);
	if (!strncmp(name, "input", 5) && !kb_parse_i64(name + 5, &idx) && idx >= 0) {
		for (size_t i = 1; i < f->nr; i++)
			if (!f->params[i].kwonly && pos++ == (size_t)idx) {
				used[i] = true;
				return strbuf_addstr(out, f->params[i].name), 0;
			}
	} else {
		for (size_t i = 1; i < f->nr; i++)
			if (!strcmp(f->params[i].name, name)) {
				used[i] = true;
				return strbuf_addstr(out, f->params[i].name), 0;
			}
	}
	strbuf_addf(why, "%s: the kernel's input '%s' is no parameter of %s.forward", s->path, name,
		    s->class_name);
	return KB_ENOTSUPPORTED;
}

/* A default the guard can compare with: None, True, False, a number or a one-line string. */
static bool literal(const char *d)
{
	size_t n = strlen(d);

	if (!strcmp(d, "None") || !strcmp(d, "True") || !strcmp(d, "False"))
		return true;
	if (n >= 2 && (d[0] == '"' || d[0] == '\'') && d[n - 1] == d[0] && !strpbrk(d, "\n\\") &&
	    !memchr(d + 1, d[0], n - 2))
		return true;
	if (*d == '-' || *d == '+')
		d++;
	if (!*d)
		return false;
	return strspn(d, "0123456789.eE+-_xXabcdefABCDEF") == strlen(d) && *d >= '0' && *d <= '9';
}

/* "x, self.w" into p->args, and the guard's conditions on unused parameters into cond. */
static int map_inputs(struct kb_module_patch *p, struct strbuf *cond, const struct forward *f,
		      const struct kb_module_patch_spec *s, struct strbuf *why)
{
	bool *used = xcalloc(f->nr, sizeof(*used));
	int rc = 0;

	for (size_t i = 0; !rc && i < s->nr_inputs; i++) {
		if (i)
			strbuf_addstr(&p->args, ", ");
		rc = input_expr(&p->args, f, used, s->inputs[i], s, why);
	}
	for (size_t i = 1; !rc && i < f->nr; i++) {
		const char *d = f->params[i].def;

		if (used[i])
			continue;
		if (!d || !literal(d)) {
			strbuf_addf(why, "%s: %s.forward's parameter '%s' is no input of the kernel and %s: "
				    "kernelbot cannot tell when the kernel applies", s->path, s->class_name,
				    f->params[i].name, d ? "its default is not a literal" : "has no default");
			rc = KB_ENOTSUPPORTED;
			break;
		}
		strbuf_addf(cond, "%s %s %s and ", f->params[i].name,
			    !strcmp(d, "None") || !strcmp(d, "True") || !strcmp(d, "False") ? "is" : "==", d);
	}
	free(used);
	return rc;
}

/* Where the call goes (after the docstring) and the body's indentation (and one level more). */
static int body_site(const struct kb_pylines *pl, size_t def, size_t *at, struct strbuf *indent,
		     struct strbuf *unit, const struct kb_module_patch_spec *s, struct strbuf *why)
{
	size_t din = kb_pyline_indent(pl, &pl->v[def]), first = def + 1, bin;
	const char *c = pl->code.buf;

	while (first < pl->nr && pl->v[first].blank)
		first++;
	bin = first < pl->nr ? kb_pyline_indent(pl, &pl->v[first]) : 0;
	if (first >= pl->nr || bin <= din || memcmp(c + pl->v[first].start, c + pl->v[def].start, din)) {
		strbuf_addf(why, "%s: the body of %s.forward is not indented below its def in a way "
			    "kernelbot can follow (tabs and spaces mixed?)", s->path, s->class_name);
		return KB_ENOTSUPPORTED;
	}
	strbuf_add(indent, c + pl->v[first].start, bin);
	strbuf_add(unit, c + pl->v[first].start + din, bin - din);
	*at = pl->v[def].end;
	/* a docstring stays first: the call goes after it */
	if (strchr("\"'", c[pl->v[first].code]) ||
	    (strchr("rRuUbBfF", c[pl->v[first].code]) && strchr("\"'", c[pl->v[first].code + 1])))
		*at = pl->v[first].end;
	return 0;
}

/* The line ending of the line that ends at offset at (pl's own when none). */
const char *kb_patch_eol(const struct kb_pylines *pl, const char *text, size_t at)
{
	if (at >= 2 && text[at - 1] == '\n' && text[at - 2] == '\r')
		return "\r\n";
	if (at >= 1 && text[at - 1] == '\n')
		return "\n";
	return pl->crlf ? "\r\n" : "\n";
}

int kb_module_patch_forward(struct kb_module_patch *p, const struct kb_pylines *pl, const char *text,
			    const struct kb_module_patch_spec *s, struct patch_insert *ins, struct strbuf *why)
{
	struct strbuf cond = STRBUF_INIT, indent = STRBUF_INIT, unit = STRBUF_INIT;
	struct forward f = { 0 };
	size_t def;
	const char *eol;
	int rc;

	if ((rc = find_forward(pl, s, &def, why)) || (rc = read_forward(pl, text, def, &f, s, why)) ||
	    (rc = map_inputs(p, &cond, &f, s, why)) ||
	    (rc = body_site(pl, def, &ins->at, &indent, &unit, s, why)))
		goto out;
	eol = kb_patch_eol(pl, text, ins->at);
	if (ins->at && text[ins->at - 1] != '\n')
		strbuf_addstr(&ins->text, eol);
	/* configured(self): the module built as the verified one was (its settings are baked in) */
	strbuf_addf(&ins->text, "%sif %s%s.supported(%s) and %s.configured(%s):%s%s%sreturn %s.%s(%s)%s",
		    indent.buf, cond.buf, s->alias, p->args.buf, s->alias, f.params[0].name, eol, indent.buf,
		    unit.buf, s->alias, s->op_function, p->args.buf, eol);
out:
	forward_release(&f);
	strbuf_release(&cond);
	strbuf_release(&indent);
	strbuf_release(&unit);
	return rc;
}
