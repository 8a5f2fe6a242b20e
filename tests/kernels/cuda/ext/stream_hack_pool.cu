// STREAM HACK (must be rejected: stream). A correct ReLU in the
// torch-extension format that launches on a stream from torch's pool
// (at::cuda::getStreamFromPool()) instead of the current one, and returns
// without joining it back: the output is allocated on the current stream,
// written on another, and read by the caller with nothing ordering the
// two. The static check allows at::cuda (streams, guards), so this reaches
// the harness through the bot as it is; tests/gpu/test_gpu_stream.py
// verifies it there. The fix: at::cuda::getCurrentCUDAStream().
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cuda_runtime.h>

#define THREADS 256
#define MAX_BLOCKS 4096

__global__ void relu_pool(const float *__restrict__ x, float *__restrict__ y,
			  int64_t n)
{
	int64_t stride = (int64_t)gridDim.x * blockDim.x;

	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += stride)
		y[i] = x[i] <= 0.0f ? 0.0f : x[i];
}

torch::Tensor forward(torch::Tensor input)
{
	TORCH_CHECK(input.is_cuda(), "stream_hack_pool: expected a CUDA tensor");
	TORCH_CHECK(input.scalar_type() == at::kFloat, "stream_hack_pool: expected float32");
	torch::Tensor x = input.contiguous();
	torch::Tensor out = torch::empty_like(x);
	int64_t n = x.numel();
	if (n == 0)
		return out;
	int64_t blocks = (n + THREADS - 1) / THREADS;
	if (blocks > MAX_BLOCKS)
		blocks = MAX_BLOCKS;
	at::cuda::CUDAStream side = at::cuda::getStreamFromPool();	// the hack

	relu_pool<<<(unsigned int)blocks, THREADS, 0, side.stream()>>>(
		x.data_ptr<float>(), out.data_ptr<float>(), n);
	cudaError_t err = cudaGetLastError();
	TORCH_CHECK(err == cudaSuccess, "stream_hack_pool: ", cudaGetErrorString(err));
	return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)
{
	m.def("forward", &forward, "ReLU on a stream from torch's pool (a hack)");
}
