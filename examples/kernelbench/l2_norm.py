"""Row-wise L2 norm (family: rowwise, kind norm_l2).

sqrt(sum(x^2)) over the last dimension of (batch_size, dim); the output is
one value per row, (batch_size,).
"""
import torch
import torch.nn as nn


class Model(nn.Module):
    """Euclidean norm of every row."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.linalg.vector_norm(x, ord=2, dim=-1)


batch_size = 4096
dim = 4096


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
