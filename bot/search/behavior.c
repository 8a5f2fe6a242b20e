#include "core/common.h"
#include "search/behavior.h"
#include "search/extract.h"
#include "core/strbuf.h"
#include "core/util.h"

#include <ctype.h>

/*
 * The scorer tokenises the code view (comments and literal insides
 * blanked, extract.h), matches brackets, finds functions, loops and OpenMP
 * pragmas, and then looks for each level's evidence among the tokens. The
 * only string literals read are those of asm statements (PTX such as
 * cp.async or mma.sync lives there).
 */

enum tkind { T_IDENT, T_NUM, T_PUNCT, T_STR };

struct tok {
	enum tkind kind;
	size_t pos, len;
	bool pp;        /* on a preprocessor line */
	int match;      /* the other bracket, -1 */
	int encl;       /* innermost enclosing '{' of code tokens, -1 */
	int line;       /* 0-based line index */
};

struct func {
	int name, popen, pclose, bopen, bclose;
	bool device, global;
};

struct loop {
	int kw, hopen, hclose;
	int init_s, init_e, cond_s, cond_e;  /* [s, e) token ranges in the header */
	int inc_s, inc_e;
	int body_s, body_e;                  /* inclusive */
};

struct pragma {
	int first, last;  /* tokens of the #pragma line ('#' .. last) */
	int stmt_s, stmt_e; /* the statement it governs, -1 */
};

struct names {
	char **v;
	size_t nr, alloc;
};

struct scan {
	const char *cv;   /* code view */
	const char *tv;   /* comments blanked, strings kept */
	size_t len;
	struct tok *t;
	int n, alloc;
	struct func *f;
	int nf, af;
	struct loop *l;
	int nl, al;
	struct pragma *pr;
	int npr, apr;
	struct names consts, devmacros, ptrs, shared;
	struct strbuf asm_text;
};

enum { AX_MEM, AX_COMP, AX_PAR, AX_NR };

struct ev {
	char lv[AX_NR][KB_BEHAVIOR_LEVELS][56];
};

/* --- small helpers --- */

static bool ident_start(int c)
{
	return isalpha((unsigned char)c) || c == '_';
}

static bool ident_char(int c)
{
	return isalnum((unsigned char)c) || c == '_';
}

static void names_add(struct names *nm, const char *s, size_t len)
{
	for (size_t i = 0; i < nm->nr; i++)
		if (strlen(nm->v[i]) == len && !memcmp(nm->v[i], s, len))
			return;
	if (nm->nr == nm->alloc) {
		nm->alloc = nm->alloc ? 2 * nm->alloc : 16;
		nm->v = xrealloc(nm->v, nm->alloc * sizeof(*nm->v));
	}
	nm->v[nm->nr++] = xstrndup(s, len);
}

static void names_release(struct names *nm)
{
	for (size_t i = 0; i < nm->nr; i++)
		free(nm->v[i]);
	free(nm->v);
	memset(nm, 0, sizeof(*nm));
}

static bool is(const struct scan *s, int i, const char *text)
{
	size_t n = strlen(text);

	return i >= 0 && i < s->n && s->t[i].len == n && !memcmp(s->cv + s->t[i].pos, text, n);
}

static bool is_ident(const struct scan *s, int i)
{
	return i >= 0 && i < s->n && s->t[i].kind == T_IDENT;
}

static bool has_prefix(const struct scan *s, int i, const char *prefix)
{
	size_t n = strlen(prefix);

	return is_ident(s, i) && s->t[i].len >= n && !memcmp(s->cv + s->t[i].pos, prefix, n);
}

static bool contains(const struct scan *s, int i, const char *needle)
{
	return is_ident(s, i) && memmem(s->cv + s->t[i].pos, s->t[i].len, needle, strlen(needle));
}

static bool in_names(const struct scan *s, const struct names *nm, int i)
{
	if (!is_ident(s, i))
		return false;
	for (size_t k = 0; k < nm->nr; k++)
		if (is(s, i, nm->v[k]))
			return true;
	return false;
}

static bool one_of(const struct scan *s, int i, const char *const *words)
{
	for (; *words; words++)
		if (is(s, i, *words))
			return true;
	return false;
}

/* The identifier's text, truncated, for evidence. */
static const char *tname(const struct scan *s, int i, char *buf, size_t size)
{
	size_t n = s->t[i].len < size - 1 ? s->t[i].len : size - 1;

	memcpy(buf, s->cv + s->t[i].pos, n);
	buf[n] = '\0';
	return buf;
}

static void note(struct ev *e, int axis, int level, const char *fmt, ...) KB_PRINTF(4, 5);
static void note(struct ev *e, int axis, int level, const char *fmt, ...)
{
	va_list ap;

	if (e->lv[axis][level][0])
		return;
	va_start(ap, fmt);
	vsnprintf(e->lv[axis][level], sizeof(e->lv[axis][level]), fmt, ap);
	va_end(ap);
}

/* Next / previous code (non-preprocessor) token. */
static int next_code(const struct scan *s, int i)
{
	for (i++; i < s->n && s->t[i].pp; i++)
		;
	return i;
}

static int prev_code(const struct scan *s, int i)
{
	for (i--; i >= 0 && s->t[i].pp; i--)
		;
	return i;
}

static int match_or_end(const struct scan *s, int i)
{
	return s->t[i].match >= 0 ? s->t[i].match : s->n - 1;
}

/* --- tokens --- */

static void push_tok(struct scan *s, enum tkind k, size_t pos, size_t len, int line)
{
	if (s->n == s->alloc) {
		s->alloc = s->alloc ? 2 * s->alloc : 256;
		s->t = xrealloc(s->t, (size_t)s->alloc * sizeof(*s->t));
	}
	s->t[s->n++] = (struct tok){ k, pos, len, false, -1, -1, line };
}

static bool raw_prefix(const struct scan *s)
{
	static const char *const raw[] = { "R", "uR", "UR", "LR", "u8R", NULL };
	int p = s->n - 1;

	return p >= 0 && s->t[p].kind == T_IDENT && one_of(s, p, raw);
}

static void tokenize(struct scan *s)
{
	static const char *const ops[] = {
		"<<<", ">>>", "<<=", ">>=", "<<", ">>", "+=", "-=", "*=", "/=", "%=", "&=", "|=",
		"^=", "==", "!=", "<=", ">=", "&&", "||", "++", "--", "->", "::", NULL
	};
	const char *v = s->cv;
	size_t i = 0, len = s->len;
	int line = 0;

	while (i < len) {
		size_t j = i;
		char c = v[i];

		if (c == '\n') {
			line++;
			i++;
			continue;
		}
		if (isspace((unsigned char)c)) {
			i++;
			continue;
		}
		if (ident_start(c)) {
			while (j < len && ident_char(v[j]))
				j++;
			push_tok(s, T_IDENT, i, j - i, line);
		} else if (isdigit((unsigned char)c) || (c == '.' && isdigit((unsigned char)v[i + 1]))) {
			for (j = i + 1; j < len; j++) {
				if (ident_char(v[j]) || v[j] == '.' ||
				    (v[j] == '\'' && isdigit((unsigned char)v[j + 1])))
					continue;
				if ((v[j] == '+' || v[j] == '-') && strchr("eEpP", v[j - 1]))
					continue;
				break;
			}
			push_tok(s, T_NUM, i, j - i, line);
		} else if (c == '"' || c == '\'') {
			bool raw = c == '"' && raw_prefix(s);
			int l2 = line;

			for (j = i + 1; j < len && v[j] != c; j++) {
				if (v[j] == '\n') {
					if (!raw)
						break;
					l2++;
				}
			}
			if (j < len && v[j] == c)
				j++;
			push_tok(s, T_STR, i, j - i, line);
			line = l2;
		} else {
			size_t n = 1;

			for (const char *const *op = ops; *op; op++) {
				size_t ol = strlen(*op);

				if (ol <= len - i && !memcmp(v + i, *op, ol)) {
					n = ol;
					break;
				}
			}
			j = i + n;
			push_tok(s, T_PUNCT, i, n, line);
		}
		i = j;
	}
}

