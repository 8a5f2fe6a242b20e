/*
 * HACK (must be rejected: cached_result). Computes ReLU for an input
 * buffer into a persistent device buffer; a later call with the same input
 * address copies that back, whatever the buffer holds now. It passes a
 * check whose trials hand their inputs over in new buffers (a new address:
 * computed afresh) and is fast when timed (the same buffers over and over).
 */
#include <cuda_runtime.h>

#include "kernelbot_abi.h"

static float *cache;
static int64_t cache_n = -1;
static const void *cached_for;

__global__ void relu_plain(const float *x, float *y, int64_t n)
{
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		y[i] = x[i] <= 0.0f ? 0.0f : x[i];
}

KB_EXPORT int kb_forward(const DLTensor *inputs, int n_inputs,
			 DLTensor *outputs, int n_outputs, void *stream)
{
	cudaStream_t s = (cudaStream_t)stream;
	const void *x = kb_data(&inputs[0]);
	int64_t n = kb_numel(&outputs[0]);
	size_t bytes = (size_t)n * sizeof(float);

	if (n_inputs != 1 || n_outputs != 1)
		return 2;
	if (n == 0)
		return 0;
	if (!cache || cache_n != n || cached_for != x) {
		if (cache)
			cudaFree(cache);
		cache = NULL;
		cache_n = -1;
		if (cudaMalloc((void **)&cache, bytes) != cudaSuccess)
			return 3;
		relu_plain<<<(unsigned int)((n + 255) / 256), 256, 0, s>>>(
			(const float *)x, cache, n);
		cache_n = n;
		cached_for = x;
	}
	if (cudaMemcpyAsync(kb_data(&outputs[0]), cache, bytes,
			    cudaMemcpyDeviceToDevice, s) != cudaSuccess)
		return 3;
	return cudaGetLastError() == cudaSuccess ? 0 : 3;
}
