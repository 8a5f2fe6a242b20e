#include "core/common.h"
#include "core/util.h"
#include "report/markdown.h"

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

static void escape_ascii(struct strbuf *sb, char c, void *payload)
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
	case '\\': case '`': case '*': case '_': case '[': case ']': case '|':
	case '#': case '~':
		strbuf_addch(sb, '\\');
		strbuf_addch(sb, c);
		return;
	default:
		if ((unsigned char)c < 0x20 || c == 0x7F)
			return;
		strbuf_addch(sb, c);
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

/* --- evidence --- */

const cJSON *kb_md_ev_obj(const cJSON *o, const char *key)
{
	const cJSON *v = o ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;

	return cJSON_IsObject(v) ? v : NULL;
}

const cJSON *kb_md_ev_arr(const cJSON *o, const char *key)
{
	const cJSON *v = o ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;

	return cJSON_IsArray(v) ? v : NULL;
}

const char *kb_md_ev_str(const cJSON *o, const char *key)
{
	const cJSON *v = o ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;

	return cJSON_IsString(v) && v->valuestring ? v->valuestring : NULL;
}

double kb_md_ev_num(const cJSON *o, const char *key)
{
	const cJSON *v = o ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;

	return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

void kb_md_ev_config_label(struct strbuf *sb, const cJSON *config, size_t index)
{
	const char *name = kb_md_ev_str(config, "name");

	if (name && *name)
		kb_md_code_n(sb, name, KB_MD_NAME_CHARS, true);
	else
		strbuf_addf(sb, "#%zu", index);
}

void kb_md_dropped_row(struct strbuf *sb, const cJSON *dropped, size_t index, size_t reason_max)
{
	struct strbuf cell[3] = { STRBUF_INIT, STRBUF_INIT, STRBUF_INIT };
	const char *cells[3];

	kb_md_ev_config_label(&cell[0], dropped, index);
	kb_md_escape_n(&cell[1], kb_md_ev_str(dropped, "kind"), 24);
	kb_md_escape_n(&cell[2], kb_md_ev_str(dropped, "reason"), reason_max);
	for (size_t i = 0; i < 3; i++)
		cells[i] = cell[i].buf;
	kb_md_table_row(sb, cells, 3);
	for (size_t i = 0; i < 3; i++)
		strbuf_release(&cell[i]);
}

void kb_md_ev_roofline(char *buf, size_t size, const cJSON *timing)
{
	double bw = kb_md_ev_num(timing, "bw_share"), fl = kb_md_ev_num(timing, "flops_share");

	if (!isfinite(bw) && !isfinite(fl))
		snprintf(buf, size, "n/a");
	else if (!isfinite(fl) || (isfinite(bw) && bw >= fl))
		snprintf(buf, size, "%.0f%% BW", 100 * bw);
	else
		snprintf(buf, size, "%.0f%% FLOPs", 100 * fl);
}

/* "2.31x" or "2.31x / 1.40x" */
static void speedup_cell(char *buf, size_t size, double eager, double compile, bool both)
{
	char e[32], c[32];

	kb_md_fmt_speedup(e, sizeof(e), eager);
	if (!both) {
		snprintf(buf, size, "%s", e);
		return;
	}
	kb_md_fmt_speedup(c, sizeof(c), compile);
	snprintf(buf, size, "%s / %s", e, c);
}

size_t kb_md_ev_speedup_table(struct strbuf *sb, const cJSON *evidence, size_t max_rows,
			      const char *more_where)
{
	static const char *const head[] = { "config", "eager ms", "torch.compile ms",
					     "kernel ms", "speedup", "roofline share" };
	const cJSON *configs = kb_md_ev_arr(evidence, "configs"), *cfg;
	const cJSON *summary = kb_md_ev_obj(evidence, "summary");
	const char *reasons[3] = { NULL };
	size_t nreasons = 0, rows = 0, left;
	bool timed = false, both = false;

	cJSON_ArrayForEach(cfg, configs) {
		const cJSON *t = kb_md_ev_obj(cfg, "timing");
		const char *why = kb_md_ev_str(t, "compile_reason");

		timed |= t != NULL;
		both |= kb_md_ev_obj(t, "compile") != NULL;
		if (why && !kb_md_ev_obj(t, "compile")) {
			size_t i;

			for (i = 0; i < nreasons && strcmp(reasons[i], why); i++)
				;
			if (i == nreasons && nreasons < ARRAY_SIZE(reasons))
				reasons[nreasons++] = why;
		}
	}
	if (!timed) {
		const char *note = kb_md_ev_str(evidence, "timing_note");

		strbuf_addstr(sb, "Not timed");
		if (note) {
			strbuf_addstr(sb, ": ");
			kb_md_escape_n(sb, note, 300);
		}
		strbuf_addstr(sb, ".\n\n");
		return 0;
	}

	kb_md_table_head(sb, head, ARRAY_SIZE(head), "lrrrrr");
	cJSON_ArrayForEach(cfg, configs) {
		const cJSON *t = kb_md_ev_obj(cfg, "timing");
		struct strbuf label = STRBUF_INIT;
		char e[32], co[32], k[32], sp[80], roof[32];
		const char *cells[6];

		if (rows == max_rows)
			break;
		kb_md_ev_config_label(&label, cfg, rows);
		kb_md_fmt_ms(e, sizeof(e), kb_md_ev_num(kb_md_ev_obj(t, "eager"), "median_ms"));
		kb_md_fmt_ms(co, sizeof(co), kb_md_ev_num(kb_md_ev_obj(t, "compile"), "median_ms"));
		kb_md_fmt_ms(k, sizeof(k), kb_md_ev_num(kb_md_ev_obj(t, "kernel"), "median_ms"));
		speedup_cell(sp, sizeof(sp), kb_md_ev_num(t, "speedup_eager"),
			     kb_md_ev_num(t, "speedup_compile"), both);
		kb_md_ev_roofline(roof, sizeof(roof), t);
		cells[0] = label.buf;
		cells[1] = e;
		cells[2] = co;
		cells[3] = k;
		cells[4] = sp;
		cells[5] = roof;
		kb_md_table_row(sb, cells, 6);
		strbuf_release(&label);
		rows++;
	}
	{
		char sp[80], bold[96];
		const char *cells[6] = { "**geomean**", "", "", "", bold, "" };

		speedup_cell(sp, sizeof(sp), kb_md_ev_num(summary, "geomean_speedup_eager"),
			     kb_md_ev_num(summary, "geomean_speedup_compile"), both);
		snprintf(bold, sizeof(bold), "**%s**", sp);
		kb_md_table_row(sb, cells, 6);
	}
	left = (size_t)cJSON_GetArraySize(configs) - rows;
	if (left) {
		/* a blank line first, or the line would be read as one more row */
		strbuf_addf(sb, "\n… %zu more config%s", left, left == 1 ? "" : "s");
		if (more_where) {
			strbuf_addstr(sb, " in ");
			kb_md_code_n(sb, more_where, 200, false);
		}
		strbuf_addch(sb, '\n');
	}
	strbuf_addstr(sb, both ? "\nMedian times; speedup vs eager / vs torch.compile"
			       : "\nMedian times; speedup vs eager");
	strbuf_addstr(sb, "; roofline share: achieved bandwidth (BW) or FLOP rate, whichever "
		      "is higher, as a share of the device's measured peak.");
	for (size_t i = 0; i < nreasons; i++) {
		strbuf_addstr(sb, i ? "; " : " torch.compile n/a: ");
		kb_md_escape_n(sb, reasons[i], 200);
	}
	if (nreasons)
		strbuf_addch(sb, '.');
	strbuf_addstr(sb, "\n\n");
	return left;
}
