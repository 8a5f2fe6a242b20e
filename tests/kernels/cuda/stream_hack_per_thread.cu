/*
 * STREAM HACK (must be rejected: stream, or static through the bot). A
 * correct ReLU launched on cudaStreamPerThread, the per-thread default
 * stream: it orders itself with the legacy default stream only, not with
 * the non-blocking stream the harness hands in, so the call returns with
 * the work unordered and untimed by the harness's events.
 *
 * The bot's static check refuses the word cudaStreamPerThread; the
 * harness must catch the same work at run time too (a word list misses
 * ((cudaStream_t)0x2), a macro or the driver's entry points), and
 * tests/gpu/test_gpu_stream.py gives it to the harness directly.
 */
#include <cuda_runtime.h>

#include "kernelbot_abi.h"

#define THREADS 256
#define MAX_BLOCKS 4096

__global__ void relu_ptds(const float *__restrict__ x, float *__restrict__ y,
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
	blocks = (n + THREADS - 1) / THREADS;
	if (blocks > MAX_BLOCKS)
		blocks = MAX_BLOCKS;
	relu_ptds<<<(unsigned int)blocks, THREADS, 0, cudaStreamPerThread>>>(
		(const float *)kb_data(&inputs[0]), (float *)kb_data(&outputs[0]),
		n);
	return cudaGetLastError() == cudaSuccess ? 0 : 3;
}
