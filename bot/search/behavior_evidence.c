#include "core/common.h"
#include "search/behavior_priv.h"
#include "core/util.h"


/* --- evidence shared by both backends --- */

static const char *const float_types[] = {
	"float", "double", "half", "__half", "__nv_bfloat16", "nv_bfloat16", "int", "unsigned",
	"int32_t", "uint32_t", "int64_t", "float2", "float4", "half2", "__half2", "__nv_bfloat162",
	"double2", "int4", "uint4", "int8_t", "_Float16", "__fp16", "kb_t", "acc_t", "scalar_t", NULL
};

const char *const bh_simd_types[] = {
	"__m128", "__m128d", "__m128i", "__m256", "__m256d", "__m256i", "__m512", "__m512d",
	"__m512i", "__m512bh", "float32x4_t", "float64x2_t", "float16x8_t", "svfloat32_t", NULL
};

/* The statement around token i (back to ; { } or a preprocessor line) holds word. */
bool bh_stmt_has_before(const struct scan *s, int i, const char *word)
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
bool bh_accumulated(const struct scan *s, int decl)
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
		end = bh_stmt_end(s, k, 0);
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
bool bh_register_tile(const struct scan *s, bool device_only, bool simd, bool accum, char *what,
		      size_t size)
{
	for (int i = 0; i + 2 < s->n; i++) {
		int dims = 0, k;
		bool vec;
		char nb[32];

		if (s->t[i].pp || !is_ident(s, i + 1) || !is(s, i + 2, "["))
			continue;
		vec = simd && one_of(s, i, bh_simd_types);
		if (!vec && !one_of(s, i, float_types))
			continue;
		if (!bh_func_at(s, i) || (device_only && !bh_in_device(s, i)))
			continue;
		if (bh_stmt_has_before(s, i, "__shared__") || bh_stmt_has_before(s, i, "__constant__") ||
		    bh_stmt_has_before(s, i, "extern") || bh_stmt_has_before(s, i, "static"))
			continue;
		for (k = i + 2; is(s, k, "[") && s->t[k].match > k; k = s->t[k].match + 1)
			dims++;
		if (!(dims >= 2 || (vec && dims >= 1)) || (accum && !bh_accumulated(s, i + 1)))
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
bool bh_online(const struct scan *s, char *what, size_t size)
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
			bh_names_add(&rescale, s->cv + s->t[i - 1].pos, s->t[i - 1].len);

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
	bh_names_release(&rescale);
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
bool bh_repeated_pass(const struct scan *s, bool device_only, char *what, size_t size)
{
	for (int a = 0; a < s->nl; a++) {
		const struct loop *la = &s->l[a];

		if (device_only && !bh_in_device(s, la->kw))
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

struct ifstmt *bh_collect_ifs(const struct scan *s, int *nr)
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
		f.te = bh_stmt_end(s, f.ts, 0);
		if (is(s, next_code(s, f.te), "else")) {
			f.es = next_code(s, next_code(s, f.te));
			f.ee = bh_stmt_end(s, f.es, 0);
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
bool bh_alternatives(const struct scan *s, const struct ifstmt *ifs, int nifs, int a, int b)
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
