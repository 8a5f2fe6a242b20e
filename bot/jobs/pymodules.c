/*
 * nn.Module classes and operator functions of a .py file, by reading it
 * (pymodules.h). The scan walks the code view (core/pyscan.h: comments
 * and string contents blanked, quotes kept) one logical line at a time:
 * a line ends at a newline outside brackets and strings, so a string
 * that spans lines or a signature split over several never looks like a
 * statement of its own. Indentation opens and closes class and def
 * scopes; imports are followed for the names `nn`, `Module` and
 * `kernelbot` may be bound to.
 */
#include "core/common.h"
#include "core/pyscan.h"
#include "core/util.h"
#include "jobs/pymodules.h"

#define MAX_PARAM_TEXT 200
#define MAX_DEPTH 64

struct scope {
	int indent;
	bool is_class;
	size_t op;       /* the class's index in ops; SIZE_MAX: not recorded */
	bool in_def;     /* this scope or one around it is a def */
	char *qual;      /* the class's qualified name */
};

struct scan {
	const char *text, *code;
	size_t len;
	struct kb_pyops *ops;
	struct strvec alias_names, alias_targets; /* import bindings, last one wins */
	struct scope stack[MAX_DEPTH];
	size_t depth;
	bool pending_marked, pending_static;
	int last_line;  /* the last line of the last statement seen */
};

static bool ident_char(int c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '_' || (unsigned char)c >= 0x80;
}

static bool blank_char(int c)
{
	return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\n';
}

/* Just past the string literal whose opening quote is at code[i]. */
static size_t skip_string(const char *code, size_t len, size_t i)
{
	char q = code[i];
	bool triple = i + 2 < len && code[i + 1] == q && code[i + 2] == q;
	size_t k = i + (triple ? 3 : 1);

	for (; k < len; k++) {
		if (!triple && code[k] == '\n')
			return k;
		if (code[k] == q && (!triple || (k + 2 < len && code[k + 1] == q && code[k + 2] == q)))
			return k + (triple ? 3 : 1);
	}
	return len;
}

/* The end of the logical line that starts at i: its newline, or len. */
static size_t line_end(const char *code, size_t len, size_t i)
{
	int depth = 0;

	while (i < len) {
		char c = code[i];

		if (c == '"' || c == '\'') {
			i = skip_string(code, len, i);
			continue;
		}
		if (c == '\\' && i + 1 < len && (code[i + 1] == '\n' || code[i + 1] == '\r')) {
			i += code[i + 1] == '\r' && i + 2 < len && code[i + 2] == '\n' ? 3 : 2;
			continue;
		}
		if (c == '(' || c == '[' || c == '{')
			depth++;
		else if ((c == ')' || c == ']' || c == '}') && depth > 0)
			depth--;
		else if (c == '\n' && !depth)
			return i;
		i++;
	}
	return len;
}

/* Skip blanks (newlines and continuations too: inside brackets they are blanks). */
static size_t skip_blank(const char *s, size_t i, size_t e)
{
	while (i < e && (blank_char(s[i]) || s[i] == '\\'))
		i++;
	return i;
}

/* The keyword kw at s[i] as a whole word: the index after it, or 0. */
static size_t keyword(const char *s, size_t i, size_t e, const char *kw)
{
	size_t n = strlen(kw);

	if (i + n > e || strncmp(s + i, kw, n) || (i + n < e && ident_char(s[i + n])))
		return 0;
	return i + n;
}

/* A dotted name at s[i] (blanks around the dots allowed) into out; the index after it. */
static size_t dotted(const char *s, size_t i, size_t e, struct strbuf *out)
{
	strbuf_reset(out);
	for (;;) {
		size_t j = i;

		while (j < e && ident_char(s[j]))
			j++;
		if (j == i)
			return i;
		strbuf_add(out, s + i, j - i);
		i = skip_blank(s, j, e);
		if (i >= e || s[i] != '.')
			return j;
		strbuf_addch(out, '.');
		i = skip_blank(s, i + 1, e);
	}
}

/* The bracket matching the one at s[open], or e. */
static size_t matching(const char *s, size_t len, size_t open, size_t e)
{
	int depth = 0;

	for (size_t i = open; i < e;) {
		char c = s[i];

		if (c == '"' || c == '\'') {
			i = skip_string(s, len, i);
			continue;
		}
		if (c == '(' || c == '[' || c == '{')
			depth++;
		else if ((c == ')' || c == ']' || c == '}') && --depth == 0)
			return i;
		i++;
	}
	return e;
}

