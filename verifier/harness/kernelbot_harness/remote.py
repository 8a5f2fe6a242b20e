"""The judge's side of the runner (PROTOCOL.md "Judge and runner").

The judge (this process) loads the operator, makes the inputs, runs the
reference, compares, decides and times the baselines; it never maps
candidate code. The kernel runs in a runner process forked for this
evaluation by the zygote (kb_runner.py), which is either given to us by
the bot in a sandbox of its own (KB_RUNNER_FD, a socket) or, when the
harness is run by hand or by tests, started here as our child.

RemoteCaller has kbh_calls.Caller's interface, so the verifier's checks
do not know where the kernel runs. Outputs come back as copies in our
memory. What the runner reports about its own process (guard bands,
stream observations, which inputs it changed, its timing) is the
candidate's word; the judge cross-checks the timing against the wall
clock it sees (time_kernel) and treats a dead or babbling runner as the
candidate's crash.
"""
import signal
import socket
import sys
import time

import torch

from kernelbot_harness import budget as kbh_budget
from kernelbot_harness import wire as kbh_wire
from kernelbot_harness.abi import KernelLoadError
from kernelbot_harness.zygote import RunnerError, zygote  # noqa: F401  (RunnerError: for kbh_run)
from kernelbot_harness.checks.calls import CallResult, DeviceFault

# cross-check of the runner's timing (PROTOCOL.md): its wall time may
# exceed what its figures explain by this factor, plus FIXED_MS
WALL_FACTOR = 2.0
FIXED_MS = 250.0



def _died(what, end):
    sig = end.get("signal")
    if isinstance(sig, int):
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = "signal %d" % sig
        why = "%s, signal %d" % (name, sig)
    else:
        why = "exit status %s" % end.get("status")
    return DeviceFault("the kernel's process died %s (%s)" % (what, why))


class RemoteKernel:
    def __init__(self, abi):
        self.abi = abi


class RemoteCaller:
    """kbh_calls.Caller's interface over a runner."""

    def __init__(self, req, task, device):
        self.task, self.device, self.pass_ = task, device, req["pass"]
        self.reasons = None
        self.guarded = []
        self._sent = None
        self.zyg = zygote()
        self.pid, self.sock = self.zyg.fork()
        self.ended = None
        self.custom = self.custom_share = None
        k = req["kernel"]
        self.kernelbench = req.get("stream_mode") == "kernelbench"
        h, _ = self._ask({"op": "load", "kernel": k, "pass": req["pass"],
                       "backend": device.type, "operator": req["operator"],
                       "stream_mode": req.get("stream_mode", "strict")},
                      what="while loading the kernel")
        if "load_error" in h:
            self.close()
            raise KernelLoadError(str(h["load_error"]))
        if h.get("abi") not in ("native", "torch-ext", "modelnew"):
            self.close()
            raise KernelLoadError("the kernel's process answered no ABI")
        self.kernel = RemoteKernel(h["abi"])
        c = h.get("custom")
        # how the runner can switch its custom code off (the candidate's word)
        self.custom = c if isinstance(c, dict) and c.get("method") in ("noop", "poison", None) \
            else None
        self.isolation = self.zyg.isolation

    def _end(self):
        if self.ended is None:
            try:
                self.sock.close()
            except OSError:
                pass
            try:
                self.ended = self.zyg.reap(self.pid)
            except RunnerError:
                self.ended = {"status": None, "signal": None}
            tail = self.ended.get("output_tail")
            if isinstance(tail, str) and tail:
                # the kernel's output: the operator's log only (PROTOCOL.md)
                sys.stderr.write("--- kernel process output (last %d bytes) ---\n%s\n"
                                 % (len(tail), tail))
        return self.ended

    def _ask(self, header, tensors=(), what="during the kernel call"):
        # every wait on the kernel's process ends with the candidate's
        # budget (kbh_budget): past it the runner is killed, reason `timeout`
        budget = kbh_budget.current()
        left = budget.left()
        if left is not None and left <= 0:
            self._end()
            raise kbh_budget.Exceeded(budget, what)
        try:
            self.sock.settimeout(left)
            kbh_wire.send(self.sock, header, tensors)
            h, ts = kbh_wire.recv(self.sock)
        except socket.timeout:
            self._end()
            raise kbh_budget.Exceeded(budget, what)
        except (OSError, kbh_wire.WireError):
            raise _died(what, self._end())
        if "fault" in h:
            self._end()
            raise DeviceFault(str(h["fault"])[:800])
        if "protocol_error" in h:
            self._end()
            raise DeviceFault("the kernel's process broke the protocol: %s"
                              % str(h["protocol_error"])[:300])
        return h, ts

    def close(self):
        if self.ended is None:
            try:
                kbh_wire.send(self.sock, {"op": "bye"})
            except OSError:
                pass
        self._end()

    def allocate(self, out_specs, pattern):
        self._ask({"op": "allocate", "out_specs": _specs(out_specs)}, [pattern.cpu()])

    def _model(self, case, header):
        """A ModelNew runner builds its model per config and seed."""
        if self.kernel.abi == "modelnew":
            header["model"] = getattr(case, "model_init", None)
        return header

    def call(self, case, kargs, grad_outs, check_stream, gate=False, noop=False):
        """noop: the runner switches its custom code off for this call (the
        proof that it does work): True as it can, "poison" by poisoning
        what its extension calls return."""
        tensors = []
        header = self._model(case, {
            "op": "call", "check_stream": bool(check_stream), "gate": bool(gate),
            "noop": "poison" if noop == "poison" else bool(noop), "has_model": getattr(case, "model", None) is not None})
        sent = list(kargs) + [None] + list(grad_outs)
        if self._sent is not None and len(sent) == len(self._sent) and \
                all(a is b for a, b in zip(sent, self._sent)):
            # the same argument objects as the last call (a trial calls two
            # to four times; the judge never writes them): the runner calls
            # on fresh copies of what it kept instead of a second transfer
            header["same_args"] = True
        else:
            header["args"] = kbh_wire.encode_values(list(kargs), tensors)
            header["grads"] = kbh_wire.encode_values(list(grad_outs), tensors)
            self._sent = sent  # held: their ids cannot be reused meanwhile
        h, ts = self._ask(header, tensors)
        res = CallResult()
        try:
            res.error = _opt_str(h.get("error"))
            res.guards_ok = _opt_bool(h.get("guards_ok"))
            res.late = _opt_bool(h.get("late"))
            res.poisoned = bool(h.get("poisoned"))
            res.gate = _gate(h.get("gate"))
            res.outs = [o for o in kbh_wire.decode_values(h.get("outs") or [], ts, self.device)]
            if not all(torch.is_tensor(o) for o in res.outs):
                raise kbh_wire.WireError("an output that is not a tensor")
            changed = h.get("changed") or []
            res.ext_calls = h.get("ext_calls") if isinstance(h.get("ext_calls"), int) else None
            res.noop_ok = h.get("noop_ok") if isinstance(h.get("noop_ok"), bool) else None
        except (kbh_wire.WireError, TypeError, ValueError, KeyError) as e:
            self._end()
            raise DeviceFault("the kernel's process sent a malformed answer: %s" % e)
        n = len(kargs) + len(grad_outs)
        for i in changed:
            if isinstance(i, int) and 0 <= i < n:
                res.changed.append(i)
        return res

    def time_kernel(self, case, args, grads, out_specs, timing):
        """The runner's timing stats for the kernel and the judge's wall
        clock around it: (stats, wall_ms)."""
        tensors = []
        header = self._model(case, {
            "op": "time", "args": kbh_wire.encode_values(list(args), tensors),
            "grads": kbh_wire.encode_values(list(grads), tensors),
            "out_specs": _specs(out_specs), "timing": timing,
            "has_model": getattr(case, "model", None) is not None})
        h, _ = self._ask(header, tensors, what="while preparing its timing")
        if "timing_error" in h:
            return None, None, str(h["timing_error"])
        t0 = time.perf_counter()
        h, _ = self._ask({"op": "go"}, what="while being timed")
        wall_ms = (time.perf_counter() - t0) * 1e3
        stats = h.get("stats")
        if not isinstance(stats, dict):
            raise DeviceFault("the kernel's process sent no timing")
        share = h.get("custom_share")
        self.custom_share = float(share) if isinstance(share, (int, float)) and \
            0.0 <= share <= 1.0 else None
        return stats, wall_ms, None


