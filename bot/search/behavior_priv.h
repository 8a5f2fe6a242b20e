#ifndef KB_SEARCH_BEHAVIOR_PRIV_H
#define KB_SEARCH_BEHAVIOR_PRIV_H

#include "core/common.h"
#include "core/strbuf.h"
#include "search/behavior.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/*
 * The behaviour scorer's own parts, shared by its files: behavior.c (the
 * public descriptors and cells), behavior_scan.c (tokens, brackets,
 * functions, loops, pragmas, names), behavior_evidence.c (what both
 * backends look for), behavior_cuda.c and behavior_cpu.c (each level's
 * evidence per backend).
 *
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

/* Each if statement: its then branch [ts, te] and else branch [es, ee] (-1: none). */
struct ifstmt {
	int ts, te, es, ee;
};

/* Tokenise source and collect functions, loops, pragmas and names into s; bh_scan_release frees them. */
void bh_scan_init(struct scan *s, const char *source);
void bh_scan_release(struct scan *s);

/* the scan (behavior_scan.c) */
void bh_names_add(struct names *nm, const char *s, size_t len);
void bh_names_release(struct names *nm);
bool bh_asm_has(const struct scan *s, const char *mnemonic);
int bh_stmt_end(const struct scan *s, int i, int depth);
const struct func *bh_func_at(const struct scan *s, int i);
bool bh_in_device(const struct scan *s, int i);
bool bh_pragma_has(const struct scan *s, const struct pragma *pr, const char *word);
bool bh_pragma_omp(const struct scan *s, const struct pragma *pr);
void bh_collect_pointers(struct scan *s);

/* evidence shared by both backends (behavior_evidence.c) */
bool bh_stmt_has_before(const struct scan *s, int i, const char *word);
bool bh_accumulated(const struct scan *s, int decl);
bool bh_register_tile(const struct scan *s, bool device_only, bool simd, bool accum, char *what,
		      size_t size);
bool bh_online(const struct scan *s, char *what, size_t size);
bool bh_repeated_pass(const struct scan *s, bool device_only, char *what, size_t size);
struct ifstmt *bh_collect_ifs(const struct scan *s, int *nr);
bool bh_alternatives(const struct scan *s, const struct ifstmt *ifs, int nifs, int a, int b);

/* the backends (behavior_cuda.c, behavior_cpu.c): each level's evidence into e */
void bh_score_cuda(struct scan *s, struct ev *e);
void bh_score_cpu(struct scan *s, struct ev *e);

extern const char *const bh_simd_types[];

/* --- small helpers --- */

static inline bool is(const struct scan *s, int i, const char *text)
{
	size_t n = strlen(text);

	return i >= 0 && i < s->n && s->t[i].len == n && !memcmp(s->cv + s->t[i].pos, text, n);
}

static inline bool is_ident(const struct scan *s, int i)
{
	return i >= 0 && i < s->n && s->t[i].kind == T_IDENT;
}

static inline bool has_prefix(const struct scan *s, int i, const char *prefix)
{
	size_t n = strlen(prefix);

	return is_ident(s, i) && s->t[i].len >= n && !memcmp(s->cv + s->t[i].pos, prefix, n);
}

static inline bool contains(const struct scan *s, int i, const char *needle)
{
	return is_ident(s, i) && memmem(s->cv + s->t[i].pos, s->t[i].len, needle, strlen(needle));
}

static inline bool in_names(const struct scan *s, const struct names *nm, int i)
{
	if (!is_ident(s, i))
		return false;
	for (size_t k = 0; k < nm->nr; k++)
		if (is(s, i, nm->v[k]))
			return true;
	return false;
}

static inline bool one_of(const struct scan *s, int i, const char *const *words)
{
	for (; *words; words++)
		if (is(s, i, *words))
			return true;
	return false;
}

/* The identifier's text, truncated, for evidence. */
static inline const char *tname(const struct scan *s, int i, char *buf, size_t size)
{
	size_t n = s->t[i].len < size - 1 ? s->t[i].len : size - 1;

	memcpy(buf, s->cv + s->t[i].pos, n);
	buf[n] = '\0';
	return buf;
}

static inline void note(struct ev *e, int axis, int level, const char *fmt, ...) KB_PRINTF(4, 5);
static inline void note(struct ev *e, int axis, int level, const char *fmt, ...)
{
	va_list ap;

	if (e->lv[axis][level][0])
		return;
	va_start(ap, fmt);
	vsnprintf(e->lv[axis][level], sizeof(e->lv[axis][level]), fmt, ap);
	va_end(ap);
}

/* Next / previous code (non-preprocessor) token. */
static inline int next_code(const struct scan *s, int i)
{
	for (i++; i < s->n && s->t[i].pp; i++)
		;
	return i;
}

static inline int prev_code(const struct scan *s, int i)
{
	for (i--; i >= 0 && s->t[i].pp; i--)
		;
	return i;
}

static inline int match_or_end(const struct scan *s, int i)
{
	return s->t[i].match >= 0 ? s->t[i].match : s->n - 1;
}


#endif
