"""Analysis test operator: hardtanh with its bounds, then a clamp."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.clamp(F.hardtanh(x, min_val=-2.0, max_val=2.5), min=-1.5)


batch_size = 8
dim = 64


def get_inputs():
    return [torch.randn(batch_size, dim) * 3]


def get_init_inputs():
    return []
