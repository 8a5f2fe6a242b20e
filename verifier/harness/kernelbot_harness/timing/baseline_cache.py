"""The baseline cache's harness side (PROTOCOL.md "Baseline cache").

The bot keeps the baselines' figures (eager, torch.compile) per operator
content in its state database and sends this operator's entries with
each request (`baseline_cache`). Here: the key one config's figures are
filed under (what changes them besides the operator: torch, the device,
the pass, the config, the timing settings), the check of an entry (one
that is malformed is ignored, with a warning), the eager anchor that
tells a stale entry, and the figures sent back for storing
(`baselines_measured`).

Nothing here is trusted more than a measurement: a hit still times eager
beside the kernel, in turns, and compares it with the cached eager.
"""
import json
import math
import sys

KEY_VERSION = 1
STATS_MAX_KEYS = 64
TEXT_MAX = 300


class BadEntry(ValueError):
    """A cached entry that cannot be used; the message says why."""


def _device_name(device):
    import torch
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    from kernelbot_harness.timing.roofline import cpu_name
    return cpu_name()


def key(req, device, cfg, settings):
    """The string one config's baseline figures are filed under: whatever
    changes them besides the operator's own content (the bot files entries
    under that): the harness, torch (and its CUDA), the device, backend,
    pass, stream mode (the judge's stream), the config's name and
    parameters, and the timing settings."""
    import torch
    from kernelbot_harness.evidence import HARNESS_VERSION
    parts = {"v": KEY_VERSION, "harness": HARNESS_VERSION, "torch": torch.__version__,
             "cuda": torch.version.cuda, "device": _device_name(device),
             "backend": device.type, "pass": req["pass"],
             "stream_mode": req.get("stream_mode") or "strict", "config": cfg.name,
             "params": cfg.params,
             "timing": {k: settings[k] for k in ("warmup", "min_time_ms", "max_reps",
                                                 "l2_flush", "method")},
             "baselines": sorted(str(b) for b in req["timing"].get("baselines") or [])}
    return "baselines/%d %s" % (KEY_VERSION, json.dumps(parts, sort_keys=True, default=str,
                                                         separators=(",", ":")))


def warn(msg):
    """A cache problem goes to the operator's log (stderr); the config's
    evidence says what was done instead (baseline_cache.why)."""
    sys.stderr.write("kb_harness: baseline cache: %s\n" % msg)


def _index(req):
    """key -> raw entry, built once per request (the first of a key wins)."""
    idx = req.get("_baseline_index")
    if idx is None:
        idx, bad = {}, 0
        for e in req.get("baseline_cache") or []:
            if isinstance(e, dict) and isinstance(e.get("key"), str):
                idx.setdefault(e["key"], e)
            else:
                bad += 1
        if bad:
            warn("%d entr%s without a key ignored" % (bad, "y" if bad == 1 else "ies"))
        req["_baseline_index"] = idx
    return idx


def _number(v, what, positive=False):
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or \
            v < 0 or (positive and v <= 0):
        raise BadEntry("%s is not a %s number: %r" % (what, "positive" if positive
                                                      else "non-negative", v))
    return v


def _stats(v, name):
    """A baseline's stats as the evidence carries them, kept to plain
    values (numbers, booleans, short strings): a forged entry cannot put
    anything else into the evidence."""
    if not isinstance(v, dict):
        raise BadEntry("%s is not an object" % name)
    if len(v) > STATS_MAX_KEYS:
        raise BadEntry("%s has %d fields" % (name, len(v)))
    _number(v.get("median_ms"), "%s median_ms" % name, positive=True)
    reps = v.get("reps")
    if not isinstance(reps, int) or isinstance(reps, bool) or reps < 1:
        raise BadEntry("%s reps is not a positive count: %r" % (name, reps))
    out = {}
    for k, x in v.items():
        if not isinstance(k, str) or len(k) > 64:
            continue
        if x is None or isinstance(x, bool) or isinstance(x, int):
            out[k] = x
        elif isinstance(x, float):
            out[k] = x if math.isfinite(x) else None
        elif isinstance(x, str):
            out[k] = x[:TEXT_MAX]
    return out


def check(raw):
    """The usable figures of a raw entry, or BadEntry naming what is wrong."""
    f = raw.get("figures")
    if not isinstance(f, dict):
        raise BadEntry("figures is not an object")
    comp = f.get("compile")
    why = f.get("compile_reason")
    method = f.get("method")
    if why is not None and not isinstance(why, str):
        raise BadEntry("compile_reason is not a string")
    if not isinstance(method, str) or len(method) > 16:
        raise BadEntry("method is not a name: %r" % (method,))
    return {"eager": _stats(f.get("eager"), "eager"),
            "compile": None if comp is None else _stats(comp, "compile"),
            "compile_reason": why[:TEXT_MAX] if why else None, "method": method}


def lookup(req, k):
    """(hit or None, why there is none). A hit: {"figures", "age_s"}."""
    raw = _index(req).get(k)
    if raw is None:
        return None, "no cached entry"
    try:
        figures = check(raw)
    except BadEntry as e:
        warn("entry ignored: %s" % e)
        return None, "cached entry ignored (malformed: %s)" % e
    age = raw.get("age_s")
    age = age if isinstance(age, (int, float)) and not isinstance(age, bool) and \
        math.isfinite(age) and age >= 0 else None
    return {"figures": figures, "age_s": age}, None


def anchor(hit, eager, method, band):
    """Whether the eager baseline timed now agrees with the cached one
    within band (a ratio either way), and the method matches: (ok, the
    evidence's baseline_cache object)."""
    cached = hit["figures"]["eager"]["median_ms"]
    fresh = (eager or {}).get("median_ms")
    info = {"age_s": hit["age_s"], "band": band, "cached_eager_ms": cached,
            "eager_drift": None}
    if not isinstance(fresh, (int, float)) or not fresh > 0:
        info["why"] = "eager could not be timed now"
        return False, info
    info["eager_drift"] = round(fresh / cached - 1.0, 4)
    if method != hit["figures"]["method"]:
        info["why"] = ("stale: cached figures were timed by '%s', the kernel by '%s'"
                       % (hit["figures"]["method"], method))
        return False, info
    ratio = max(fresh / cached, cached / fresh)
    if ratio > 1.0 + band:
        info["why"] = ("stale: eager now %.4g ms, cached %.4g ms (%+.1f%%, band %g%%)"
                       % (fresh, cached, 100.0 * (fresh / cached - 1.0), 100.0 * band))
        return False, info
    return True, info


def figures(res, compile_reason, method):
    """What is stored for one config: the baselines' merged stats."""
    return {"eager": res.get("eager"), "compile": res.get("compile"),
            "compile_reason": compile_reason, "method": method}
