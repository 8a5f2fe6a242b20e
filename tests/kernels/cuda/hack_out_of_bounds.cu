/*
 * HACK (must be rejected: out_of_bounds). Correct ReLU, but the launch is
 * rounded up and the extra threads write -1 past the end of the output
 * (32 floats, well inside the harness's guard band).
 */
#include <cuda_runtime.h>

#include "kernelbot_abi.h"

#define SPILL 32

__global__ void relu_sloppy(const float *x, float *y, int64_t n)
{
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		y[i] = x[i] <= 0.0f ? 0.0f : x[i];
	else if (i < n + SPILL)
		y[i] = -1.0f;	/* out of bounds */
}

KB_EXPORT int kb_forward(const DLTensor *inputs, int n_inputs,
			 DLTensor *outputs, int n_outputs, void *stream)
{
	int64_t n = kb_numel(&outputs[0]);

	if (n_inputs != 1 || n_outputs != 1)
		return 2;
	relu_sloppy<<<(unsigned int)((n + SPILL + 255) / 256), 256, 0,
		      (cudaStream_t)stream>>>(
		(const float *)kb_data(&inputs[0]),
		(float *)kb_data(&outputs[0]), n);
	return cudaGetLastError() == cudaSuccess ? 0 : 3;
}
