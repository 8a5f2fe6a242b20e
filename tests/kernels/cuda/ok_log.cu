/*
 * Correct natural log (tests/operators/kb_log.py): y = log(x), float32, any
 * shape. logf keeps torch's special values: NaN for negatives and NaN,
 * -inf for +-0, +inf for +inf. float4 loads and stores when both pointers
 * are 16-byte aligned, scalar otherwise and for the tail; a grid-stride
 * loop; all work on the given stream.
 */
#include <cuda_runtime.h>
#include <math.h>

#include "kernelbot_abi.h"

#define THREADS 256
#define MAX_BLOCKS 4096

__global__ void log_vec4(const float4 *__restrict__ x, float4 *__restrict__ y,
			 int64_t n4, const float *__restrict__ xt,
			 float *__restrict__ yt, int64_t tail)
{
	int64_t stride = (int64_t)gridDim.x * blockDim.x;
	int64_t first = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;

	for (int64_t i = first; i < n4; i += stride) {
		float4 v = x[i];
		v.x = logf(v.x);
		v.y = logf(v.y);
		v.z = logf(v.z);
		v.w = logf(v.w);
		y[i] = v;
	}
	if (first < tail)
		yt[first] = logf(xt[first]);
}

__global__ void log_scalar(const float *__restrict__ x, float *__restrict__ y,
			   int64_t n)
{
	int64_t stride = (int64_t)gridDim.x * blockDim.x;

	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += stride)
		y[i] = logf(x[i]);
}

static int is_f32_cuda(const DLTensor *t)
{
	return t->dtype.code == kDLFloat && t->dtype.bits == 32 &&
	       t->dtype.lanes == 1 && t->device.device_type == kDLCUDA;
}

static unsigned int blocks_for(int64_t work)
{
	int64_t b = (work + THREADS - 1) / THREADS;

	if (b < 1)
		b = 1;
	return (unsigned int)(b < MAX_BLOCKS ? b : MAX_BLOCKS);
}

KB_EXPORT int kb_forward(const DLTensor *inputs, int n_inputs,
			 DLTensor *outputs, int n_outputs, void *stream)
{
	cudaStream_t s = (cudaStream_t)stream;
	const float *x;
	float *y;
	int64_t n;

	if (n_inputs != 1 || n_outputs != 1 || !is_f32_cuda(&inputs[0]) ||
	    !is_f32_cuda(&outputs[0]))
		return 2;
	n = kb_numel(&inputs[0]);
	if (kb_numel(&outputs[0]) != n)
		return 2;
	if (n == 0)
		return 0;
	x = (const float *)kb_data(&inputs[0]);
	y = (float *)kb_data(&outputs[0]);

	if ((((uintptr_t)x | (uintptr_t)y) & 15) == 0) {
		int64_t n4 = n / 4, tail = n - 4 * n4;

		log_vec4<<<blocks_for(n4), THREADS, 0, s>>>(
			(const float4 *)x, (float4 *)y, n4, x + 4 * n4,
			y + 4 * n4, tail);
	} else {
		log_scalar<<<blocks_for(n), THREADS, 0, s>>>(x, y, n);
	}
	return cudaGetLastError() == cudaSuccess ? 0 : 3;
}