/* Source [a, b) with its strings as written and blanks collapsed. */
static void render(struct strbuf *out, const struct scan *sc, size_t a, size_t b)
{
	bool space = false;

	strbuf_reset(out);
	for (size_t i = a; i < b;) {
		char c = sc->code[i];

		if (c == '"' || c == '\'') {
			size_t e = skip_string(sc->code, sc->len, i);

			if (space && out->len)
				strbuf_addch(out, ' ');
			space = false;
			for (size_t k = i; k < e && k < b; k++)
				strbuf_addch(out, blank_char(sc->text[k]) ? ' ' : sc->text[k]);
			i = e;
			continue;
		}
		if (blank_char(c) || c == '\\') {
			space = true;
			i++;
			continue;
		}
		if (space && out->len)
			strbuf_addch(out, ' ');
		space = false;
		strbuf_addch(out, c);
		i++;
	}
	if (out->len > MAX_PARAM_TEXT) {
		strbuf_setlen(out, MAX_PARAM_TEXT);
		strbuf_addstr(out, "...");
	}
}

/* Call fn on each top-level comma-separated item of s[a, b) (empty ones skipped). */
static void split_items(struct scan *sc, size_t a, size_t b,
			void (*fn)(struct scan *, size_t, size_t, void *), void *payload)
{
	size_t start = a;

	for (size_t i = a; i <= b;) {
		char c = i < b ? sc->code[i] : ',';

		if (i < b && (c == '"' || c == '\'')) {
			i = skip_string(sc->code, sc->len, i);
			continue;
		}
		if (i < b && (c == '(' || c == '[' || c == '{')) {
			i = matching(sc->code, sc->len, i, b) + 1;
			continue;
		}
		if (c == ',') {
			size_t x = skip_blank(sc->code, start, i);

			if (x < i)
				fn(sc, x, i, payload);
			start = i + 1;
		}
		i++;
	}
}

/* --- imports --- */

static void bind(struct scan *sc, const char *name, const char *target)
{
	strvec_push(&sc->alias_names, name);
	strvec_push(&sc->alias_targets, target);
}

/* name with its first component replaced by what an import bound it to. */
static void resolve(const struct scan *sc, const char *name, struct strbuf *out)
{
	size_t n = strcspn(name, ".");

	strbuf_reset(out);
	for (size_t i = sc->alias_names.nr; i-- > 0;) {
		if (strlen(sc->alias_names.v[i]) == n && !strncmp(sc->alias_names.v[i], name, n)) {
			strbuf_addf(out, "%s%s", sc->alias_targets.v[i], name + n);
			return;
		}
	}
	/* `nn` unbound: the convention (a star import, a re-export) */
	if (n == 2 && !strncmp(name, "nn", 2))
		strbuf_addf(out, "torch.nn%s", name + n);
	else
		strbuf_addstr(out, name);
}

static void import_item(struct scan *sc, size_t a, size_t b, void *payload)
{
	const char *from = payload; /* NULL: `import a.b as c` */
	struct strbuf name = STRBUF_INIT, as = STRBUF_INIT, full = STRBUF_INIT;
	size_t i = dotted(sc->code, a, b, &name), k;

	if (!name.len)
		goto out;
	i = skip_blank(sc->code, i, b);
	if ((k = keyword(sc->code, i, b, "as")))
		dotted(sc->code, skip_blank(sc->code, k, b), b, &as);
	if (from) {
		strbuf_addf(&full, "%s.%s", from, name.buf);
		bind(sc, as.len ? as.buf : name.buf, full.buf);
	} else if (as.len) {
		bind(sc, as.buf, name.buf);
	} else {
		strbuf_setlen(&name, strcspn(name.buf, "."));
		bind(sc, name.buf, name.buf);
	}
out:
	strbuf_release(&name);
	strbuf_release(&as);
	strbuf_release(&full);
}

static void import_stmt(struct scan *sc, size_t p, size_t e)
{
	const char *c = sc->code;
	struct strbuf from = STRBUF_INIT;
	size_t i;

	if ((i = keyword(c, p, e, "import"))) {
		split_items(sc, i, e, import_item, NULL);
	} else if ((i = keyword(c, p, e, "from"))) {
		i = skip_blank(c, i, e);
		if (i < e && c[i] == '.')
			goto out; /* relative: nothing of torch or kernelbot */
		i = skip_blank(c, dotted(c, i, e, &from), e);
		if (!from.len || !(i = keyword(c, i, e, "import")))
			goto out;
		i = skip_blank(c, i, e);
		if (i < e && c[i] == '(') {
			size_t close = matching(c, sc->len, i, e);

			split_items(sc, i + 1, close, import_item, from.buf);
		} else {
			split_items(sc, i, e, import_item, from.buf);
		}
	}
out:
	strbuf_release(&from);
}

