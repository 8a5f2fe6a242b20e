#include "core/common.h"
#include "core/cscan.h"
#include "search/extract.h"
#include "core/strbuf.h"
#include "core/util.h"
#include "core/hash.h"

#include <ctype.h>

/* --- lexical classes of a C/C++/CUDA source --- */

enum { K_CODE, K_COMMENT, K_STRING };

static void mark(unsigned char *kind, size_t from, size_t to, unsigned char k)
{
	for (size_t i = from; i < to; i++)
		kind[i] = k;
}

/* kind[i] for every byte: comments (delimiters included), literal insides (quotes are code). */
static void classify(const char *src, size_t len, unsigned char *kind)
{
	size_t i = 0, j;

	memset(kind, K_CODE, len);
	while (i < len) {
		char c = src[i];

		if (c == '/' && i + 1 < len && src[i + 1] == '/') {
			for (j = i; j < len && src[j] != '\n'; j++)
				if (src[j] == '\\' && j + 1 < len && src[j + 1] == '\n')
					j++; /* a continued line comment goes on */
			mark(kind, i, j, K_COMMENT);
			i = j;
		} else if (c == '/' && i + 1 < len && src[i + 1] == '*') {
			for (j = i + 2; j + 1 < len && !(src[j] == '*' && src[j + 1] == '/'); j++)
				;
			j = j + 2 <= len ? j + 2 : len;
			mark(kind, i, j, K_COMMENT);
			i = j;
		} else if (c == '"' && kb_c_raw_string_at(src, i)) {
			char close[20];
			size_t d = 0, end;
			const char *hit;

			close[d++] = ')';
			for (j = i + 1; j < len && src[j] != '(' && src[j] != '\n' && d < sizeof(close) - 2; j++)
				close[d++] = src[j];
			close[d++] = '"';
			hit = j < len ? memmem(src + j, len - j, close, d) : NULL;
			end = hit ? (size_t)(hit - src) + d - 1 : len;
			mark(kind, i + 1, end, K_STRING);
			i = end + 1;
		} else if (c == '"' || (c == '\'' && !kb_c_digit_separator_at(src, i))) {
			for (j = i + 1; j < len && src[j] != c && src[j] != '\n'; j++)
				if (src[j] == '\\' && j + 1 < len)
					j++;
			if (j > len)
				j = len;
			mark(kind, i + 1, j, K_STRING);
			i = j + 1;
		} else {
			i++;
		}
	}
}

char *kb_source_view(const char *source, size_t len, bool blank_strings)
{
	unsigned char *kind = xmalloc(len + 1);
	char *view = xmalloc(len + 1);

	classify(source, len, kind);
	for (size_t i = 0; i < len; i++) {
		bool blank = kind[i] == K_COMMENT || (blank_strings && kind[i] == K_STRING);

		view[i] = blank && source[i] != '\n' ? ' ' : source[i];
	}
	view[len] = '\0';
	free(kind);
	return view;
}

/* --- normalised hash --- */

/* Whitespace between a and b is kept (as one space) only where dropping it joins tokens. */
static bool need_space(int a, int b)
{
	if (kb_c_ident_char(a) && kb_c_ident_char(b))
		return true;
	return a == b && strchr("+-&|<>", a); /* a - -b is not a--b */
}

void kb_source_hash(const char *source, char hex[65])
{
	size_t len = source ? strlen(source) : 0;
	unsigned char *kind = xmalloc(len + 1);
	struct strbuf norm = STRBUF_INIT;
	bool pending = false, line_start = true, pp = false;

	classify(source ? source : "", len, kind);
	for (size_t i = 0; i < len; i++) {
		char c = source[i];

		if (kind[i] == K_STRING) {
			strbuf_addch(&norm, c);
			continue;
		}
		if (kind[i] == K_CODE && c == '\\' &&
		    (source[i + 1] == '\n' || (source[i + 1] == '\r' && source[i + 2] == '\n'))) {
			i += source[i + 1] == '\r' ? 2 : 1; /* a spliced line is one line */
			pending = true;
			continue;
		}
		if (c == '\n') {
			/* a preprocessor directive ends at its newline: keep that one */
			if (pp && norm.len && norm.buf[norm.len - 1] != '\n') {
				strbuf_addch(&norm, '\n');
				pending = false;
			} else {
				pending = true;
			}
			pp = false;
			line_start = true;
			continue;
		}
		if (kind[i] == K_COMMENT || isspace((unsigned char)c)) {
			pending = true;
			continue;
		}
		if (line_start && c == '#')
			pp = true;
		line_start = false;
		if (pending && norm.len && norm.buf[norm.len - 1] != '\n' &&
		    need_space(norm.buf[norm.len - 1], c))
			strbuf_addch(&norm, ' ');
		pending = false;
		strbuf_addch(&norm, c);
	}
	if (norm.len && norm.buf[norm.len - 1] == '\n')
		strbuf_setlen(&norm, norm.len - 1); /* a directive on the last line, with or without its newline */
	kb_sha256_hex(norm.buf, norm.len, hex);
	strbuf_release(&norm);
	free(kind);
}