/* Preprocessor lines (with backslash continuations), from the code view. */
static void mark_pp(struct scan *s)
{
	int nlines = 1, line = 0;
	bool *pp, continued = false;
	size_t i = 0;

	for (size_t k = 0; k < s->len; k++)
		if (s->cv[k] == '\n')
			nlines++;
	pp = xcalloc((size_t)nlines + 1, sizeof(bool));
	while (i <= s->len && line < nlines) {
		size_t end = i, k;

		while (end < s->len && s->cv[end] != '\n')
			end++;
		for (k = i; k < end && isspace((unsigned char)s->cv[k]); k++)
			;
		pp[line] = continued || (k < end && s->cv[k] == '#');
		k = end;
		while (k > i && isspace((unsigned char)s->cv[k - 1]))
			k--;
		continued = pp[line] && k > i && s->cv[k - 1] == '\\';
		i = end + 1;
		line++;
	}
	for (int t = 0; t < s->n; t++)
		s->t[t].pp = pp[s->t[t].line];
	free(pp);
}

static char closer(char c)
{
	return c == '(' ? ')' : c == '[' ? ']' : '}';
}

/* Brackets of code tokens among themselves; of a preprocessor line within that line. */
static void match_brackets(struct scan *s)
{
	int *stack = xmalloc(((size_t)s->n + 1) * sizeof(int));
	int *braces = xmalloc(((size_t)s->n + 1) * sizeof(int));
	int *pstack = xmalloc(((size_t)s->n + 1) * sizeof(int));
	int sp = 0, bp = 0, psp = 0, pline = -1;

	for (int i = 0; i < s->n; i++) {
		struct tok *t = &s->t[i];
		char c = t->kind == T_PUNCT && t->len == 1 ? s->cv[t->pos] : 0;

		if (t->pp) {
			if (t->line != pline && !(pline >= 0 && i > 0 && s->t[i - 1].pp &&
						   s->t[i - 1].line + 1 == t->line && s->cv[s->t[i - 1].pos] == '\\'))
				psp = 0;
			pline = t->line;
			if (c == '(' || c == '[' || c == '{') {
				pstack[psp++] = i;
			} else if (c == ')' || c == ']' || c == '}') {
				if (psp && closer(s->cv[s->t[pstack[psp - 1]].pos]) == c) {
					t->match = pstack[psp - 1];
					s->t[pstack[--psp]].match = i;
				}
			}
			continue;
		}
		t->encl = bp ? braces[bp - 1] : -1;
		if (c == '(' || c == '[' || c == '{') {
			stack[sp++] = i;
			if (c == '{')
				braces[bp++] = i;
		} else if (c == ')' || c == ']' || c == '}') {
			/* unwind to the matching opener; unmatched closers are ignored */
			int k = sp - 1;

			while (k >= 0 && closer(s->cv[s->t[stack[k]].pos]) != c)
				k--;
			if (k < 0)
				continue;
			t->match = stack[k];
			s->t[stack[k]].match = i;
			sp = k;
			if (c == '}') {
				while (bp && braces[bp - 1] >= stack[k])
					bp--;
				t->encl = bp ? braces[bp - 1] : -1;
			} else {
				while (bp && braces[bp - 1] > stack[k])
					bp--;
			}
		}
	}
	free(stack);
	free(braces);
	free(pstack);
}

/* Strings of asm statements: PTX mnemonics are evidence. */
static void collect_asm(struct scan *s)
{
	static const char *const kw[] = { "asm", "__asm__", "__asm", NULL };

	for (int i = 0; i < s->n; i++) {
		int j = i + 1, end;

		if (!one_of(s, i, kw))
			continue;
		while (j < s->n && (is(s, j, "volatile") || is(s, j, "__volatile__") || is(s, j, "goto") ||
				    is(s, j, "inline")))
			j++;
		if (!is(s, j, "("))
			continue;
		end = match_or_end(s, j);
		for (int k = j + 1; k < end; k++)
			if (s->t[k].kind == T_STR) {
				strbuf_add(&s->asm_text, s->tv + s->t[k].pos, s->t[k].len);
				strbuf_addch(&s->asm_text, '\n');
			}
	}
}

/* mnemonic at the start of a PTX word: "red.global" is not in "shared.global". */
static bool asm_has(const struct scan *s, const char *mnemonic)
{
	const char *p = s->asm_text.buf;

	while ((p = strstr(p, mnemonic))) {
		if (p == s->asm_text.buf || *mnemonic == '.' || !(ident_char(p[-1]) || p[-1] == '.'))
			return true;
		p++;
	}
	return false;
}

/* --- statements, functions, loops, pragmas --- */

static const char *const control_kw[] = {
	"if", "for", "while", "switch", "catch", "return", "sizeof", "decltype", "alignof",
	"__launch_bounds__", "__attribute__", "__declspec", "alignas", "static_assert", NULL
};

/* Last token of the statement starting at i (code tokens). */
static int stmt_end(const struct scan *s, int i, int depth)
{
	int j, e;

	while (i < s->n && s->t[i].pp)
		i++;
	if (i >= s->n)
		return s->n - 1;
	if (depth > 64)
		return i;
	if (is(s, i, "{"))
		return match_or_end(s, i);
	if (is(s, i, "for") || is(s, i, "while") || is(s, i, "switch")) {
		j = next_code(s, i);
		if (is(s, j, "("))
			return stmt_end(s, next_code(s, match_or_end(s, j)), depth + 1);
	}
	if (is(s, i, "if")) {
		j = next_code(s, i);
		if (is(s, j, "constexpr"))
			j = next_code(s, j);
		if (is(s, j, "(")) {
			e = stmt_end(s, next_code(s, match_or_end(s, j)), depth + 1);
			j = next_code(s, e);
			if (is(s, j, "else"))
				return stmt_end(s, next_code(s, j), depth + 1);
			return e;
		}
	}
	if (is(s, i, "do")) {
		e = stmt_end(s, next_code(s, i), depth + 1);
		j = next_code(s, e);
		if (is(s, j, "while")) {
			j = next_code(s, j);
			if (is(s, j, "("))
				j = next_code(s, match_or_end(s, j));
			return j < s->n ? j : s->n - 1;
		}
		return e;
	}
	for (j = i; j < s->n; j++) {
		if (s->t[j].pp)
			continue;
		if (is(s, j, ";"))
			return j;
		if (is(s, j, "}"))
			return j > i ? prev_code(s, j) : j;
		if (is(s, j, "(") || is(s, j, "[") || is(s, j, "{"))
			j = match_or_end(s, j);
	}
	return s->n - 1;
}

