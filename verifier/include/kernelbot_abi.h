/*
 * kernelbot native kernel ABI, version 1.
 *
 * A candidate kernel is one .cu (CUDA backend, built with plain nvcc) or one
 * .cpp (CPU backend, built with g++ -fopenmp) that includes this header and
 * exports, with C linkage:
 *
 *   int kb_forward(const DLTensor *inputs, int n_inputs,
 *                  DLTensor *outputs, int n_outputs, void *stream);
 *
 * inputs   the reference's arguments, in order:
 *            robust-kbench task: forward_fn's arguments (tensors, then
 *              parameters, then scalars, exactly as Model.forward passes them);
 *            KernelBench task: get_inputs() in order, then the module's
 *              parameters in named_parameters() order, then its buffers in
 *              named_buffers() order.
 *          Tensors are contiguous (strides may be NULL; when set they are the
 *          row-major strides). A non-tensor argument (a Python float, int or
 *          bool) arrives as a 0-d tensor in HOST memory (device kDLCPU) of
 *          dtype float64 (floats) or int64 (ints and bools), even on the CUDA
 *          backend: read it with kb_scalar_f64 / kb_scalar_i64.
 * outputs  preallocated by the harness, contiguous, with the shapes and
 *          dtypes of what the reference returns, in its order (a tuple
 *          return gives several outputs). Their contents on entry are
 *          garbage (NaN): write every element.
 * stream   the cudaStream_t to launch on (CUDA backend); NULL on the CPU
 *          backend. All work must be enqueued on this stream: the harness
 *          reads the outputs right after the call, ordered only by it.
 * return   0 on success; anything else is reported as a kernel failure.
 *
 * Backward tasks also export
 *
 *   int kb_backward(const DLTensor *inputs, int n_inputs,
 *                   DLTensor *outputs, int n_outputs, void *stream);
 *
 * inputs   the forward's inputs in the same order as kb_forward's, then one
 *          upstream gradient per forward output (same shape and dtype as
 *          that output), in output order.
 * outputs  one gradient per floating-point TENSOR input of the forward, in
 *          input order (scalars and integer tensors are skipped), shaped and
 *          typed like that input.
 *
 * Rules the harness enforces: do not modify inputs; do not write outside
 * the outputs; do not keep results between calls; no other streams; the
 * same inputs must give the same outputs on every call; compute in the
 * task's precision (no fp32 -> fp16/TF32 downgrade).
 */
#ifndef KERNELBOT_ABI_H
#define KERNELBOT_ABI_H

#include <dlpack/dlpack.h>
#include <stdint.h>

#define KB_ABI_VERSION 1

#ifdef __cplusplus
#define KB_EXTERN_C extern "C"
#else
#define KB_EXTERN_C
#endif

#if defined(__CUDACC__)
#define KB_HD __host__ __device__ inline
#else
#define KB_HD static inline
#endif

#define KB_EXPORT KB_EXTERN_C __attribute__((visibility("default")))

/* Number of elements of a tensor (1 for a 0-d tensor). */
KB_HD int64_t kb_numel(const DLTensor *t)
{
	int64_t n = 1;
	for (int i = 0; i < t->ndim; i++)
		n *= t->shape[i];
	return n;
}

/* The first element's address, byte_offset applied. */
KB_HD void *kb_data(const DLTensor *t)
{
	return (char *)t->data + t->byte_offset;
}

/* A scalar argument (0-d host tensor of float64 or int64) as double / int64. */
static inline double kb_scalar_f64(const DLTensor *t)
{
	if (t->dtype.code == kDLFloat)
		return *(const double *)kb_data(t);
	return (double)*(const int64_t *)kb_data(t);
}

static inline int64_t kb_scalar_i64(const DLTensor *t)
{
	if (t->dtype.code == kDLFloat)
		return (int64_t)*(const double *)kb_data(t);
	return *(const int64_t *)kb_data(t);
}

/* Size of dimension d, counting negative d from the end (like torch). */
static inline int64_t kb_dim(const DLTensor *t, int d)
{
	return t->shape[d < 0 ? t->ndim + d : d];
}

#endif /* KERNELBOT_ABI_H */
