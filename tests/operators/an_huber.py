"""Analysis test operator: Huber loss with its delta."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return F.huber_loss(a, b, delta=0.5)


batch_size = 8
dim = 64


def get_inputs():
    return [torch.randn(batch_size, dim), torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
