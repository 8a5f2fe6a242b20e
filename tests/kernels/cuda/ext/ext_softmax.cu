// Correct softmax over the last dimension in the torch-extension format:
// the kernel of ok_softmax.cu (one block per row, online max/sum merged by
// warp shuffles, then a normalising pass) behind a torch binding. torch
// only allocates the output and names the current stream.
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cuda_runtime.h>
#include <math.h>

#define THREADS 256
#define WARPS (THREADS / 32)

struct ms {
	float m;	/* running max */
	float s;	/* sum of exp(x - m) */
};

__device__ __forceinline__ struct ms merge(struct ms a, struct ms b)
{
	struct ms r;

	r.m = fmaxf(a.m, b.m);
	if (r.m == -INFINITY) {	/* both empty (s is 0, or NaN from a NaN x) */
		r.s = a.s + b.s;
		return r;
	}
	r.s = a.s * expf(a.m - r.m) + b.s * expf(b.m - r.m);
	return r;
}

__device__ __forceinline__ struct ms warp_merge(struct ms v)
{
	for (int off = 16; off > 0; off >>= 1) {
		struct ms o;

		o.m = __shfl_xor_sync(0xffffffffu, v.m, off);
		o.s = __shfl_xor_sync(0xffffffffu, v.s, off);
		v = merge(v, o);
	}
	return v;
}

__global__ void __launch_bounds__(THREADS)
softmax_rows(const float *__restrict__ x, float *__restrict__ y, int64_t cols)
{
	__shared__ struct ms part[WARPS];
	__shared__ struct ms row;
	const float *xr = x + (int64_t)blockIdx.x * cols;
	float *yr = y + (int64_t)blockIdx.x * cols;
	struct ms acc = { -INFINITY, 0.0f };
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

	for (int64_t j = threadIdx.x; j < cols; j += THREADS) {
		float v = xr[j];

		if (v == -INFINITY)
			continue;	/* contributes exp(-inf) = 0 */
		if (v > acc.m) {
			acc.s *= expf(acc.m - v);
			acc.m = v;
		}
		acc.s += expf(v - acc.m);	/* NaN for NaN or +inf: as torch */
	}
	acc = warp_merge(acc);
	if (lane == 0)
		part[warp] = acc;
	__syncthreads();
	if (warp == 0) {
		struct ms v = lane < WARPS ? part[lane] :
					     (struct ms){ -INFINITY, 0.0f };

		v = warp_merge(v);
		if (lane == 0)
			row = v;
	}
	__syncthreads();
	for (int64_t j = threadIdx.x; j < cols; j += THREADS)
		yr[j] = expf(xr[j] - row.m) / row.s;
}

torch::Tensor forward(torch::Tensor input)
{
	TORCH_CHECK(input.is_cuda(), "ext_softmax: expected a CUDA tensor");
	TORCH_CHECK(input.scalar_type() == at::kFloat, "ext_softmax: expected float32");
	TORCH_CHECK(input.dim() >= 1, "ext_softmax: expected at least one dimension");
	torch::Tensor x = input.contiguous();
	torch::Tensor out = torch::empty_like(x);
	int64_t n = x.numel();
	int64_t cols = x.size(-1);
	if (n == 0 || cols == 0)
		return out;
	int64_t rows = n / cols;
	TORCH_CHECK(rows <= 0x7fffffff, "ext_softmax: too many rows");
	softmax_rows<<<(unsigned int)rows, THREADS, 0,
		       at::cuda::getCurrentCUDAStream()>>>(
		x.data_ptr<float>(), out.data_ptr<float>(), cols);
	cudaError_t err = cudaGetLastError();
	TORCH_CHECK(err == cudaSuccess, "ext_softmax: ", cudaGetErrorString(err));
	return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)
{
	m.def("forward", &forward, "softmax over the last dimension (CUDA kernel)");
}
