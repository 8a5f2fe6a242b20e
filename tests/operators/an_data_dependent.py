"""Analysis test operator: control flow on tensor values, which torch.fx
cannot trace; the analysis records the branch the own inputs take."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        if x.mean() > -100.0:
            return torch.sigmoid(x) * 2.0
        return x


batch_size = 8
dim = 64


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
