"""The result body (PROTOCOL.md "Evidence"): environment, operator,
configs, reasons, summary, verdict.
"""
import math
import platform

from kernelbot_harness.timing.roofline import cpu_name

HARNESS_VERSION = 1
FLAGS = {"suspicious_speedup"}  # reasons that flag but do not reject


def environment(backend, device=None):
    """What ran the evaluation; driver and CUDA only on the cuda backend."""
    env = {"backend": backend, "device": cpu_name(),
           "driver": None, "cuda": None, "torch": None,
           "python": platform.python_version(), "harness": HARNESS_VERSION}
    try:
        import torch
    except ImportError:
        return env
    env["torch"] = torch.__version__
    if backend == "cuda" and torch.cuda.is_available():
        env["device"] = torch.cuda.get_device_name(device)
        env["cuda"] = torch.version.cuda
        env["driver"] = _driver_version()
    return env


def _driver_version():
    try:
        with open("/proc/driver/nvidia/version") as f:
            for word in f.readline().split():
                if word[:1].isdigit() and "." in word:
                    return word
    except OSError:
        pass
    return None


def verdict(reasons):
    if any(r["check"] not in FLAGS for r in reasons):
        return "rejected"
    return "verified"


def config_entry(cfg, checks, atol, rtol):
    return {"index": cfg.index, "name": cfg.name, "kind": cfg.kind,
            "params": cfg.params, "inputs": cfg.inputs, "outputs": cfg.outputs,
            "trials": getattr(cfg, "trials", 0),
            "max_abs_err": getattr(cfg, "max_abs", None),
            "max_rel_err": getattr(cfg, "max_rel", None),
            "atol": atol, "rtol": rtol, "checks": checks,
            "error_bound": getattr(cfg, "error_bound", None),
            "timing": getattr(cfg, "timing", None),
            "notes": getattr(cfg, "notes", [])}


def settings(req):
    """What the verdict and the figures were taken under: the tolerances,
    the error bound and (when timed) the timing settings; a Reproduce
    command pins them (`kernelbot bench --set`)."""
    out = {"tolerances": req["tolerances"], "error_factor": req.get("error_factor"),
           "stream_mode": req.get("stream_mode", "strict")}
    t = req.get("timing") or {}
    if t.get("enabled"):
        out["timing"] = {k: t.get(k) for k in ("warmup", "min_time_ms", "max_reps", "l2_flush",
                                                "baselines")}
    return out


def geomean(xs):
    xs = [x for x in xs if x is not None and x > 0 and math.isfinite(x)]
    if not xs:
        return None
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def summary(configs, seeds, suspicious):
    timed = [c.timing for c in configs if getattr(c, "timing", None)]
    return {"configs": len(configs), "seeds": seeds,
            "trials": sum(getattr(c, "trials", 0) for c in configs),
            "geomean_speedup_eager": geomean([t.get("speedup_eager") for t in timed]),
            "geomean_speedup_compile": geomean([t.get("speedup_compile") for t in timed]),
            "suspicious": suspicious}


def operator_entry(req, task, configs):
    first = configs[0] if configs else None
    return {"path": req["operator"], "format": task.format if task else None,
            "pass": req["pass"],
            "n_inputs": getattr(first, "n_inputs", None),
            "n_outputs": len(first.out_specs) if first else None}
