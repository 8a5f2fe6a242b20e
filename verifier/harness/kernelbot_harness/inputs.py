"""Input value distributions and parameter init settings, cycled per trial.

A kernel tuned (or hacked) for one value range fails on another: the file's
own inputs, a normal draw, large and tiny magnitudes. Parameters are
re-initialised under the trial's seed with several schemes for the same
reason. Integer and bool tensors are kept as the file makes them (indices,
masks, labels have meanings random values would break).
"""
import math

import torch

DISTRIBUTIONS = ("own", "normal", "uniform_large", "uniform_tiny")
INIT_SETTINGS = ("default", "kaiming_uniform", "xavier_uniform", "normal_0.02")

# magnitude of "uniform_large" per dtype: large, but far from overflow in
# the sums and products a typical operator forms
LARGE = {torch.float16: 1e1, torch.bfloat16: 1e2}
LARGE_DEFAULT = 1e3
TINY = 1e-3


def trial_seed(config_index, seed):
    """A distinct, reproducible seed per (config, trial)."""
    return 1000003 * (config_index + 1) + 7919 * seed + 17


def distribution(seed):
    return DISTRIBUTIONS[seed % len(DISTRIBUTIONS)]


def init_setting(config_index, seed):
    """Offset by the config so that a config does not pair one init with one distribution."""
    return INIT_SETTINGS[(seed + config_index) % len(INIT_SETTINGS)]


def scale(dist, dtype):
    """The input magnitude of a distribution: tolerances' atol scales with it."""
    if dist == "uniform_large":
        return LARGE.get(dtype, LARGE_DEFAULT)
    if dist == "uniform_tiny":
        return TINY
    return 1.0


def _redraw(t, dist, gen):
    shape, dtype = t.shape, t.dtype
    if dist == "normal":
        v = torch.randn(shape, generator=gen, dtype=torch.float32)
    else:
        v = torch.rand(shape, generator=gen, dtype=torch.float32) * 2 - 1
        v = v * scale(dist, dtype)
    return v.to(dtype)


def apply_distribution(values, dist, seed):
    """Redraw every floating tensor in values (a list) from dist; others kept."""
    if dist == "own":
        return list(values)
    gen = torch.Generator().manual_seed(seed)
    out = []
    for v in values:
        if torch.is_tensor(v) and v.is_floating_point():
            v = _redraw(v.detach().cpu(), dist, gen).to(v.device)
        out.append(v)
    return out


def _init_one(p, setting):
    if setting == "normal_0.02":
        torch.nn.init.normal_(p, 0.0, 0.02)
    elif p.dim() >= 2 and setting == "kaiming_uniform":
        torch.nn.init.kaiming_uniform_(p, a=math.sqrt(5))
    elif p.dim() >= 2 and setting == "xavier_uniform":
        torch.nn.init.xavier_uniform_(p)
    else:  # 1-d and 0-d parameters have no fan: uniform in +-1/sqrt(n)
        bound = 1.0 / math.sqrt(max(1, p.numel()))
        torch.nn.init.uniform_(p, -bound, bound)


def apply_init(model, setting, seed):
    """Re-initialise every floating parameter in place ("default" keeps the
    constructor's init, which ran under the trial's seed)."""
    if setting == "default" or not isinstance(model, torch.nn.Module):
        return
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.is_floating_point() and p.numel() > 0:
                _init_one(p, setting)
