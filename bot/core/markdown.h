#ifndef KB_CORE_MARKDOWN_H
#define KB_CORE_MARKDOWN_H
/*
 * Small markdown builders shared by everything the bot posts (pull request
 * body, comments, check runs) and by report.md: escaping of untrusted text,
 * code spans and fences that cannot be broken out of, tables, <details>
 * blocks, UTF-8 aware length counting and cutting, number formats.
 *
 * Untrusted text (config names, paths, LLM output) always goes through
 * kb_md_escape, kb_md_code or kb_md_fence: it never opens an HTML tag or
 * comment, a link or a new table cell, so it cannot break the layout
 * (text that looks like a marker can sit inside a code span; markers are
 * read back from the end, see bot/report/pr_body.h). Invalid UTF-8
 * becomes U+FFFD, so lengths counted in code points are well defined and
 * GitHub never refuses a body for its encoding. '@' is left alone: show
 * names that could hold a mention as code spans, where GitHub does not
 * notify.
 *
 * Sizes: GitHub counts characters, the forge (forge.h) refuses bodies
 * over 65,536 bytes; struct kb_md_limits checks both.
 */
#include "core/common.h"
#include "core/strbuf.h"

/* GitHub's limits, in characters (code points). */
#define KB_MD_BODY_MAX_CHARS 65535      /* pull request and comment bodies: < 65,536 */
#define KB_MD_CHECK_MAX_CHARS 65535     /* check run output.summary / output.text */
#define KB_MD_STATUS_MAX_CHARS 140      /* commit status description */

/* --- UTF-8 --- */

/* Code points in s[0..len); each invalid byte counts as one. */
size_t kb_utf8_chars(const char *s, size_t len);
/*
 * Bytes of the longest prefix of s[0..len) that holds at most max_chars
 * code points and at most max_bytes bytes and never ends inside a
 * multi-byte sequence.
 */
size_t kb_utf8_prefix(const char *s, size_t len, size_t max_chars, size_t max_bytes);
/* Append s[0..len) with every invalid sequence replaced by U+FFFD. */
void kb_md_add_utf8(struct strbuf *sb, const char *s, size_t len);

/* A size budget: both must hold (0: no limit on that one). */
struct kb_md_limits {
	size_t max_chars;
	size_t max_bytes;
};
/* True when sb fits lim. */
bool kb_md_fits(const struct strbuf *sb, const struct kb_md_limits *lim);

/* --- text --- */

/*
 * Append s as inline text that renders literally: markdown and HTML
 * specials are backslash-escaped or turned into entities ('<' '>' '&'),
 * newlines and tabs become spaces, other control characters are dropped.
 * Safe inside a table cell. NULL appends nothing.
 */
void kb_md_escape(struct strbuf *sb, const char *s);
/* kb_md_escape of at most max_chars code points of s, then "…" when it was cut. */
void kb_md_escape_n(struct strbuf *sb, const char *s, size_t max_chars);
/*
 * Append s as an inline code span (backticks longer than any run in s;
 * newlines become spaces). in_table escapes '|' so the span stays in one
 * cell. NULL or empty s appends nothing.
 */
void kb_md_code(struct strbuf *sb, const char *s, bool in_table);
/* kb_md_code of at most max_chars code points, "…" after it when cut. */
void kb_md_code_n(struct strbuf *sb, const char *s, size_t max_chars, bool in_table);
/*
 * A fenced code block: a fence of backticks longer than any run of
 * backticks at a line start in text, info string lang (NULL: none), then
 * text[0..len) with a final newline ensured, then the closing fence.
 */
void kb_md_fence(struct strbuf *sb, const char *lang, const char *text, size_t len);
/*
 * A link [text](url) with text escaped. A url with characters that could
 * end the link or open HTML (space, parentheses, '<', '>', quotes, control
 * bytes) is not linked: the text, then the url as a code span.
 */
void kb_md_link(struct strbuf *sb, const char *text, const char *url);
/* "<details><summary>" summary (escaped) "</summary>\n\n"; end with kb_md_details_end. */
void kb_md_details_begin(struct strbuf *sb, const char *summary);
void kb_md_details_end(struct strbuf *sb);

/* --- tables --- */

/*
 * Header and delimiter rows. align has one character per column: 'l',
 * 'r' or 'c' (NULL: all left). Headers are escaped.
 */
void kb_md_table_head(struct strbuf *sb, const char *const *head, size_t ncols, const char *align);
/* One row; cells are markdown already (escape them first); NULL cells are empty. */
void kb_md_table_row(struct strbuf *sb, const char *const *cells, size_t ncols);

/* --- numbers --- */

/* Milliseconds with about 4 significant digits ("0.534", "10.09"); "n/a" when not finite. */
void kb_md_fmt_ms(char *buf, size_t size, double ms);
/* "2.31x"; "n/a" when not finite. */
void kb_md_fmt_speedup(char *buf, size_t size, double x);
/* "45s", "12m 04s", "2h 03m". */
void kb_md_fmt_duration(char *buf, size_t size, double seconds);
/* "1.49e-08"; "n/a" when not finite. */
void kb_md_fmt_err(char *buf, size_t size, double v);

#endif
