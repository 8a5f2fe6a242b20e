// ACCEPTED: a CUDA kernel that copies with cudaMemcpyAsync and launches a
// kernel, both on the harness's stream. nvcc links the runtime statically;
// the import check reads the kernel's own object, so only the runtime calls
// and nvcc's registration stubs are imported.
#include "kernelbot_abi.h"

__global__ void relu_k(float *y, int64_t n)
{
	int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;

	if (i < n)
		y[i] = y[i] > 0.f ? y[i] : 0.f;
}

KB_EXPORT int kb_forward(const DLTensor *inputs, int n_inputs,
			 DLTensor *outputs, int n_outputs, void *stream)
{
	int64_t n = kb_numel(&inputs[0]);
	cudaStream_t s = (cudaStream_t)stream;

	if (cudaMemcpyAsync(kb_data(&outputs[0]), kb_data(&inputs[0]), (size_t)n * sizeof(float),
			    cudaMemcpyDeviceToDevice, s) != cudaSuccess)
		return 1;
	relu_k<<<(unsigned)((n + 255) / 256), 256, 0, s>>>((float *)kb_data(&outputs[0]), n);
	return cudaGetLastError() != cudaSuccess;
}
