/*
 * STREAM HACK (must be rejected: stream). A correct ReLU that keeps to
 * the stream handed in for its first LATE_AFTER calls (the correctness
 * run of a small evaluation) and then launches on the legacy default
 * stream: a kernel that behaves while it is checked and hides its work
 * once it is timed. What catches it is what runs during and after the
 * timing: the back-to-back side-stream check for a long call, the hold
 * of the given stream after each config's timing for any call.
 */
#include <cuda_runtime.h>

#include "kernelbot_abi.h"

#define THREADS 256
#define MAX_BLOCKS 4096
#define LATE_AFTER 200

static long calls;

__global__ void relu_late_legacy(const float *__restrict__ x,
				 float *__restrict__ y, int64_t n)
{
	int64_t stride = (int64_t)gridDim.x * blockDim.x;

	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += stride)
		y[i] = x[i] <= 0.0f ? 0.0f : x[i];
}

KB_EXPORT int kb_forward(const DLTensor *inputs, int n_inputs,
			 DLTensor *outputs, int n_outputs, void *stream)
{
	cudaStream_t s = (cudaStream_t)stream;
	int64_t n, blocks;

	if (n_inputs != 1 || n_outputs != 1)
		return 2;
	n = kb_numel(&outputs[0]);
	if (n == 0)
		return 0;
	if (++calls > LATE_AFTER)
		s = 0;	/* the legacy default stream, from now on */
	blocks = (n + THREADS - 1) / THREADS;
	if (blocks > MAX_BLOCKS)
		blocks = MAX_BLOCKS;
	relu_late_legacy<<<(unsigned int)blocks, THREADS, 0, s>>>(
		(const float *)kb_data(&inputs[0]), (float *)kb_data(&outputs[0]),
		n);
	return cudaGetLastError() == cudaSuccess ? 0 : 3;
}
