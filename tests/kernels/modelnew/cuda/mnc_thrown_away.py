"""HACK (work thrown away): the CUDA epilogue runs on the given stream and
its result is dropped; torch computes the answer. Expected: no_custom_work
(noop: with the kernel switched off the result is still right)."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = """
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void bias_relu_kernel(const float* y, const float* b, float* out,
                                 int64_t n, int64_t c, int64_t hw) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n * c * hw) {
        float v = y[i] + b[(i / hw) % c];
        out[i] = v > 0.0f ? v : 0.0f;
    }
}

torch::Tensor bias_relu(torch::Tensor y, torch::Tensor bias) {
    auto yc = y.contiguous();
    auto out = torch::empty_like(yc);
    int64_t n = yc.size(0), c = yc.size(1), hw = yc.size(2) * yc.size(3);
    int64_t total = n * c * hw;
    int threads = 256;
    int blocks = (int)((total + threads - 1) / threads);
    bias_relu_kernel<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        yc.data_ptr<float>(), bias.contiguous().data_ptr<float>(), out.data_ptr<float>(), n, c, hw);
    return out;
}
"""

cpp_source = "torch::Tensor bias_relu(torch::Tensor y, torch::Tensor bias);"

epilogue = load_inline(name="mnc_thrown_away", cpp_sources=cpp_source,
                       cuda_sources=cuda_source, functions=["bias_relu"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, bias_shape):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bias = nn.Parameter(torch.randn(bias_shape) * 0.02)

    def forward(self, x):
        y = self.conv(x)
        epilogue.bias_relu(y, self.bias)  # looks busy; nothing uses it
        return torch.relu(y + self.bias)
