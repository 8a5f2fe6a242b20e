"""KernelBench-style task returning a tuple: two outputs of different shapes."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor):
        return torch.relu(x), x.sum(dim=1)


batch_size = 8
dim = 512


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
