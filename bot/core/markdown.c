#include "core/common.h"
#include "core/util.h"
#include "core/markdown.h"

#include <math.h>

/* U+FFFD REPLACEMENT CHARACTER, for invalid input bytes */
static const char replacement[] = "\xEF\xBF\xBD";

/*
 * Length of the valid UTF-8 sequence at s (1-4), or 0 when the bytes there
 * are not one (overlong forms, surrogates and values past U+10FFFF are
 * invalid, as in RFC 3629).
 */
static size_t utf8_seq(const unsigned char *s, size_t len)
{
	unsigned char c = s[0];
	size_t n;
	uint32_t cp, min;

	if (c < 0x80)
		return 1;
	if (c >= 0xC2 && c <= 0xDF) {
		n = 2; cp = c & 0x1F; min = 0x80;
	} else if (c >= 0xE0 && c <= 0xEF) {
		n = 3; cp = c & 0x0F; min = 0x800;
	} else if (c >= 0xF0 && c <= 0xF4) {
		n = 4; cp = c & 0x07; min = 0x10000;
	} else {
		return 0;
	}
	if (len < n)
		return 0;
	for (size_t i = 1; i < n; i++) {
		if ((s[i] & 0xC0) != 0x80)
			return 0;
		cp = (cp << 6) | (s[i] & 0x3F);
	}
	if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
		return 0;
	return n;
}

size_t kb_utf8_chars(const char *s, size_t len)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t i = 0, chars = 0;

	while (i < len) {
		size_t n = utf8_seq(p + i, len - i);

		i += n ? n : 1;
		chars++;
	}
	return chars;
}

size_t kb_utf8_prefix(const char *s, size_t len, size_t max_chars, size_t max_bytes)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t i = 0, chars = 0;

	while (i < len && chars < max_chars) {
		size_t n = utf8_seq(p + i, len - i);

		if (!n)
			n = 1;
		if (i + n > max_bytes)
			break;
		i += n;
		chars++;
	}
	return i;
}

void kb_md_add_utf8(struct strbuf *sb, const char *s, size_t len)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t i = 0, run = 0;

	/* copy valid runs in one go; replace each invalid byte */
	while (i < len) {
		size_t n = utf8_seq(p + i, len - i);

		if (n) {
			i += n;
			continue;
		}
		strbuf_add(sb, s + run, i - run);
		strbuf_addstr(sb, replacement);
		run = ++i;
	}
	strbuf_add(sb, s + run, len - run);
}

bool kb_md_fits(const struct strbuf *sb, const struct kb_md_limits *lim)
{
	if (lim->max_bytes && sb->len > lim->max_bytes)
		return false;
	/* chars <= bytes: count only when it could matter */
	if (lim->max_chars && sb->len > lim->max_chars &&
	    kb_utf8_chars(sb->buf, sb->len) > lim->max_chars)
		return false;
	return true;
}

/*
 * Walk s code point by code point, up to max_chars of them (SIZE_MAX: all);
 * each ASCII byte goes to ascii(), each valid multi-byte sequence is copied,
 * each invalid byte becomes U+FFFD. Returns true when s was cut.
 */
static bool walk(struct strbuf *sb, const char *s, size_t max_chars,
		 void (*ascii)(struct strbuf *, char, void *), void *payload)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t len = strlen(s), i = 0, chars = 0;

	while (i < len) {
		size_t n;

		if (chars == max_chars)
			return true;
		n = utf8_seq(p + i, len - i);
		if (n == 1)
			ascii(sb, s[i], payload);
		else if (n)
			strbuf_add(sb, s + i, n);
		else
			strbuf_addstr(sb, replacement);
		i += n ? n : 1;
		chars++;
	}
	return false;
}

static void html_ascii(struct strbuf *sb, char c, void *payload)
{
	switch (c) {
	case '\n': case '\r': case '\t':
		strbuf_addch(sb, ' ');
		return;
	case '<':
		strbuf_addstr(sb, "&lt;");
		return;
	case '>':
		strbuf_addstr(sb, "&gt;");
		return;
	case '&':
		strbuf_addstr(sb, "&amp;");
		return;
	default:
		if ((unsigned char)c < 0x20 || c == 0x7F)
			return;
		strbuf_addch(sb, c);
	}
}

/* markdown specials backslash-escaped, the rest as html_ascii */
static void escape_ascii(struct strbuf *sb, char c, void *payload)
{
	switch (c) {
	case '\\': case '`': case '*': case '_': case '[': case ']': case '|':
	case '#': case '~':
		strbuf_addch(sb, '\\');
		strbuf_addch(sb, c);
		return;
	default:
		html_ascii(sb, c, payload);
	}
}

void kb_md_escape(struct strbuf *sb, const char *s)
{
	if (s)
		walk(sb, s, SIZE_MAX, escape_ascii, NULL);
}

void kb_md_escape_n(struct strbuf *sb, const char *s, size_t max_chars)
{
	if (s && walk(sb, s, max_chars, escape_ascii, NULL))
		strbuf_addstr(sb, "…");
}

static void code_ascii(struct strbuf *sb, char c, void *payload)
{
	bool in_table = *(bool *)payload;

	if (c == '\n' || c == '\r' || c == '\t')
		strbuf_addch(sb, ' ');
	else if ((unsigned char)c < 0x20 || c == 0x7F)
		return;
	else if (c == '|' && in_table)
		strbuf_addstr(sb, "\\|");
	else
		strbuf_addch(sb, c);
}

static size_t longest_backtick_run(const char *s, size_t len)
{
	size_t best = 0, run = 0;

	for (size_t i = 0; i < len; i++) {
		run = s[i] == '`' ? run + 1 : 0;
		if (run > best)
			best = run;
	}
	return best;
}

