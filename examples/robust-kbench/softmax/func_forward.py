"""robust-kbench task: row softmax (family: rowwise, kind softmax).

The same function as examples/kernelbench/softmax.py.
"""
import torch
import torch.nn as nn


def forward_fn(x: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dimension.

    Args:
        x: input of shape (batch_size, dim)

    Returns:
        shape (batch_size, dim), every row summing to one
    """
    return torch.softmax(x, dim=-1)


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, fn=forward_fn):
        return fn(x)


def get_inputs(batch_size: int = 4096, dim: int = 4096):
    return [torch.randn(batch_size, dim)]


input_names = ["x"]