/* --- classes and defs --- */

static struct kb_pyop *new_op(struct scan *sc, const char *name, int line, int indent)
{
	struct kb_pyops *ops = sc->ops;
	struct kb_pyop *op;

	if (ops->nr == ops->alloc) {
		ops->alloc = ops->alloc ? 2 * ops->alloc : 8;
		ops->v = xrealloc(ops->v, ops->alloc * sizeof(*ops->v));
	}
	op = &ops->v[ops->nr++];
	memset(op, 0, sizeof(*op));
	op->name = xstrdup(name);
	op->line = op->end_line = line;
	op->indent = indent;
	strvec_init(&op->params);
	strvec_init(&op->init_params);
	strvec_init(&op->bases);
	return op;
}

static void base_item(struct scan *sc, size_t a, size_t b, void *payload)
{
	struct kb_pyop *op = payload;
	struct strbuf name = STRBUF_INIT;
	size_t i = dotted(sc->code, a, b, &name);

	i = skip_blank(sc->code, i, b);
	/* keywords (metaclass=...) and starred bases are no base class */
	if (name.len && (i >= b || sc->code[i] == '[' || sc->code[i] == '('))
		strvec_push(&op->bases, name.buf);
	strbuf_release(&name);
}

static void class_stmt(struct scan *sc, size_t i, size_t e, int indent, int line)
{
	struct strbuf name = STRBUF_INIT, qual = STRBUF_INIT;
	struct scope *top = sc->depth ? &sc->stack[sc->depth - 1] : NULL;
	struct scope *s;
	bool in_def = top && top->in_def;

	i = skip_blank(sc->code, i, e);
	while (i < e && ident_char(sc->code[i]))
		strbuf_addch(&name, sc->code[i++]);
	if (!name.len || sc->depth >= MAX_DEPTH)
		goto out;
	if (top && top->is_class && top->qual)
		strbuf_addf(&qual, "%s.", top->qual);
	strbuf_addstr(&qual, name.buf);
	s = &sc->stack[sc->depth++];
	memset(s, 0, sizeof(*s));
	s->indent = indent;
	s->is_class = true;
	s->in_def = in_def;
	s->op = SIZE_MAX;
	s->qual = in_def || (top && !top->is_class) ? NULL : strbuf_detach(&qual, NULL);
	if (s->qual) {
		struct kb_pyop *op = new_op(sc, s->qual, line, indent);

		s->op = sc->ops->nr - 1;
		i = skip_blank(sc->code, i, e);
		if (i < e && sc->code[i] == '(')
			split_items(sc, i + 1, matching(sc->code, sc->len, i, e), base_item, op);
	}
out:
	strbuf_release(&name);
	strbuf_release(&qual);
}

static void param_item(struct scan *sc, size_t a, size_t b, void *payload)
{
	struct strbuf sb = STRBUF_INIT;

	render(&sb, sc, a, b);
	if (sb.len)
		strvec_push(payload, sb.buf);
	strbuf_release(&sb);
}

/* The parameters of the def whose name ends at s[i], into params (the first left out when drop_first). */
static void def_params(struct scan *sc, size_t i, size_t e, struct strvec *params, bool drop_first)
{
	struct strvec all = STRVEC_INIT;

	i = skip_blank(sc->code, i, e);
	if (i >= e || sc->code[i] != '(')
		return;
	split_items(sc, i + 1, matching(sc->code, sc->len, i, e), param_item, &all);
	strvec_clear(params);
	for (size_t k = drop_first && all.nr ? 1 : 0; k < all.nr; k++)
		strvec_push(params, all.v[k]);
	strvec_clear(&all);
}

