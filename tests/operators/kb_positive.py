"""KernelBench-style task whose reference checks its domain: it raises on
negative inputs (as Cholesky raises on a non-SPD matrix). The harness must
fall back to the file's own inputs for draws the operator refuses."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if bool((x < 0).any()):
            raise ValueError("inputs must be non-negative")
        return torch.relu(x)


batch_size = 4
dim = 1000


def get_inputs():
    return [torch.rand(batch_size, dim)]


def get_init_inputs():
    return []
