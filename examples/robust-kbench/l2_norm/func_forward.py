"""robust-kbench task: row-wise L2 norm (family: rowwise, kind norm_l2).

The same function as examples/kernelbench/l2_norm.py.
"""
import torch
import torch.nn as nn


def forward_fn(x: torch.Tensor) -> torch.Tensor:
    """Euclidean norm of every row.

    Args:
        x: input of shape (batch_size, dim)

    Returns:
        sqrt(sum(x^2, -1)), shape (batch_size,)
    """
    return torch.linalg.vector_norm(x, ord=2, dim=-1)


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, fn=forward_fn):
        return fn(x)


def get_inputs(batch_size: int = 4096, dim: int = 4096):
    return [torch.randn(batch_size, dim)]


input_names = ["x"]
