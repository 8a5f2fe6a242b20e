/*
 * Correct softmax over the last dimension, float32, any shape: one block
 * per row. Each thread keeps an online (max, sum of exp) pair over its
 * strided elements, the block merges the pairs (warp shuffles, then shared
 * memory), and a second pass writes exp(x - max) / sum. Matches torch on
 * NaN, +inf and all -inf rows (NaN rows). All work on the given stream.
 */
#include <cuda_runtime.h>
#include <math.h>

#include "kernelbot_abi.h"

#define THREADS 256
#define WARPS (THREADS / 32)

struct ms {
	float m;	/* running max */
	float s;	/* sum of exp(x - m) */
};

__device__ __forceinline__ struct ms merge(struct ms a, struct ms b)
{
	struct ms r;

	r.m = fmaxf(a.m, b.m);
	if (r.m == -INFINITY) {	/* both empty (s is 0, or NaN from a NaN x) */
		r.s = a.s + b.s;
		return r;
	}
	r.s = a.s * expf(a.m - r.m) + b.s * expf(b.m - r.m);
	return r;
}

__device__ __forceinline__ struct ms warp_merge(struct ms v)
{
	for (int off = 16; off > 0; off >>= 1) {
		struct ms o;

		o.m = __shfl_xor_sync(0xffffffffu, v.m, off);
		o.s = __shfl_xor_sync(0xffffffffu, v.s, off);
		v = merge(v, o);
	}
	return v;
}

__global__ void __launch_bounds__(THREADS)
softmax_rows(const float *__restrict__ x, float *__restrict__ y, int64_t cols)
{
	__shared__ struct ms part[WARPS];
	__shared__ struct ms row;
	const float *xr = x + (int64_t)blockIdx.x * cols;
	float *yr = y + (int64_t)blockIdx.x * cols;
	struct ms acc = { -INFINITY, 0.0f };
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

	for (int64_t j = threadIdx.x; j < cols; j += THREADS) {
		float v = xr[j];

		if (v == -INFINITY)
			continue;	/* contributes exp(-inf) = 0 */
		if (v > acc.m) {
			acc.s *= expf(acc.m - v);
			acc.m = v;
		}
		acc.s += expf(v - acc.m);	/* NaN for NaN or +inf: as torch */
	}
	acc = warp_merge(acc);
	if (lane == 0)
		part[warp] = acc;
	__syncthreads();
	if (warp == 0) {
		struct ms v = lane < WARPS ? part[lane] :
					     (struct ms){ -INFINITY, 0.0f };

		v = warp_merge(v);
		if (lane == 0)
			row = v;
	}
	__syncthreads();
	for (int64_t j = threadIdx.x; j < cols; j += THREADS)
		yr[j] = expf(xr[j] - row.m) / row.s;
}

static int is_f32_cuda(const DLTensor *t)
{
	return t->dtype.code == kDLFloat && t->dtype.bits == 32 &&
	       t->dtype.lanes == 1 && t->device.device_type == kDLCUDA;
}

KB_EXPORT int kb_forward(const DLTensor *inputs, int n_inputs,
			 DLTensor *outputs, int n_outputs, void *stream)
{
	int64_t n, cols, rows;

	if (n_inputs < 1 || n_outputs != 1 || !is_f32_cuda(&inputs[0]) ||
	    !is_f32_cuda(&outputs[0]) || inputs[0].ndim < 1)
		return 2;
	n = kb_numel(&inputs[0]);
	if (kb_numel(&outputs[0]) != n)
		return 2;
	cols = kb_dim(&inputs[0], -1);
	if (n == 0 || cols == 0)
		return 0;
	rows = n / cols;
	if (rows > 0x7fffffff)
		return 2;
	softmax_rows<<<(unsigned int)rows, THREADS, 0, (cudaStream_t)stream>>>(
		(const float *)kb_data(&inputs[0]),
		(float *)kb_data(&outputs[0]), cols);
	return cudaGetLastError() == cudaSuccess ? 0 : 3;
}