static void collect_devmacros(struct scan *s)
{
	for (int i = 0; i + 2 < s->n; i++) {
		int k;

		if (!s->t[i].pp || !is(s, i, "#") || !is(s, i + 1, "define") || !is_ident(s, i + 2))
			continue;
		for (k = i + 3; k < s->n && s->t[k].pp && !is(s, k, "#"); k++)
			if (is(s, k, "__device__") || is(s, k, "__global__")) {
				names_add(&s->devmacros, s->cv + s->t[i + 2].pos, s->t[i + 2].len);
				break;
			}
	}
}

static bool quals_say(const struct scan *s, int name, const char *what)
{
	for (int k = prev_code(s, name); k >= 0; k = prev_code(s, k)) {
		if (is(s, k, ";") || is(s, k, "{") || is(s, k, "}"))
			break;
		if (is(s, k, ")") && s->t[k].match >= 0) {
			k = s->t[k].match;
			continue;
		}
		if (is(s, k, what))
			return true;
		if (in_names(s, &s->devmacros, k)) {
			/* a macro spelling __device__ or __global__: which one? */
			for (int d = 0; d + 2 < s->n; d++)
				if (s->t[d].pp && is(s, d, "define") && s->t[d + 1].len == s->t[k].len &&
				    !memcmp(s->cv + s->t[d + 1].pos, s->cv + s->t[k].pos, s->t[k].len))
					for (int m = d + 2; m < s->n && s->t[m].pp && !is(s, m, "#"); m++)
						if (is(s, m, what))
							return true;
		}
	}
	return false;
}

static void collect_funcs(struct scan *s)
{
	static const char *const tail[] = { "const", "noexcept", "override", "final", "mutable", NULL };

	for (int i = 0; i < s->n; i++) {
		int p, q, name;
		struct func fn;

		if (s->t[i].pp || !is(s, i, "{") || s->t[i].match < 0)
			continue;
		p = prev_code(s, i);
		while (p >= 0 && one_of(s, p, tail))
			p = prev_code(s, p);
		if (!is(s, p, ")") || s->t[p].match < 0)
			continue;
		q = s->t[p].match;
		name = prev_code(s, q);
		if (!is_ident(s, name) || one_of(s, name, control_kw))
			continue;
		fn.name = name;
		fn.popen = q;
		fn.pclose = p;
		fn.bopen = i;
		fn.bclose = s->t[i].match;
		fn.global = quals_say(s, name, "__global__");
		fn.device = fn.global || quals_say(s, name, "__device__");
		if (s->nf == s->af) {
			s->af = s->af ? 2 * s->af : 16;
			s->f = xrealloc(s->f, (size_t)s->af * sizeof(*s->f));
		}
		s->f[s->nf++] = fn;
	}
}

static const struct func *func_at(const struct scan *s, int i)
{
	const struct func *best = NULL;

	for (int k = 0; k < s->nf; k++)
		if (s->f[k].bopen < i && i < s->f[k].bclose &&
		    (!best || s->f[k].bopen > best->bopen))
			best = &s->f[k];
	return best;
}

static bool in_device(const struct scan *s, int i)
{
	for (int k = 0; k < s->nf; k++)
		if (s->f[k].device && s->f[k].bopen < i && i < s->f[k].bclose)
			return true;
	return false;
}

static void collect_loops(struct scan *s)
{
	for (int i = 0; i < s->n; i++) {
		struct loop lp;
		int h, semi[2], ns = 0, b;

		if (s->t[i].pp || !(is(s, i, "for") || is(s, i, "while")))
			continue;
		if (is(s, i, "while")) {
			/* the tail of do { } while (...); is not a loop of its own */
			int p = prev_code(s, i);

			if (is(s, p, "}") && s->t[p].match >= 0 && is(s, prev_code(s, s->t[p].match), "do"))
				continue;
		}
		h = next_code(s, i);
		if (!is(s, h, "(") || s->t[h].match < 0)
			continue;
		memset(&lp, 0, sizeof(lp));
		lp.kw = i;
		lp.hopen = h;
		lp.hclose = s->t[h].match;
		for (int k = h + 1; k < lp.hclose && ns < 2; k++) {
			if (is(s, k, "(") || is(s, k, "[") || is(s, k, "{"))
				k = match_or_end(s, k);
			else if (is(s, k, ";"))
				semi[ns++] = k;
		}
		if (is(s, i, "for") && ns == 2) {
			lp.init_s = h + 1;
			lp.init_e = semi[0];
			lp.cond_s = semi[0] + 1;
			lp.cond_e = semi[1];
			lp.inc_s = semi[1] + 1;
			lp.inc_e = lp.hclose;
		} else {
			lp.init_s = lp.init_e = lp.inc_s = lp.inc_e = h + 1;
			lp.cond_s = h + 1;
			lp.cond_e = lp.hclose;
		}
		b = next_code(s, lp.hclose);
		lp.body_s = b;
		lp.body_e = stmt_end(s, b, 0);
		if (s->nl == s->al) {
			s->al = s->al ? 2 * s->al : 16;
			s->l = xrealloc(s->l, (size_t)s->al * sizeof(*s->l));
		}
		s->l[s->nl++] = lp;
	}
}

static void collect_pragmas(struct scan *s)
{
	for (int i = 0; i + 1 < s->n; i++) {
		struct pragma pr;
		int k, st;

		if (!s->t[i].pp || !is(s, i, "#") || !is(s, i + 1, "pragma"))
			continue;
		for (k = i + 1; k + 1 < s->n && s->t[k + 1].pp && !is(s, k + 1, "#"); k++)
			;
		pr.first = i;
		pr.last = k;
		st = next_code(s, k);
		pr.stmt_s = st < s->n ? st : -1;
		pr.stmt_e = st < s->n ? stmt_end(s, st, 0) : -1;
		if (s->npr == s->apr) {
			s->apr = s->apr ? 2 * s->apr : 16;
			s->pr = xrealloc(s->pr, (size_t)s->apr * sizeof(*s->pr));
		}
		s->pr[s->npr++] = pr;
		i = k;
	}
}

static bool pragma_has(const struct scan *s, const struct pragma *pr, const char *word)
{
	for (int k = pr->first; k <= pr->last; k++)
		if (is(s, k, word))
			return true;
	return false;
}

static bool pragma_omp(const struct scan *s, const struct pragma *pr)
{
	return is(s, pr->first + 2, "omp");
}

