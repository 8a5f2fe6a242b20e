"""Analysis test operator: a 4-op pointwise chain with a broadcast bias
(a parameter of shape [N]) and a scalar constant: add, mul, silu, clamp."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(dim))
        self.scale = 0.5

    def forward(self, x):
        return F.silu((x + self.bias) * self.scale).clamp(max=4.0)


batch_size = 8
dim = 96


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [dim]
