/*
 * STREAM HACK (must be rejected: stream, or static through the bot). A
 * correct ReLU launched on a non-blocking stream the kernel creates once
 * and keeps: the call returns at once, the work runs beside the harness's
 * stream, unordered with it and unseen by its events. Unlike hack_stream.cu
 * it adds no delay: the honest speed of the work, hidden; a few
 * microseconds on a KernelBench-sized input.
 *
 * The bot's static check refuses cudaStreamCreateWithFlags; the harness
 * must catch the work at run time too, and tests/gpu/test_gpu_stream.py
 * gives it to the harness directly.
 */
#include <cuda_runtime.h>

#include "kernelbot_abi.h"

#define THREADS 256
#define MAX_BLOCKS 4096

static cudaStream_t own;	/* created on the first call, never destroyed */

__global__ void relu_own(const float *__restrict__ x, float *__restrict__ y,
			 int64_t n)
{
	int64_t stride = (int64_t)gridDim.x * blockDim.x;

	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += stride)
		y[i] = x[i] <= 0.0f ? 0.0f : x[i];
}

KB_EXPORT int kb_forward(const DLTensor *inputs, int n_inputs,
			 DLTensor *outputs, int n_outputs, void *stream)
{
	int64_t n, blocks;

	(void)stream;	/* ignored: the hack */
	if (n_inputs != 1 || n_outputs != 1)
		return 2;
	n = kb_numel(&outputs[0]);
	if (n == 0)
		return 0;
	if (!own && cudaStreamCreateWithFlags(&own, cudaStreamNonBlocking) !=
			    cudaSuccess)
		return 3;
	blocks = (n + THREADS - 1) / THREADS;
	if (blocks > MAX_BLOCKS)
		blocks = MAX_BLOCKS;
	relu_own<<<(unsigned int)blocks, THREADS, 0, own>>>(
		(const float *)kb_data(&inputs[0]), (float *)kb_data(&outputs[0]),
		n);
	return cudaGetLastError() == cudaSuccess ? 0 : 3;
}
