"""robust-kbench task: fused pointwise chain (family: pointwise).

The same function as examples/kernelbench/fused_pointwise.py.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


def forward_fn(x: torch.Tensor, bias: torch.Tensor, scale: float) -> torch.Tensor:
    """tanh(gelu(x * scale + bias)), exact (erf) GELU.

    Args:
        x: input of shape (batch_size, hidden_size)
        bias: per-feature shift, shape (hidden_size,), broadcast over rows
        scale: a Python float

    Returns:
        shape (batch_size, hidden_size)
    """
    return torch.tanh(F.gelu(x * scale + bias))


class Model(nn.Module):
    def __init__(self, hidden_size: int = 4096, scale: float = 0.5):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(hidden_size) * 0.02)
        self.scale = scale

    def forward(self, x, fn=forward_fn):
        return fn(x, self.bias, self.scale)


def get_inputs(batch_size: int = 4096, hidden_size: int = 4096):
    return [torch.randn(batch_size, hidden_size)]


input_names = ["x"]