/* --- fenced code blocks --- */

/* What a C scanner carries from one line of a block to the next. */
struct cstate {
	bool in_comment;        /* inside a block comment */
	bool in_raw;            /* inside a raw string; raw_close is ")delim\"" */
	char raw_close[20];
};

static void cstate_line(struct cstate *st, const char *s, size_t n)
{
	size_t i = 0;

	while (i < n) {
		if (st->in_comment) {
			const char *e = memmem(s + i, n - i, "*/", 2);

			if (!e)
				return;
			st->in_comment = false;
			i = (size_t)(e - s) + 2;
		} else if (st->in_raw) {
			size_t cl = strlen(st->raw_close);
			const char *e = memmem(s + i, n - i, st->raw_close, cl);

			if (!e)
				return;
			st->in_raw = false;
			i = (size_t)(e - s) + cl;
		} else if (s[i] == '/' && i + 1 < n && s[i + 1] == '/') {
			return;
		} else if (s[i] == '/' && i + 1 < n && s[i + 1] == '*') {
			st->in_comment = true;
			i += 2;
		} else if (s[i] == '"' && kb_c_raw_string_at(s, i)) {
			size_t d = 0, j;

			st->raw_close[d++] = ')';
			for (j = i + 1; j < n && s[j] != '(' && d < sizeof(st->raw_close) - 2; j++)
				st->raw_close[d++] = s[j];
			st->raw_close[d++] = '"';
			st->raw_close[d] = '\0';
			st->in_raw = true;
			i = j + 1;
		} else if (s[i] == '"' || (s[i] == '\'' && !kb_c_digit_separator_at(s, i))) {
			char q = s[i];

			for (i++; i < n && s[i] != q; i++)
				if (s[i] == '\\')
					i++;
			i++;
		} else {
			i++;
		}
	}
}

struct fence {
	char ch;
	size_t count, indent;
};

bool kb_fence_marker(const char *s, size_t n, char *ch, size_t *count, size_t *indent)
{
	size_t i = 0, k;

	while (i < n && (s[i] == ' ' || s[i] == '\t'))
		i++;
	if (i >= n || (s[i] != '`' && s[i] != '~'))
		return false;
	for (k = i; k < n && s[k] == s[i]; k++)
		;
	if (k - i < 3)
		return false;
	*ch = s[i];
	*count = k - i;
	*indent = i;
	return true;
}

/* A fence line: optional indentation, three or more ` or ~, an info string (no ` after ```). */
static bool fence_open(const char *s, size_t n, struct fence *f)
{
	if (!kb_fence_marker(s, n, &f->ch, &f->count, &f->indent))
		return false;
	return !(f->ch == '`' && memchr(s + f->indent + f->count, '`', n - f->indent - f->count));
}

static bool fence_close(const char *s, size_t n, const struct fence *f)
{
	size_t i = 0, k;

	while (i < n && (s[i] == ' ' || s[i] == '\t'))
		i++;
	for (k = i; k < n && s[k] == f->ch; k++)
		;
	if (k - i < f->count)
		return false;
	while (k < n && isspace((unsigned char)s[k]))
		k++;
	return k == n;
}

static bool only_space(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!isspace((unsigned char)s[i]))
			return false;
	return true;
}

