"""Linear layer then GELU (family: matmul, kind linear, epilogue bias +
gelu).

y = gelu(x @ W^T + b) with x (batch_size, in_features) and W
(out_features, in_features). The product belongs to cuBLAS(Lt); the win is
the bias and GELU fused into its epilogue instead of two more passes over
y. fp32 throughout: TF32 is off in the reference.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """nn.Linear(in_features, out_features) followed by exact GELU."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.linear(x))


batch_size = 4096
in_features = 4096
out_features = 4096


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
