"""KernelBench-style task with parameters: Linear then GELU."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """y = gelu(x @ W^T + b)."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.linear(x))


batch_size = 8
in_features = 256
out_features = 512


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
