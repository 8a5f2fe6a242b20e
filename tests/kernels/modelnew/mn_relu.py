"""A KernelBench ModelNew as KernelBench's own samples write it: ReLU in
a C++ loop built with load_inline (cpu; the cuda corpus has CUDA ones)."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

relu_source = """
torch::Tensor relu_forward(torch::Tensor x) {
    auto xc = x.contiguous();
    auto out = torch::empty_like(xc);
    const float *in = xc.data_ptr<float>();
    float *o = out.data_ptr<float>();
    for (int64_t i = 0; i < xc.numel(); i++)
        o[i] = in[i] < 0.0f ? 0.0f : in[i];
    return out;
}
"""

relu_ext = load_inline(name="mn_relu", cpp_sources=relu_source,
                       functions=["relu_forward"], extra_cflags=["-O1"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.relu = relu_ext

    def forward(self, x):
        return self.relu.relu_forward(x)
