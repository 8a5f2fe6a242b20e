"""robust-kbench-style task: per-feature scale and shift, times a scalar."""
import torch
import torch.nn as nn


def forward_fn(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, alpha: float
) -> torch.Tensor:
    """Scales and shifts every feature, then multiplies by alpha.

    Args:
        x: input of shape (batch_size, num_features)
        weight: per-feature scale, shape (num_features,)
        bias: per-feature shift, shape (num_features,)
        alpha: a Python float

    Returns:
        (x * weight + bias) * alpha, shape (batch_size, num_features)
    """
    return (x * weight + bias) * alpha


class Model(nn.Module):
    def __init__(self, num_features: int = 64, init_scale: float = 1.0,
                 alpha: float = 1.5):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(num_features) * init_scale)
        self.bias = nn.Parameter(torch.randn(num_features) * 0.1)
        self.alpha = alpha

    def forward(self, x, fn=forward_fn):
        return fn(x, self.weight, self.bias, self.alpha)


def get_inputs(batch_size: int = 32, num_features: int = 64):
    return [torch.randn(batch_size, num_features)]


input_names = ["x"]
