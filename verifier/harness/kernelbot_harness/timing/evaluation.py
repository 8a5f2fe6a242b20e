"""The timing entry of each config (PROTOCOL.md "Timing"), through
kernelbot_harness.timing.measure and roofline.

Runs only after correctness passed. When the timing modules cannot be
imported the evaluation still completes, with "timing": null and the
reason.
"""
import os
import time

import torch

from kernelbot_harness import budget as kbh_budget
from kernelbot_harness import cache as kbh_cache
from kernelbot_harness.checks import compare as kbh_checks
from kernelbot_harness.timing import baseline_cache as kbh_bcache
from kernelbot_harness import reference as kbh_reference
from kernelbot_harness import remote as kbh_remote
from kernelbot_harness.checks.calls import early_write_message, stream_fix

TIMING_SEED = 777
WALL_ATTEMPTS = 3   # the kernel's timing is taken again while its wall check fails
TIMING_TURNS = 2    # kernel and baselines timed in turns, ABAB (_time_in_turns)
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
    """(measure, roofline) modules, or (None, reason): a broken timing
    module must not cost the verdict (the evaluation then carries
    "timing": null and the reason)."""
    try:
        from kernelbot_harness.timing import measure, roofline
    except Exception as e:  # any import failure: no timing, the verdict stands
        return None, "could not import the timing harness: %s: %s" % (type(e).__name__, e)
    return (measure, roofline), None


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


def _baselines(caller, case, cfg, grads, backward, tmod, req, device, want_compile=True):
    """The judge's zero-argument callables: eager and (when it works and
    want_compile) compile. The kernel is timed in its own process
    (kbh_remote)."""
    model, mi = case.model, case.model_inputs
    if backward:
        eager = lambda: kbh_reference.backward(case, case.args, grads)
        return {"eager": eager}, "no compile baseline for backward"
    fns = {"eager": lambda: model(*mi)}
    comp, why = (None, "compile baseline not requested")
    if want_compile and "compile" in req["timing"].get("baselines", []):
        _raise_recompile_limits()
        # compiled once per worker in serve mode (kbh_cache); the judge's
        # time, not the candidate's (kbh_budget)
        with kbh_budget.current().baselines():
            comp, why = kbh_cache.compile_baseline(tmod, caller.task, cfg, model, mi, device)
    if comp is not None:
        fns["compile"] = lambda: comp(*mi)
    return fns, why or None


def _settings(req):
    t = req["timing"]
    return {"warmup": t["warmup"], "min_time_ms": t["min_time_ms"],
            "max_reps": t["max_reps"], "l2_flush": t["l2_flush"],
            "method": timing_method(req)}


def _own_overhead_ms(res, wall_ms):
    """Wall milliseconds per call of the judge's own measurement beyond
    the figures it reported (flushes, syncs, the loop): what a runner's
    timing may add per call before its figures stop explaining its wall."""
    calls = sum((st or {}).get("reps") or 0 for st in res.values())
    total = sum((st or {}).get("total_ms") or 0.0 for st in res.values())
    if calls <= 0:
        return 0.0
    return max(0.0, wall_ms - total) / calls


