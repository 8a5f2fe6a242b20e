"""Analysis test operator: log-softmax over the last dim."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return F.log_softmax(x, dim=-1)


batch_size = 8
dim = 100


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
