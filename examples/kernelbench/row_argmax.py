"""Row-wise argmax (family: rowwise, kind argmax).

The index of the largest value of every row of (batch_size, dim), as
int64 (batch_size,). Integer outputs are compared exactly.
"""
import torch
import torch.nn as nn


class Model(nn.Module):
    """torch.argmax over dim -1."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.argmax(x, dim=-1)


batch_size = 4096
dim = 4096


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