/* Compile-time names: macros, constant-initialised const/constexpr, template parameters, CUDA built-ins. */
static void collect_consts(struct scan *s)
{
	static const char *const builtin[] = { "threadIdx", "blockIdx", "blockDim", "gridDim", "warpSize",
					       NULL };

	for (const char *const *b = builtin; *b; b++)
		names_add(&s->consts, *b, strlen(*b));
	for (int i = 0; i < s->n; i++) {
		if (s->t[i].pp) {
			if (is(s, i, "define") && is_ident(s, i + 1) && s->t[i + 1].pp)
				names_add(&s->consts, s->cv + s->t[i + 1].pos, s->t[i + 1].len);
			continue;
		}
		if (is(s, i, "template") && is(s, next_code(s, i), "<")) {
			int depth = 0;

			for (int k = next_code(s, i); k < s->n; k++) {
				if (is(s, k, "<"))
					depth++;
				else if (is(s, k, ">") && --depth == 0)
					break;
				else if (is(s, k, ">>") && (depth -= 2) <= 0)
					break;
				else if (is_ident(s, k) && (is(s, k + 1, ",") || is(s, k + 1, ">") ||
							    is(s, k + 1, "=") || is(s, k + 1, ">>")))
					names_add(&s->consts, s->cv + s->t[k].pos, s->t[k].len);
			}
			continue;
		}
		if (is(s, i, "constexpr") || is(s, i, "const")) {
			int k, eq = -1, end;
			bool constant = true;

			for (k = i; k < s->n && !is(s, k, ";") && !is(s, k, "{") && !is(s, k, ")"); k++)
				if (is(s, k, "=")) {
					eq = k;
					break;
				}
			if (eq < 0 || !is_ident(s, eq - 1))
				continue;
			for (end = eq + 1; end < s->n && !is(s, end, ";") && !is(s, end, ","); end++) {
				if (s->t[end].kind == T_IDENT && !in_names(s, &s->consts, end) &&
				    !is(s, end, "sizeof") && !is(s, end, "int") && !is(s, end, "float"))
					constant = false;
				if (is(s, end, "(") || is(s, end, "["))
					end = match_or_end(s, end);
			}
			if (constant)
				names_add(&s->consts, s->cv + s->t[eq - 1].pos, s->t[eq - 1].len);
		}
	}
}

/* Pointer parameters of device functions, and local pointers derived from them or from shared arrays. */
static void collect_pointers(struct scan *s)
{
	for (int f = 0; f < s->nf; f++) {
		const struct func *fn = &s->f[f];
		int seg = fn->popen + 1;

		if (!fn->device)
			continue;
		for (int k = fn->popen + 1; k <= fn->pclose; k++) {
			bool star = false;
			int last = -1;

			if (!(is(s, k, ",") || k == fn->pclose))
				continue;
			for (int m = seg; m < k; m++) {
				if (is(s, m, "*"))
					star = true;
				else if (is_ident(s, m) && !is(s, m, "__restrict__") && !is(s, m, "__restrict") &&
					 !is(s, m, "restrict") && !is(s, m, "const"))
					last = m;
			}
			if (star && last >= 0)
				names_add(&s->ptrs, s->cv + s->t[last].pos, s->t[last].len);
			seg = k + 1;
		}
	}
	/* T *name = expr: name is global when expr names a global pointer, shared when a shared array */
	for (int i = 0; i + 3 < s->n; i++) {
		int eq;

		if (s->t[i].pp || !is(s, i, "*") || !is_ident(s, i + 1) || !is(s, i + 2, "=") ||
		    !in_device(s, i))
			continue;
		eq = i + 2;
		for (int k = eq + 1; k < s->n && !is(s, k, ";") && !is(s, k, ","); k++) {
			if (in_names(s, &s->shared, k)) {
				names_add(&s->shared, s->cv + s->t[i + 1].pos, s->t[i + 1].len);
				break;
			}
			if (in_names(s, &s->ptrs, k)) {
				names_add(&s->ptrs, s->cv + s->t[i + 1].pos, s->t[i + 1].len);
				break;
			}
		}
	}
}

/* --- evidence shared by both backends --- */

static const char *const float_types[] = {
	"float", "double", "half", "__half", "__nv_bfloat16", "nv_bfloat16", "int", "unsigned",
	"int32_t", "uint32_t", "int64_t", "float2", "float4", "half2", "__half2", "__nv_bfloat162",
	"double2", "int4", "uint4", "int8_t", "_Float16", "__fp16", "kb_t", "acc_t", "scalar_t", NULL
};

static const char *const simd_types[] = {
	"__m128", "__m128d", "__m128i", "__m256", "__m256d", "__m256i", "__m512", "__m512d",
	"__m512i", "__m512bh", "float32x4_t", "float64x2_t", "float16x8_t", "svfloat32_t", NULL
};

/* The statement around token i (back to ; { } or a preprocessor line) holds word. */
static bool stmt_has_before(const struct scan *s, int i, const char *word)
{
	for (int k = i - 1; k >= 0; k--) {
		if (s->t[k].pp || is(s, k, ";") || is(s, k, "{") || is(s, k, "}"))
			return false;
		if (is(s, k, word))
			return true;
	}
	return false;
}

/* NAME[..][..] += ... or NAME[..][..] = fma(...) somewhere after the declaration at decl. */
static bool accumulated(const struct scan *s, int decl)
{
	for (int i = decl + 1; i + 1 < s->n; i++) {
		int k = i + 1, end;

		if (s->t[i].len != s->t[decl].len || memcmp(s->cv + s->t[i].pos, s->cv + s->t[decl].pos, s->t[i].len) ||
		    !is_ident(s, i) || is(s, i - 1, ".") || is(s, i - 1, "->"))
			continue;
		while (is(s, k, "[") && s->t[k].match > k)
			k = s->t[k].match + 1;
		if (k == i + 1)
			continue;
		if (is(s, k, "+=") || is(s, k, "-="))
			return true;
		if (!is(s, k, "="))
			continue;
		end = stmt_end(s, k, 0);
		for (int m = k + 1; m <= end; m++)
			if (has_prefix(s, m, "fma") || has_prefix(s, m, "__fma") || has_prefix(s, m, "__hfma"))
				return true;
	}
	return false;
}

/*
 * A local array of arithmetic type with two or more dimensions, or of SIMD
 * vectors: a register tile (with accum: only one accumulated into).
 */
static bool register_tile(const struct scan *s, bool device_only, bool simd, bool accum, char *what,
			  size_t size)
{
	for (int i = 0; i + 2 < s->n; i++) {
		int dims = 0, k;
		bool vec;
		char nb[32];

		if (s->t[i].pp || !is_ident(s, i + 1) || !is(s, i + 2, "["))
			continue;
		vec = simd && one_of(s, i, simd_types);
		if (!vec && !one_of(s, i, float_types))
			continue;
		if (!func_at(s, i) || (device_only && !in_device(s, i)))
			continue;
		if (stmt_has_before(s, i, "__shared__") || stmt_has_before(s, i, "__constant__") ||
		    stmt_has_before(s, i, "extern") || stmt_has_before(s, i, "static"))
			continue;
		for (k = i + 2; is(s, k, "[") && s->t[k].match > k; k = s->t[k].match + 1)
			dims++;
		if (!(dims >= 2 || (vec && dims >= 1)) || (accum && !accumulated(s, i + 1)))
			continue;
		snprintf(what, size, "register tile %s%s", tname(s, i + 1, nb, sizeof(nb)),
			 dims >= 2 ? "[][]" : "[]");
		return true;
	}
	return false;
}

static const char *const exp_fns[] = {
	"exp", "expf", "expl", "__expf", "exp2", "exp2f", "exp2l", "hexp", "hexp2", "h2exp", "h2exp2",
	"__builtin_exp", "__builtin_expf", "fast_exp", NULL
};

/* exp(...) with a subtraction inside, starting at token i: its closing paren, or -1. */
static int exp_of_difference(const struct scan *s, int i)
{
	int open = i + 1, close;

	if (!one_of(s, i, exp_fns) || !is(s, open, "(") || s->t[open].match < 0)
		return -1;
	close = s->t[open].match;
	for (int k = open + 1; k < close; k++)
		if (is(s, k, "-"))
			return close;
	return -1;
}

