/*
 * STREAM HACK (must be rejected: stream). A correct ReLU launched with
 * <<<blocks, threads, 0, 0>>>: on the legacy default stream, not on the
 * stream handed in, the idiom of many published KernelBench solutions.
 * The harness's stream is non-blocking, so nothing orders this work after
 * the inputs or before the reads of the outputs, and events recorded on
 * the harness's stream time none of it: on the H200 this kernel was once
 * verified and published at 7.2x eager where it is really 2.2x.
 *
 * Nothing here is a forbidden word for the static check; the harness
 * catches it at run time, for a few-microsecond call as for a long one
 * (tests/gpu/test_gpu_stream.py runs it on both).
 */
#include <cuda_runtime.h>

#include "kernelbot_abi.h"

#define THREADS 256
#define MAX_BLOCKS 4096

__global__ void relu_legacy(const float *__restrict__ x, float *__restrict__ y,
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
	relu_legacy<<<(unsigned int)blocks, THREADS, 0, 0>>>(
		(const float *)kb_data(&inputs[0]), (float *)kb_data(&outputs[0]),
		n);
	return cudaGetLastError() == cudaSuccess ? 0 : 3;
}
