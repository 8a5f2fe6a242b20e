/*
 * HACK (must be rejected: crash). Writes far outside any allocation (4 TiB
 * past the output): an illegal address that poisons the CUDA context. The
 * launch itself succeeds and kb_forward returns 0; the error surfaces at
 * the harness's next synchronisation, and the worker must be restarted.
 */
#include <cuda_runtime.h>

#include "kernelbot_abi.h"

__global__ void wild_write(float *y, int64_t offset)
{
	y[offset + threadIdx.x] = 1.0f;
}

KB_EXPORT int kb_forward(const DLTensor *inputs, int n_inputs,
			 DLTensor *outputs, int n_outputs, void *stream)
{
	(void)inputs;
	(void)n_inputs;
	if (n_outputs < 1)
		return 2;
	wild_write<<<1, 32, 0, (cudaStream_t)stream>>>(
		(float *)kb_data(&outputs[0]), (int64_t)1 << 40);
	return cudaGetLastError() == cudaSuccess ? 0 : 3;
}
