#include "core/common.h"
#include "search/behavior_priv.h"
#include "search/extract.h"
#include "core/util.h"

#include <ctype.h>

/* The scan of a kernel's source: tokens, brackets, functions, loops, pragmas and names. */

/* --- small helpers --- */

static bool ident_start(int c)
{
	return isalpha((unsigned char)c) || c == '_';
}

static bool ident_char(int c)
{
	return isalnum((unsigned char)c) || c == '_';
}

void bh_names_add(struct names *nm, const char *s, size_t len)
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

void bh_names_release(struct names *nm)
{
	for (size_t i = 0; i < nm->nr; i++)
		free(nm->v[i]);
	free(nm->v);
	memset(nm, 0, sizeof(*nm));
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
bool bh_asm_has(const struct scan *s, const char *mnemonic)
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
int bh_stmt_end(const struct scan *s, int i, int depth)
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
			return bh_stmt_end(s, next_code(s, match_or_end(s, j)), depth + 1);
	}
	if (is(s, i, "if")) {
		j = next_code(s, i);
		if (is(s, j, "constexpr"))
			j = next_code(s, j);
		if (is(s, j, "(")) {
			e = bh_stmt_end(s, next_code(s, match_or_end(s, j)), depth + 1);
			j = next_code(s, e);
			if (is(s, j, "else"))
				return bh_stmt_end(s, next_code(s, j), depth + 1);
			return e;
		}
	}
	if (is(s, i, "do")) {
		e = bh_stmt_end(s, next_code(s, i), depth + 1);
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
				bh_names_add(&s->devmacros, s->cv + s->t[i + 2].pos, s->t[i + 2].len);
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

const struct func *bh_func_at(const struct scan *s, int i)
{
	const struct func *best = NULL;

	for (int k = 0; k < s->nf; k++)
		if (s->f[k].bopen < i && i < s->f[k].bclose &&
		    (!best || s->f[k].bopen > best->bopen))
			best = &s->f[k];
	return best;
}

bool bh_in_device(const struct scan *s, int i)
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
		lp.body_e = bh_stmt_end(s, b, 0);
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
		pr.stmt_e = st < s->n ? bh_stmt_end(s, st, 0) : -1;
		if (s->npr == s->apr) {
			s->apr = s->apr ? 2 * s->apr : 16;
			s->pr = xrealloc(s->pr, (size_t)s->apr * sizeof(*s->pr));
		}
		s->pr[s->npr++] = pr;
		i = k;
	}
}

bool bh_pragma_has(const struct scan *s, const struct pragma *pr, const char *word)
{
	for (int k = pr->first; k <= pr->last; k++)
		if (is(s, k, word))
			return true;
	return false;
}

bool bh_pragma_omp(const struct scan *s, const struct pragma *pr)
{
	return is(s, pr->first + 2, "omp");
}

/* Compile-time names: macros, constant-initialised const/constexpr, template parameters, CUDA built-ins. */
static void collect_consts(struct scan *s)
{
	static const char *const builtin[] = { "threadIdx", "blockIdx", "blockDim", "gridDim", "warpSize",
					       NULL };

	for (const char *const *b = builtin; *b; b++)
		bh_names_add(&s->consts, *b, strlen(*b));
	for (int i = 0; i < s->n; i++) {
		if (s->t[i].pp) {
			if (is(s, i, "define") && is_ident(s, i + 1) && s->t[i + 1].pp)
				bh_names_add(&s->consts, s->cv + s->t[i + 1].pos, s->t[i + 1].len);
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
					bh_names_add(&s->consts, s->cv + s->t[k].pos, s->t[k].len);
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
				bh_names_add(&s->consts, s->cv + s->t[eq - 1].pos, s->t[eq - 1].len);
		}
	}
}

/* Pointer parameters of device functions, and local pointers derived from them or from shared arrays. */
void bh_collect_pointers(struct scan *s)
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
				bh_names_add(&s->ptrs, s->cv + s->t[last].pos, s->t[last].len);
			seg = k + 1;
		}
	}
	/* T *name = expr: name is global when expr names a global pointer, shared when a shared array */
	for (int i = 0; i + 3 < s->n; i++) {
		int eq;

		if (s->t[i].pp || !is(s, i, "*") || !is_ident(s, i + 1) || !is(s, i + 2, "=") ||
		    !bh_in_device(s, i))
			continue;
		eq = i + 2;
		for (int k = eq + 1; k < s->n && !is(s, k, ";") && !is(s, k, ","); k++) {
			if (in_names(s, &s->shared, k)) {
				bh_names_add(&s->shared, s->cv + s->t[i + 1].pos, s->t[i + 1].len);
				break;
			}
			if (in_names(s, &s->ptrs, k)) {
				bh_names_add(&s->ptrs, s->cv + s->t[i + 1].pos, s->t[i + 1].len);
				break;
			}
		}
	}
}

void bh_scan_init(struct scan *s, const char *source)
{
	memset(s, 0, sizeof(*s));
	s->len = strlen(source);
	s->cv = kb_source_view(source, s->len, true);
	s->tv = kb_source_view(source, s->len, false);
	strbuf_init(&s->asm_text, 0);
	tokenize(s);
	mark_pp(s);
	match_brackets(s);
	collect_asm(s);
	collect_devmacros(s);
	collect_funcs(s);
	collect_loops(s);
	collect_pragmas(s);
	collect_consts(s);
}

void bh_scan_release(struct scan *s)
{
	strbuf_release(&s->asm_text);
	bh_names_release(&s->consts);
	bh_names_release(&s->devmacros);
	bh_names_release(&s->ptrs);
	bh_names_release(&s->shared);
	free(s->t);
	free(s->f);
	free(s->l);
	free(s->pr);
	free((char *)s->cv);
	free((char *)s->tv);
}
