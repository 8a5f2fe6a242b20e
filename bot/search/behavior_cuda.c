#include "core/common.h"
#include "search/behavior_priv.h"
#include "core/util.h"


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
		end = bh_stmt_end(s, i, 0);
		for (int k = i + 1; k <= end; k++) {
			int dims = 0, m;

			if (!is_ident(s, k) || !is(s, k + 1, "["))
				continue;
			for (m = k + 1; is(s, m, "[") && s->t[m].match > m; m = s->t[m].match + 1)
				dims++;
			if (dims >= 2)
				note(e, AX_MEM, 2, "__shared__ tile %s[][]", tname(s, k, nb, sizeof(nb)));
			bh_names_add(&s->shared, s->cv + s->t[k].pos, s->t[k].len);
			k = m - 1;
		}
	}
	bh_collect_pointers(s);
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
		end = bh_stmt_end(s, i, 0);
		for (int k = close + 2; k <= end; k++)
			if (in_names(s, &s->ptrs, k)) {
				note(e, AX_MEM, 2, "global loads staged in __shared__ %s", tname(s, i, nb, sizeof(nb)));
				break;
			}
	}
}

/* memory: vector types, cache hints, async copies and TMA, shared and register tiles */
static void cuda_memory(struct scan *s, struct ev *e)
{
	char nb[48], what[56];

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
	if (bh_asm_has(s, "cp.async.bulk"))
		note(e, AX_MEM, 3, "TMA (cp.async.bulk)");
	if (bh_asm_has(s, "cp.async"))
		note(e, AX_MEM, 3, "cp.async");
	if (bh_asm_has(s, "ldmatrix"))
		note(e, AX_MEM, 3, "ldmatrix");
	if (bh_asm_has(s, ".v4.") || bh_asm_has(s, ".v2."))
		note(e, AX_MEM, 1, "vector ld/st in PTX");
	cuda_shared(s, e);
	if (bh_register_tile(s, true, false, false, what, sizeof(what)))
		note(e, AX_MEM, 3, "%s", what);
}

/* compute: tensor cores and libraries, a tiled accumulation, an online merge */
static void cuda_compute(struct scan *s, struct ev *e)
{
	char what[56];

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
	}
	if (bh_asm_has(s, "mma.sync") || bh_asm_has(s, "mma.sp"))
		note(e, AX_COMP, 3, "tensor cores (mma.sync)");
	if (bh_asm_has(s, "wgmma") || bh_asm_has(s, "tcgen05.mma"))
		note(e, AX_COMP, 3, "tensor cores (wgmma)");
	if (e->lv[AX_MEM][2][0] && bh_register_tile(s, true, false, true, what, sizeof(what)))
		note(e, AX_COMP, 3, "tiled: shared tile + accumulated %s", what);
	if (bh_online(s, what, sizeof(what)))
		note(e, AX_COMP, 2, "%s", what);
}

/* the kernels a source defines and the sites that launch them */
struct launches {
	struct names launched;
	int kernels, kernel_name, launch_in_loop, sites[64], nsites;
};

static void cuda_launches(struct scan *s, struct launches *ln)
{
	for (int i = 0; i < s->n; i++) {
		if (s->t[i].pp)
			continue;
		if (is(s, i, "__global__")) {
			const struct func *fn = NULL;

			for (int k = 0; k < s->nf; k++)
				if (s->f[k].global && s->f[k].name > i && (!fn || s->f[k].name < fn->name))
					fn = &s->f[k];
			for (int k = i; fn && k < fn->name; k++)
				if (is(s, k, ";") || is(s, k, "{") || is(s, k, "}"))
					fn = NULL; /* a declaration only */
			if (fn) {
				ln->kernels++;
				if (ln->kernel_name < 0)
					ln->kernel_name = fn->name;
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
				bh_names_add(&ln->launched, s->cv + s->t[k].pos, s->t[k].len);
				if (ln->nsites < (int)ARRAY_SIZE(ln->sites))
					ln->sites[ln->nsites++] = k;
			}
			for (int l = 0; l < s->nl; l++)
				if (s->l[l].body_s <= i && i <= s->l[l].body_e && !bh_in_device(s, i))
					ln->launch_in_loop = i;
		}
		if (is(s, i, "cudaLaunchKernel") || is(s, i, "cudaLaunchCooperativeKernel") ||
		    is(s, i, "cudaLaunchKernelEx")) {
			for (int k = i + 2; k < s->n && k < i + 8; k++)
				if (is_ident(s, k) && !is(s, k, "void") && !is(s, k, "const")) {
					bh_names_add(&ln->launched, s->cv + s->t[k].pos, s->t[k].len);
					if (ln->nsites < (int)ARRAY_SIZE(ln->sites))
						ln->sites[ln->nsites++] = k;
					break;
				}
		}
	}
}

