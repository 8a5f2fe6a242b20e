"""robust-kbench task: layer normalisation with affine parameters (family:
rowwise, kind layer_norm).

The same function as examples/kernelbench/layernorm.py.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


def forward_fn(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
               eps: float) -> torch.Tensor:
    """LayerNorm over the last dimension.

    Args:
        x: input of shape (batch_size, hidden_size)
        weight, bias: shape (hidden_size,)
        eps: a Python float added to the variance

    Returns:
        (x - mean) / sqrt(var + eps) * weight + bias, shape (batch_size, hidden_size)
    """
    return F.layer_norm(x, (x.shape[-1],), weight, bias, eps)


class Model(nn.Module):
    def __init__(self, hidden_size: int = 4096, eps: float = 1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.bias = nn.Parameter(torch.zeros(hidden_size))
        self.eps = eps

    def forward(self, x, fn=forward_fn):
        return fn(x, self.weight, self.bias, self.eps)


def get_inputs(batch_size: int = 4096, hidden_size: int = 4096):
    return [torch.randn(batch_size, hidden_size)]


input_names = ["x"]