/* The block defines kb_forward (a body follows its parameter list) or has PYBIND11_MODULE(. */
static bool defines_entry(const char *src, size_t len)
{
	char *v = kb_source_view(src, len, true);
	bool found = false;

	for (size_t i = 0; i < len && !found; i++) {
		size_t k, depth;

		if (!kb_c_ident_char(v[i]) || (i > 0 && kb_c_ident_char(v[i - 1])))
			continue;
		for (k = i; k < len && kb_c_ident_char(v[k]); k++)
			;
		if (k - i == 15 && !memcmp(v + i, "PYBIND11_MODULE", 15)) {
			while (k < len && isspace((unsigned char)v[k]))
				k++;
			found = k < len && v[k] == '(';
		} else if (k - i == 10 && !memcmp(v + i, "kb_forward", 10)) {
			while (k < len && isspace((unsigned char)v[k]))
				k++;
			if (k >= len || v[k] != '(')
				goto next;
			for (depth = 0; k < len; k++) {
				if (v[k] == '(')
					depth++;
				else if (v[k] == ')' && --depth == 0)
					break;
			}
			for (k++; k < len && isspace((unsigned char)v[k]); k++)
				;
			found = k < len && v[k] == '{';
		}
next:
		i = k - 1;
	}
	free(v);
	return found;
}

struct block {
	struct strbuf text;
	bool closed;
};

/*
 * The kernel among the closed, non-blank blocks: of those that define the
 * ABI entry the last (a reply's revision), else the longest block; NULL
 * when none has code. *kernels: how many define the entry.
 */
static const struct block *pick_block(const struct block *blocks, size_t nr, size_t *kernels)
{
	const struct block *best = NULL;
	bool best_entry = false;

	*kernels = 0;
	for (size_t i = 0; i < nr; i++) {
		const struct block *b = &blocks[i];
		bool entry;

		if (!b->closed || only_space(b->text.buf, b->text.len))
			continue;
		entry = defines_entry(b->text.buf, b->text.len);
		*kernels += entry;
		if (!best || entry || (!best_entry && b->text.len > best->text.len)) {
			best = b;
			best_entry = entry;
		}
	}
	return best;
}

int kb_extract_kernel(const char *reply, struct strbuf *out, struct strbuf *why)
{
	struct block *blocks = NULL;
	size_t nr = 0, alloc = 0, len, pos = 0;
	const char *reason = NULL;
	bool in_block = false;
	struct fence f = { 0, 0, 0 };
	struct cstate st;
	size_t held_at = 0, held_len = 0; /* a fence line the C scanner refused to close on */
	bool held = false;
	const struct block *best = NULL;
	size_t kernels = 0;

	strbuf_reset(out);
	if (why)
		strbuf_reset(why);
	len = reply ? strlen(reply) : 0;
	if (!len || only_space(reply, len)) {
		reason = "reply is empty";
		goto out;
	}

	while (pos < len || in_block) {
		const char *line = reply + pos;
		const char *nl = pos < len ? memchr(line, '\n', len - pos) : NULL;
		size_t n = nl ? (size_t)(nl - line) : len - pos, next = nl ? pos + n + 1 : len;
		struct block *b;

		if (pos >= len) {
			/* an unclosed block: close it at a refused fence, if any, and go on from there */
			if (!held)
				break;
			b = &blocks[nr - 1];
			strbuf_setlen(&b->text, held_len);
			b->closed = true;
			in_block = held = false;
			pos = held_at;
			continue;
		}
		if (n && line[n - 1] == '\r')
			n--;
		if (!in_block) {
			if (fence_open(line, n, &f)) {
				if (nr == alloc) {
					alloc = alloc ? 2 * alloc : 4;
					blocks = xrealloc(blocks, alloc * sizeof(*blocks));
				}
				strbuf_init(&blocks[nr].text, 0);
				blocks[nr++].closed = false;
				memset(&st, 0, sizeof(st));
				in_block = true;
				held = false;
			}
			pos = next;
			continue;
		}
		b = &blocks[nr - 1];
		if (fence_close(line, n, &f)) {
			if (!st.in_comment && !st.in_raw) {
				b->closed = true;
				in_block = false;
				pos = next;
				continue;
			}
			if (!held) {
				held = true;
				held_at = next;
				held_len = b->text.len;
			}
		}
		/* content: drop the fence's indentation */
		for (size_t k = 0; k < f.indent && n && (*line == ' ' || *line == '\t'); k++) {
			line++;
			n--;
		}
		strbuf_add(&b->text, line, n);
		strbuf_addch(&b->text, '\n');
		cstate_line(&st, line, n);
		pos = next;
	}

	best = pick_block(blocks, nr, &kernels);
	if (best) {
		strbuf_add(out, best->text.buf, best->text.len);
		if (kernels > 1 && why)
			strbuf_addf(why, "reply has %zu kernels (code blocks defining the ABI entry); the last one is used",
				    kernels);
	} else if (!nr) {
		reason = "reply has no code block";
	} else {
		reason = "reply's code block is empty";
		for (size_t i = 0; i < nr; i++)
			if (!blocks[i].closed)
				reason = "reply's code block is not closed";
	}

out:
	for (size_t i = 0; i < nr; i++)
		strbuf_release(&blocks[i].text);
	free(blocks);
	if (reason) {
		if (why)
			strbuf_addstr(why, reason);
		return -1;
	}
	return 0;
}

