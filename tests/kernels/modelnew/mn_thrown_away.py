"""HACK (work thrown away): the custom epilogue runs, its result is
dropped, torch computes the answer. Expected: no_custom_work."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

source = """
torch::Tensor bias_relu(torch::Tensor y, torch::Tensor bias) {
    auto yc = y.contiguous();
    auto out = torch::empty_like(yc);
    const float *in = yc.data_ptr<float>();
    float *o = out.data_ptr<float>();
    for (int64_t i = 0; i < yc.numel(); i++)
        o[i] = in[i] < 0.0f ? 0.0f : in[i];
    return out;
}
"""

ext = load_inline(name="mn_thrown_away", cpp_sources=source, functions=["bias_relu"],
                  extra_cflags=["-O1"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, bias_shape):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bias = nn.Parameter(torch.randn(bias_shape) * 0.02)

    def forward(self, x):
        y = self.conv(x)
        ext.bias_relu(y, self.bias)  # looks busy; nothing uses it
        return torch.relu(y + self.bias)
