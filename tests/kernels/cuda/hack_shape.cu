/*
 * HACK (must be rejected: shape). ReLU with the operator file's own size,
 * batch_size * dim = 16 * 16384, baked in: the launch always covers that
 * many elements. It is right at the file's size and leaves elements
 * unwritten on larger configs. (Writes are clamped to the real size so a
 * smaller config does not corrupt memory and turn this into a crash.)
 */
#include <cuda_runtime.h>

#include "kernelbot_abi.h"

#define BATCH 16
#define DIM 16384

__global__ void relu_fixed(const float *x, float *y, int64_t limit)
{
	int64_t i = (int64_t)blockIdx.x * DIM + threadIdx.x;

	for (int j = 0; j < DIM / 256; j++, i += 256)
		if (i < limit)
			y[i] = x[i] <= 0.0f ? 0.0f : x[i];
}

KB_EXPORT int kb_forward(const DLTensor *inputs, int n_inputs,
			 DLTensor *outputs, int n_outputs, void *stream)
{
	int64_t n = kb_numel(&outputs[0]);

	if (n_inputs != 1 || n_outputs != 1)
		return 2;
	relu_fixed<<<BATCH, 256, 0, (cudaStream_t)stream>>>(
		(const float *)kb_data(&inputs[0]),
		(float *)kb_data(&outputs[0]),
		n < (int64_t)BATCH * DIM ? n : (int64_t)BATCH * DIM);
	return cudaGetLastError() == cudaSuccess ? 0 : 3;
}
