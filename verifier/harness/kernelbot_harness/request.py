"""The request file (PROTOCOL.md "Request"): read, default, validate.

Defaults live here, once, so that a request written by hand or by an older
bot still means one thing.
"""
import hashlib
import json
import os

PROTOCOL_VERSION = 1

DEFAULT_TOLERANCES = {
    "float32": {"atol": 1e-4, "rtol": 1e-4},
    "float16": {"atol": 1e-2, "rtol": 1e-2},
    "bfloat16": {"atol": 1e-2, "rtol": 1e-2},
    "float64": {"atol": 1e-7, "rtol": 1e-7},
}

DEFAULT_TIMING = {"enabled": False, "warmup": 5, "min_time_ms": 100,
                  "max_reps": 1000, "l2_flush": True,
                  "baselines": ["eager", "compile"]}

# a cached baseline entry is stale when the eager baseline timed now differs
# from its cached eager median by more than this ratio (PROTOCOL.md "Baseline cache")
DEFAULT_BASELINE_DRIFT = 0.1

# numel cap per tensor for scaled-up configs (PROTOCOL.md "max_numel")
DEFAULT_MAX_NUMEL = {"cuda": 1 << 26, "cpu": 1 << 22}


class RequestError(Exception):
    """The request is unusable: reported as verdict "error"."""


# strict: a non-blocking stream the kernel must keep to (the bot's);
# kernelbench: KernelBench's legacy default stream, device-wide syncs, no stream checks
STREAM_MODES = ("strict", "kernelbench")


def _need(cond, msg):
    if not cond:
        raise RequestError(msg)


def _kernel(req, mode):
    k = req.get("kernel")
    if mode == "describe":
        return k
    _need(isinstance(k, dict), "missing 'kernel' in request")
    abi = k.get("abi", "native")
    _need(abi in ("native", "torch-ext", "modelnew"), "bad kernel abi '%s'" % abi)
    if abi == "native":
        _need(isinstance(k.get("library"), str), "missing 'kernel.library'")
    else:
        _need(isinstance(k.get("source"), str), "missing 'kernel.source'")
        digest = hashlib.sha1(k["source"].encode()).hexdigest()[:12]
        k.setdefault("name", "kb_ext_" + digest)
    k["abi"] = abi
    return k


def _error_factor(req):
    """The error bound's factor (PROTOCOL.md "Error bound"); 0 turns it off."""
    from kernelbot_harness.checks.compare import ERROR_FACTOR
    v = req.get("error_factor", ERROR_FACTOR)
    _need(isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v <= 1e6,
          "bad error_factor %r (a number from 0, off, to 1e6)" % (v,))
    return float(v)


def _tolerances(req):
    tol = {d: dict(v) for d, v in DEFAULT_TOLERANCES.items()}
    for d, v in (req.get("tolerances") or {}).items():
        _need(isinstance(v, dict), "bad tolerance for '%s'" % d)
        tol.setdefault(d, {}).update({k: float(x) for k, x in v.items()})
    return tol


def _positive(req, name, default, hi):
    """An optional number in (0, hi]; default when absent."""
    v = req.get(name, default)
    if v is None:
        return None
    _need(isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v <= hi,
          "bad %s %r (a number above 0, at most %g)" % (name, v, hi))
    return float(v)


def _baseline_cache(req):
    """The bot's cached baselines for this operator (PROTOCOL.md "Baseline
    cache"): a list; each entry is checked where it is used, and a bad one
    is ignored there with a warning, never fatal."""
    v = req.get("baseline_cache")
    if v is None:
        return []
    _need(isinstance(v, list), "bad baseline_cache (a list of {key, figures} entries)")
    return v


def _backend(req):
    b = req.get("backend")
    if b is None:
        import torch
        b = "cuda" if torch.cuda.is_available() else "cpu"
    _need(b in ("cpu", "cuda"), "bad backend '%s'" % b)
    return b


def parse(path):
    """Read and complete the request; raises RequestError naming what is wrong."""
    try:
        with open(path) as f:
            req = json.load(f)
    except (OSError, ValueError) as e:
        raise RequestError("could not read request '%s': %s" % (path, e))
    _need(isinstance(req, dict), "request '%s' is not an object" % path)
    _need(req.get("protocol", 1) == PROTOCOL_VERSION,
          "unsupported protocol '%s'" % req.get("protocol"))
    mode = req.setdefault("mode", "verify")
    _need(mode in ("verify", "bench", "describe"), "bad mode '%s'" % mode)
    _need(isinstance(req.get("operator"), str), "missing 'operator'")
    _need(req.setdefault("pass", "forward") in ("forward", "backward"),
          "bad pass '%s'" % req.get("pass"))
    req["backend"] = _backend(req)
    req["kernel"] = _kernel(req, mode)
    req["seeds"] = max(1, int(req.get("seeds", 5)))
    req["max_configs"] = max(1, int(req.get("max_configs", 16)))
    req["max_numel"] = int(req.get("max_numel") or DEFAULT_MAX_NUMEL[req["backend"]])
    req["tolerances"] = _tolerances(req)
    req["error_factor"] = _error_factor(req)
    req["stream_mode"] = req.get("stream_mode") or "strict"
    _need(req["stream_mode"] in STREAM_MODES, "bad stream_mode '%s' (strict or kernelbench)"
          % req["stream_mode"])
    req["extra_configs"] = list(req.get("extra_configs") or [])
    timing = dict(DEFAULT_TIMING)
    timing.update(req.get("timing") or {})
    timing["enabled"] = bool(timing["enabled"]) or mode == "bench"
    req["timing"] = timing
    req["suspicious_speedup"] = float(req.get("suspicious_speedup", 10.0))
    req["candidate_timeout_s"] = _positive(req, "candidate_timeout_s", None, 1e7)
    req["baseline_cache"] = _baseline_cache(req)
    req["baseline_drift"] = _positive(req, "baseline_drift", DEFAULT_BASELINE_DRIFT, 100.0)
    req.setdefault("peaks_cache", None)
    req["workdir"] = req.get("workdir") or os.environ.get("TMPDIR") or "/tmp"
    return req
