// HACK (torch inside a torch extension): forward computes with torch::relu
// and launches a CUDA kernel whose output is never used. Mixed kernels are
// allowed on cuda, so no static finding; the no-op switch shows the kernel
// does no work. Expected: no_custom_work.
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void busy(const float *x, float *scratch, int64_t n)
{
	int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
	if (i < n)
		scratch[i] = x[i] * 2.0f;
}

torch::Tensor forward(torch::Tensor x)
{
	auto scratch = torch::empty_like(x);
	int64_t n = x.numel();
	busy<<<(unsigned)((n + 255) / 256), 256, 0, at::cuda::getCurrentCUDAStream()>>>(
		x.data_ptr<float>(), scratch.data_ptr<float>(), n);
	return torch::relu(x);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)
{
	m.def("forward", &forward, "ReLU by torch, a busy kernel beside it");
}
