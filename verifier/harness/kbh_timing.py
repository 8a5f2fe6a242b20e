"""Timing and roofline, through bench/harness/timing.py and roofline.py.

Runs only after correctness passed. bench/harness sits at ../../bench/harness
from this file both in a checkout (verifier/harness) and installed
(share/kernelbot/verifier/harness). When those modules are missing the
evaluation still completes, with "timing": null and the reason.
"""
import os
import sys

import torch

import kbh_cache
import kbh_checks
import kbh_reference
from kbh_calls import early_write_message, stream_fix

TIMING_SEED = 777
METHODS = ("auto", "graph", "events")
_limits_raised = []


def timing_method(req):
    """bench/harness/timing.py's CUDA method: the request's timing "method",
    else the environment's KB_TIMING_METHOD (a runner-wide override), else
    "events". An unknown name means "events".

    Not "auto" by default: on the H200 (2026-12-02, test_gpu_timing) the
    graph method's flush subtraction gave ~4 us kernels medians that moved
    by up to 79% between two runs (about 2.5 ms of flushes subtracted per
    sample), where per-call events stayed within 10%. Graph timing stays
    available on request ("auto" or "graph")."""
    m = (req.get("timing") or {}).get("method") or os.environ.get("KB_TIMING_METHOD")
    return m if m in METHODS else "events"


def load_bench():
    """(timing, roofline) modules, or (None, reason)."""
    here = os.path.dirname(os.path.abspath(__file__))
    d = os.path.normpath(os.path.join(here, "..", "..", "bench", "harness"))
    if not os.path.exists(os.path.join(d, "timing.py")):
        return None, "timing harness not found in '%s'" % d
    if d not in sys.path:
        sys.path.insert(0, d)
    try:
        import roofline
        import timing
    except Exception as e:  # a broken bench module must not cost the verdict
        return None, "could not import the timing harness: %s: %s" % (type(e).__name__, e)
    return (timing, roofline), None


def _raise_recompile_limits():
    """Each config compiles the operator's forward again (other shapes, a
    fresh model): past dynamo's default limit (8 per function) the compile
    baseline of the later configs would silently run eager. A serve-mode
    worker keeps several operators' compilations (kbh_cache)."""
    if _limits_raised:
        return
    _limits_raised.append(True)
    try:
        import torch._dynamo
        cfg = torch._dynamo.config
    except Exception:  # torch 1.13: no dynamo, no compile baseline
        return
    for name, floor in (("recompile_limit", 64), ("cache_size_limit", 64),
                        ("accumulated_recompile_limit", 1024),
                        ("accumulated_cache_size_limit", 1024)):
        try:
            if isinstance(getattr(cfg, name, None), int) and getattr(cfg, name) < floor:
                setattr(cfg, name, floor)
        except Exception:  # a renamed or read-only setting: keep torch's
            pass


def _fns(kernel, caller, case, cfg, grads, backward, tmod, req, device):
    """Zero-argument callables: kernel, eager and (when it works) compile."""
    if kernel.abi == "native":
        caller.allocate(cfg.out_specs, torch.zeros(4096, dtype=torch.uint8))
        k = kernel.bind(case.args + grads, [g.out for g in caller.guarded])
    elif backward:
        k = lambda: kernel.backward(caller.task, case, case.args, grads)
    else:
        k = lambda: kernel.forward(case.args)
    model, mi = case.model, case.model_inputs
    if backward:
        eager = lambda: kbh_reference.backward(case, case.args, grads)
        return {"kernel": k, "eager": eager}, None, "no compile baseline for backward"
    eager = lambda: model(*mi)
    fns = {"kernel": k, "eager": eager}
    comp, why = (None, "compile baseline not requested")
    if "compile" in req["timing"].get("baselines", []):
        _raise_recompile_limits()
        # compiled once per worker in serve mode (kbh_cache)
        comp, why = kbh_cache.compile_baseline(tmod, caller.task, cfg, model, mi, device)
    if comp is not None:
        fns["compile"] = lambda: comp(*mi)
    return fns, comp, why or None


