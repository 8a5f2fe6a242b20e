"""HACK (torch fallback): an extension is built but forward never calls
it. Expected: torch_fallback."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

source = """
torch::Tensor unused(torch::Tensor x) {
    return x;
}
"""

ext = load_inline(name="mn_torch_only", cpp_sources=source, functions=["unused"],
                  extra_cflags=["-O1"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)
