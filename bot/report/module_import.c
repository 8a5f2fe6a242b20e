#include "core/common.h"
#include "core/util.h"
#include "report/module_patch.h"
#include "report/module_patch_priv.h"

#include <ctype.h>

/*
 * The import half of kb_module_patch (module_patch.h) and the assembly of
 * both insertions into the patched text.
 */

static bool top_level(const struct kb_pylines *pl, size_t i)
{
	return !pl->v[i].blank && kb_pyline_indent(pl, &pl->v[i]) == 0;
}

static bool is_import(const struct kb_pylines *pl, size_t i)
{
	return kb_pyline_starts(pl, &pl->v[i], "import") || kb_pyline_starts(pl, &pl->v[i], "from");
}

/* A from-import other than `from __future__`: the style the new import follows. */
static bool is_from(const struct kb_pylines *pl, size_t i)
{
	const char *c = pl->code.buf + pl->v[i].code;

	return kb_pyline_starts(pl, &pl->v[i], "from") && strncmp(c, "from __future__", 15);
}

static bool clause(const struct kb_pylines *pl, size_t i)
{
	static const char *const words[] = { "except", "else", "elif", "finally" };

	for (size_t k = 0; k < ARRAY_SIZE(words); k++)
		if (kb_pyline_starts(pl, &pl->v[i], words[k]))
			return true;
	return false;
}

/* A top-level statement that opens a block (try:, if ...:, with ...:) ends in ':' in the code view. */
static bool opens_block(const struct kb_pylines *pl, size_t i)
{
	size_t e = pl->v[i].body_end;

	while (e > pl->v[i].code && strchr(" \t\\", pl->code.buf[e - 1]))
		e--;
	return e > pl->v[i].code && pl->code.buf[e - 1] == ':';
}

/*
 * The last line of the compound statement headed by top-level line i, its
 * except/else/finally clauses included; *imports: it holds an import (*from:
 * the last one is a from-import).
 */
static size_t compound_last(const struct kb_pylines *pl, size_t i, bool *imports, bool *from)
{
	size_t end = kb_pylines_block_end(pl, i), last = i;

	while (end < pl->nr && top_level(pl, end) && clause(pl, end))
		end = kb_pylines_block_end(pl, end);
	for (size_t k = i + 1; k < end; k++) {
		if (pl->v[k].blank)
			continue;
		last = k;
		if (is_import(pl, k)) {
			*imports = true;
			*from = is_from(pl, k);
		}
	}
	return last;
}

/*
 * Where the import goes: after the last top-level import (or block of
 * imports) before the first top-level def, class or decorator; without
 * one, after the module docstring or before the first statement.
 */
static size_t import_site(const struct kb_pylines *pl, bool *from)
{
	size_t at = SIZE_MAX, first = SIZE_MAX;

	*from = false;
	for (size_t i = 0; i < pl->nr; i++) {
		bool imports = false, f = false;
		size_t last;

		if (!top_level(pl, i))
			continue;
		if (first == SIZE_MAX)
			first = i;
		if (kb_pyline_starts(pl, &pl->v[i], "def") || kb_pyline_starts(pl, &pl->v[i], "class") ||
		    kb_pyline_starts(pl, &pl->v[i], "async") || pl->code.buf[pl->v[i].code] == '@')
			break;
		if (is_import(pl, i)) {
			at = pl->v[i].end;
			*from = is_from(pl, i);
		} else if (opens_block(pl, i)) {
			last = compound_last(pl, i, &imports, &f);
			if (imports) {
				at = pl->v[last].end;
				*from = f;
			}
			i = last;
		}
	}
	if (at != SIZE_MAX)
		return at;
	if (first == SIZE_MAX)
		return pl->nr ? pl->v[pl->nr - 1].end : 0;
	if (strchr("\"'", pl->code.buf[pl->v[first].code]))
		return pl->v[first].end; /* the module docstring stays first */
	return pl->v[first].start;
}

static int import_insert(const struct kb_pylines *pl, const char *text, const struct kb_module_patch_spec *s,
			 struct patch_insert *ins)
{
	const char *dot = strrchr(s->op_module, '.'), *eol;
	bool from;

	ins->at = import_site(pl, &from);
	eol = kb_patch_eol(pl, text, ins->at);
	if (ins->at && text[ins->at - 1] != '\n')
		strbuf_addstr(&ins->text, eol);
	if (from && dot)
		strbuf_addf(&ins->text, "from %.*s import %s as %s%s", (int)(dot - s->op_module), s->op_module,
			    dot + 1, s->alias, eol);
	else
		strbuf_addf(&ins->text, "import %s as %s%s", s->op_module, s->alias, eol);
	return 0;
}

/* The 1-based line at offset at of text. */
static int line_of(const char *text, size_t at)
{
	int line = 1;

	for (size_t k = 0; k < at; k++)
		line += text[k] == '\n';
	return line;
}

/* Does word occur in the code view as a whole identifier? */
static bool names(const struct kb_pylines *pl, const char *word)
{
	size_t n = strlen(word);
	const char *c = pl->code.buf, *p = c;

	while ((p = memmem(p, pl->code.len - (size_t)(p - c), word, n))) {
		bool before = p > c && (isalnum((unsigned char)p[-1]) || p[-1] == '_');
		bool after = isalnum((unsigned char)p[n]) || p[n] == '_';

		if (!before && !after)
			return true;
		p += n;
	}
	return false;
}

void kb_module_patch_init(struct kb_module_patch *p)
{
	memset(p, 0, sizeof(*p));
	strbuf_init(&p->text, 0);
	strbuf_init(&p->args, 0);
}

void kb_module_patch_release(struct kb_module_patch *p)
{
	strbuf_release(&p->text);
	strbuf_release(&p->args);
}

int kb_module_patch(struct kb_module_patch *p, const char *text, size_t len,
		    const struct kb_module_patch_spec *s, struct strbuf *why)
{
	struct kb_pylines pl;
	struct patch_insert ins[2] = { { 0, false, STRBUF_INIT }, { 0, true, STRBUF_INIT } };
	size_t from = 0, shift = 0;
	int rc;

	kb_pylines_init(&pl, text, len);
	strbuf_reset(&p->text);
	strbuf_reset(&p->args);
	if (names(&pl, s->alias)) {
		strbuf_addf(why, "%s already names %s: it is wired already", s->path, s->alias);
		rc = KB_ENOTSUPPORTED;
		goto out;
	}
	if ((rc = kb_module_patch_forward(p, &pl, text, s, &ins[1], why)) ||
	    (rc = import_insert(&pl, text, s, &ins[0])))
		goto out;
	if (ins[0].at > ins[1].at) { /* a class above the imports */
		struct patch_insert t = ins[0];

		ins[0] = ins[1];
		ins[1] = t;
	}
	for (size_t i = 0; i < 2; i++) {
		/* an inserted text that starts with a line end ends the unterminated line it follows */
		int line = line_of(text, ins[i].at) + (int)shift + (strchr("\r\n", ins[i].text.buf[0]) != NULL);

		strbuf_add(&p->text, text + from, ins[i].at - from);
		*(ins[i].guard ? &p->guard_line : &p->import_line) = line;
		strbuf_add(&p->text, ins[i].text.buf, ins[i].text.len);
		for (size_t k = 0; k < ins[i].text.len; k++)
			shift += ins[i].text.buf[k] == '\n';
		from = ins[i].at;
	}
	strbuf_add(&p->text, text + from, len - from);
out:
	strbuf_release(&ins[0].text);
	strbuf_release(&ins[1].text);
	kb_pylines_release(&pl);
	return rc;
}
