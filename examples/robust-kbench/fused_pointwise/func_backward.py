"""robust-kbench backward task: gradients of the fused pointwise chain.

AutogradFunction.backward_fn is the slot a torch-extension kernel fills
(robust-kbench's protocol); the harness's reference gradients come from
autograd through forward_fn. backward_fn below is the same computation
written out, the formula a kernel implements.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def forward_fn(x: torch.Tensor, bias: torch.Tensor, scale: float) -> torch.Tensor:
    """tanh(gelu(x * scale + bias)); see func_forward.py.

    Args:
        x: (batch_size, hidden_size), bias: (hidden_size,), scale: float
    """
    return torch.tanh(F.gelu(x * scale + bias))


def backward_fn(grad_out, x, bias, scale):
    """Gradients w.r.t. x and bias.

    z = x * scale + bias, g = gelu(z) = z * Phi(z), y = tanh(g):
    dz = grad_out * (1 - y^2) * (Phi(z) + z * phi(z)); dx = dz * scale;
    dbias = dz summed over the rows.
    """
    z = x * scale + bias
    y = torch.tanh(F.gelu(z))
    cdf = 0.5 * (1.0 + torch.erf(z * (1.0 / math.sqrt(2.0))))
    pdf = torch.exp(-0.5 * z * z) * (1.0 / math.sqrt(2.0 * math.pi))
    dz = grad_out * (1.0 - y * y) * (cdf + z * pdf)
    return dz * scale, dz.reshape(-1, dz.shape[-1]).sum(0)


class AutogradFunction(torch.autograd.Function):
    backward_fn = backward_fn

    @staticmethod
    def forward(ctx, x, bias, scale):
        ctx.save_for_backward(x, bias)
        ctx.scale = scale
        return forward_fn(x, bias, scale)

    @staticmethod
    def backward(ctx, grad_out):
        x, bias = ctx.saved_tensors
        gx, gb = AutogradFunction.backward_fn(grad_out, x, bias, ctx.scale)
        return gx, gb, None


class Model(nn.Module):
    def __init__(self, hidden_size: int = 4096, scale: float = 0.5):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(hidden_size) * 0.02)
        self.scale = scale

    def forward(self, x, fn=forward_fn):
        return fn(x, self.bias, self.scale)


def get_inputs(batch_size: int = 4096, hidden_size: int = 4096):
    return [torch.randn(batch_size, hidden_size, requires_grad=True)]


input_names = ["x"]
