"""RMS normalisation, written out by hand (family: rowwise, kind rms_norm).

y = x * rsqrt(mean(x^2, -1) + eps) * weight over (batch_size, hidden_size),
as LLaMA-style models write it. Its backward pass (gradients of x and
weight) is exercised with "pass": "backward" (`kernelbot verify --pass
backward`).
"""
import torch
import torch.nn as nn


class Model(nn.Module):
    """RMSNorm with a learned per-feature weight."""

    def __init__(self, hidden_size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rms = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return x * rms * self.weight


batch_size = 4096
hidden_size = 4096
eps = 1e-6


def get_inputs():
    return [torch.randn(batch_size, hidden_size)]


def get_init_inputs():
    return [hidden_size, eps]