def _turn_settings(settings, turns):
    """One turn's share of the timing settings: the measurement is split
    into `turns` kernel/baseline pairs, so each turn gets that share of
    the time and calls (warm-up calls stay whole: each turn warms up)."""
    return dict(settings, min_time_ms=float(settings["min_time_ms"]) / turns,
                max_reps=max(1, int(settings["max_reps"]) // turns))


def _time_baselines(tmod, fns, settings, method, backward, device):
    """The judge's timing of the baselines in one turn: (stats, wall ms).
    The judge's time, not the candidate's (kbh_budget)."""
    with kbh_budget.current().baselines(), \
            torch.no_grad() if not backward else torch.enable_grad():
        t0 = time.perf_counter()
        # the baselines by the kernel's method: speedups compare like with like
        res = tmod.measure(fns, device=device.type, warmup=settings["warmup"],
                           min_time_ms=settings["min_time_ms"],
                           max_reps=settings["max_reps"], l2_flush=settings["l2_flush"],
                           method=method if method in ("graph", "events")
                           else settings["method"])
        return res, (time.perf_counter() - t0) * 1e3


def _time_in_turns(caller, task, cfg, case, grads, fns, settings, tmod, backward,
                   device, announce=None):
    """The kernel (in its runner) and the baselines (here) timed in turns,
    ABAB, so that a drift of clocks or load between the two processes'
    measurements hits both alike; each turn's kernel timing is checked
    against the judge's wall clock (_wall_check). Returns (kernel stats
    merged or None, why there are none, baseline stats merged, the wall
    checks of the turns). announce(stage), when given, hears "baselines"
    before each baseline turn and "timing" after it (a progress record)."""
    announce = announce or (lambda stage: None)
    turn = _turn_settings(settings, TIMING_TURNS)
    kparts, bparts, checks = [], [], []
    kwhy = None
    for _ in range(TIMING_TURNS):
        kst, kwall, kwhy = caller.time_kernel(case, case.args, grads, cfg.out_specs, turn)
        if kst is None:
            kparts = []
            break
        method = kst.get("method")
        if method in ("graph", "events"):
            turn = dict(turn, method=method)   # later turns: the first turn's method
        announce("baselines")
        res, own_wall = _time_baselines(tmod, fns, turn, method, backward, device)
        announce("timing")
        bparts.append(res)
        kst, figures = _wall_check(caller, task, cfg, case, grads, turn, kst, kwall,
                                   _own_overhead_ms(res, own_wall))
        checks.append(figures)
        kparts.append(kst)
        if not figures["ok"]:
            break   # rejected `timing`: no need to time the other turns
    if not bparts:   # no kernel timing: the baselines alone, once, whole
        res, _ = _time_baselines(tmod, fns, settings, None, backward, device)
        bparts.append(res)
    res = {name: _merged(tmod, [r.get(name) for r in bparts]) for name in fns}
    kstats = _merged(tmod, kparts) if kparts else None
    if kparts and kstats is None:
        kwhy = "the kernel's process sent malformed timing samples"
        _timing_failed(caller, cfg, {"why": "malformed timing samples"})
    return kstats, kwhy, res, checks


def _merged(tmod, parts):
    try:
        st = tmod.merge(parts)
    except ValueError:
        return None
    if st is not None:
        st.pop("sample_ms", None)   # the figures stay in the timing process
    return st


def time_config(mods, kernel, caller, task, cfg, req, device, chan=None):
    """The timing entry of one config (PROTOCOL.md "timing"): the kernel
    timed by its runner and the baselines timed here, in turns
    (_time_in_turns; cached baselines: _timed_with_cache), then the stream
    probe and the roofline. chan: progress records ("baselines")."""
    tmod, roof = mods
    backward = req["pass"] == "backward"
    settings = _settings(req)
    with task.activate(cfg):
        case = task.make_case(cfg, TIMING_SEED, "own", "default", device)
        grads = kbh_reference.grad_outputs(cfg.fwd_specs, TIMING_SEED, device) \
            if backward else []
        kstats, kwhy, res, checks, why, cached = _timed_with_cache(
            caller, task, cfg, case, grads, settings, tmod, req, device, chan)
        with torch.no_grad() if not backward else torch.enable_grad():
            probe = stream_probe(caller, case, grads, req, device) \
                if kstats and req.get("stream_mode") != "kernelbench" else None
        if backward:
            flops, nbytes = roof.count(lambda *a: kbh_reference.backward(case, list(a), grads),
                                       case.args)
        else:
            with torch.no_grad():
                flops, nbytes = roof.count(case.model, case.model_inputs)
    kres = kstats or {}
    entry = {"kernel": kstats, "eager": res.get("eager"),
             "compile": res.get("compile"), "compile_reason": why,
             "method": kres.get("method"), "method_reason": kres.get("method_reason")}
    if kwhy:
        entry["kernel_reason"] = kwhy
    entry["baseline_source"] = cached.pop("source")
    entry["baseline_cache"] = cached
    if kernel.abi != "native":
        # the share of the kernel's time in its own code (the runner's word)
        entry["custom_share"] = getattr(caller, "custom_share", None)
    entry.update(tmod.speedups(dict(res, kernel=kstats)))
    if checks:
        # the turn whose wall time came closest to (or beyond) its bound
        worst = max(checks, key=lambda f: (not f.get("ok", True),
                                           (f.get("wall_ms") or 0) /
                                           max(f.get("bound_ms") or 1e-9, 1e-9)))
        entry["wall_check"] = dict(worst, turns=len(checks))
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
    kmed = (kstats or {}).get("median_ms")
    entry.update({"flops": int(flops), "bytes": int(nbytes)})
    entry.update(roof.shares(flops, nbytes, kmed, peaks, dtype))
    entry["peaks"] = {"copy_gbps": peaks.get("copy_gbps"),
                      "matmul_tflops": peaks.get("matmul_tflops")}
    return entry


def _timed_with_cache(caller, task, cfg, case, grads, settings, tmod, req, device, chan):
    """_time_in_turns with the bot's cached baselines (PROTOCOL.md
    "Baseline cache"). A hit compiles and times no torch.compile: eager
    alone is timed beside the kernel, in turns, as the anchor; when it
    agrees with the cached eager within the request's baseline_drift, the
    cached compile figures stand in. A miss, a malformed entry or a stale
    one (the anchor disagrees) measures every baseline now, and the
    figures go back to the bot when the kernel's timing held
    (cfg.baseline_measured). Returns _time_in_turns's four, the compile
    reason and the evidence's baseline_cache object (with its "source")."""
    backward = req["pass"] == "backward"
    k = kbh_bcache.key(req, device, cfg, settings)
    hit, miss = kbh_bcache.lookup(req, k)
    if hit is not None:
        fns, _ = _baselines(caller, case, cfg, grads, backward, tmod, req, device,
                            want_compile=False)
        kstats, kwhy, res, checks = _time_in_turns(caller, task, cfg, case, grads, fns,
                                                   settings, tmod, backward, device)
        ok, info = kbh_bcache.anchor(hit, res.get("eager"), (kstats or {}).get("method"),
                                     req["baseline_drift"])
        timed = kstats is not None and all(c.get("ok") for c in checks)
        if ok or not timed:   # a kernel that failed its timing: nothing to re-measure for
            res["compile"] = hit["figures"]["compile"]
            return (kstats, kwhy, res, checks, hit["figures"]["compile_reason"],
                    dict(info, source="cache"))
        miss = info["why"]
        kbh_bcache.warn("config '%s': %s; measuring again" % (cfg.name, miss))
    announce = (lambda stage: chan.progress(stage, cfg.index)) if chan else None
    if announce:
        announce("baselines")   # the bot allows the baselines' time (PROTOCOL.md)
    fns, why = _baselines(caller, case, cfg, grads, backward, tmod, req, device)
    if announce:
        announce("timing")
    kstats, kwhy, res, checks = _time_in_turns(caller, task, cfg, case, grads, fns,
                                               settings, tmod, backward, device, announce)
    if kstats is not None and all(c.get("ok") for c in checks):
        cfg.baseline_measured = {"key": k, "figures": kbh_bcache.figures(
            res, why, kstats.get("method"))}
    return kstats, kwhy, res, checks, why, {"source": "measured", "why": miss}


def _wall_check(caller, task, cfg, case, grads, settings, kstats, kwall, ovh):
    """The judge's cross-check of one turn of the runner's timing
    (kbh_remote.crosscheck), taken again up to WALL_ATTEMPTS times while
    it fails: a busy device or host (another process's work) stretches
    one wall time now and then, a forged clock every one. A failing last
    attempt is the reason `timing`. Returns (the turn's kernel stats in
    force, the check's figures)."""
    ok, figures = kbh_remote.crosscheck(kstats, kwall, ovh, settings["warmup"])
    attempts = 1
    while not ok and attempts < WALL_ATTEMPTS:
        attempts += 1
        with task.activate(cfg):
            again, wall, _ = caller.time_kernel(case, case.args, grads, cfg.out_specs,
                                                settings)
        if again is None:
            break
        ok, figures = kbh_remote.crosscheck(again, wall, ovh, settings["warmup"])
        if ok:
            kstats = again
    figures["attempts"] = attempts
    figures["ok"] = ok
    if not ok:
        _timing_failed(caller, cfg, figures)
    return kstats, figures


def _timing_failed(caller, cfg, figures):
    reasons = getattr(caller, "reasons", None)
    if reasons is not None and "timing" not in cfg.failed:
        cfg.failed.add("timing")
        reasons.add("timing", cfg.index, None, "config '%s': %s" % (
            cfg.name, wall_check_message(figures)))


def wall_check_message(figures):
    if figures.get("why"):
        return "the kernel's timing could not be checked: %s" % figures["why"]
    return ("the kernel's process reported %d timed calls whose figures explain at most "
            "%.1f ms, but the judge saw it take %.1f ms: its timing does not match what "
            "it did (a clock or figures changed from inside the kernel's process)"
            % (figures["reps"], figures["bound_ms"], figures["wall_ms"]))


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