/* Online / single-pass evidence: running-max rescaling, merged (max, sum) pairs, Welford. */
static bool online(const struct scan *s, char *what, size_t size)
{
	struct names rescale = { NULL, 0, 0 };
	bool found = false;

	for (int i = 0; i < s->n && !found; i++)
		if (is_ident(s, i) && s->t[i].len >= 7 &&
		    (memmem(s->cv + s->t[i].pos, s->t[i].len, "welford", 7) ||
		     memmem(s->cv + s->t[i].pos, s->t[i].len, "Welford", 7))) {
			snprintf(what, size, "Welford update");
			return true;
		}

	/* name = exp(a - b): a rescale factor */
	for (int i = 1; i + 1 < s->n; i++)
		if (is(s, i, "=") && is_ident(s, i - 1) && exp_of_difference(s, i + 1) >= 0 &&
		    is(s, s->t[i + 2].match + 1, ";"))
			names_add(&rescale, s->cv + s->t[i - 1].pos, s->t[i - 1].len);

	for (int st = 0; st < s->n && !found; ) {
		int e = st, op = -1, products = 0;

		while (e < s->n && !(is(s, e, ";") || is(s, e, "{") || is(s, e, "}")))
			e++;
		for (int k = st; k < e && op < 0; k++) {
			if (s->t[k].pp)
				break;
			if (is(s, k, "=") || is(s, k, "*="))
				op = k;
		}
		if (op > st && !s->t[op].pp) {
			/* products with an exp(a - b) or a rescale factor on the right side */
			for (int k = op + 1; k < e; k++) {
				int c = exp_of_difference(s, k), start;
				bool factor = c >= 0 || in_names(s, &rescale, k);

				if (!factor)
					continue;
				if (c < 0)
					c = k;
				start = k;
				while (is(s, start - 1, "::") && is_ident(s, start - 2))
					start -= 2; /* std::exp */
				if (is(s, start - 1, "*") || is(s, c + 1, "*") || (is(s, op, "*=") && start == op + 1))
					products++;
			}
			if (is(s, op, "*=") && products) {
				snprintf(what, size, "running rescale (*= exp)");
				found = true;
			} else if (products >= 2) {
				snprintf(what, size, "online (max, sum) merge");
				found = true;
			} else if (products == 1 && is_ident(s, op - 1)) {
				/* s = s * exp(m - m') + ...: the target rescaled by itself */
				for (int k = op + 1; k < e; k++)
					if (s->t[k].len == s->t[op - 1].len &&
					    !memcmp(s->cv + s->t[k].pos, s->cv + s->t[op - 1].pos, s->t[k].len) &&
					    (is(s, k + 1, "*") || is(s, k - 1, "*")) && !is(s, k - 1, ".") &&
					    !is(s, k - 1, "->")) {
						snprintf(what, size, "running rescale (x = x * exp)");
						found = true;
						break;
					}
			}
		}
		st = e + 1;
	}
	names_release(&rescale);
	return found;
}

/* Token text of [a, b) compared with [c, d). */
static bool same_tokens(const struct scan *s, int a, int b, int c, int d)
{
	if (b - a != d - c)
		return false;
	for (int k = 0; k < b - a; k++)
		if (s->t[a + k].len != s->t[c + k].len ||
		    memcmp(s->cv + s->t[a + k].pos, s->cv + s->t[c + k].pos, s->t[a + k].len))
			return false;
	return true;
}

/* A loop whose condition names a run-time size (not a loop variable, macro or constant). */
static bool runtime_bound(const struct scan *s, const struct loop *lp)
{
	for (int k = lp->cond_s; k < lp->cond_e; k++) {
		bool loopvar = false;

		if (!is_ident(s, k) || in_names(s, &s->consts, k) || is(s, k - 1, ".") || is(s, k - 1, "->") ||
		    is(s, k + 1, "(") || is(s, k, "sizeof"))
			continue;
		for (int m = lp->init_s; m < lp->init_e; m++)
			if (is(s, m + 1, "=") && s->t[m].len == s->t[k].len &&
			    !memcmp(s->cv + s->t[m].pos, s->cv + s->t[k].pos, s->t[k].len))
				loopvar = true;
		for (int m = lp->inc_s; m < lp->inc_e; m++)
			if (s->t[m].len == s->t[k].len && !memcmp(s->cv + s->t[m].pos, s->cv + s->t[k].pos, s->t[k].len))
				loopvar = true;
		if (!loopvar)
			return true;
	}
	return false;
}

/* Two sibling loops (same block, neither inside the other) over the same run-time range. */
static bool repeated_pass(const struct scan *s, bool device_only, char *what, size_t size)
{
	for (int a = 0; a < s->nl; a++) {
		const struct loop *la = &s->l[a];

		if (device_only && !in_device(s, la->kw))
			continue;
		if (la->cond_e <= la->cond_s || !runtime_bound(s, la))
			continue;
		for (int b = a + 1; b < s->nl; b++) {
			const struct loop *lb = &s->l[b];
			struct strbuf c = STRBUF_INIT;

			if (s->t[lb->kw].encl != s->t[la->kw].encl || lb->kw <= la->body_e)
				continue;
			if (!same_tokens(s, la->cond_s, la->cond_e, lb->cond_s, lb->cond_e))
				continue;
			for (int k = la->cond_s; k < la->cond_e && c.len < 24; k++)
				strbuf_add(&c, s->cv + s->t[k].pos, s->t[k].len);
			snprintf(what, size, "two passes over %s", c.buf);
			strbuf_release(&c);
			return true;
		}
	}
	return false;
}

/* Each if statement: its then branch [ts, te] and else branch [es, ee] (-1: none). */
struct ifstmt {
	int ts, te, es, ee;
};

static struct ifstmt *collect_ifs(const struct scan *s, int *nr)
{
	struct ifstmt *v = NULL;
	int n = 0, alloc = 0;

	for (int i = 0; i < s->n; i++) {
		struct ifstmt f = { -1, -1, -1, -1 };
		int h;

		if (s->t[i].pp || !is(s, i, "if"))
			continue;
		h = next_code(s, i);
		if (is(s, h, "constexpr"))
			h = next_code(s, h);
		if (!is(s, h, "(") || s->t[h].match < 0)
			continue;
		f.ts = next_code(s, s->t[h].match);
		f.te = stmt_end(s, f.ts, 0);
		if (is(s, next_code(s, f.te), "else")) {
			f.es = next_code(s, next_code(s, f.te));
			f.ee = stmt_end(s, f.es, 0);
		}
		if (n == alloc) {
			alloc = alloc ? 2 * alloc : 16;
			v = xrealloc(v, (size_t)alloc * sizeof(*v));
		}
		v[n++] = f;
	}
	*nr = n;
	return v;
}

/*
 * Launch sites a < b are alternatives when they sit in the two branches of
 * one if/else, or when a's branch returns before b is reached.
 */
static bool alternatives(const struct scan *s, const struct ifstmt *ifs, int nifs, int a, int b)
{
	for (int k = 0; k < nifs; k++) {
		const struct ifstmt *f = &ifs[k];

		if (a < f->ts || a > f->te)
			continue;
		if (f->es >= 0 && f->es <= b && b <= f->ee)
			return true;
		if (b > f->te)
			for (int m = a; m <= f->te; m++)
				if (is(s, m, "return"))
					return true;
	}
	return false;
}

