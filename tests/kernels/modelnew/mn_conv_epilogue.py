"""A mixed kernel, the usual honest level-2 solution: torch's convolution
(nn.Conv2d, its parameters matched to Model's by name) and the bias + ReLU
epilogue fused in one custom loop."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

epilogue_source = """
torch::Tensor bias_relu(torch::Tensor y, torch::Tensor bias) {
    auto yc = y.contiguous();
    auto bc = bias.contiguous();
    auto out = torch::empty_like(yc);
    const float *in = yc.data_ptr<float>();
    const float *b = bc.data_ptr<float>();
    float *o = out.data_ptr<float>();
    int64_t n = yc.size(0), c = yc.size(1), hw = yc.size(2) * yc.size(3);
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < c; j++)
            for (int64_t k = 0; k < hw; k++) {
                int64_t at = (i * c + j) * hw + k;
                float v = in[at] + b[j];
                o[at] = v < 0.0f ? 0.0f : v;
            }
    return out;
}
"""

epilogue = load_inline(name="mn_conv_epilogue", cpp_sources=epilogue_source,
                       functions=["bias_relu"], extra_cflags=["-O1"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, bias_shape):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bias = nn.Parameter(torch.randn(bias_shape) * 0.02)

    def forward(self, x):
        return epilogue.bias_relu(self.conv(x), self.bias)
