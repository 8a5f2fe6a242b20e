"""The runner: the one process that maps candidate code (PROTOCOL.md
"Judge and runner"). It loads the kernel, makes the observed calls the
judge asks for on the tensors the judge sends, and times the kernel; it
decides nothing. Everything it answers is checked or cross-checked by the
judge, which never loads the kernel itself.

One runner serves one evaluation, then the zygote (kb_runner.py) kills it
and everything it started.

Requests (kbh_wire messages, "op"):
  load      {"kernel", "pass", "backend", "operator"?}  -> {"abi"} | {"load_error"}
  allocate  {"out_specs", pattern tensor}              -> {}
  call      {"args", "grads", "check_stream", "gate", "has_model"}
            -> {"error", "guards_ok", "late", "poisoned", "gate",
                "changed": [argument indices], "outs"} + output tensors
  time      {"args", "grads", "out_specs", "timing", "has_model"} -> {"ready"},
            then "go" -> {"stats"}  (the judge clocks from "go" to the answer)
  bye       -> exit
A device error answers {"fault": message} and the runner exits.
"""
import contextlib
import os

import torch

from kernelbot_harness import wire as kbh_wire

FAULT_EXIT = 3


class _Case:
    """What a torch-ext backward needs of the judge's case: only whether
    the operator has a model (robust-kbench autograd tasks)."""

    def __init__(self, has_model):
        self.model = object() if has_model else None


def _refill(buf, value):
    """value in buf when it has value's shape, dtype, layout and device,
    else in a new copy."""
    if not torch.is_tensor(value):
        return value
    if torch.is_tensor(buf) and buf.shape == value.shape and buf.dtype == value.dtype and \
            buf.stride() == value.stride() and buf.device == value.device and \
            not buf.requires_grad:
        with torch.no_grad():
            buf.copy_(value)
        return buf
    return value.clone()


