"""Analysis test operator: RMS norm written by hand (x * x, sqrt, divide)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(hidden))
        self.eps = 1e-5

    def forward(self, x):
        return x / torch.sqrt(torch.mean(x * x, dim=-1, keepdim=True) + self.eps) * self.weight


batch_size = 8
hidden = 64


def get_inputs():
    return [torch.randn(batch_size, hidden)]


def get_init_inputs():
    return [hidden]
