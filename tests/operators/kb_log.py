"""KernelBench-style task whose reference has NaN and -Inf: log of normal
draws (negative inputs give NaN, zeros -Inf). Checks NaN/Inf positions."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log(x)


batch_size = 8
dim = 4096


def _draw():
    """Reads the size constants itself: the harness finds them through it."""
    x = torch.randn(batch_size, dim)
    x[:, ::97] = 0.0  # a few exact zeros: -inf in the reference
    return x


def get_inputs():
    return [_draw()]


def get_init_inputs():
    return []
