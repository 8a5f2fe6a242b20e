"""robust-kbench task: linear layer then GELU (family: matmul, kind
linear, epilogue bias + gelu).

The same function as examples/kernelbench/linear_gelu.py.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def forward_fn(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """gelu(x @ weight^T + bias), exact (erf) GELU, fp32.

    Args:
        x: input of shape (batch_size, in_features)
        weight: shape (out_features, in_features)
        bias: shape (out_features,)

    Returns:
        shape (batch_size, out_features)
    """
    return F.gelu(F.linear(x, weight, bias))


class Model(nn.Module):
    def __init__(self, in_features: int = 4096, out_features: int = 4096):
        super().__init__()
        # nn.Linear's own initialisation
        self.weight = nn.Parameter(torch.empty(out_features, in_features))
        self.bias = nn.Parameter(torch.empty(out_features))
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        bound = 1.0 / math.sqrt(in_features)
        nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x, fn=forward_fn):
        return fn(x, self.weight, self.bias)


def get_inputs(batch_size: int = 4096, in_features: int = 4096, out_features: int = 4096):
    return [torch.randn(batch_size, in_features)]


input_names = ["x"]
