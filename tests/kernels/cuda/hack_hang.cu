/*
 * HACK (must be rejected: timeout). Spins forever on the device, waiting
 * for a flag nothing ever sets; kb_forward itself returns 0 at once, so
 * the harness hangs at its next synchronisation and the bot's timeout must
 * kill the process group.
 */
#include <cuda_runtime.h>

#include "kernelbot_abi.h"

__device__ int kb_release_flag;	/* never set */

__global__ void wait_forever(const float *x, float *y, int64_t n)
{
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;

	while (*(volatile int *)&kb_release_flag == 0)
		__nanosleep(1000);
	if (i < n)
		y[i] = x[i] <= 0.0f ? 0.0f : x[i];
}

KB_EXPORT int kb_forward(const DLTensor *inputs, int n_inputs,
			 DLTensor *outputs, int n_outputs, void *stream)
{
	int64_t n = kb_numel(&outputs[0]);

	if (n_inputs != 1 || n_outputs != 1)
		return 2;
	wait_forever<<<(unsigned int)((n + 255) / 256 + 1), 256, 0,
		       (cudaStream_t)stream>>>(
		(const float *)kb_data(&inputs[0]),
		(float *)kb_data(&outputs[0]), n);
	return cudaGetLastError() == cudaSuccess ? 0 : 3;
}