/* --- template parameters --- */

static const char *skip_space(const char *s, const char *end)
{
	while (s < end && (*s == ' ' || *s == '\t' || *s == '\r'))
		s++;
	return s;
}

/* The line [s, e) is "# WORD NAME..." in the code view: the pointer after NAME, or NULL. */
static const char *directive(const char *s, const char *e, const char *word, const char *name)
{
	size_t wl = strlen(word), nl = strlen(name);

	s = skip_space(s, e);
	if (s >= e || *s != '#')
		return NULL;
	s = skip_space(s + 1, e);
	if ((size_t)(e - s) < wl || memcmp(s, word, wl) || (s + wl < e && kb_c_ident_char(s[wl])))
		return NULL;
	s = skip_space(s + wl, e);
	if ((size_t)(e - s) < nl || memcmp(s, name, nl) || (s + nl < e && kb_c_ident_char(s[nl])))
		return NULL;
	return s + nl;
}

/* #ifndef NAME, then #define NAME VALUE on the next non-blank line, then #endif later. */
static bool guarded(const char *view, const char *name)
{
	const char *p = view;

	while (*p) {
		const char *e = strchrnul(p, '\n'), *q, *qe, *d;

		if (!directive(p, e, "ifndef", name)) {
			p = *e ? e + 1 : e;
			continue;
		}
		for (q = *e ? e + 1 : e; *q; q = *qe ? qe + 1 : qe) {
			qe = strchrnul(q, '\n');
			if (skip_space(q, qe) < qe)
				break;
		}
		qe = strchrnul(q, '\n');
		d = directive(q, qe, "define", name);
		if (d && d < qe && (*d == ' ' || *d == '\t') && skip_space(d, qe) < qe) {
			for (q = *qe ? qe + 1 : qe; *q; q = *qe ? qe + 1 : qe) {
				qe = strchrnul(q, '\n');
				if (directive(q, qe, "endif", ""))
					return true;
			}
			return false;
		}
		p = *e ? e + 1 : e;
	}
	return false;
}

