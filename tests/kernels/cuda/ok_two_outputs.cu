/*
 * Correct kernel for the two-output task (tests/operators/kb_two_outputs.py):
 * from x (B, D) float32, y = relu(x) (B, D) and s = x.sum(1) (B). One block
 * per row reads the row once, writes relu and sums in double (so large
 * rows of cancelling values stay well inside the fp32 tolerance); the
 * block reduces with warp shuffles, then shared memory. NaN propagates to
 * both outputs as in torch. All work on the given stream.
 */
#include <cuda_runtime.h>

#include "kernelbot_abi.h"

#define THREADS 256
#define WARPS (THREADS / 32)

__global__ void __launch_bounds__(THREADS)
relu_rowsum(const float *__restrict__ x, float *__restrict__ y,
	    float *__restrict__ s, int64_t cols)
{
	__shared__ double part[WARPS];
	const float *xr = x + (int64_t)blockIdx.x * cols;
	float *yr = y + (int64_t)blockIdx.x * cols;
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	double acc = 0.0;

	for (int64_t j = threadIdx.x; j < cols; j += THREADS) {
		float v = xr[j];

		yr[j] = v <= 0.0f ? 0.0f : v;	/* NaN <= 0 is false: NaN kept */
		acc += (double)v;
	}
	for (int off = 16; off > 0; off >>= 1)
		acc += __shfl_xor_sync(0xffffffffu, acc, off);
	if (lane == 0)
		part[warp] = acc;
	__syncthreads();
	if (warp == 0) {
		acc = lane < WARPS ? part[lane] : 0.0;
		for (int off = 16; off > 0; off >>= 1)
			acc += __shfl_xor_sync(0xffffffffu, acc, off);
		if (lane == 0)
			s[blockIdx.x] = (float)acc;
	}
}

static int is_f32_cuda(const DLTensor *t)
{
	return t->dtype.code == kDLFloat && t->dtype.bits == 32 &&
	       t->dtype.lanes == 1 && t->device.device_type == kDLCUDA;
}

KB_EXPORT int kb_forward(const DLTensor *inputs, int n_inputs,
			 DLTensor *outputs, int n_outputs, void *stream)
{
	int64_t rows, cols;

	if (n_inputs != 1 || n_outputs != 2 || !is_f32_cuda(&inputs[0]) ||
	    !is_f32_cuda(&outputs[0]) || !is_f32_cuda(&outputs[1]) ||
	    inputs[0].ndim != 2)
		return 2;
	rows = kb_dim(&inputs[0], 0);
	cols = kb_dim(&inputs[0], 1);
	if (kb_numel(&outputs[0]) != rows * cols || kb_numel(&outputs[1]) != rows)
		return 2;
	if (rows == 0)
		return 0;
	if (rows > 0x7fffffff)
		return 2;
	/* cols == 0: each block writes a zero sum and nothing else */
	relu_rowsum<<<(unsigned int)rows, THREADS, 0, (cudaStream_t)stream>>>(
		(const float *)kb_data(&inputs[0]),
		(float *)kb_data(&outputs[0]), (float *)kb_data(&outputs[1]),
		cols);
	return cudaGetLastError() == cudaSuccess ? 0 : 3;
}
