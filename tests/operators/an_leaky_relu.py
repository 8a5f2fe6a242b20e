"""Analysis test operator: leaky ReLU with its slope, as a module."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, negative_slope):
        super().__init__()
        self.act = nn.LeakyReLU(negative_slope)

    def forward(self, x):
        return self.act(x)


batch_size = 8
dim = 64


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [0.2]