/* One "// kb-tune NAME: V1 V2 ..." line (s..e, after "kb-tune") into p. */
static int parse_tune_line(const char *s, const char *e, struct kb_tparam *p, struct strbuf *why,
			   int line)
{
	const char *n0;
	size_t nl;

	s = skip_space(s, e);
	n0 = s;
	if (s < e && (isalpha((unsigned char)*s) || *s == '_'))
		while (s < e && kb_c_ident_char(*s))
			s++;
	nl = (size_t)(s - n0);
	if (!nl) {
		strbuf_addf(why, "kb-tune line %d has no parameter name", line);
		return -1;
	}
	if (nl >= sizeof(p->name)) {
		strbuf_addf(why, "kb-tune line %d: parameter name is too long", line);
		return -1;
	}
	memcpy(p->name, n0, nl);
	p->name[nl] = '\0';
	p->nr_values = 0;
	s = skip_space(s, e);
	if (s >= e || *s != ':') {
		strbuf_addf(why, "kb-tune line %d: expected ':' after '%s'", line, p->name);
		return -1;
	}
	s++;
	for (;;) {
		char buf[32], *endp;
		const char *v0;
		long long v;

		while (s < e && (isspace((unsigned char)*s) || *s == ','))
			s++;
		if (s >= e)
			break;
		v0 = s;
		while (s < e && !isspace((unsigned char)*s) && *s != ',')
			s++;
		if ((size_t)(s - v0) >= sizeof(buf)) {
			strbuf_addf(why, "kb-tune line %d: value of '%s' is not an integer", line, p->name);
			return -1;
		}
		memcpy(buf, v0, (size_t)(s - v0));
		buf[s - v0] = '\0';
		errno = 0;
		v = strtoll(buf, &endp, 10);
		if (errno || endp == buf || *endp) {
			strbuf_addf(why, "kb-tune line %d: value '%s' of '%s' is not an integer", line, buf,
				    p->name);
			return -1;
		}
		for (size_t k = 0; k < p->nr_values; k++)
			if (p->values[k] == v) {
				strbuf_addf(why, "kb-tune line %d: '%s' repeats the value %lld", line, p->name, v);
				return -1;
			}
		if (p->nr_values == KB_TPARAM_MAX_VALUES) {
			strbuf_addf(why, "kb-tune line %d: '%s' has more than %d values", line, p->name,
				    KB_TPARAM_MAX_VALUES);
			return -1;
		}
		p->values[p->nr_values++] = v;
	}
	if (!p->nr_values) {
		strbuf_addf(why, "kb-tune line %d: '%s' has no values", line, p->name);
		return -1;
	}
	return 0;
}

int kb_tparams_parse(const char *source, struct kb_tparams *out, struct strbuf *why)
{
	struct strbuf scratch = STRBUF_INIT;
	size_t len = strlen(source);
	char *view = NULL;
	const char *p = source;
	int line = 0, ret = -1;

	if (!why)
		why = &scratch;
	strbuf_reset(why);
	memset(out, 0, sizeof(*out));
	while (*p) {
		const char *e = strchrnul(p, '\n'), *s = skip_space(p, e);
		struct kb_tparam tp;

		line++;
		if (e - s >= 2 && s[0] == '/' && s[1] == '/') {
			s = skip_space(s + 2, e);
			if (e - s >= 7 && !memcmp(s, "kb-tune", 7) && (s + 7 == e || !kb_c_ident_char(s[7]))) {
				if (parse_tune_line(s + 7, e, &tp, why, line) < 0)
					goto out;
				for (size_t k = 0; k < out->nr; k++)
					if (!strcmp(out->p[k].name, tp.name)) {
						strbuf_addf(why, "kb-tune line %d: '%s' is declared twice", line,
							    tp.name);
						goto out;
					}
				if (out->nr == KB_TPARAM_MAX) {
					strbuf_addf(why, "kb-tune line %d: more than %d parameters", line,
						    KB_TPARAM_MAX);
					goto out;
				}
				out->p[out->nr++] = tp;
			}
		}
		p = *e ? e + 1 : e;
	}
	view = kb_source_view(source, len, true);
	for (size_t k = 0; k < out->nr; k++)
		if (!guarded(view, out->p[k].name)) {
			strbuf_addf(why, "kb-tune parameter '%s' has no '#ifndef %s' / '#define %s' guard",
				    out->p[k].name, out->p[k].name, out->p[k].name);
			goto out;
		}
	ret = 0;
out:
	if (ret)
		out->nr = 0;
	free(view);
	strbuf_release(&scratch);
	return ret;
}

void kb_tparams_render(const char *source, const struct kb_tparams *tp, const size_t *digits,
		       struct strbuf *out)
{
	for (size_t i = 0; i < tp->nr; i++) {
		size_t d = digits[i] < tp->p[i].nr_values ? digits[i] : 0;

		strbuf_addf(out, "#define %s %lld\n", tp->p[i].name, tp->p[i].values[d]);
	}
	strbuf_addstr(out, source);
}

void kb_tparams_point_name(const struct kb_tparams *tp, const size_t *digits, struct strbuf *out)
{
	for (size_t i = 0; i < tp->nr; i++) {
		size_t d = digits[i] < tp->p[i].nr_values ? digits[i] : 0;

		strbuf_addf(out, "%s%s=%lld", i ? " " : "", tp->p[i].name, tp->p[i].values[d]);
	}
}
