/*
 * HACK (must be rejected: input_mutation). Correct output, but ReLU is also
 * applied in place to the input ("saves a pass"), so the caller's tensor
 * changes under it.
 */
#include <cuda_runtime.h>

#include "kernelbot_abi.h"

__global__ void relu_both(float *x, float *y, int64_t n)
{
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n) {
		float r = x[i] <= 0.0f ? 0.0f : x[i];

		x[i] = r;	/* writes the input */
		y[i] = r;
	}
}

KB_EXPORT int kb_forward(const DLTensor *inputs, int n_inputs,
			 DLTensor *outputs, int n_outputs, void *stream)
{
	int64_t n = kb_numel(&outputs[0]);

	if (n_inputs != 1 || n_outputs != 1)
		return 2;
	if (n == 0)
		return 0;
	relu_both<<<(unsigned int)((n + 255) / 256), 256, 0,
		    (cudaStream_t)stream>>>((float *)kb_data(&inputs[0]),
					    (float *)kb_data(&outputs[0]), n);
	return cudaGetLastError() == cudaSuccess ? 0 : 3;
}
