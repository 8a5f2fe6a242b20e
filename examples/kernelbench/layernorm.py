"""Layer normalisation with affine parameters (family: rowwise, kind
layer_norm).

nn.LayerNorm over the last dimension of (batch_size, hidden_size): mean and
variance per row, then (x - mean) / sqrt(var + eps) * weight + bias.
"""
import torch
import torch.nn as nn


class Model(nn.Module):
    """nn.LayerNorm(hidden_size, eps) with elementwise weight and bias."""

    def __init__(self, hidden_size: int, eps: float):
        super().__init__()
        self.ln = nn.LayerNorm(hidden_size, eps=eps, elementwise_affine=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln(x)


batch_size = 4096
hidden_size = 4096
eps = 1e-5


def get_inputs():
    return [torch.randn(batch_size, hidden_size)]


def get_init_inputs():
    return [hidden_size, eps]
