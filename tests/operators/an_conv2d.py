"""Analysis test operator: a convolution, in no supported family."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, kernel_size=3)

    def forward(self, x):
        return torch.relu(self.conv(x))


batch_size = 2
height = 10
width = 10


def get_inputs():
    return [torch.randn(batch_size, 3, height, width)]


def get_init_inputs():
    return []
