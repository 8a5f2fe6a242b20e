"""The correctness run: every config, several seeds, each trial ordered
candidate, reference, candidate, with the anti-loophole checks.

A config stops at its first failing trial (fast), but each distinct check
that failed anywhere becomes a reason. `shape` is a diagnosis over all
configs, added after the run.
"""
import os

import torch

from kernelbot_harness.checks import compare as kbh_checks
from kernelbot_harness import inputs as kbh_inputs
from kernelbot_harness.checks import memory as kbh_memory
from kernelbot_harness import reference as kbh_reference
from kernelbot_harness.checks.calls import DeviceFault, early_write_message, stream_fix
from kernelbot_harness.task import TaskError, error_text

CHECKS = ("kernel_error", "correctness", "nan_mismatch", "unwritten_output",
          "out_of_bounds", "input_mutation", "cached_result", "precision",
          "stream", "nondeterminism", "torch_fallback", "no_custom_work")
# failures that a kernel tuned to one shape shows on others
SHAPE_CHECKS = {"kernel_error", "correctness", "nan_mismatch",
                "unwritten_output", "out_of_bounds", "precision"}


class Reasons:
    """Distinct reasons, first occurrence kept, later ones counted."""

    def __init__(self):
        self.items, self.by = [], {}

    def add(self, check, config, seed, message):
        if check in self.by:
            self.by[check]["count"] += 1
            return
        r = {"check": check, "config": config, "seed": seed,
             "message": message, "count": 1}
        self.by[check] = r
        self.items.append(r)


def _dtype_name(dtype):
    return str(dtype).replace("torch.", "")


class _Ref64:
    """The reference of one trial in float64 (floating arguments and
    gradients cast), computed once, on first need: what the error bound
    measures both the candidate and the reference's own dtype against.
    None when the operator does not run in float64 (a fixed-dtype
    constant inside it, an op without a float64 kernel)."""

    def __init__(self, verifier, case, pristine, n):
        self.v, self.case, self.pristine, self.n = verifier, case, pristine, n
        self.done, self.outs = False, None

    def outputs(self):
        if not self.done:
            self.done = True
            args = [a.double() if torch.is_tensor(a) and a.is_floating_point() else a
                    for a in self.pristine]
            try:
                outs = self.v._reference(self.case, args, self.n)
            except Exception:  # noqa: BLE001 (operator code: anything)
                outs = None
            if outs is not None and all(torch.is_tensor(o) and (
                    o.dtype == torch.float64 or not o.is_floating_point()) for o in outs):
                self.outs = outs
        return self.outs


