/*
 * HACK (must be rejected: stream). Correct ReLU launched on a stream of its
 * own (non-blocking, so it does not order with the given one) and the call
 * returns without waiting: events on the harness's stream see nothing, and
 * outputs read right after the call are not ready. The kernel first spins
 * about a millisecond, standing in for the heavy work a real exploit hides.
 */
#include <cuda_runtime.h>

#include "kernelbot_abi.h"

#define SPIN_CYCLES 2000000LL	/* ~1 ms at 2 GHz */

__global__ void relu_late(const float *x, float *y, int64_t n)
{
	long long t0 = clock64();
	int64_t stride = (int64_t)gridDim.x * blockDim.x;

	while (clock64() - t0 < SPIN_CYCLES)
		;
	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += stride)
		y[i] = x[i] <= 0.0f ? 0.0f : x[i];
}

KB_EXPORT int kb_forward(const DLTensor *inputs, int n_inputs,
			 DLTensor *outputs, int n_outputs, void *stream)
{
	int64_t n = kb_numel(&outputs[0]);
	int64_t blocks = (n + 255) / 256;
	cudaStream_t side;

	(void)stream;	/* ignored on purpose */
	if (n_inputs != 1 || n_outputs != 1)
		return 2;
	if (n == 0)
		return 0;
	if (cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking) !=
	    cudaSuccess)
		return 3;
	relu_late<<<(unsigned int)(blocks < 512 ? blocks : 512), 256, 0,
		    side>>>((const float *)kb_data(&inputs[0]),
			    (float *)kb_data(&outputs[0]), n);
	/* returns at once; the stream goes away when its work is done */
	cudaStreamDestroy(side);
	return cudaGetLastError() == cudaSuccess ? 0 : 3;
}
