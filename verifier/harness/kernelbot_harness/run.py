"""One evaluation, start to end: device, operator, configs, kernel,
correctness, then timing; returns the result body.
"""
import contextlib
import time

import torch

from kernelbot_harness import budget as kbh_budget
from kernelbot_harness import cache as kbh_cache
from kernelbot_harness import evidence as kbh_evidence
from kernelbot_harness import prepare as kbh_prepare
from kernelbot_harness import remote as kbh_remote
from kernelbot_harness.timing import evaluation as kbh_timing
from kernelbot_harness.abi import KernelLoadError
from kernelbot_harness.checks.calls import DeviceFault
from kernelbot_harness.request import RequestError
from kernelbot_harness.verify import Verifier


def _device(backend):
    if backend == "cuda":
        if not torch.cuda.is_available():
            raise RequestError("backend 'cuda' requested but torch sees no GPU")
        # the reference is exact fp32: a TF32 reference would hide a TF32 kernel
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        if hasattr(torch, "set_float32_matmul_precision"):
            torch.set_float32_matmul_precision("highest")
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _stream(device, mode="strict"):
    """A non-default stream for everything: the legacy default stream would
    synchronise with a kernel's side streams and hide their lateness. In
    KernelBench's mode the legacy default stream, as KernelBench runs."""
    if device.type != "cuda" or mode == "kernelbench":
        return contextlib.nullcontext()
    return torch.cuda.stream(torch.cuda.Stream(device))


def _open_kernel(req, task, device):
    """The kernel, loaded in a runner process of its own (kbh_remote):
    this process never maps candidate code."""
    return kbh_remote.RemoteCaller(req, task, device)


def _tol(req, cfg):
    dtype = str(cfg.out_specs[0][1]).replace("torch.", "") if cfg.out_specs else "float32"
    t = req["tolerances"].get(dtype) or req["tolerances"]["float32"]
    return t["atol"], t["rtol"]


class _Clock:
    """Wall seconds per stage (PROTOCOL.md "stages")."""

    def __init__(self, stages):
        self.stages = stages if stages is not None else {}
        self.t = time.perf_counter()

    def lap(self, name):
        now = time.perf_counter()
        self.stages[name] = round(self.stages.get(name, 0.0) + now - self.t, 4)
        self.t = now


def evaluate(req, chan, stages=None):
    """The result body; stages (a dict) receives load_s, correctness_s and
    timing_s as far as the evaluation got, and baseline_s (kbh_budget)."""
    budget = kbh_budget.start(req.get("candidate_timeout_s"))
    try:
        device = _device(req["backend"])
        with _stream(device, req.get("stream_mode", "strict")):
            return _evaluate(req, chan, device, _Clock(stages))
    finally:
        if stages is not None:
            stages["baseline_s"] = round(budget.baseline_s(), 4)


def _evaluate(req, chan, device, clock):
    env = kbh_evidence.environment(req["backend"], device)
    chan.progress("load")
    if req["mode"] != "describe":
        # a zygote we start ourselves imports torch while we load the operator
        kbh_remote.zygote()
    task = kbh_cache.load_task(req["operator"], req["pass"])
    configs, dropped = kbh_cache.prepare(task, req, device)
    env["operator_cached"] = kbh_cache.hits["task"] and kbh_cache.hits["configs"]
    base = {"protocol": 1, "mode": req["mode"], "environment": env,
            "operator": kbh_evidence.operator_entry(req, task, configs),
            "dropped_configs": dropped, "settings": kbh_evidence.settings(req)}
    if req["mode"] == "describe":
        clock.lap("load_s")
        return _describe(base, req, task, configs, device)
    try:
        caller = _open_kernel(req, task, device)
    except KernelLoadError as e:
        clock.lap("load_s")
        r = {"check": "load", "config": None, "seed": None, "message": str(e), "count": 1}
        return dict(base, verdict="rejected", reasons=[r], summary=None,
                    configs=[_entry(req, c, None) for c in configs])
    except (kbh_remote.RunnerError, DeviceFault) as e:
        clock.lap("load_s")
        # kbh_budget.Exceeded: "timeout"
        r = {"check": getattr(e, "check", "crash"), "config": None, "seed": None,
             "message": str(e), "count": 1}
        return dict(base, verdict="rejected", reasons=[r], summary=None,
                    configs=[_entry(req, c, None) for c in configs])
    env["runner"] = caller.isolation
    try:
        return _judge(req, task, caller, configs, device, chan, clock, base)
    finally:
        caller.close()


