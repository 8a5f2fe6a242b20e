"""Numerical comparisons and the diagnoses built on them.

compare() is allclose by element (|c - r| <= atol + rtol * |r|) plus NaN and
Inf positions (and Inf signs) that must match the reference's. Errors are
computed in float64 so the measure itself adds no rounding.
"""
import torch

# precision rule (PROTOCOL.md "precision"): an fp32 task whose failure looks
# like rounding to fp16/bf16/TF32 rather than a wrong formula
PRECISION_MAX_REL = 2e-2   # bf16 rounds at 2^-9 ~ 2e-3; TF32 sums stay below this
PRECISION_SPREAD = 0.05    # median/max relative error: rounding spreads over all elements
PRECISION_REPRESENTABLE = 0.9


class Diff:
    """Result of comparing one candidate output with the reference."""

    def __init__(self):
        self.nan_bad = 0
        self.bad = 0
        self.first_bad = None
        self.max_abs = 0.0
        self.max_rel = 0.0
        self.median_rel = 0.0
        self.max_srel = 0.0     # error / max(|r|, rms(r)): no blow-up near zeros
        self.median_srel = 0.0
        self.numel = 0

    @property
    def ok(self):
        return self.nan_bad == 0 and self.bad == 0


def _first(mask):
    idx = torch.nonzero(mask.reshape(-1))
    return int(idx[0]) if idx.numel() else None


def _same(c, r):
    return bool(torch.equal(c.reshape(-1).view(_int_view(c)),
                            r.reshape(-1).view(_int_view(r))))


def _int_view(t):
    return {8: torch.int64, 4: torch.int32, 2: torch.int16}.get(
        t.element_size(), torch.uint8)


def compare(c, r, atol, rtol, pattern=True):
    """Element-wise comparison; c and r same shape and dtype. The error
    pattern (medians) is measured only when something failed."""
    d = Diff()
    d.numel = r.numel()
    if c.shape != r.shape:
        d.bad, d.first_bad = max(1, r.numel()), 0
        return d
    if c.dtype == r.dtype and _same(c, r):
        return d
    if not r.is_floating_point():
        neq = c != r
        d.bad, d.first_bad = int(neq.sum()), _first(neq)
        return d
    c64, r64 = c.double(), r.double()
    nonfin = ~torch.isfinite(c64) | ~torch.isfinite(r64)
    if bool(nonfin.any()):
        same = (c64 == r64) | (torch.isnan(c64) & torch.isnan(r64))
        nan_bad = nonfin & ~same
        d.nan_bad = int(nan_bad.sum())
    else:
        nan_bad = None
    err = (c64 - r64).abs_().masked_fill_(nonfin, 0.0)
    ra = r64.abs().masked_fill_(nonfin, 0.0)
    bad = err > atol + rtol * ra
    d.bad = int(bad.sum())
    if d.bad or d.nan_bad:
        d.first_bad = _first(bad if nan_bad is None else bad | nan_bad)
    if err.numel():
        d.max_abs = float(err.max())
        big = ra > atol  # relative error only where |r| is above the noise
        d.max_rel = float(torch.where(big, err / ra.clamp(min=atol if atol > 0 else 1e-300),
                                      torch.zeros_like(err)).max())
        if d.bad and pattern:
            _pattern(d, err, ra, ~nonfin, big)
    return d


def _pattern(d, err, ra, fin, big):
    """Medians of the errors, for the precision diagnosis. Scaled error is
    relative to max(|r|, rms(r)): rounding noise is a fixed share of that
    scale, while plain relative error explodes where r nears zero."""
    if bool(big.any()):
        d.median_rel = float((err[big] / ra[big]).median())
    if not bool(fin.any()):
        return
    rf = ra[fin]
    rms = float(rf.pow(2).mean().sqrt())
    if rms == 0.0:
        return
    srel = err[fin] / rf.clamp(min=rms)
    d.max_srel = float(srel.max())
    d.median_srel = float(srel.median())


def equal_within(a, b, atol, rtol):
    """Same values up to tolerance, NaN/Inf in the same places."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return compare(a, b, atol, rtol, pattern=False).ok


def _representable_share(t):
    """Share of nonzero finite elements exactly representable in fp16 or bf16."""
    t = t.reshape(-1).float()
    keep = torch.isfinite(t) & (t != 0)
    t = t[keep]
    if t.numel() == 0:
        return 0.0
    rep = (t.half().float() == t) | (t.bfloat16().float() == t)
    return float(rep.float().mean())


def looks_like_precision(c, r, diff):
    """True when an fp32 failure has the pattern of reduced-precision math:
    small relative errors spread over the whole output, or outputs that
    are exactly fp16/bf16 values while the reference's are not."""
    if r.dtype != torch.float32 or diff.ok or diff.nan_bad:
        return False
    if 0 < diff.max_srel <= PRECISION_MAX_REL and \
            diff.median_srel >= PRECISION_SPREAD * diff.max_srel:
        return True
    return _representable_share(c) >= PRECISION_REPRESENTABLE and \
        _representable_share(r) < 0.5


def message(what, i, diff, atol, rtol):
    """One reason line for output/gradient i."""
    if diff.nan_bad:
        return "%s %d: NaN/Inf at %d positions where the reference differs (first at %s)" % (
            what, i, diff.nan_bad, diff.first_bad)
    return ("%s %d: %d of %d elements beyond atol=%g rtol=%g (first at %s), "
            "max abs err %.3g, max rel err %.3g" % (
                what, i, diff.bad, diff.numel, atol, rtol, diff.first_bad,
                diff.max_abs, diff.max_rel))