def time_config(mods, kernel, caller, task, cfg, req, device):
    """The timing entry of one config (PROTOCOL.md "timing")."""
    tmod, roof = mods
    backward = req["pass"] == "backward"
    t = req["timing"]
    with task.activate(cfg):
        case = task.make_case(cfg, TIMING_SEED, "own", "default", device)
        grads = kbh_reference.grad_outputs(cfg.fwd_specs, TIMING_SEED, device) \
            if backward else []
        fns, comp, why = _fns(kernel, caller, case, cfg, grads, backward, tmod, req, device)
        with torch.no_grad() if not backward else torch.enable_grad():
            # on the evaluation's own (non-default) stream, which the native
            # kernel was bound to: graph capture needs both
            res = tmod.measure(fns, device=device.type, warmup=t["warmup"],
                               min_time_ms=t["min_time_ms"], max_reps=t["max_reps"],
                               l2_flush=t["l2_flush"], method=timing_method(req))
            probe = stream_probe(caller, case, grads, req, device)
        if backward:
            flops, nbytes = roof.count(lambda *a: kbh_reference.backward(case, list(a), grads),
                                       case.args)
        else:
            with torch.no_grad():
                flops, nbytes = roof.count(case.model, case.model_inputs)
    kres = res.get("kernel") or {}
    entry = {"kernel": res.get("kernel"), "eager": res.get("eager"),
             "compile": res.get("compile"), "compile_reason": why,
             "method": kres.get("method"), "method_reason": kres.get("method_reason")}
    entry.update(tmod.speedups(res))
    if probe is not None:
        entry["stream_probe"] = probe
        msg = stream_probe_message(probe, kernel.abi)
        reasons = getattr(caller, "reasons", None)
        if msg and reasons is not None:
            cfg.failed.add("stream")
            reasons.add("stream", cfg.index, None,
                        "config '%s': after timing: %s" % (cfg.name, msg))
    peaks = roof.peaks(device.type, req.get("peaks_cache"))
    dtype = cfg.out_specs[0][1] if cfg.out_specs else None
    kmed = (res.get("kernel") or {}).get("median_ms")
    entry.update({"flops": int(flops), "bytes": int(nbytes)})
    entry.update(roof.shares(flops, nbytes, kmed, peaks, dtype))
    entry["peaks"] = {"copy_gbps": peaks.get("copy_gbps"),
                      "matmul_tflops": peaks.get("matmul_tflops")}
    return entry


def _tolerances(req, outs):
    out = []
    for o in outs:
        t = req["tolerances"].get(str(o.dtype).replace("torch.", "")) or \
            req["tolerances"]["float32"]
        out.append((t["atol"], t["rtol"]))
    return out


def stream_probe(caller, case, grads, req, device):
    """After a config's timing (cuda): the kernel called once behind a hold
    of the given stream and once without (kbh_calls.Gate), on the timing
    case. A kernel that kept to its stream through the correctness run and
    left it later (after so many calls, say) shows here: outputs written
    under the hold, a result that differs with and without it, or outputs
    still changing after the call. None on cpu.
    {"hold_ms", "conclusive", "early_write", "late_inputs", "late"}"""
    if device.type != "cuda":
        return None
    held = caller.call(case, case.args, grads, check_stream=True, gate=True)
    plain = caller.call(case, case.args, grads, check_stream=True)
    g = held.gate or {"hold_ms": None, "conclusive": False, "early_write": None}
    # a torch extension's output here may be a buffer it keeps and refills
    # on its stream: holding this same result already, it is not proof
    early = g["early_write"] if caller.kernel.abi == "native" else None
    differ = False
    if not held.error and not plain.error:
        tols = _tolerances(req, plain.outs)
        differ = len(held.outs) != len(plain.outs) or not all(
            a.shape == b.shape and a.dtype == b.dtype and
            kbh_checks.equal_within(a, b, at, rt)
            for a, b, (at, rt) in zip(held.outs, plain.outs, tols))
    return {"hold_ms": g["hold_ms"], "conclusive": g["conclusive"],
            "early_write": early, "late_inputs": bool(differ),
            "late": bool(held.late or plain.late)}


def stream_probe_message(probe, abi):
    """The `stream` reason a probe gives, or None."""
    if not probe:
        return None
    if probe.get("early_write"):
        what = early_write_message(probe)
    elif probe.get("late_inputs"):
        what = ("the result behind a %g ms hold of the stream handed in (inputs written "
                "on it only after the hold) differs from the result without it: the "
                "kernel read its inputs before the given stream's earlier work had "
                "finished" % probe["hold_ms"])
    elif probe.get("late"):
        what = "outputs changed after the call returned"
    else:
        return None
    return "%s: %s" % (what, stream_fix(abi))


def side_stream_suspect(entry):
    """The kernel kept the device busy after its stream finished, and the
    eager baseline, timed alike, did not: work hidden on another stream."""
    k, e = entry.get("kernel") or {}, entry.get("eager") or {}
    return bool(k.get("side_stream_suspect")) and not e.get("side_stream_suspect")


def side_stream_figures(entry):
    """The cross-check's figures behind a "stream" reason, for the reader
    who must tell a hidden stream from a slow launch: per fn the event
    median, the host time of the call, the call-to-idle time and the
    excess (busy after the timed stream's end event, beyond an idle sync)."""
    parts = []
    for name in ("kernel", "eager"):
        st = entry.get(name) or {}

        def ms(key):
            v = st.get(key)
            return "%.4f ms" % v if isinstance(v, (int, float)) else "-"
        parts.append("%s: events %s, host call %s, %s back to back to idle device %s "
                     "(busy %s after its end event)"
                     % (name, ms("median_ms"), ms("host_median_ms"),
                        "%s call%s" % (st.get("tail_batch") or 1,
                                       "" if (st.get("tail_batch") or 1) == 1 else "s"),
                        ms("sync_median_ms"), ms("sync_excess_ms")))
    return "%s; so %s" % ("; ".join(parts), stream_fix(None))