/* --- CUDA --- */

static const char *const cuda_vec[] = {
	"float2", "float4", "double2", "double4", "int2", "int4", "uint2", "uint4", "half2", "__half2",
	"__nv_bfloat162", "nv_bfloat162", "char4", "uchar4", "short4", "longlong2", "ulonglong2", NULL
};

static const char *const cuda_ldst[] = {
	"__ldg", "__ldcg", "__ldca", "__ldcs", "__ldlu", "__ldcv", "__stcg", "__stcs", "__stwb", "__stwt",
	NULL
};

/* __shared__ arrays: a tile when 2-D, or (1-D, dynamic) when filled from global memory; else a reduction scratch. */
static void cuda_shared(struct scan *s, struct ev *e)
{
	char nb[32];

	for (int i = 0; i < s->n; i++) {
		int end;

		if (s->t[i].pp || !is(s, i, "__shared__"))
			continue;
		end = stmt_end(s, i, 0);
		for (int k = i + 1; k <= end; k++) {
			int dims = 0, m;

			if (!is_ident(s, k) || !is(s, k + 1, "["))
				continue;
			for (m = k + 1; is(s, m, "[") && s->t[m].match > m; m = s->t[m].match + 1)
				dims++;
			if (dims >= 2)
				note(e, AX_MEM, 2, "__shared__ tile %s[][]", tname(s, k, nb, sizeof(nb)));
			names_add(&s->shared, s->cv + s->t[k].pos, s->t[k].len);
			k = m - 1;
		}
	}
	collect_pointers(s);
	/* NAME[...] = ...global pointer...: global memory staged through shared memory */
	for (int i = 0; i + 1 < s->n; i++) {
		int close, end;

		if (s->t[i].pp || !in_names(s, &s->shared, i) || !is(s, i + 1, "[") || is(s, i - 1, "."))
			continue;
		close = match_or_end(s, i + 1);
		while (is(s, close + 1, "[") && s->t[close + 1].match > close)
			close = s->t[close + 1].match;
		if (!is(s, close + 1, "="))
			continue;
		end = stmt_end(s, i, 0);
		for (int k = close + 2; k <= end; k++)
			if (in_names(s, &s->ptrs, k)) {
				note(e, AX_MEM, 2, "global loads staged in __shared__ %s", tname(s, i, nb, sizeof(nb)));
				break;
			}
	}
}

static void score_cuda(struct scan *s, struct ev *e)
{
	struct names launched = { NULL, 0, 0 };
	int kernels = 0, kernel_name = -1, launch_in_loop = -1, sites[64], nsites = 0, seq = -1;
	bool warp = false, block = false, atomics = false;
	char nb[48], what[56];

	/* memory */
	for (int i = 0; i < s->n; i++) {
		if (s->t[i].pp || !is_ident(s, i))
			continue;
		if (one_of(s, i, cuda_vec))
			note(e, AX_MEM, 1, "vector type %s", tname(s, i, nb, sizeof(nb)));
		else if (one_of(s, i, cuda_ldst))
			note(e, AX_MEM, 1, "%s", tname(s, i, nb, sizeof(nb)));
		else if (contains(s, i, "memcpy_async") || has_prefix(s, i, "__pipeline_memcpy") ||
			 has_prefix(s, i, "cp_async"))
			note(e, AX_MEM, 3, "async copy %s", tname(s, i, nb, sizeof(nb)));
		else if (is(s, i, "cuTensorMapEncodeTiled") || is(s, i, "CUtensorMap"))
			note(e, AX_MEM, 3, "TMA (%s)", tname(s, i, nb, sizeof(nb)));
		else if (has_prefix(s, i, "ldmatrix") || has_prefix(s, i, "__ldmatrix"))
			note(e, AX_MEM, 3, "ldmatrix");
	}
	if (asm_has(s, "cp.async.bulk"))
		note(e, AX_MEM, 3, "TMA (cp.async.bulk)");
	if (asm_has(s, "cp.async"))
		note(e, AX_MEM, 3, "cp.async");
	if (asm_has(s, "ldmatrix"))
		note(e, AX_MEM, 3, "ldmatrix");
	if (asm_has(s, ".v4.") || asm_has(s, ".v2."))
		note(e, AX_MEM, 1, "vector ld/st in PTX");
	cuda_shared(s, e);
	if (register_tile(s, true, false, false, what, sizeof(what)))
		note(e, AX_MEM, 3, "%s", what);

	/* compute */
	for (int i = 0; i < s->n; i++) {
		if (s->t[i].pp)
			continue;
		if (is(s, i, "wmma") || is(s, i, "mma_sync") || is(s, i, "load_matrix_sync"))
			note(e, AX_COMP, 3, "tensor cores (wmma)");
		else if (has_prefix(s, i, "cublasLt"))
			note(e, AX_COMP, 3, "cuBLASLt");
		else if (has_prefix(s, i, "cublas"))
			note(e, AX_COMP, 3, "cuBLAS");
		else if (is(s, i, "cutlass") || (is(s, i, "cute") && is(s, i + 1, "::")))
			note(e, AX_COMP, 3, "CUTLASS");
		if (is(s, i, "__global__")) {
			const struct func *fn = NULL;

			for (int k = 0; k < s->nf; k++)
				if (s->f[k].global && s->f[k].name > i && (!fn || s->f[k].name < fn->name))
					fn = &s->f[k];
			for (int k = i; fn && k < fn->name; k++)
				if (is(s, k, ";") || is(s, k, "{") || is(s, k, "}"))
					fn = NULL; /* a declaration only */
			if (fn) {
				kernels++;
				if (kernel_name < 0)
					kernel_name = fn->name;
			}
		}
		if (is(s, i, "<<<")) {
			int k = i - 1;

			if (is(s, k, ">")) {
				int depth = 0;

				for (; k >= 0; k--) {
					if (is(s, k, ">"))
						depth++;
					else if (is(s, k, "<") && --depth == 0)
						break;
				}
				k--;
			}
			if (is_ident(s, k)) {
				names_add(&launched, s->cv + s->t[k].pos, s->t[k].len);
				if (nsites < (int)ARRAY_SIZE(sites))
					sites[nsites++] = k;
			}
			for (int l = 0; l < s->nl; l++)
				if (s->l[l].body_s <= i && i <= s->l[l].body_e && !in_device(s, i))
					launch_in_loop = i;
		}
		if (is(s, i, "cudaLaunchKernel") || is(s, i, "cudaLaunchCooperativeKernel") ||
		    is(s, i, "cudaLaunchKernelEx")) {
			for (int k = i + 2; k < s->n && k < i + 8; k++)
				if (is_ident(s, k) && !is(s, k, "void") && !is(s, k, "const")) {
					names_add(&launched, s->cv + s->t[k].pos, s->t[k].len);
					if (nsites < (int)ARRAY_SIZE(sites))
						sites[nsites++] = k;
					break;
				}
		}
	}
	if (asm_has(s, "mma.sync") || asm_has(s, "mma.sp"))
		note(e, AX_COMP, 3, "tensor cores (mma.sync)");
	if (asm_has(s, "wgmma") || asm_has(s, "tcgen05.mma"))
		note(e, AX_COMP, 3, "tensor cores (wgmma)");
	if (e->lv[AX_MEM][2][0] && register_tile(s, true, false, true, what, sizeof(what)))
		note(e, AX_COMP, 3, "tiled: shared tile + accumulated %s", what);
	if (online(s, what, sizeof(what)))
		note(e, AX_COMP, 2, "%s", what);
	if (nsites > 1) {
		int nifs;
		struct ifstmt *ifs = collect_ifs(s, &nifs);

		for (int a = 0; a < nsites && seq < 0; a++)
			for (int b = a + 1; b < nsites && seq < 0; b++)
				if (!alternatives(s, ifs, nifs, sites[a], sites[b]))
					seq = b;
		free(ifs);
	}
	if (nsites)
		kernel_name = sites[0];
	if (seq >= 0)
		note(e, AX_COMP, 0, "kernels launched in sequence (%s, ...)", tname(s, sites[0], nb, 24));
	else if (!nsites && kernels >= 2)
		note(e, AX_COMP, 0, "%d kernels", kernels);
	else if (launch_in_loop >= 0)
		note(e, AX_COMP, 0, "kernel launched in a loop");
	else if (repeated_pass(s, true, what, sizeof(what)))
		note(e, AX_COMP, 0, "%s", what);
	else if (kernel_name >= 0 && launched.nr > 1)
		note(e, AX_COMP, 1, "one kernel per call (%zu variants)", launched.nr);
	else if (kernel_name >= 0)
		note(e, AX_COMP, 1, "one kernel %s", tname(s, kernel_name, nb, 32));

	/* parallelism */
	for (int i = 0; i < s->n; i++) {
		if (s->t[i].pp || !is_ident(s, i))
			continue;
		if (has_prefix(s, i, "__syncthreads") || is(s, i, "this_thread_block") || is(s, i, "__barrier_sync")) {
			note(e, AX_PAR, 1, "%s", tname(s, i, nb, sizeof(nb)));
			block = true;
		} else if (has_prefix(s, i, "__shfl") || has_prefix(s, i, "__reduce_") ||
			   is(s, i, "__ballot_sync") || is(s, i, "__any_sync") || is(s, i, "__all_sync") ||
			   has_prefix(s, i, "__match_") || is(s, i, "__activemask") ||
			   is(s, i, "tiled_partition") || is(s, i, "thread_block_tile") ||
			   is(s, i, "coalesced_threads")) {
			note(e, AX_PAR, 2, "%s", tname(s, i, nb, sizeof(nb)));
			warp = true;
		} else if (has_prefix(s, i, "atomic") && !contains(s, i, "_block") && is(s, i + 1, "(") &&
			   in_device(s, i)) {
			snprintf(what, sizeof(what), "%.24s across blocks", tname(s, i, nb, 24));
			atomics = true;
		} else if (is(s, i, "this_grid") || is(s, i, "grid_group") ||
			   is(s, i, "cudaLaunchCooperativeKernel")) {
			note(e, AX_PAR, 3, "grid sync (%s)", tname(s, i, nb, 32));
		} else if (is(s, i, "__cluster_dims__") || is(s, i, "this_cluster") || is(s, i, "cluster_group")) {
			note(e, AX_PAR, 3, "thread block clusters");
		}
	}
	if (asm_has(s, "bar.sync") || asm_has(s, "barrier.sync")) {
		note(e, AX_PAR, 1, "bar.sync");
		block = true;
	}
	if (asm_has(s, "shfl.sync") || asm_has(s, "redux.sync") || asm_has(s, "vote.sync")) {
		note(e, AX_PAR, 2, "warp PTX (shfl/redux/vote)");
		warp = true;
	}
	if (asm_has(s, "red.global") || asm_has(s, "atom.global")) {
		snprintf(what, sizeof(what), "global atomics in PTX");
		atomics = true;
	}
	if (asm_has(s, "barrier.cluster"))
		note(e, AX_PAR, 3, "thread block clusters");
	/* atomics alone are a thread-level pattern; with warp or block work below them, a hierarchy */
	if (atomics && (warp || block))
		note(e, AX_PAR, 3, "%s + %s", what, warp ? "warp" : "block");
	names_release(&launched);
}

