#ifndef KB_SEARCH_BEHAVIOR_H
#define KB_SEARCH_BEHAVIOR_H
/*
 * KernelFoundry's behaviour descriptors: three axes, each a level 0-3
 * scored from the kernel's source alone (comments and string literals
 * ignored), which place a kernel in a cell of the MAP-Elites archive.
 *
 *   memory      0 naive loads/stores; 1 coalesced or vectorised (float4 /
 *               half2 / __ldg / vector types; CPU: omp simd, contiguous
 *               SIMD intrinsics); 2 shared-memory tiling (__shared__ tiles;
 *               CPU: cache blocking loops); 3 register blocking or async
 *               copy (cp.async, memcpy_async, TMA, ldmatrix, per-thread
 *               register tiles; CPU: register tiles, prefetch)
 *   compute     0 multi-pass (several kernels / passes over the data);
 *               1 fused (one kernel does the whole chain); 2 single-pass /
 *               online (online softmax, Welford, running max rescale);
 *               3 tiled / tensor core (wmma, mma.sync, wgmma, cuBLASLt;
 *               CPU: FMA intrinsics on tiles)
 *   parallelism 0 thread-level only; 1 block barriers (__syncthreads;
 *               CPU: omp parallel for); 2 warp intrinsics (__shfl*_sync,
 *               cooperative_groups tiles, __reduce_*; CPU: omp simd
 *               reductions); 3 hierarchical (warp + block + grid level:
 *               atomics across blocks, grid sync, clusters; CPU: nested or
 *               collapsed parallel loops with SIMD reductions)
 *
 * The score is the highest level whose evidence is present; each level
 * found is listed in `why`, so a reader sees why a kernel sits where it
 * does.
 *
 * How the evidence is read (behavior.c): identifiers of the code only,
 * plus the strings of asm statements (PTX: cp.async, ldmatrix, mma.sync,
 * wgmma, bar.sync, shfl.sync, red.global/atom.global). Specifically:
 *   - a __shared__ array is a tile when it has two dimensions, or when it
 *     (1-D or extern) is assigned from a pointer parameter of a device
 *     function; a 1-D array filled from registers is a reduction scratch
 *     and does not count;
 *   - a register tile is a local array with two or more dimensions in
 *     device code (CPU: also an array of SIMD vectors, or four or more
 *     vector accumulators declared together);
 *   - compute 0 is two kernel launches that run in sequence (launches in
 *     the two branches of an if/else, or before a return, are
 *     alternatives), several kernels and no launch seen, a launch inside a
 *     host loop, or two sibling loops over the same run-time bound (CPU);
 *     compute 1 is one kernel (CPU: any loop) otherwise; compute 3
 *     "tiled" without tensor cores is a shared tile plus a register tile
 *     accumulated into (+= or fma);
 *   - online: x *= exp(a - b), x = x * exp(a - b) + ..., two exp(a - b)
 *     products merged, a rescale factor f = exp(a - b) multiplied in, or
 *     an identifier naming Welford;
 *   - CUDA parallelism 3 needs atomics together with a warp or block
 *     level (atomics alone are thread level); grid sync and clusters count
 *     alone. CPU parallelism 2 is any OpenMP reduction clause or a
 *     horizontal SIMD reduction; 3 is a SIMD (or nested parallel)
 *     reduction inside a parallel loop, or collapse(n) with a reduction.
 */
#include "core/common.h"
#include "core/config.h"

#define KB_BEHAVIOR_LEVELS 4
#define KB_BEHAVIOR_CELLS (KB_BEHAVIOR_LEVELS * KB_BEHAVIOR_LEVELS * KB_BEHAVIOR_LEVELS)

struct kb_behavior {
	int memory, compute, parallel;   /* each 0..3 */
	char why[256];                   /* "memory 2: __shared__ tile; compute 1: ..." */
};

/* Score source for backend (cuda or cpu; auto means cuda). Never fails. */
void kb_behavior_score(const char *source, enum kb_backend backend, struct kb_behavior *out);

/* The cell index 0..63: memory * 16 + compute * 4 + parallel, and back. */
int kb_behavior_cell(const struct kb_behavior *b);
void kb_behavior_from_cell(int cell, struct kb_behavior *out);

#endif
