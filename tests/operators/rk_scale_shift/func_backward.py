"""robust-kbench-style backward task: gradients of the scale-shift op.

AutogradFunction.backward_fn is the slot a torch-extension kernel fills
(robust-kbench's protocol); the reference gradients come from autograd.
"""
import torch
import torch.nn as nn


def forward_fn(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, alpha: float
) -> torch.Tensor:
    """(x * weight + bias) * alpha; see func_forward.py.

    Args:
        x: (batch_size, num_features), weight and bias: (num_features,)
    """
    return (x * weight + bias) * alpha


def backward_fn(grad_out, x, weight, bias, alpha):
    """Gradients w.r.t. x, weight and bias."""
    g = grad_out * alpha
    return g * weight, (g * x).sum(0), g.sum(0)


class AutogradFunction(torch.autograd.Function):
    backward_fn = backward_fn

    @staticmethod
    def forward(ctx, x, weight, bias, alpha):
        ctx.save_for_backward(x, weight, bias)
        ctx.alpha = alpha
        return forward_fn(x, weight, bias, alpha)

    @staticmethod
    def backward(ctx, grad_out):
        x, weight, bias = ctx.saved_tensors
        gx, gw, gb = AutogradFunction.backward_fn(grad_out, x, weight, bias, ctx.alpha)
        return gx, gw, gb, None


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
    return [torch.randn(batch_size, num_features, requires_grad=True)]


input_names = ["x"]
