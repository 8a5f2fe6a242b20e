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


# ------------------------------------------------------------ error bound

ERROR_FACTOR = 16.0        # default: the candidate may err 16x the reference dtype's own error
BOUND_FLOOR_Q = 0.99       # the per-element floor: this quantile of the reference's own error
BOUND_SAMPLE = 1 << 20     # elements the floor's quantile is taken over, at most


class Bound:
    """Result of the error-bound check of one output (PROTOCOL.md "Error
    bound"): where the candidate sits against factor x the error the
    reference's own dtype commits, both measured against float64."""

    def __init__(self, factor):
        self.factor = factor
        self.ok = False
        self.bad = 0
        self.numel = 0
        self.ref_err_max = self.ref_err_rms = 0.0
        self.cand_err_max = self.cand_err_rms = 0.0
        self.floor = 0.0
        self.worst_ratio = 0.0   # max over elements of error / (its bound / factor)

    def figures(self):
        return {"factor": self.factor, "ok": self.ok, "bad": self.bad, "numel": self.numel,
                "ref_err_max": self.ref_err_max, "ref_err_rms": self.ref_err_rms,
                "cand_err_max": self.cand_err_max, "cand_err_rms": self.cand_err_rms,
                "floor": self.floor, "worst_ratio": self.worst_ratio}


def _quantile_of(t, q):
    flat = t.reshape(-1)
    if flat.numel() > BOUND_SAMPLE:   # a strided sample: torch.quantile has a size limit
        flat = flat[::(flat.numel() + BOUND_SAMPLE - 1) // BOUND_SAMPLE]
    return float(torch.quantile(flat, q)) if flat.numel() else 0.0


def bounded(c, r, r64, factor):
    """Judge candidate c by its error against the float64 reference r64,
    relative to the error the reference r (computed in the task's own
    dtype) commits: element i passes when |c - r64| <= factor x
    max(|r - r64|_i, floor), floor being the 99th percentile of the
    reference's own error (an element the reference got exactly right by
    luck does not demand exactness); and the whole passes when its
    root-mean-square error is within factor x the reference's. Ordinary
    reordering of fp32 sums passes; fp16/bf16/TF32 downgrades (errors
    10^3-10^4 x fp32's) and partial garbage do not. NaN/Inf positions are
    compare()'s business: an output with any is not rescued here."""
    b = Bound(factor)
    b.numel = r.numel()
    if c.shape != r.shape or c.shape != r64.shape or not r.is_floating_point() \
            or factor <= 0:
        return b
    c64, ref64, want = c.double(), r.double(), r64.double()
    if not bool(torch.isfinite(c64).all()) or not bool(torch.isfinite(want).all()) \
            or not bool(torch.isfinite(ref64).all()):
        return b
    ref_err = (ref64 - want).abs_()
    cand_err = (c64 - want).abs_()
    if cand_err.numel() == 0:
        b.ok = True
        return b
    b.floor = _quantile_of(ref_err, BOUND_FLOOR_Q)
    scale = torch.clamp(ref_err, min=b.floor)
    b.ref_err_max, b.cand_err_max = float(ref_err.max()), float(cand_err.max())
    b.ref_err_rms = float(ref_err.pow(2).mean().sqrt())
    b.cand_err_rms = float(cand_err.pow(2).mean().sqrt())
    if b.floor <= 0.0:
        return b   # the reference is exact here: only the fixed tolerances apply
    b.bad = int((cand_err > factor * scale).sum())
    b.worst_ratio = float((cand_err / scale).max())
    b.ok = b.bad == 0 and b.cand_err_rms <= factor * b.ref_err_rms
    return b


def bound_message(what, i, b):
    return ("%s %d: also beyond the error bound: %d of %d elements err more than %g x "
            "the reference dtype's own error (worst %.3g x; rms %.3g against the "
            "reference's %.3g)" % (what, i, b.bad, b.numel, b.factor, b.worst_ratio,
                                    b.cand_err_rms, b.ref_err_rms))
