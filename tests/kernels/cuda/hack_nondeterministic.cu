/*
 * HACK (must be rejected: nondeterminism). A deliberate race: each output
 * element is built by two threads in different warps, each adding half of
 * relu(x) with a plain (non-atomic) load and store. When the two overlap
 * one update is lost and the element ends up at half its value; which
 * elements lose depends on warp timing (one warp also waits a few cycles
 * taken from the SM clock), so repeated calls on the same inputs differ by
 * far more than any tolerance.
 */
#include <cuda_runtime.h>

#include "kernelbot_abi.h"

__global__ void relu_racy(const float *x, float *y, int64_t n)
{
	int64_t i = (int64_t)blockIdx.x * 128 + (threadIdx.x & 127);
	float r, old;

	if (i >= n)
		return;
	r = x[i] <= 0.0f ? 0.0f : x[i];
	if (threadIdx.x >= 128) {
		long long t0 = clock64(), wait = t0 & 511;

		while (clock64() - t0 < wait)
			;
	}
	old = ((volatile float *)y)[i];
	((volatile float *)y)[i] = old + 0.5f * r;	/* lost update race */
}

KB_EXPORT int kb_forward(const DLTensor *inputs, int n_inputs,
			 DLTensor *outputs, int n_outputs, void *stream)
{
	cudaStream_t s = (cudaStream_t)stream;
	int64_t n = kb_numel(&outputs[0]);
	float *y = (float *)kb_data(&outputs[0]);

	if (n_inputs != 1 || n_outputs != 1)
		return 2;
	if (n == 0)
		return 0;
	if (cudaMemsetAsync(y, 0, (size_t)n * sizeof(float), s) != cudaSuccess)
		return 3;
	relu_racy<<<(unsigned int)((n + 127) / 128), 256, 0, s>>>(
		(const float *)kb_data(&inputs[0]), y, n);
	return cudaGetLastError() == cudaSuccess ? 0 : 3;
}
