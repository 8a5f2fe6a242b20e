"""Analysis test operator: a batched matrix product."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.bmm(a, b)


batch_size = 3
m = 16
k = 32
n = 24


def get_inputs():
    return [torch.randn(batch_size, m, k), torch.randn(batch_size, k, n)]


def get_init_inputs():
    return []