def _specs(out_specs):
    return [{"shape": [int(d) for d in s], "dtype": kbh_wire.NAMES[d]} for s, d in out_specs]


def _opt_str(v):
    if v is None or isinstance(v, str):
        return v
    raise TypeError("not a string")


def _opt_bool(v):
    if v is None or isinstance(v, bool):
        return v
    raise TypeError("not a boolean")


def _gate(g):
    if g is None:
        return None
    if not isinstance(g, dict):
        raise TypeError("gate is not an object")
    ew = g.get("early_write")
    if ew is not None and not (isinstance(ew, dict) and all(
            isinstance(ew.get(k), int) for k in ("output", "written", "numel"))):
        raise TypeError("malformed early_write")
    return {"hold_ms": float(g.get("hold_ms") or 0.0), "conclusive": bool(g.get("conclusive")),
            "open_at_return": _opt_bool(g.get("open_at_return")), "early_write": ew}


def _num(v):
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _samples_disagree(stats, reps, total, med):
    """Why the runner's per-call samples contradict its own summary, or
    None: the judge merges turns from the samples (timing.measure.merge),
    so they must be the figures the wall check judged. Every per-call
    time lies between the smallest and largest sample, so the total lies
    between reps x min and reps x max."""
    from kernelbot_harness.timing.measure import valid_samples, stats as summary
    if not valid_samples(stats):
        return "malformed timing samples"
    vals = stats["sample_ms"]
    if not vals:
        return None if reps == 0 else "timing figures without samples"
    tol = 1e-6 * max(1.0, total)
    if abs(summary(vals)["median_ms"] - med) > 1e-6 * max(1.0, med) or \
            total < reps * min(vals) - tol or total > reps * max(vals) + tol:
        return "the timing samples do not give the reported figures"
    return None


def crosscheck(stats, wall_ms, own_overhead_ms, warmup):
    """The judge's check of the runner's timing (PROTOCOL.md): the wall
    time the judge saw must be explained by the figures the runner gave.
    A runner that did the work but reports it faster (a patched clock,
    forged samples) took more wall time than its figures allow. Returns
    (ok, figures)."""
    reps = stats.get("reps")
    total, med = _num(stats.get("total_ms")), _num(stats.get("median_ms"))
    if not isinstance(reps, int) or isinstance(reps, bool) or reps < 0 or \
            total is None or med is None or total < 0 or med < 0:
        return False, {"wall_ms": wall_ms, "why": "malformed timing figures"}
    why = _samples_disagree(stats, reps, total, med)
    if why:
        return False, {"wall_ms": wall_ms, "why": why}
    calls = reps + max(0, int(warmup))
    bound = WALL_FACTOR * (total + warmup * med + calls * own_overhead_ms) + FIXED_MS
    figures = {"wall_ms": round(wall_ms, 3), "bound_ms": round(bound, 3),
               "reps": reps, "overhead_ms": round(own_overhead_ms, 4)}
    return wall_ms <= bound, figures
