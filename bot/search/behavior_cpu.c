#include "core/common.h"
#include "search/behavior_priv.h"
#include "core/util.h"


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

void bh_score_cpu(struct scan *s, struct ev *e)
{
	bool red = false;
	int nvec_decl = 0;
	char nb[48], what[56];

	/* pragmas */
	for (int p = 0; p < s->npr; p++) {
		const struct pragma *pr = &s->pr[p];

		if (bh_pragma_omp(s, pr)) {
			bool simd = bh_pragma_has(s, pr, "simd");

			if (simd)
				note(e, AX_MEM, 1, "omp simd");
			if (bh_pragma_has(s, pr, "parallel") || bh_pragma_has(s, pr, "for") ||
			    bh_pragma_has(s, pr, "taskloop") || bh_pragma_has(s, pr, "task")) {
				note(e, AX_PAR, 1, "omp %s", bh_pragma_has(s, pr, "parallel") ?
					(bh_pragma_has(s, pr, "for") ? "parallel for" : "parallel") : "for");
			}
			if (bh_pragma_has(s, pr, "reduction")) {
				note(e, AX_PAR, 2, "omp %sreduction", simd ? "simd " : "");
				red = true;
			}
		} else if ((is(s, pr->first + 2, "GCC") && bh_pragma_has(s, pr, "ivdep")) ||
			   (is(s, pr->first + 2, "clang") && bh_pragma_has(s, pr, "vectorize"))) {
			note(e, AX_MEM, 1, "vectorisation pragma");
		}
	}
	/* hierarchical: a SIMD reduction inside a parallel loop, or collapsed parallel loops with a reduction */
	for (int p = 0; p < s->npr; p++) {
		const struct pragma *pr = &s->pr[p];

		if (!bh_pragma_omp(s, pr) || !(bh_pragma_has(s, pr, "parallel") || bh_pragma_has(s, pr, "for")) ||
		    pr->stmt_s < 0)
			continue;
		if (bh_pragma_has(s, pr, "collapse") && red) {
			note(e, AX_PAR, 3, "collapsed parallel loops + reduction");
			continue;
		}
		for (int q = 0; q < s->npr; q++) {
			const struct pragma *in = &s->pr[q];

			if (q != p && bh_pragma_omp(s, in) && in->first > pr->stmt_s && in->first < pr->stmt_e &&
			    bh_pragma_has(s, in, "reduction") &&
			    (bh_pragma_has(s, in, "simd") || bh_pragma_has(s, in, "parallel")))
				note(e, AX_PAR, 3, "omp %s reduction inside a parallel loop",
				     bh_pragma_has(s, in, "simd") ? "simd" : "parallel");
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
		if (one_of(s, i, bh_simd_types) && bh_func_at(s, i)) {
			/* __m256 c0, c1, c2, c3: several vector accumulators in one declaration */
			int end = bh_stmt_end(s, i, 0), n = 1;

			for (int k = i + 1; k <= end; k++)
				if (is(s, k, ","))
					n++;
				else if (is(s, k, "(") || is(s, k, "["))
					k = match_or_end(s, k);
			if (!bh_stmt_has_before(s, i, "(") && n > nvec_decl)
				nvec_decl = n;
		}
	}
	if (nvec_decl >= 4)
		note(e, AX_MEM, 3, "register tile (%d vector accumulators)", nvec_decl);
	if (bh_register_tile(s, false, true, false, what, sizeof(what)))
		note(e, AX_MEM, 3, "%s", what);
	if (blocked_loops(s, what, sizeof(what)))
		note(e, AX_MEM, 2, "%s", what);
	if (bh_online(s, what, sizeof(what)))
		note(e, AX_COMP, 2, "%s", what);
	if (bh_repeated_pass(s, false, what, sizeof(what)))
		note(e, AX_COMP, 0, "%s", what);
	else if (s->nl)
		note(e, AX_COMP, 1, "one pass");
}