/* how many kernel passes: launches in sequence or in a loop, several kernels, or one */
static void cuda_passes(struct scan *s, struct ev *e, struct launches *ln)
{
	char nb[48], what[56];
	int seq = -1;

	if (ln->nsites > 1) {
		int nifs;
		struct ifstmt *ifs = bh_collect_ifs(s, &nifs);

		for (int a = 0; a < ln->nsites && seq < 0; a++)
			for (int b = a + 1; b < ln->nsites && seq < 0; b++)
				if (!bh_alternatives(s, ifs, nifs, ln->sites[a], ln->sites[b]))
					seq = b;
		free(ifs);
	}
	if (ln->nsites)
		ln->kernel_name = ln->sites[0];
	if (seq >= 0)
		note(e, AX_COMP, 0, "kernels launched in sequence (%s, ...)", tname(s, ln->sites[0], nb, 24));
	else if (!ln->nsites && ln->kernels >= 2)
		note(e, AX_COMP, 0, "%d kernels", ln->kernels);
	else if (ln->launch_in_loop >= 0)
		note(e, AX_COMP, 0, "kernel launched in a loop");
	else if (bh_repeated_pass(s, true, what, sizeof(what)))
		note(e, AX_COMP, 0, "%s", what);
	else if (ln->kernel_name >= 0 && ln->launched.nr > 1)
		note(e, AX_COMP, 1, "one kernel per call (%zu variants)", ln->launched.nr);
	else if (ln->kernel_name >= 0)
		note(e, AX_COMP, 1, "one kernel %s", tname(s, ln->kernel_name, nb, 32));
}

/* parallelism: block and warp cooperation, atomics across blocks, grid sync and clusters */
static void cuda_parallel(struct scan *s, struct ev *e)
{
	bool warp = false, block = false, atomics = false;
	char nb[48], what[56];

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
			   bh_in_device(s, i)) {
			snprintf(what, sizeof(what), "%.24s across blocks", tname(s, i, nb, 24));
			atomics = true;
		} else if (is(s, i, "this_grid") || is(s, i, "grid_group") ||
			   is(s, i, "cudaLaunchCooperativeKernel")) {
			note(e, AX_PAR, 3, "grid sync (%s)", tname(s, i, nb, 32));
		} else if (is(s, i, "__cluster_dims__") || is(s, i, "this_cluster") || is(s, i, "cluster_group")) {
			note(e, AX_PAR, 3, "thread block clusters");
		}
	}
	if (bh_asm_has(s, "bar.sync") || bh_asm_has(s, "barrier.sync")) {
		note(e, AX_PAR, 1, "bar.sync");
		block = true;
	}
	if (bh_asm_has(s, "shfl.sync") || bh_asm_has(s, "redux.sync") || bh_asm_has(s, "vote.sync")) {
		note(e, AX_PAR, 2, "warp PTX (shfl/redux/vote)");
		warp = true;
	}
	if (bh_asm_has(s, "red.global") || bh_asm_has(s, "atom.global")) {
		snprintf(what, sizeof(what), "global atomics in PTX");
		atomics = true;
	}
	if (bh_asm_has(s, "barrier.cluster"))
		note(e, AX_PAR, 3, "thread block clusters");
	/* atomics alone are a thread-level pattern; with warp or block work below them, a hierarchy */
	if (atomics && (warp || block))
		note(e, AX_PAR, 3, "%s + %s", what, warp ? "warp" : "block");
}

void bh_score_cuda(struct scan *s, struct ev *e)
{
	struct launches ln = { { NULL, 0, 0 }, 0, -1, -1, { 0 }, 0 };

	cuda_memory(s, e);
	cuda_compute(s, e);
	cuda_launches(s, &ln);
	cuda_passes(s, e, &ln);
	cuda_parallel(s, e);
	bh_names_release(&ln.launched);
}