static void def_stmt(struct scan *sc, size_t i, size_t e, int indent, int line)
{
	struct scope *top = sc->depth ? &sc->stack[sc->depth - 1] : NULL;
	struct strbuf name = STRBUF_INIT;
	struct scope *s;

	i = skip_blank(sc->code, i, e);
	while (i < e && ident_char(sc->code[i]))
		strbuf_addch(&name, sc->code[i++]);
	if (!name.len || sc->depth >= MAX_DEPTH)
		goto out;
	if (!top) {
		struct kb_pyop *op = new_op(sc, name.buf, line, indent);

		op->is_function = true;
		op->marked = sc->pending_marked;
		op->forward_line = line;
		def_params(sc, i, e, &op->params, false);
	} else if (top->is_class && top->op != SIZE_MAX) {
		struct kb_pyop *cls = &sc->ops->v[top->op];

		if (!strcmp(name.buf, "forward")) {
			cls->forward_line = line;
			def_params(sc, i, e, &cls->params, !sc->pending_static);
		} else if (!strcmp(name.buf, "__init__")) {
			cls->has_init = true;
			def_params(sc, i, e, &cls->init_params, true);
		}
	}
	s = &sc->stack[sc->depth++];
	memset(s, 0, sizeof(*s));
	s->indent = indent;
	s->in_def = true;
	s->op = SIZE_MAX;
out:
	strbuf_release(&name);
}

static void decorator(struct scan *sc, size_t i, size_t e)
{
	struct strbuf name = STRBUF_INIT, full = STRBUF_INIT;

	dotted(sc->code, skip_blank(sc->code, i, e), e, &name);
	resolve(sc, name.buf, &full);
	if (!strcmp(full.buf, "kernelbot.operator"))
		sc->pending_marked = true;
	if (!strcmp(name.buf, "staticmethod"))
		sc->pending_static = true;
	strbuf_release(&name);
	strbuf_release(&full);
}

/* Close the scopes a statement at indent leaves. */
static void close_scopes(struct scan *sc, int indent)
{
	while (sc->depth && sc->stack[sc->depth - 1].indent >= indent) {
		struct scope *s = &sc->stack[--sc->depth];

		if (s->op != SIZE_MAX)
			sc->ops->v[s->op].end_line = sc->last_line;
		free(s->qual);
	}
}

static void statement(struct scan *sc, size_t p, size_t e, int indent, int line)
{
	const char *c = sc->code;
	size_t i;

	close_scopes(sc, indent);
	if (c[p] == '@') {
		decorator(sc, p + 1, e);
		return;
	}
	if ((i = keyword(c, p, e, "class"))) {
		class_stmt(sc, i, e, indent, line);
	} else if ((i = keyword(c, p, e, "def"))) {
		def_stmt(sc, i, e, indent, line);
	} else if ((i = keyword(c, p, e, "async"))) {
		/* an async def is no operator, but its body is a scope all the same */
		if ((i = keyword(c, skip_blank(c, i, e), e, "def")) && sc->depth < MAX_DEPTH) {
			struct scope *s = &sc->stack[sc->depth++];

			memset(s, 0, sizeof(*s));
			s->indent = indent;
			s->in_def = true;
			s->op = SIZE_MAX;
		}
	} else if (keyword(c, p, e, "import") || keyword(c, p, e, "from")) {
		import_stmt(sc, p, e);
	}
	sc->pending_marked = sc->pending_static = false;
}

/* --- after the scan: which classes are modules, and inherited signatures --- */

/*
 * torch.nn.Module itself, or one of torch.nn's module classes (a subclass
 * of nn.Linear or nn.LayerNorm is a module too): a capitalised name
 * directly under torch.nn, but for the parameter and buffer tensors.
 */
static bool torch_module(const char *full)
{
	static const char *const tensors[] = { "Parameter", "UninitializedParameter",
					       "UninitializedBuffer", "Buffer" };
	const char *last = full + 9;

	if (!strcmp(full, "torch.nn.modules.module.Module") || !strcmp(full, "torch.nn.modules.Module"))
		return true;
	if (strncmp(full, "torch.nn.", 9) || !(*last >= 'A' && *last <= 'Z') || strchr(last, '.'))
		return false;
	for (size_t i = 0; i < ARRAY_SIZE(tensors); i++)
		if (!strcmp(last, tensors[i]))
			return false;
	return true;
}

/* The class of the file a base names: by its qualified name, else its last component. */
static struct kb_pyop *file_class(struct kb_pyops *ops, const char *base)
{
	for (size_t i = 0; i < ops->nr; i++)
		if (!ops->v[i].is_function && !strcmp(ops->v[i].name, base))
			return &ops->v[i];
	for (size_t i = 0; i < ops->nr; i++) {
		const char *dot = strrchr(ops->v[i].name, '.');

		if (!ops->v[i].is_function && dot && !strcmp(dot + 1, base))
			return &ops->v[i];
	}
	return NULL;
}

