/*
 * Correct robust-kbench scale_shift forward (tests/operators/rk_scale_shift):
 * y = (x * weight + bias) * alpha. Inputs in forward_fn's order: x (B, F),
 * weight (F), bias (F), alpha (a 0-d float64 HOST tensor). Rounds like
 * torch's three separate fp32 ops (no fused multiply-add; alpha taken as
 * fp32, as torch does for a Python scalar). A 2-d grid: x over features,
 * y over rows (grid-strided), so there is no per-element division. All
 * work on the given stream.
 */
#include <cuda_runtime.h>

#include "kernelbot_abi.h"

#define THREADS 256
#define MAX_ROW_BLOCKS 4096

__global__ void scale_shift(const float *__restrict__ x,
			    const float *__restrict__ w,
			    const float *__restrict__ b, float alpha,
			    float *__restrict__ y, int64_t rows, int64_t cols)
{
	int64_t f = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	float wf, bf;

	if (f >= cols)
		return;
	wf = w[f];
	bf = b[f];
	for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
		int64_t i = r * cols + f;

		y[i] = __fmul_rn(__fadd_rn(__fmul_rn(x[i], wf), bf), alpha);
	}
}

static int is_f32_cuda(const DLTensor *t)
{
	return t->dtype.code == kDLFloat && t->dtype.bits == 32 &&
	       t->dtype.lanes == 1 && t->device.device_type == kDLCUDA;
}

KB_EXPORT int kb_forward(const DLTensor *inputs, int n_inputs,
			 DLTensor *outputs, int n_outputs, void *stream)
{
	int64_t cols, rows, col_blocks, row_blocks;
	float alpha;

	if (n_inputs != 4 || n_outputs != 1 || !is_f32_cuda(&inputs[0]) ||
	    !is_f32_cuda(&inputs[1]) || !is_f32_cuda(&inputs[2]) ||
	    !is_f32_cuda(&outputs[0]) || inputs[0].ndim < 1 ||
	    inputs[3].device.device_type != kDLCPU)
		return 2;
	cols = kb_dim(&inputs[0], -1);
	if (kb_numel(&inputs[1]) != cols || kb_numel(&inputs[2]) != cols ||
	    kb_numel(&outputs[0]) != kb_numel(&inputs[0]))
		return 2;
	if (cols == 0 || kb_numel(&inputs[0]) == 0)
		return 0;
	rows = kb_numel(&inputs[0]) / cols;
	alpha = (float)kb_scalar_f64(&inputs[3]);
	col_blocks = (cols + THREADS - 1) / THREADS;
	row_blocks = rows < MAX_ROW_BLOCKS ? rows : MAX_ROW_BLOCKS;
	if (col_blocks > 0x7fffffff)
		return 2;
	scale_shift<<<dim3((unsigned int)col_blocks, (unsigned int)row_blocks),
		      THREADS, 0, (cudaStream_t)stream>>>(
		(const float *)kb_data(&inputs[0]),
		(const float *)kb_data(&inputs[1]),
		(const float *)kb_data(&inputs[2]), alpha,
		(float *)kb_data(&outputs[0]), rows, cols);
	return cudaGetLastError() == cudaSuccess ? 0 : 3;
}