class Runner:
    def __init__(self, sock, workdir):
        self.sock, self.workdir = sock, workdir
        self.kernel = self.caller = self.task = None
        self.device = torch.device("cpu")
        self.pass_ = "forward"
        self.kept = None  # (args, grads) of the last call that sent them
        self.bufs = []    # the native calls' input buffers (_inputs)

    def reply(self, header, tensors=()):
        kbh_wire.send(self.sock, header, tensors)

    def load(self, h):
        from kernelbot_harness import cache as kbh_cache
        from kernelbot_harness.abi import KernelLoadError, NativeKernel
        from kernelbot_harness.checks.calls import Caller
        from kernelbot_harness.task import TaskError
        self.pass_ = h.get("pass") or "forward"
        if h.get("backend") == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
            self.device = torch.device("cuda", torch.cuda.current_device())
        k = h.get("kernel") or {}
        try:
            if k.get("abi") == "native":
                kbh_cache.enabled = True  # a private copy: one fresh instance
                lib = kbh_cache.private_library(k["library"], self.workdir)
                self.kernel = NativeKernel(lib, self.pass_)
            elif k.get("abi") == "modelnew":
                from kernelbot_harness.modelnew import ModelNewKernel
                self.task = kbh_cache.load_task(h["operator"], "forward") \
                    if h.get("operator") else None
                self.kernel = ModelNewKernel(k["source"], self.task, self.workdir,
                                             self.device, self.pass_)
            else:
                from kernelbot_harness.ext import ExtKernel
                if self.pass_ == "backward" and h.get("operator"):
                    # a robust-kbench task's AutogradFunction hosts the kernel
                    self.task = kbh_cache.load_task(h["operator"], self.pass_)
                self.kernel = ExtKernel(k["source"], k["name"], self.workdir, self.pass_)
        except KernelLoadError as e:
            return self.reply({"load_error": str(e)})
        except TaskError as e:  # the operator, imported here for ModelNew
            return self.reply({"load_error": str(e)})
        self.caller = Caller(self.kernel, self.task, self.device, self.pass_)
        # KernelBench's semantics: the device settles right after each call
        self.caller.device_sync = h.get("stream_mode") == "kernelbench"
        custom = self.kernel.custom() if hasattr(self.kernel, "custom") else None
        self.reply({"abi": self.kernel.abi, "custom": custom})

    def _specs(self, h):
        return [(tuple(s["shape"]), kbh_wire.DTYPES[s["dtype"]]) for s in h["out_specs"]]

    def allocate(self, h, ts):
        self.caller.allocate(self._specs(h), ts[0] if ts else torch.zeros(4096, dtype=torch.uint8))
        self.reply({})

    def _values(self, h, ts, key):
        return kbh_wire.decode_values(h.get(key) or [], ts, self.device)

    def _inputs(self):
        """The kept values as the call's (args, grads). A native kernel gets
        them in the same buffers call after call, fresh values at an
        unchanged address: one that caches its result by where its inputs
        are, not what they hold, returns a stale result and is caught
        (cached_result); a new buffer would let it compute afresh whenever
        the allocator moves the inputs. A torch-ext kernel gets new
        tensors (its Python code may keep autograd state on them)."""
        flat = self.kept[0] + self.kept[1]
        if self.kernel.abi != "native":
            bufs = [a.clone() if torch.is_tensor(a) else a for a in flat]
        else:
            old = self.bufs if len(self.bufs) == len(flat) else [None] * len(flat)
            bufs = [_refill(b, a) for b, a in zip(old, flat)]
            self.bufs = bufs
        n = len(self.kept[0])
        return bufs[:n], bufs[n:]

    def call(self, h, ts):
        if h.get("same_args"):
            if self.kept is None:
                raise kbh_wire.WireError("no arguments kept to call on")
        else:
            self.kept = (self._values(h, ts, "args"), self._values(h, ts, "grads"))
        # copies per call: what a call does to its inputs stays with it
        args, grads = self._inputs()
        every = args + grads
        pristine = self.kept[0] + self.kept[1]  # never handed to a call
        why = self._configure(h)
        if why:
            return self.reply({"error": why, "guards_ok": None, "late": None,
                               "poisoned": False, "gate": None, "changed": [], "outs": []})
        noop = bool(h.get("noop")) and hasattr(self.kernel, "set_noop")
        poison = h.get("noop") == "poison"
        noop_ok = None
        if poison:
            noop_ok = hasattr(self.kernel, "poisoning")
            if noop_ok:
                self.kernel.poisoning = True
        elif noop:
            noop_ok = self.kernel.set_noop(True)
        from kernelbot_harness.checks import memory as kbh_memory
        if noop:
            # outputs allocated in the call must not inherit an earlier result
            kbh_memory.poison_free_memory(self.device)
        self.kernel.calls = 0
        try:
            res = self.caller.call(_Case(h.get("has_model")), args, grads,
                                   bool(h.get("check_stream")), gate=bool(h.get("gate")))
        finally:
            if noop:
                self.kernel.set_noop(False)
            if poison and noop_ok:
                self.kernel.poisoning = False
        changed = [i for i, (a, p) in enumerate(zip(every, pristine))
                   if torch.is_tensor(a) and not kbh_memory.same_bits(a, p)]
        out = []
        body = {"error": res.error, "guards_ok": res.guards_ok, "late": res.late,
                "poisoned": res.poisoned, "gate": res.gate, "changed": changed,
                "outs": kbh_wire.encode_values(list(res.outs), out)}
        if noop:
            body["noop_ok"] = bool(noop_ok)
        if hasattr(self.kernel, "ext_call"):
            body["ext_calls"] = self.kernel.calls
        self.reply(body, out)

    def _configure(self, h):
        """A ModelNew call's model (config constants, seed, argument
        names); the error text when ModelNew cannot be built for it."""
        if "model" not in h or not hasattr(self.kernel, "configure"):
            return None
        from kernelbot_harness.modelnew import _CallError
        try:
            self.kernel.configure(h["model"])
        except _CallError as e:
            return "kernel raised %s" % e
        return None

    def _custom_share(self, mods, t, stats):
        """The share of the kernel's time its own code takes (the
        candidate's word, informational): with every custom CUDA kernel
        switched off the call takes t_off, so 1 - t_off / t; with only
        host-side extension calls, their time over the loop's."""
        if not hasattr(self.kernel, "custom") or not stats:
            return None
        c = self.kernel.custom()
        med = stats.get("median_ms")
        if not c["method"] or not isinstance(med, (int, float)) or med <= 0:
            return None
        if c["method"] == "poison":
            calls = max(1, getattr(self.kernel, "bound_calls", 0))
            return round(max(0.0, min(1.0, self.kernel.ext_s * 1e3 / calls / med)), 4)
        self.kernel.set_noop(True)
        try:
            off = mods[0].measure({"kernel": self._k}, device=self.device.type,
                                  warmup=2, min_time_ms=max(10, t.get("min_time_ms", 100) / 4),
                                  max_reps=max(10, t.get("max_reps", 1000) // 4),
                                  l2_flush=t.get("l2_flush", True),
                                  method=t.get("method", "events")).get("kernel") or {}
        finally:
            self.kernel.set_noop(False)
        m_off = off.get("median_ms")
        if not isinstance(m_off, (int, float)):
            return None
        return round(max(0.0, min(1.0, 1.0 - m_off / med)), 4)

    def time(self, h, ts):
        from kernelbot_harness.timing import evaluation as kbh_timing
        mods, why = kbh_timing.load_bench()
        if mods is None:
            return self.reply({"timing_error": why})
        args, grads = self._values(h, ts, "args"), self._values(h, ts, "grads")
        backward = self.pass_ == "backward"
        prepare = None
        if self.kernel.abi == "native":
            self.caller.allocate(self._specs(h), torch.zeros(4096, dtype=torch.uint8))
            guarded = list(self.caller.guarded)
            k = self.kernel.bind(args + grads, [g.out for g in guarded])
            # every timed call finds its outputs poisoned, as every checked
            # call does: one that returns early when they already hold the
            # answer computes here too (torch-ext kernels allocate theirs)
            prepare = lambda: [g.arm() for g in guarded]
        elif backward:
            case = _Case(h.get("has_model"))
            k = lambda: self.kernel.backward(self.task, case, args, grads)
        elif self.kernel.abi == "modelnew":
            why = self._configure(h)
            if why:
                return self.reply({"timing_error": why})
            k = self.kernel.bound(args)
        else:
            k = lambda: self.kernel.forward(args)
        self._k = k
        if hasattr(self.kernel, "ext_s"):
            self.kernel.ext_s = 0.0
        self.reply({"ready": True})
        go, _ = kbh_wire.recv(self.sock)
        if go.get("op") != "go":
            raise kbh_wire.WireError("expected 'go', got '%s'" % go.get("op"))
        t = h.get("timing") or {}
        with torch.no_grad() if not backward else torch.enable_grad():
            res = mods[0].measure({"kernel": k}, device=self.device.type,
                                  warmup=t.get("warmup", 5),
                                  min_time_ms=t.get("min_time_ms", 100),
                                  max_reps=t.get("max_reps", 1000),
                                  l2_flush=t.get("l2_flush", True),
                                  method=t.get("method", "events"),
                                  prepare={"kernel": prepare})
        stats = res.get("kernel")
        share = self._custom_share(mods, t, stats) if not backward else None
        self.reply({"stats": stats, "custom_share": share})

    def serve(self):
        from kernelbot_harness.checks.calls import DeviceFault
        handlers = {"load": lambda h, ts: self.load(h), "allocate": self.allocate,
                    "call": self.call, "time": self.time}
        while True:
            try:
                h, ts = kbh_wire.recv(self.sock)
            except kbh_wire.WireError:
                return 0
            op = h.get("op")
            if op == "bye":
                return 0
            if op not in handlers or (op != "load" and self.caller is None):
                self.reply({"protocol_error": "unexpected request '%s'" % op})
                return 2
            try:
                handlers[op](h, ts)
            except DeviceFault as e:
                self.reply({"fault": str(e)})
                return FAULT_EXIT


def _stream(device_type, mode="strict"):
    """The runner's calls and timing on a non-default stream, as in the
    judge (kbh_run._stream): the legacy default stream would synchronise
    with a kernel's side streams and hide them. KernelBench's mode: the
    legacy default stream."""
    if device_type == "cuda" and torch.cuda.is_available() and mode != "kernelbench":
        return torch.cuda.stream(torch.cuda.Stream())
    return contextlib.nullcontext()


def serve(sock, workdir):
    """Serve one evaluation on sock; returns the exit status."""
    os.chdir(workdir)
    os.environ["TMPDIR"] = workdir
    r = Runner(sock, workdir)
    first = None
    try:
        first, ts = kbh_wire.recv(sock)
    except kbh_wire.WireError:
        return 0
    if first.get("op") != "load":
        return 2
    with _stream(first.get("backend"), first.get("stream_mode") or "strict"):
        r.load(first)
        return r.serve()
