"""robust-kbench task: row-wise argmax (family: rowwise, kind argmax).

The same function as examples/kernelbench/row_argmax.py.
"""
import torch
import torch.nn as nn


def forward_fn(x: torch.Tensor) -> torch.Tensor:
    """Index of the largest value of every row (the first one on a tie).

    Args:
        x: input of shape (batch_size, dim)

    Returns:
        int64, shape (batch_size,)
    """
    return torch.argmax(x, dim=-1)


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, fn=forward_fn):
        return fn(x)


def get_inputs(batch_size: int = 4096, dim: int = 4096):
    return [torch.randn(batch_size, dim)]


input_names = ["x"]
