"""Row softmax (family: rowwise, kind softmax).

Softmax over the last dimension of a (batch_size, dim) matrix: a max, an
exp-sum and a normalisation per row, each row independent.
"""
import torch
import torch.nn as nn


class Model(nn.Module):
    """Softmax over dim -1."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)


batch_size = 4096
dim = 4096


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
