/*
 * Python's comments and string literals, blanked out of a copy of the
 * source (core/pyscan.h). Prefixes (r, b, f) stay as code; an
 * unterminated single-quoted literal ends at its line, as Python's own
 * error would.
 */
#include "core/common.h"
#include "core/pyscan.h"

/* C++ worth scanning: what a load_inline source holds, not a docstring. */
static bool looks_like_cxx(const char *s, size_t n)
{
	if (memmem(s, n, "#include", 8) || memmem(s, n, "__global__", 10) ||
	    memmem(s, n, "torch::", 7) || memmem(s, n, "at::", 4))
		return true;
	return memchr(s, '{', n) && memchr(s, ';', n) && memchr(s, '(', n);
}

/* Blank [from, to) of buf (a copy of the text): spaces, newlines kept. */
static void blank(struct strbuf *buf, size_t from, size_t to)
{
	for (size_t i = from; i < to && i < buf->len; i++)
		if (buf->buf[i] != '\n')
			buf->buf[i] = ' ';
}

/* The end of the string literal whose quote is at i: just past its closing quote(s). */
static size_t literal_end(const char *t, size_t len, size_t i, bool triple, size_t *body_end)
{
	char q = t[i];
	size_t k = i + (triple ? 3 : 1);

	while (k < len) {
		if (t[k] == '\\') {
			k += 2;
			continue;
		}
		if (!triple && t[k] == '\n')
			break;  /* unterminated: Python's own error, at import */
		if (t[k] == q && (!triple || (k + 2 < len && t[k + 1] == q && t[k + 2] == q))) {
			*body_end = k;
			return k + (triple ? 3 : 1);
		}
		k++;
	}
	*body_end = k < len ? k : len;
	return *body_end;
}

void kb_py_views(const char *text, size_t len, struct strbuf *cxx, struct strbuf *code)
{
	size_t i = 0;

	strbuf_reset(cxx);
	strbuf_reset(code);
	strbuf_add(cxx, text, len);
	strbuf_add(code, text, len);
	blank(cxx, 0, len);
	while (i < len) {
		char c = text[i];

		if (c == '#') {
			size_t e = i;

			while (e < len && text[e] != '\n')
				e++;
			blank(code, i, e);
			i = e;
		} else if (c == '"' || c == '\'') {
			bool triple = i + 2 < len && text[i + 1] == c && text[i + 2] == c;
			size_t body = i + (triple ? 3 : 1), body_end, end;

			end = literal_end(text, len, i, triple, &body_end);
			blank(code, body, body_end);
			if (triple && looks_like_cxx(text + body, body_end - body))
				memcpy(cxx->buf + body, text + body, body_end - body);
			i = end > i ? end : i + 1;
		} else {
			i++;
		}
	}
}