static void settle(struct scan *sc)
{
	struct kb_pyops *ops = sc->ops;
	struct strbuf full = STRBUF_INIT;
	bool changed = true;

	for (size_t i = 0; i < ops->nr; i++)
		for (size_t b = 0; b < ops->v[i].bases.nr && !ops->v[i].is_module; b++) {
			resolve(sc, ops->v[i].bases.v[b], &full);
			ops->v[i].is_module = torch_module(full.buf);
		}
	/* a subclass of a module of the file, and what it inherits from it */
	while (changed) {
		changed = false;
		for (size_t i = 0; i < ops->nr; i++) {
			struct kb_pyop *op = &ops->v[i];

			for (size_t b = 0; b < op->bases.nr; b++) {
				struct kb_pyop *base = file_class(ops, op->bases.v[b]);

				if (!base || base == op)
					continue;
				if (base->is_module && !op->is_module)
					op->is_module = changed = true;
				if (!op->forward_line && base->forward_line) {
					op->forward_line = base->forward_line;
					strvec_pushv(&op->params, base->params.v);
					changed = true;
				}
				if (!op->has_init && base->has_init) {
					op->has_init = true;
					strvec_pushv(&op->init_params, base->init_params.v);
					changed = true;
				}
			}
		}
	}
	strbuf_release(&full);
}

void kb_pyops_scan(struct kb_pyops *out, const char *text, size_t len)
{
	struct strbuf cxx = STRBUF_INIT, code = STRBUF_INIT;
	struct scan sc;
	size_t i = 0;
	int line = 1;

	kb_pyops_release(out);
	kb_py_views(text, len, &cxx, &code);
	memset(&sc, 0, sizeof(sc));
	sc.text = text;
	sc.code = code.buf;
	sc.len = code.len;
	sc.ops = out;
	strvec_init(&sc.alias_names);
	strvec_init(&sc.alias_targets);
	while (i < sc.len) {
		size_t e = line_end(sc.code, sc.len, i), p = i;
		int indent = 0, lines = 0;

		for (; p < e && (sc.code[p] == ' ' || sc.code[p] == '\t' || sc.code[p] == '\f' ||
				 sc.code[p] == '\r'); p++)
			indent = sc.code[p] == '\t' ? (indent / 8 + 1) * 8 : indent + (sc.code[p] == ' ');
		for (size_t k = i; k < e; k++)
			lines += sc.code[k] == '\n';
		if (p < e && !blank_char(sc.code[p])) {
			statement(&sc, p, e, indent, line);
			sc.last_line = line + lines;
		}
		line += lines + 1;
		i = e + 1;
	}
	close_scopes(&sc, -1);
	settle(&sc);
	for (size_t k = 0; k < out->nr; k++)
		strvec_clear(&out->v[k].bases);
	strvec_clear(&sc.alias_names);
	strvec_clear(&sc.alias_targets);
	strbuf_release(&cxx);
	strbuf_release(&code);
}

void kb_pyops_release(struct kb_pyops *ops)
{
	for (size_t i = 0; i < ops->nr; i++) {
		free(ops->v[i].name);
		strvec_clear(&ops->v[i].params);
		strvec_clear(&ops->v[i].init_params);
		strvec_clear(&ops->v[i].bases);
	}
	free(ops->v);
	memset(ops, 0, sizeof(*ops));
}

const struct kb_pyop *kb_pyops_find(const struct kb_pyops *ops, const char *name)
{
	for (size_t i = 0; i < ops->nr; i++)
		if (!strcmp(ops->v[i].name, name))
			return &ops->v[i];
	return NULL;
}

void kb_pyop_signature(struct strbuf *out, const struct kb_pyop *op, bool init)
{
	const struct strvec *p = init ? &op->init_params : &op->params;

	strbuf_reset(out);
	strbuf_addch(out, '(');
	for (size_t i = 0; i < p->nr; i++)
		strbuf_addf(out, "%s%s", i ? ", " : "", p->v[i]);
	strbuf_addch(out, ')');
}

void kb_pyparam_name(struct strbuf *out, const char *p, bool *required, int *kind)
{
	size_t n;

	strbuf_reset(out);
	*kind = 0;
	if (!strcmp(p, "/")) {
		*kind = 3;
		*required = false;
		return;
	}
	if (p[0] == '*') {
		*kind = p[1] == '*' ? 2 : 1;
		p += *kind;
	}
	while (*p == ' ')
		p++;
	for (n = 0; ident_char(p[n]); n++)
		;
	strbuf_add(out, p, n);
	*required = !*kind && !strchr(p + n, '=');
}
