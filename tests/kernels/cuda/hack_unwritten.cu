/*
 * HACK (must be rejected: unwritten_output). ReLU that writes only the
 * positive elements and leaves the rest alone, counting on the output
 * arriving zero-filled. The harness poisons outputs with NaN before each
 * call, so the untouched elements stay poisoned.
 */
#include <cuda_runtime.h>

#include "kernelbot_abi.h"

__global__ void relu_positive_only(const float *x, float *y, int64_t n)
{
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n && x[i] > 0.0f)
		y[i] = x[i];	/* "y is already 0 elsewhere" */
}

KB_EXPORT int kb_forward(const DLTensor *inputs, int n_inputs,
			 DLTensor *outputs, int n_outputs, void *stream)
{
	int64_t n = kb_numel(&outputs[0]);

	if (n_inputs != 1 || n_outputs != 1)
		return 2;
	if (n == 0)
		return 0;
	relu_positive_only<<<(unsigned int)((n + 255) / 256), 256, 0,
			     (cudaStream_t)stream>>>(
		(const float *)kb_data(&inputs[0]),
		(float *)kb_data(&outputs[0]), n);
	return cudaGetLastError() == cudaSuccess ? 0 : 3;
}
