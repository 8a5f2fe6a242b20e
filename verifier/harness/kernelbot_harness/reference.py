"""The reference side of a trial: forward outputs, or gradients by autograd.

TF32 is off (set once by kb_harness on cuda), the reference runs in the
task's own dtype, on copies of the arguments the kernel sees.
"""
import torch


def clone_args(args):
    return [a.detach().clone() if torch.is_tensor(a) else a for a in args]


def float_tensor_indices(args):
    """Which arguments get a gradient: floating tensors (ABI kb_backward)."""
    return [i for i, a in enumerate(args)
            if torch.is_tensor(a) and a.is_floating_point()]


def forward(case, args):
    with torch.no_grad():
        return [o.detach() for o in case.ref(clone_args(args))]


def grad_outputs(specs, seed, device):
    """Seeded upstream gradients, one per forward output (zeros for integer outputs)."""
    g = torch.Generator().manual_seed(seed ^ 0x5EED)
    out = []
    for shape, dtype in specs:
        if dtype.is_floating_point:
            t = torch.randn(shape, generator=g, dtype=torch.float32).to(dtype)
        else:
            t = torch.zeros(shape, dtype=dtype)
        out.append(t.to(device).contiguous())
    return out


def backward(case, args, grad_outs):
    """Gradients of the reference w.r.t. every floating tensor argument, in order."""
    leaves = [a.detach().clone().requires_grad_(True)
              if torch.is_tensor(a) and a.is_floating_point() else a
              for a in clone_args(args)]
    idx = float_tensor_indices(leaves)
    with torch.enable_grad():
        outs = case.ref(leaves)
        pairs = [(o, g) for o, g in zip(outs, grad_outs) if o.requires_grad]
        grads = [None] * len(idx)
        if pairs and idx:
            grads = torch.autograd.grad([o for o, _ in pairs],
                                        [leaves[i] for i in idx],
                                        [g for _, g in pairs], allow_unused=True)
    return [g.detach() if g is not None else torch.zeros_like(leaves[i])
            for g, i in zip(grads, idx)]


def specs(tensors):
    return [(tuple(t.shape), t.dtype) for t in tensors]