void kb_md_code_n(struct strbuf *sb, const char *s, size_t max_chars, bool in_table)
{
	size_t ticks, start, len;
	bool cut, pad;

	if (!s || !*s)
		return;
	len = strlen(s);
	ticks = longest_backtick_run(s, len) + 1;
	for (size_t i = 0; i < ticks; i++)
		strbuf_addch(sb, '`');
	/* a span that starts or ends with a backtick needs a space inside the fence */
	pad = s[0] == '`' || s[len - 1] == '`';
	if (pad)
		strbuf_addch(sb, ' ');
	start = sb->len;
	cut = walk(sb, s, max_chars, code_ascii, &in_table);
	if (cut && sb->len > start && sb->buf[sb->len - 1] == '`' && !pad)
		strbuf_addch(sb, ' ');
	if (pad)
		strbuf_addch(sb, ' ');
	for (size_t i = 0; i < ticks; i++)
		strbuf_addch(sb, '`');
	if (cut)
		strbuf_addstr(sb, "…");
}

void kb_md_code(struct strbuf *sb, const char *s, bool in_table)
{
	kb_md_code_n(sb, s, SIZE_MAX, in_table);
}

void kb_md_fence(struct strbuf *sb, const char *lang, const char *text, size_t len)
{
	size_t ticks = longest_backtick_run(text, len) + 1;

	if (ticks < 3)
		ticks = 3;
	for (size_t i = 0; i < ticks; i++)
		strbuf_addch(sb, '`');
	if (lang)
		strbuf_addstr(sb, lang);
	strbuf_addch(sb, '\n');
	kb_md_add_utf8(sb, text, len);
	if (len && text[len - 1] != '\n')
		strbuf_addch(sb, '\n');
	for (size_t i = 0; i < ticks; i++)
		strbuf_addch(sb, '`');
	strbuf_addch(sb, '\n');
}

void kb_md_link(struct strbuf *sb, const char *text, const char *url)
{
	bool ok = url && *url;

	for (const char *p = url; ok && *p; p++)
		ok = (unsigned char)*p > 0x20 && (unsigned char)*p < 0x7F && !strchr("()<>\"'`\\[]", *p);
	if (!ok) {
		kb_md_escape(sb, text);
		if (url && *url) {
			strbuf_addch(sb, ' ');
			kb_md_code_n(sb, url, 300, false);
		}
		return;
	}
	strbuf_addch(sb, '[');
	kb_md_escape(sb, text);
	strbuf_addstr(sb, "](");
	strbuf_addstr(sb, url);
	strbuf_addch(sb, ')');
}

void kb_md_details_begin(struct strbuf *sb, const char *summary)
{
	/* markdown is not rendered inside <summary>: escape for HTML only */
	strbuf_addstr(sb, "<details><summary>");
	walk(sb, summary ? summary : "details", SIZE_MAX, html_ascii, NULL);
	strbuf_addstr(sb, "</summary>\n\n");
}

void kb_md_details_end(struct strbuf *sb)
{
	strbuf_addstr(sb, "\n</details>\n\n");
}

void kb_md_table_head(struct strbuf *sb, const char *const *head, size_t ncols, const char *align)
{
	strbuf_addch(sb, '|');
	for (size_t i = 0; i < ncols; i++) {
		strbuf_addch(sb, ' ');
		kb_md_escape(sb, head[i]);
		strbuf_addstr(sb, " |");
	}
	strbuf_addstr(sb, "\n|");
	for (size_t i = 0; i < ncols; i++) {
		char a = align && i < strlen(align) ? align[i] : 'l';

		strbuf_addstr(sb, a == 'r' ? " --: |" : a == 'c' ? " :-: |" : " --- |");
	}
	strbuf_addch(sb, '\n');
}

void kb_md_table_row(struct strbuf *sb, const char *const *cells, size_t ncols)
{
	strbuf_addch(sb, '|');
	for (size_t i = 0; i < ncols; i++) {
		strbuf_addch(sb, ' ');
		if (cells[i])
			strbuf_addstr(sb, cells[i]);
		strbuf_addstr(sb, " |");
	}
	strbuf_addch(sb, '\n');
}

void kb_md_fmt_ms(char *buf, size_t size, double ms)
{
	if (!isfinite(ms))
		snprintf(buf, size, "n/a");
	else if (ms < 1)
		snprintf(buf, size, "%.3g", ms);
	else if (ms < 10)
		snprintf(buf, size, "%.3f", ms);
	else if (ms < 100)
		snprintf(buf, size, "%.2f", ms);
	else
		snprintf(buf, size, "%.1f", ms);
}

void kb_md_fmt_speedup(char *buf, size_t size, double x)
{
	if (!isfinite(x))
		snprintf(buf, size, "n/a");
	else
		snprintf(buf, size, "%.2fx", x);
}

void kb_md_fmt_duration(char *buf, size_t size, double seconds)
{
	long s;

	if (!isfinite(seconds) || seconds < 0)
		seconds = 0;
	s = (long)kb_i64_from_double(seconds + 0.5); /* 1e300 s from a file: saturated */
	if (s < 60)
		snprintf(buf, size, "%lds", s);
	else if (s < 3600)
		snprintf(buf, size, "%ldm %02lds", s / 60, s % 60);
	else
		snprintf(buf, size, "%ldh %02ldm", s / 3600, (s % 3600) / 60);
}

void kb_md_fmt_err(char *buf, size_t size, double v)
{
	if (!isfinite(v))
		snprintf(buf, size, "n/a");
	else
		snprintf(buf, size, "%.2e", v);
}
