/*
 * STREAM HACK (must be rejected: stream, or static through the bot). A
 * correct ReLU captured once into a CUDA graph on a private non-blocking
 * stream (captured again only when the pointers or the size change), then
 * replayed there on every call: one cudaGraphLaunch of little host cost,
 * on a stream the harness does not know, unordered with the one it hands
 * in. (Replaying on the given stream, cudaGraphLaunch(exec, stream),
 * would be correct.)
 *
 * The bot's static check refuses cudaStreamCreateWithFlags; the harness
 * must catch the work at run time too, and tests/gpu/test_gpu_stream.py
 * gives it to the harness directly.
 */
#include <cuda_runtime.h>

#include "kernelbot_abi.h"

#define THREADS 256
#define MAX_BLOCKS 4096

static cudaStream_t priv;
static cudaGraphExec_t exec;
static const float *gx;
static float *gy;
static int64_t gn = -1;

__global__ void relu_graph(const float *__restrict__ x, float *__restrict__ y,
			   int64_t n)
{
	int64_t stride = (int64_t)gridDim.x * blockDim.x;

	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += stride)
		y[i] = x[i] <= 0.0f ? 0.0f : x[i];
}

static int capture(const float *x, float *y, int64_t n)
{
	cudaGraph_t g;
	int64_t blocks = (n + THREADS - 1) / THREADS;

	if (blocks > MAX_BLOCKS)
		blocks = MAX_BLOCKS;
	if (exec) {
		cudaGraphExecDestroy(exec);
		exec = NULL;
	}
	if (cudaStreamBeginCapture(priv, cudaStreamCaptureModeThreadLocal) !=
	    cudaSuccess)
		return 3;
	relu_graph<<<(unsigned int)blocks, THREADS, 0, priv>>>(x, y, n);
	if (cudaStreamEndCapture(priv, &g) != cudaSuccess)
		return 3;
	if (cudaGraphInstantiate(&exec, g, 0) != cudaSuccess) {
		cudaGraphDestroy(g);
		return 3;
	}
	cudaGraphDestroy(g);
	gx = x;
	gy = y;
	gn = n;
	return 0;
}

KB_EXPORT int kb_forward(const DLTensor *inputs, int n_inputs,
			 DLTensor *outputs, int n_outputs, void *stream)
{
	const float *x;
	float *y;
	int64_t n;

	(void)stream;	/* ignored: the hack */
	if (n_inputs != 1 || n_outputs != 1)
		return 2;
	n = kb_numel(&outputs[0]);
	if (n == 0)
		return 0;
	x = (const float *)kb_data(&inputs[0]);
	y = (float *)kb_data(&outputs[0]);
	if (!priv && cudaStreamCreateWithFlags(&priv, cudaStreamNonBlocking) !=
			     cudaSuccess)
		return 3;
	if ((x != gx || y != gy || n != gn) && capture(x, y, n))
		return 3;
	return cudaGraphLaunch(exec, priv) == cudaSuccess ? 0 : 3;
}
