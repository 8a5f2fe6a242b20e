"""robust-kbench task: RMS normalisation (family: rowwise, kind rms_norm).

The same function as examples/kernelbench/rmsnorm.py.
"""
import torch
import torch.nn as nn


def forward_fn(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm over the last dimension.

    Args:
        x: input of shape (batch_size, hidden_size)
        weight: per-feature scale, shape (hidden_size,)
        eps: a Python float added to the mean square

    Returns:
        x * rsqrt(mean(x^2, -1) + eps) * weight, shape (batch_size, hidden_size)
    """
    rms = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return x * rms * weight


class Model(nn.Module):
    def __init__(self, hidden_size: int = 4096, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.eps = eps

    def forward(self, x, fn=forward_fn):
        return fn(x, self.weight, self.eps)


def get_inputs(batch_size: int = 4096, hidden_size: int = 4096):
    return [torch.randn(batch_size, hidden_size)]


input_names = ["x"]