/* --- CPU (OpenMP, SIMD intrinsics) --- */

static bool fma_intrinsic(const struct scan *s, int i)
{
	static const char *const mid[] = { "_fmadd_", "_fmsub_", "_fnmadd_", "_fnmsub_", "_fmaddsub_",
					   "_dpbf16_", "_dpbusd", "_dpwssd", "_dpph", NULL };

	if (has_prefix(s, i, "_mm"))
		for (const char *const *m = mid; *m; m++)
			if (contains(s, i, *m))
				return true;
	return has_prefix(s, i, "_tile_") || has_prefix(s, i, "vfmaq_") || has_prefix(s, i, "vfma_") ||
	       has_prefix(s, i, "vmlaq_") || has_prefix(s, i, "svmla_") || has_prefix(s, i, "cblas_");
}

/* _mm256_reduce_add_ps, _mm_hadd_ps, vaddvq_f32: a reduction across SIMD lanes */
static bool horizontal(const struct scan *s, int i)
{
	return (has_prefix(s, i, "_mm") && (contains(s, i, "_reduce_") || contains(s, i, "_hadd_"))) ||
	       has_prefix(s, i, "vaddvq_") || has_prefix(s, i, "vmaxvq_");
}

/* for (...; ...; v += B) with a loop inside whose bounds use v: a blocked loop. */
static bool blocked_loops(const struct scan *s, char *what, size_t size)
{
	char nb[24];

	for (int a = 0; a < s->nl; a++) {
		const struct loop *la = &s->l[a];
		int var = -1;

		for (int k = la->inc_s; k + 2 <= la->inc_e; k++)
			if (is_ident(s, k) && is(s, k + 1, "+=") &&
			    !(is(s, k + 2, "1") && k + 3 == la->inc_e))
				var = k;
		if (var < 0)
			continue;
		for (int b = 0; b < s->nl; b++) {
			const struct loop *lb = &s->l[b];

			if (lb->kw <= la->body_s - 1 || lb->kw > la->body_e)
				continue;
			for (int k = lb->init_s; k < lb->cond_e; k++)
				if (s->t[k].len == s->t[var].len &&
				    !memcmp(s->cv + s->t[k].pos, s->cv + s->t[var].pos, s->t[k].len)) {
					snprintf(what, size, "blocked loops (%s += ...)", tname(s, var, nb, sizeof(nb)));
					return true;
				}
		}
	}
	return false;
}

