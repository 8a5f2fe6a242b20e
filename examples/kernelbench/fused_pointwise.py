"""Fused pointwise chain (family: pointwise).

y = tanh(gelu(x * scale + bias)): a scalar multiply, a broadcast bias add
over the rows, exact (erf) GELU, tanh. Four ops that eager torch runs as
four kernels, each reading and writing the whole tensor; one fused kernel
reads x once and writes y once. Its backward pass is exercised with
"pass": "backward" (`kernelbot verify --pass backward`).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """tanh(gelu(x * scale + bias)) with a learned per-feature bias."""

    def __init__(self, hidden_size: int, scale: float):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(hidden_size) * 0.02)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(F.gelu(x * self.scale + self.bias))


batch_size = 4096
hidden_size = 4096
scale = 0.5


def get_inputs():
    return [torch.randn(batch_size, hidden_size)]


def get_init_inputs():
    return [hidden_size, scale]
