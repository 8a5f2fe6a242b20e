"""robust-kbench backward task: gradients of RMSNorm.

AutogradFunction.backward_fn is the slot a torch-extension kernel fills
(robust-kbench's protocol); the harness's reference gradients come from
autograd through forward_fn. backward_fn below is the same computation
written out, the formula a kernel implements.
"""
import torch
import torch.nn as nn


def forward_fn(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x * rsqrt(mean(x^2, -1) + eps) * weight; see func_forward.py.

    Args:
        x: (batch_size, hidden_size), weight: (hidden_size,), eps: float
    """
    rms = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return x * rms * weight


def backward_fn(grad_out, x, weight, eps):
    """Gradients w.r.t. x and weight.

    r = rsqrt(mean(x^2) + eps) per row, gw = grad_out * weight:
    dx = r * gw - x * r^3 * mean(gw * x); dweight = sum over rows of
    grad_out * x * r.
    """
    r = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    gw = grad_out * weight
    dx = r * gw - x * r.pow(3) * (gw * x).mean(-1, keepdim=True)
    dw = (grad_out * x * r).reshape(-1, x.shape[-1]).sum(0)
    return dx, dw


class AutogradFunction(torch.autograd.Function):
    backward_fn = backward_fn

    @staticmethod
    def forward(ctx, x, weight, eps):
        ctx.save_for_backward(x, weight)
        ctx.eps = eps
        return forward_fn(x, weight, eps)

    @staticmethod
    def backward(ctx, grad_out):
        x, weight = ctx.saved_tensors
        gx, gw = AutogradFunction.backward_fn(grad_out, x, weight, ctx.eps)
        return gx, gw, None


class Model(nn.Module):
    def __init__(self, hidden_size: int = 4096, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.eps = eps

    def forward(self, x, fn=forward_fn):
        return fn(x, self.weight, self.eps)


def get_inputs(batch_size: int = 4096, hidden_size: int = 4096):
    return [torch.randn(batch_size, hidden_size, requires_grad=True)]


input_names = ["x"]
