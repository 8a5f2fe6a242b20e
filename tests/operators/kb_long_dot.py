"""KernelBench-style task: a matrix product over a long inner dimension,
a @ b^T with K = 4096. Its fp32 result depends on the order of the sums:
the error-bound tests (test_error_bound.py) judge reordered kernels by it."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a @ b.T


rows = 16
inner = 4096
cols = 64


def get_inputs():
    return [torch.randn(rows, inner), torch.randn(cols, inner)]


def get_init_inputs():
    return []