class Verifier:
    def __init__(self, req, task, caller, device, channel):
        """caller: the kernel's calls (kbh_remote.RemoteCaller: the kernel
        runs in another process; kbh_calls.Caller has the same interface)."""
        self.req, self.task, self.device, self.chan = req, task, device, channel
        self.backward = req["pass"] == "backward"
        self.caller = caller
        self.reasons = Reasons()
        self.caller.reasons = self.reasons
        self._ref64 = None   # the trial's float64 reference (_Ref64)
        self._custom_checked = False
        self.custom_work = None  # the custom-work proof's figures (evidence)
        # guard bytes the kernel cannot predict (a fresh draw per evaluation)
        self.pattern = kbh_memory.guard_pattern(int.from_bytes(os.urandom(8), "little"))

    def tolerance(self, dtype, dist, in_dtype):
        """(atol, rtol) for an output dtype; atol scales with the input
        magnitude of the trial's distribution (large inputs, large sums)."""
        t = self.req["tolerances"].get(_dtype_name(dtype)) or \
            self.req["tolerances"]["float32"]
        return t["atol"] * kbh_inputs.scale(dist, in_dtype), t["rtol"]

    def run(self, configs):
        for cfg in configs:
            cfg.trials, cfg.max_abs, cfg.max_rel = 0, 0.0, 0.0
            cfg.failed, cfg.notes, cfg.refused = set(), [], set()
            cfg.error_bound = None
            self.chan.progress("config", cfg.index)
            self.caller.allocate(cfg.out_specs, self.pattern)
            with self.task.activate(cfg):
                self._run_config(cfg)
        self._shape_diagnosis(configs)
        return self.reasons.items

    def _run_config(self, cfg):
        prev = None
        for s in range(self.req["seeds"]):
            try:
                fails, prev = self._trial(cfg, s, prev)
            except DeviceFault as e:
                e.where = (cfg.index, s, cfg.name)
                raise
            cfg.trials += 1
            for check, msg in fails:
                cfg.failed.add(check)
                self.reasons.add(check, cfg.index, s, "config '%s': %s" % (cfg.name, msg))
            if fails:
                return

    def _trial(self, cfg, s, prev):
        """One trial; a distribution the operator refuses (its reference
        raises, e.g. a Cholesky of a non-SPD draw) falls back to the file's own."""
        dist = kbh_inputs.distribution(s)
        if dist in cfg.refused:
            dist = "own"
        try:
            return self._trial_with(cfg, s, prev, dist)
        except _RefusedInputs as e:
            if dist == "own":
                raise TaskError("reference failed on config '%s' seed %d: %s"
                                % (cfg.name, s, e))
            cfg.refused.add(dist)
            cfg.notes.append("inputs '%s' refused by the reference (%s); "
                             "the file's own used instead" % (dist, e))
            return self._trial_with(cfg, s, prev, "own")

    def _trial_with(self, cfg, s, prev, dist):
        self.chan.progress("trial", cfg.index, s)  # the bot names where a crash hit
        seed = kbh_inputs.trial_seed(cfg.index, s)
        init = kbh_inputs.init_setting(cfg.index, s)
        try:
            case = self.task.make_case(cfg, seed, dist, init, self.device)
        except Exception as e:  # operator code raising on these inputs
            raise _RefusedInputs(error_text(e))
        grads = kbh_reference.grad_outputs(cfg.fwd_specs, seed, self.device) \
            if self.backward else []
        names = case.names + ["grad_output%d" % i for i in range(len(grads))]
        pristine = kbh_reference.clone_args(case.args + grads)
        fails = []
        # the first call of a config's first trial runs behind a hold of the
        # given stream (kbh_calls.Gate): work on another stream shows there
        strict = self.req.get("stream_mode", "strict") == "strict"
        gated = s == 0 and self.device.type == "cuda" and strict
        r1 = self.caller.call(case, case.args, grads, check_stream=(s == 0 and strict),
                              gate=gated)
        self._after_call(r1, case.args + grads, pristine, names, fails)
        self._gate_note(cfg, r1)
        if r1.error:
            return fails, prev
        try:
            expected = self._reference(case, pristine, len(case.args))
        except Exception as e:  # operator code raising on these inputs
            if self.device.type == "cuda" and "CUDA error" in str(e):
                raise DeviceFault("device error in the reference after the kernel "
                                  "call: %s" % str(e)[:500])
            raise _RefusedInputs(error_text(e))
        kbh_memory.poison_free_memory(self.device)
        r2 = self.caller.call(case, case.args, grads,
                              check_stream=self.device.type == "cuda" and strict)
        self._after_call(r2, case.args + grads, pristine, names, fails)
        if r2.error:
            return fails, prev
        in_dtype = next((a.dtype for a in case.args
                         if torch.is_tensor(a) and a.is_floating_point()), torch.float32)
        tols = [self.tolerance(e.dtype, dist, in_dtype) for e in expected]
        f1, f2 = [], []
        self._ref64 = _Ref64(self, case, pristine, len(case.args))
        self._compare(cfg, r1, expected, tols, f1)
        self._compare(cfg, r2, expected, tols, f2)
        stream = any(c == "stream" for c, _ in fails)
        if r1.gate is not None and f1 and not f2 and not stream and \
                self._late_inputs(case, grads, pristine, expected, tols):
            fails.append(("stream", self._late_inputs_message(r1)))
            stream = True
        if stream and r1.gate is not None:
            # the hold showed the cause: what it did to r1 is no separate reason
            fails.extend(f2)
            return _dedupe(fails), (expected, r2.outs)
        fails.extend(f1 + f2)
        self._repeat_checks(r1, r2, expected, prev, tols, fails)
        if not fails:
            self._custom_work(cfg, s, dist, case, grads, r2, expected, tols, fails)
        return _dedupe(fails), (expected, r2.outs)

    def _custom_work(self, cfg, s, dist, case, grads, r, expected, tols, fails):
        """Once per evaluation, on its first correct trial: the candidate's
        own code must do part of the work (mixed kernels: torch, cuBLAS or
        cuDNN may do the rest). With its custom CUDA kernels switched off
        (or, without any, the outputs of its extension calls poisoned), the
        result must no longer be correct. The proof runs on fresh inputs
        (another seed): an output buffer that still holds an earlier call's
        result cannot be right for them. A noop "still correct" is trusted
        only where the poison method agrees (ModelNew); where it cannot be
        asked (a torch extension's whole forward) or disagrees, it is a
        note, never a rejection (PROTOCOL.md "Custom work")."""
        if self._custom_checked or self.caller.kernel.abi == "native":
            return
        self._custom_checked = True
        c = getattr(self.caller, "custom", None) or {}
        modelnew = self.caller.kernel.abi == "modelnew"
        base = {"method": c.get("method"), "kernels": c.get("kernels", 0),
                "ext_calls": r.ext_calls}
        if modelnew and (not c.get("modules") or r.ext_calls == 0):
            self.custom_work = dict(base, does_work=False)
            fails.append(("torch_fallback", (
                "ModelNew builds no extension (no load_inline or load)" if not c.get("modules")
                else "ModelNew's forward called none of its extension's functions")
                + ": a candidate of torch calls only is a torch fallback"))
            return
        if not c.get("method"):
            return
        case, grads, expected, tols = self._fresh(cfg, s, dist, case, grads, expected, tols)
        still = self._still_correct(case, grads, expected, tols, c["method"])
        if still is None:
            self.custom_work = dict(base, does_work=None,
                                    note="the no-op switch did not take; no proof")
            return
        how = ("with its %d custom CUDA kernel(s) switched off (every launch a no-op)"
               % c.get("kernels", 0) if c["method"] == "noop" else
               "with the outputs of its extension calls poisoned (NaN)")
        if still and c["method"] == "noop":
            poison = self._still_correct(case, grads, expected, tols, "poison") \
                if modelnew else None
            if not poison:
                self.custom_work = dict(base, does_work=None, note=(
                    "the result stayed correct with the CUDA kernels switched off, but %s; "
                    "no proof either way" % (
                        "poisoning the extension calls' outputs broke it" if modelnew else
                        "a torch extension's forward cannot be poisoned apart")))
                return
            how += ", and with its extension calls' outputs poisoned"
        self.custom_work = dict(base, does_work=not still)
        if still:
            fails.append(("no_custom_work", "custom code does no work: %s the result is "
                          "still correct, so torch or a library computed all of it" % how))

    def _fresh(self, cfg, s, dist, case, grads, expected, tols):
        """Another trial's inputs and reference for the proof; the trial's
        own when the operator refuses them."""
        seed = kbh_inputs.trial_seed(cfg.index, s) + 7919
        try:
            case2 = self.task.make_case(cfg, seed, dist, kbh_inputs.init_setting(cfg.index, s),
                                        self.device)
            grads2 = kbh_reference.grad_outputs(cfg.fwd_specs, seed, self.device) \
                if self.backward else []
            pristine = kbh_reference.clone_args(case2.args + grads2)
            expected2 = self._reference(case2, pristine, len(case2.args))
        except Exception:  # noqa: BLE001 (operator code refusing these inputs)
            return case, grads, expected, tols
        return case2, grads2, expected2, tols

    def _still_correct(self, case, grads, expected, tols, method):
        """Whether the call with the custom code off (method: "noop" as the
        runner can, or "poison") is still correct; None when the switch did
        not take."""
        off = self.caller.call(case, case.args, grads, check_stream=False,
                               noop="poison" if method == "poison" else True)
        if off.noop_ok is False:
            return None
        return self._outputs_ok(off, expected, tols)

    def _outputs_ok(self, r, expected, tols):
        if r.error or len(r.outs) != len(expected):
            return False
        for c, e, (atol, rtol) in zip(r.outs, expected, tols):
            if c.shape != e.shape or c.dtype != e.dtype or \
                    not kbh_checks.compare(c, e, atol, rtol, pattern=False).ok:
                return False
        return True

    def _late_inputs(self, case, grads, pristine, expected, tols):
        """The gated call was wrong and the plain one right: wrong again
        behind a hold, and right again without one? Then the kernel reads
        its inputs before the given stream has written them (work not
        ordered on that stream), not a kernel that is wrong now and then."""
        args = case.args + grads

        def restore():
            for a, p in zip(args, pristine):
                if torch.is_tensor(a) and not kbh_memory.same_bits(a, p):
                    a.copy_(p)

        held = self.caller.call(case, case.args, grads, check_stream=True, gate=True)
        restore()
        plain = self.caller.call(case, case.args, grads, check_stream=True)
        restore()
        return not held.error and not self._outputs_ok(held, expected, tols) and \
            self._outputs_ok(plain, expected, tols)

    def _late_inputs_message(self, r):
        return ("results wrong only when the stream handed in delivers the inputs late: "
                "behind a %g ms hold of that stream (float inputs NaN until the hold "
                "ends, then written on it) the outputs were wrong twice, without the "
                "hold right twice, so the kernel read its inputs before the given "
                "stream's earlier work had finished: %s"
                % (r.gate["hold_ms"], stream_fix(self.caller.kernel.abi)))

    def _gate_note(self, cfg, r):
        """A hold that never settled the question is said in the config's notes."""
        g = r.gate
        if g is None or g["conclusive"] or r.error:
            return
        why = ("the call returned only after the hold ended (it waits for the stream "
               "or the device)" if g["open_at_return"] else
               "the outputs could not be read while the stream was held back")
        note = ("stream hold inconclusive up to %g ms: %s; the snapshot and timing "
                "checks still apply" % (g["hold_ms"], why))
        if note not in cfg.notes:
            cfg.notes.append(note)

    def _reference(self, case, pristine, n):
        if self.backward:
            return kbh_reference.backward(case, pristine[:n], pristine[n:])
        return kbh_reference.forward(case, pristine[:n])

    def _after_call(self, r, args, pristine, names, fails):
        if r.error:
            fails.append(("kernel_error", r.error))
        # the runner's copies of the inputs; ours never reach the kernel
        changed = [names[i] for i in r.changed if i < len(names)]
        if changed:
            fails.append(("input_mutation", "inputs changed by the call: "
                          + ", ".join(changed)))
        if r.guards_ok is False:
            fails.append(("out_of_bounds", "guard bands around the outputs "
                          "changed: a write outside the outputs"))
        if r.gate is not None and r.gate["early_write"] is not None:
            fails.append(("stream", "%s: %s" % (early_write_message(r.gate),
                                                 stream_fix(self.caller.kernel.abi))))
        if r.late:
            fails.append(("stream", "outputs changed after the call returned: work not "
                          "finished on the given stream when the call returned: %s"
                          % stream_fix(self.caller.kernel.abi)))

    def _compare(self, cfg, r, expected, tols, fails):
        what = "gradient" if self.backward else "output"
        if len(r.outs) != len(expected):
            fails.append(("correctness", "%d %ss, the reference has %d"
                          % (len(r.outs), what, len(expected))))
            return
        for i, (c, e, (atol, rtol)) in enumerate(zip(r.outs, expected, tols)):
            if c.shape != e.shape or c.dtype != e.dtype:
                fails.append(("correctness", "%s %d is %s %s, the reference's %s %s" % (
                    what, i, _dtype_name(c.dtype), list(c.shape),
                    _dtype_name(e.dtype), list(e.shape))))
                continue
            c = self._written_only(c, e, r, i, what, fails)
            d = kbh_checks.compare(c, e, atol, rtol)
            cfg.max_abs = max(cfg.max_abs, d.max_abs)
            cfg.max_rel = max(cfg.max_rel, d.max_rel)
            if d.nan_bad:
                fails.append(("nan_mismatch", kbh_checks.message(what, i, d, atol, rtol)))
            b = None
            if d.bad and not d.nan_bad:
                b = self._bound(cfg, c, e, i)
                if b is not None and b.ok:
                    continue   # beyond the fixed tolerances, within the error bound
            if d.bad:
                check = "precision" if kbh_checks.looks_like_precision(c, e, d) \
                    else "correctness"
                msg = kbh_checks.message(what, i, d, atol, rtol)
                if d.bad and not d.nan_bad and b is not None and b.floor > 0:
                    msg += "; " + kbh_checks.bound_message(what, i, b)
                fails.append((check, msg))

    def _bound(self, cfg, c, e, i):
        """The error-bound check of output i against the float64 reference
        (None when there is none: no factor, or the operator does not run
        in float64); its figures are kept on the config (the worst one)."""
        factor = float(self.req.get("error_factor") or 0.0)
        ref64 = self._ref64.outputs() if factor > 0 and self._ref64 else None
        if ref64 is None or i >= len(ref64):
            return None
        b = kbh_checks.bounded(c, e, ref64[i], factor)
        fig = dict(b.figures(), output=i)
        prev = getattr(cfg, "error_bound", None)
        if prev is None or (not fig["ok"], fig["worst_ratio"]) > \
                (not prev["ok"], prev["worst_ratio"]):
            cfg.error_bound = fig
        return b

    def _written_only(self, c, e, r, i, what, fails):
        """Report poisoned (never written) elements, then compare the rest:
        an unwritten element is one failure, not also a NaN mismatch."""
        if not r.poisoned:
            return c
        pv = kbh_memory.poison_value(c.dtype)
        mask = (kbh_memory.bits(c) == pv) & (kbh_memory.bits(e) != pv)
        n = int(mask.sum())
        if n == 0:
            return c
        fails.append(("unwritten_output", "%s %d: %d of %d elements never written"
                      % (what, i, n, c.numel())))
        return torch.where(mask.view(c.shape), e, c)

    def _repeat_checks(self, r1, r2, expected, prev, tols, fails):
        def same(xs, ys):
            return len(xs) == len(ys) and all(
                kbh_checks.equal_within(x, y, *t) for x, y, t in zip(xs, ys, tols))

        if not same(r1.outs, r2.outs):
            fails.append(("nondeterminism", "two calls on the same inputs gave "
                          "different results (beyond tolerance)"))
        if prev is None:
            return
        prev_ref, prev_out = prev
        if not same(expected, prev_ref) and not same(r1.outs, expected) and \
                (same(r1.outs, prev_out) or same(r1.outs, prev_ref)):
            fails.append(("cached_result", "output equals the previous trial's "
                          "although the inputs changed"))

    def _shape_diagnosis(self, configs):
        """`shape`: some config passed, and every config that failed an
        output check has input shapes unlike every passing config's."""
        sig = lambda c: tuple(tuple(m["shape"]) for m in c.inputs)
        passed = [c for c in configs if not c.failed]
        bad = [c for c in configs if c.failed & SHAPE_CHECKS]
        if not passed or not bad:
            return
        ok_sigs = {sig(c) for c in passed}
        if all(sig(c) not in ok_sigs for c in bad):
            self.reasons.add("shape", bad[0].index, None,
                             "correct on %s but wrong on other sizes: %s" % (
                                 ", ".join("'%s'" % c.name for c in passed[:4]),
                                 ", ".join("'%s'" % c.name for c in bad[:6])))

    def checks_map(self, cfg):
        """Per-config {check: pass|fail|skip}."""
        out = {}
        native = self.caller.kernel.abi == "native"
        for c in CHECKS:
            if c in cfg.failed:
                out[c] = "fail"
            elif (c == "stream" and self.req.get("stream_mode") == "kernelbench") or \
                    (c in ("torch_fallback", "no_custom_work") and
                  (native or not (self.custom_work or {}).get("method"))) or \
                    (c in ("unwritten_output", "out_of_bounds") and not native) or \
                    (c == "cached_result" and cfg.trials < 2) or \
                    (c == "precision" and all(d != torch.float32 for _, d in cfg.out_specs)):
                out[c] = "skip"
            else:
                out[c] = "pass"
        return out


class _RefusedInputs(Exception):
    """The operator's own code raised on a trial's inputs."""


def _dedupe(fails):
    seen, out = set(), []
    for check, msg in fails:
        if check not in seen:
            seen.add(check)
            out.append((check, msg))
    return out
