#include "core/common.h"
#include "core/util.h"
#include "report/pylines.h"

/* What the scanner is inside of at the current byte. */
struct scan {
	const char *t;
	size_t len;
	char quote;          /* the open string's quote, 0 outside strings */
	bool triple;
	int depth;           /* open brackets */
};

static bool is_ident(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
	       (unsigned char)c >= 0x80;
}

/* Blank the code view's byte at i, keeping line ends. */
static void blank_at(struct strbuf *code, size_t i)
{
	if (code->buf[i] != '\n' && code->buf[i] != '\r')
		code->buf[i] = ' ';
}

/*
 * One byte of a string literal's body at i (s->quote set): blanked, the
 * string closed at its quote. Returns the next offset.
 */
static size_t in_string(struct scan *s, struct strbuf *code, size_t i)
{
	char c = s->t[i];

	if (c == '\\' && i + 1 < s->len) {
		blank_at(code, i);
		blank_at(code, i + 1);
		return i + 2;
	}
	if (c == s->quote && (!s->triple || (i + 2 < s->len && s->t[i + 1] == c && s->t[i + 2] == c))) {
		s->quote = 0;
		return i + (s->triple ? 3 : 1);
	}
	if (c == '\n' && !s->triple)
		s->quote = 0; /* unterminated: Python's own error at import; the line ends here */
	else
		blank_at(code, i);
	return i + 1;
}

static void push_line(struct kb_pylines *pl, size_t start, size_t end, int lineno, size_t *alloc)
{
	struct kb_pyline *l;
	size_t k = start;

	if (pl->nr == *alloc) {
		*alloc = *alloc ? 2 * *alloc : 64;
		pl->v = xrealloc(pl->v, *alloc * sizeof(*pl->v));
	}
	l = &pl->v[pl->nr++];
	l->start = start;
	l->end = end;
	l->lineno = lineno;
	l->body_end = end;
	if (l->body_end > start && pl->code.buf[l->body_end - 1] == '\n')
		l->body_end--;
	if (l->body_end > start && pl->code.buf[l->body_end - 1] == '\r')
		l->body_end--;
	while (k < l->body_end && strchr(" \t\f\r\n\\", pl->code.buf[k]))
		k++;
	l->code = k < l->body_end ? k : end;
	l->blank = k >= l->body_end;
}

void kb_pylines_init(struct kb_pylines *pl, const char *text, size_t len)
{
	struct scan s = { .t = text, .len = len };
	size_t i = 0, start = 0, alloc = 0;
	int lineno = 1, start_line = 1;

	memset(pl, 0, sizeof(*pl));
	strbuf_init(&pl->code, len + 1);
	strbuf_add(&pl->code, text, len);
	for (size_t k = 0; k < len; k++)
		if (text[k] == '\n') {
			pl->crlf = k > 0 && text[k - 1] == '\r';
			break;
		}
	while (i < len) {
		char c = text[i];

		if (c == '\n')
			lineno++;
		if (s.quote) {
			i = in_string(&s, &pl->code, i);
			continue;
		}
		if (c == '#') {
			while (i < len && text[i] != '\n')
				blank_at(&pl->code, i++);
			continue;
		}
		if (c == '"' || c == '\'') {
			s.quote = c;
			s.triple = i + 2 < len && text[i + 1] == c && text[i + 2] == c;
			i += s.triple ? 3 : 1;
			continue;
		}
		if (c == '\\' && i + 1 < len && (text[i + 1] == '\n' || text[i + 1] == '\r')) {
			/* a continuation: the newline is part of the statement */
			i += text[i + 1] == '\r' && i + 2 < len && text[i + 2] == '\n' ? 3 : 2;
			lineno++;
			continue;
		}
		if (c == '(' || c == '[' || c == '{')
			s.depth++;
		else if ((c == ')' || c == ']' || c == '}') && s.depth > 0)
			s.depth--;
		i++;
		if (c == '\n' && !s.depth) {
			push_line(pl, start, i, start_line, &alloc);
			start = i;
			start_line = lineno;
		}
	}
	if (start < len)
		push_line(pl, start, len, start_line, &alloc);
}

void kb_pylines_release(struct kb_pylines *pl)
{
	free(pl->v);
	strbuf_release(&pl->code);
	memset(pl, 0, sizeof(*pl));
}

size_t kb_pyline_indent(const struct kb_pylines *pl, const struct kb_pyline *l)
{
	size_t k = l->start;

	while (k < l->body_end && (pl->code.buf[k] == ' ' || pl->code.buf[k] == '\t'))
		k++;
	return k - l->start;
}

bool kb_pyline_starts(const struct kb_pylines *pl, const struct kb_pyline *l, const char *kw)
{
	size_t n = strlen(kw);

	if (l->blank || l->code + n > l->body_end || memcmp(pl->code.buf + l->code, kw, n))
		return false;
	return l->code + n == l->body_end || !is_ident(pl->code.buf[l->code + n]);
}

size_t kb_pylines_block_end(const struct kb_pylines *pl, size_t i)
{
	size_t indent = kb_pyline_indent(pl, &pl->v[i]), k;

	for (k = i + 1; k < pl->nr; k++)
		if (!pl->v[k].blank && kb_pyline_indent(pl, &pl->v[k]) <= indent)
			break;
	return k;
}

size_t kb_pylines_at(const struct kb_pylines *pl, int lineno)
{
	for (size_t i = 0; i < pl->nr; i++) {
		int last = i + 1 < pl->nr ? pl->v[i + 1].lineno - 1 : INT32_MAX;

		if (lineno >= pl->v[i].lineno && lineno <= last)
			return i;
	}
	return SIZE_MAX;
}

size_t kb_pyview_match(const struct kb_pylines *pl, size_t open, size_t limit)
{
	int depth = 0;

	for (size_t k = open; k < limit && k < pl->code.len; k++) {
		char c = pl->code.buf[k];

		if (c == '(' || c == '[' || c == '{')
			depth++;
		else if ((c == ')' || c == ']' || c == '}') && --depth == 0)
			return k;
	}
	return SIZE_MAX;
}
