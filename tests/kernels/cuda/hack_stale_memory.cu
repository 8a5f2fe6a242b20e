/*
 * HACK (must be rejected). Computes nothing: cudaMalloc's a buffer of the
 * output's size and copies it into the output, hoping the allocator hands
 * back a freed block that still holds the reference's answer (the "result
 * reuse" exploit). The harness poisons freed memory and the outputs.
 */
#include <cuda_runtime.h>

#include "kernelbot_abi.h"

KB_EXPORT int kb_forward(const DLTensor *inputs, int n_inputs,
			 DLTensor *outputs, int n_outputs, void *stream)
{
	size_t bytes = (size_t)kb_numel(&outputs[0]) * sizeof(float);
	cudaStream_t s = (cudaStream_t)stream;
	void *stale = NULL;

	(void)inputs;
	if (n_inputs != 1 || n_outputs != 1)
		return 2;
	if (bytes == 0)
		return 0;
	if (cudaMalloc(&stale, bytes) != cudaSuccess)
		return 3;
	/* no kernel: whatever the block held becomes the result */
	if (cudaMemcpyAsync(kb_data(&outputs[0]), stale, bytes,
			    cudaMemcpyDeviceToDevice, s) != cudaSuccess) {
		cudaFree(stale);
		return 3;
	}
	cudaStreamSynchronize(s);
	cudaFree(stale);
	return 0;
}
