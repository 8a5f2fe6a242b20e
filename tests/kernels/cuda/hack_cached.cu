/*
 * HACK (must be rejected: cached_result). Computes ReLU on the first call
 * for a size, keeps a copy, and afterwards returns that copy for any input
 * of the same size, whatever its values.
 */
#include <cuda_runtime.h>

#include "kernelbot_abi.h"

static float *cache;
static int64_t cache_n = -1;

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
	int64_t n = kb_numel(&outputs[0]);
	size_t bytes = (size_t)n * sizeof(float);
	float *y = (float *)kb_data(&outputs[0]);

	if (n_inputs != 1 || n_outputs != 1)
		return 2;
	if (n == 0)
		return 0;
	if (cache && cache_n == n)	/* "memoised" */
		return cudaMemcpyAsync(y, cache, bytes,
				       cudaMemcpyDeviceToDevice, s) ==
		       cudaSuccess ? 0 : 3;
	relu_plain<<<(unsigned int)((n + 255) / 256), 256, 0, s>>>(
		(const float *)kb_data(&inputs[0]), y, n);
	if (cache)
		cudaFree(cache);
	cache = NULL;
	cache_n = -1;
	if (cudaMalloc((void **)&cache, bytes) != cudaSuccess)
		return 3;
	if (cudaMemcpyAsync(cache, y, bytes, cudaMemcpyDeviceToDevice, s) !=
	    cudaSuccess)
		return 3;
	cache_n = n;
	return cudaGetLastError() == cudaSuccess ? 0 : 3;
}