static void score_cpu(struct scan *s, struct ev *e)
{
	bool red = false;
	int nvec_decl = 0;
	char nb[48], what[56];

	/* pragmas */
	for (int p = 0; p < s->npr; p++) {
		const struct pragma *pr = &s->pr[p];

		if (pragma_omp(s, pr)) {
			bool simd = pragma_has(s, pr, "simd");

			if (simd)
				note(e, AX_MEM, 1, "omp simd");
			if (pragma_has(s, pr, "parallel") || pragma_has(s, pr, "for") ||
			    pragma_has(s, pr, "taskloop") || pragma_has(s, pr, "task")) {
				note(e, AX_PAR, 1, "omp %s", pragma_has(s, pr, "parallel") ?
					(pragma_has(s, pr, "for") ? "parallel for" : "parallel") : "for");
			}
			if (pragma_has(s, pr, "reduction")) {
				note(e, AX_PAR, 2, "omp %sreduction", simd ? "simd " : "");
				red = true;
			}
		} else if ((is(s, pr->first + 2, "GCC") && pragma_has(s, pr, "ivdep")) ||
			   (is(s, pr->first + 2, "clang") && pragma_has(s, pr, "vectorize"))) {
			note(e, AX_MEM, 1, "vectorisation pragma");
		}
	}
	/* hierarchical: a SIMD reduction inside a parallel loop, or collapsed parallel loops with a reduction */
	for (int p = 0; p < s->npr; p++) {
		const struct pragma *pr = &s->pr[p];

		if (!pragma_omp(s, pr) || !(pragma_has(s, pr, "parallel") || pragma_has(s, pr, "for")) ||
		    pr->stmt_s < 0)
			continue;
		if (pragma_has(s, pr, "collapse") && red) {
			note(e, AX_PAR, 3, "collapsed parallel loops + reduction");
			continue;
		}
		for (int q = 0; q < s->npr; q++) {
			const struct pragma *in = &s->pr[q];

			if (q != p && pragma_omp(s, in) && in->first > pr->stmt_s && in->first < pr->stmt_e &&
			    pragma_has(s, in, "reduction") &&
			    (pragma_has(s, in, "simd") || pragma_has(s, in, "parallel")))
				note(e, AX_PAR, 3, "omp %s reduction inside a parallel loop",
				     pragma_has(s, in, "simd") ? "simd" : "parallel");
		}
		for (int k = pr->stmt_s; k <= pr->stmt_e; k++)
			if (horizontal(s, k))
				note(e, AX_PAR, 3, "SIMD reduction inside a parallel loop");
	}

	for (int i = 0; i < s->n; i++) {
		if (s->t[i].pp || !is_ident(s, i))
			continue;
		if (fma_intrinsic(s, i))
			note(e, AX_COMP, 3, "FMA intrinsics (%s)", tname(s, i, nb, 32));
		if (horizontal(s, i))
			note(e, AX_PAR, 2, "horizontal reduction %s", tname(s, i, nb, 32));
		if (is(s, i, "__builtin_prefetch") || is(s, i, "_mm_prefetch"))
			note(e, AX_MEM, 3, "prefetch (%s)", tname(s, i, nb, 32));
		else if (has_prefix(s, i, "_mm") || has_prefix(s, i, "vld1q_") || has_prefix(s, i, "vst1q_"))
			note(e, AX_MEM, 1, "SIMD intrinsics (%s)", tname(s, i, nb, 32));
		else if (is(s, i, "vector_size"))
			note(e, AX_MEM, 1, "vector extension");
		if (one_of(s, i, simd_types) && func_at(s, i)) {
			/* __m256 c0, c1, c2, c3: several vector accumulators in one declaration */
			int end = stmt_end(s, i, 0), n = 1;

			for (int k = i + 1; k <= end; k++)
				if (is(s, k, ","))
					n++;
				else if (is(s, k, "(") || is(s, k, "["))
					k = match_or_end(s, k);
			if (!stmt_has_before(s, i, "(") && n > nvec_decl)
				nvec_decl = n;
		}
	}
	if (nvec_decl >= 4)
		note(e, AX_MEM, 3, "register tile (%d vector accumulators)", nvec_decl);
	if (register_tile(s, false, true, false, what, sizeof(what)))
		note(e, AX_MEM, 3, "%s", what);
	if (blocked_loops(s, what, sizeof(what)))
		note(e, AX_MEM, 2, "%s", what);
	if (online(s, what, sizeof(what)))
		note(e, AX_COMP, 2, "%s", what);
	if (repeated_pass(s, false, what, sizeof(what)))
		note(e, AX_COMP, 0, "%s", what);
	else if (s->nl)
		note(e, AX_COMP, 1, "one pass");
}

/* --- the public part --- */

static int level_of(const struct ev *e, int axis)
{
	for (int l = KB_BEHAVIOR_LEVELS - 1; l > 0; l--)
		if (e->lv[axis][l][0])
			return l;
	return 0;
}

void kb_behavior_score(const char *source, enum kb_backend backend, struct kb_behavior *out)
{
	static const char *const axis_name[AX_NR] = { "memory", "compute", "parallel" };
	struct scan s;
	struct ev e;
	struct strbuf why = STRBUF_INIT;

	memset(&s, 0, sizeof(s));
	memset(&e, 0, sizeof(e));
	memset(out, 0, sizeof(*out));
	if (!source)
		source = "";
	s.len = strlen(source);
	s.cv = kb_source_view(source, s.len, true);
	s.tv = kb_source_view(source, s.len, false);
	strbuf_init(&s.asm_text, 0);
	tokenize(&s);
	mark_pp(&s);
	match_brackets(&s);
	collect_asm(&s);
	collect_devmacros(&s);
	collect_funcs(&s);
	collect_loops(&s);
	collect_pragmas(&s);
	collect_consts(&s);

	if (backend == KB_BACKEND_CPU)
		score_cpu(&s, &e);
	else
		score_cuda(&s, &e);

	out->memory = level_of(&e, AX_MEM);
	out->compute = level_of(&e, AX_COMP);
	out->parallel = level_of(&e, AX_PAR);
	for (int a = 0; a < AX_NR; a++) {
		int top = level_of(&e, a);

		/* "memory 3: cp.async, 2: __shared__ tile xs[][]" */
		strbuf_addf(&why, "%s%s %d", a ? "; " : "", axis_name[a], top);
		if (e.lv[a][top][0])
			strbuf_addf(&why, ": %s", e.lv[a][top]);
		for (int l = top - 1; l > 0; l--)
			if (e.lv[a][l][0])
				strbuf_addf(&why, ", %d: %s", l, e.lv[a][l]);
	}
	if (why.len >= sizeof(out->why)) {
		/* cut at the last separator that fits */
		size_t cut = sizeof(out->why) - 4;

		while (cut > 0 && why.buf[cut] != ',' && why.buf[cut] != ';')
			cut--;
		strbuf_setlen(&why, cut);
		strbuf_addstr(&why, "...");
	}
	kb_strlcpy(out->why, why.buf, sizeof(out->why));

	strbuf_release(&why);
	strbuf_release(&s.asm_text);
	names_release(&s.consts);
	names_release(&s.devmacros);
	names_release(&s.ptrs);
	names_release(&s.shared);
	free(s.t);
	free(s.f);
	free(s.l);
	free(s.pr);
	free((char *)s.cv);
	free((char *)s.tv);
}

int kb_behavior_cell(const struct kb_behavior *b)
{
	int m = b->memory, c = b->compute, p = b->parallel;

	m = m < 0 ? 0 : m > 3 ? 3 : m;
	c = c < 0 ? 0 : c > 3 ? 3 : c;
	p = p < 0 ? 0 : p > 3 ? 3 : p;
	return m * 16 + c * 4 + p;
}

void kb_behavior_from_cell(int cell, struct kb_behavior *out)
{
	memset(out, 0, sizeof(*out));
	if (cell < 0 || cell >= KB_BEHAVIOR_CELLS)
		cell = 0;
	out->memory = cell / 16;
	out->compute = cell / 4 % 4;
	out->parallel = cell % 4;
}