def _judge(req, task, caller, configs, device, chan, clock, base):
    clock.lap("load_s")
    v = Verifier(req, task, caller, device, chan)
    try:
        reasons = v.run(configs)
        clock.lap("correctness_s")
    except DeviceFault as e:  # the kernel's process is gone: report what we have and stop
        clock.lap("correctness_s")
        index, seed, name = getattr(e, "where", (None, None, "?"))
        v.reasons.add(getattr(e, "check", "crash"), index, seed, "config '%s': %s" % (name, e))
        return dict(base, verdict="rejected", reasons=v.reasons.items, summary=None,
                    configs=[_entry(req, c, v) for c in configs if hasattr(c, "failed")])
    timing_note = None
    if req["timing"]["enabled"] and kbh_evidence.verdict(reasons) == "verified":
        try:
            timing_note = _time(req, task, caller, v, configs, device, reasons, chan)
        except DeviceFault as e:
            v.reasons.add(getattr(e, "check", "crash"), None, None, "while timing: %s" % e)
        clock.lap("timing_s")
    suspicious = any(r["check"] == "suspicious_speedup" for r in reasons)
    body = dict(base, verdict=kbh_evidence.verdict(reasons), reasons=reasons,
                configs=[_entry(req, c, v) for c in configs],
                summary=kbh_evidence.summary(configs, req["seeds"], suspicious))
    if timing_note:
        body["timing_note"] = timing_note
    measured = [c.baseline_measured for c in configs if getattr(c, "baseline_measured", None)]
    if measured and body["verdict"] == "verified" and not suspicious:
        # the bot stores them (PROTOCOL.md "Baseline cache"); never from a
        # kernel that was rejected or flagged while they were timed
        body["baselines_measured"] = measured
    if v.custom_work is not None:
        body["custom_work"] = v.custom_work
    return body


def _entry(req, cfg, verifier):
    atol, rtol = _tol(req, cfg)
    checks = verifier.checks_map(cfg) if verifier else {}
    return kbh_evidence.config_entry(cfg, checks, atol, rtol)


def _time(req, task, caller, verifier, configs, device, reasons, chan):
    """Timing entries on each config; flags added to reasons. Returns a
    note when timing could not run."""
    mods, why = kbh_timing.load_bench()
    if mods is None:
        return why
    for cfg in configs:
        chan.progress("timing", cfg.index)
        cfg.timing = kbh_timing.time_config(mods, caller.kernel, caller, task,
                                            cfg, req, device, chan)
        sp = cfg.timing.get("speedup_eager")
        if sp is not None and sp > req["suspicious_speedup"]:
            verifier.reasons.add("suspicious_speedup", cfg.index, None,
                                 "config '%s': %.1fx faster than eager (threshold %.1fx)"
                                 % (cfg.name, sp, req["suspicious_speedup"]))
        if device.type == "cuda" and req.get("stream_mode") != "kernelbench" and \
                kbh_timing.side_stream_suspect(cfg.timing):
            verifier.reasons.add("stream", cfg.index, None,
                                 "config '%s': device busy after the timed stream "
                                 "finished (work on another stream): %s"
                                 % (cfg.name, kbh_timing.side_stream_figures(cfg.timing)))
    return None


def _describe(base, req, task, configs, device):
    mods, why = kbh_timing.load_bench()
    entries = []
    for cfg in configs:
        e = kbh_evidence.config_entry(cfg, {}, *_tol(req, cfg))
        if mods is not None:
            with task.activate(cfg):
                case = task.make_case(cfg, kbh_prepare.PROBE_SEED, "own", "default", device)
                with torch.no_grad():
                    flops, nbytes = mods[1].count(case.model, case.model_inputs)
            e.update({"flops": int(flops), "bytes": int(nbytes)})
        entries.append(e)
    body = dict(base, verdict="described", reasons=[], configs=entries, summary=None)
    from kernelbot_harness.analysis import analyze as kbh_analyze  # operator analysis for the templates (bot/templates/README.md)
    body["analysis"] = kbh_analyze.analyze(task, configs[0], device) if configs else None
    if why:
        body["timing_note"] = why
    return body
