"""Analysis test operator: a matrix product of two inputs, then a scale."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.matmul(a, b) * 0.125


m = 16
k = 32
n = 24


def get_inputs():
    return [torch.randn(m, k), torch.randn(k, n)]


def get_init_inputs():
    return []
