"""Analysis test operator: the L2 norm of every row with torch.norm."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.norm(x, p=2, dim=-1)


batch_size = 8
dim = 64


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
