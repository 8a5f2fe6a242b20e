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


class Runner:
    def __init__(self, sock, workdir):
        self.sock, self.workdir = sock, workdir
        self.kernel = self.caller = self.task = None
        self.device = torch.device("cpu")
        self.pass_ = "forward"
        self.kept = None  # (args, grads) of the last call that sent them

    def reply(self, header, tensors=()):
        kbh_wire.send(self.sock, header, tensors)

    def load(self, h):
        from kernelbot_harness import cache as kbh_cache
        from kernelbot_harness.abi import KernelLoadError, NativeKernel
        from kernelbot_harness.checks.calls import Caller
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
            else:
                from kernelbot_harness.ext import ExtKernel
                if self.pass_ == "backward" and h.get("operator"):
                    # a robust-kbench task's AutogradFunction hosts the kernel
                    self.task = kbh_cache.load_task(h["operator"], self.pass_)
                self.kernel = ExtKernel(k["source"], k["name"], self.workdir, self.pass_)
        except KernelLoadError as e:
            return self.reply({"load_error": str(e)})
        self.caller = Caller(self.kernel, self.task, self.device, self.pass_)
        self.reply({"abi": self.kernel.abi})

    def _specs(self, h):
        return [(tuple(s["shape"]), kbh_wire.DTYPES[s["dtype"]]) for s in h["out_specs"]]

    def allocate(self, h, ts):
        self.caller.allocate(self._specs(h), ts[0] if ts else torch.zeros(4096, dtype=torch.uint8))
        self.reply({})

    def _values(self, h, ts, key):
        return kbh_wire.decode_values(h.get(key) or [], ts, self.device)

    def call(self, h, ts):
        if h.get("same_args"):
            if self.kept is None:
                raise kbh_wire.WireError("no arguments kept to call on")
        else:
            self.kept = (self._values(h, ts, "args"), self._values(h, ts, "grads"))
        # fresh copies per call: what a call does to its inputs stays with it
        args, grads = [[a.clone() if torch.is_tensor(a) else a for a in vs] for vs in self.kept]
        every = args + grads
        pristine = self.kept[0] + self.kept[1]  # never handed to a call
        res = self.caller.call(_Case(h.get("has_model")), args, grads,
                               bool(h.get("check_stream")), gate=bool(h.get("gate")))
        from kernelbot_harness.checks import memory as kbh_memory
        changed = [i for i, (a, p) in enumerate(zip(every, pristine))
                   if torch.is_tensor(a) and not kbh_memory.same_bits(a, p)]
        out = []
        body = {"error": res.error, "guards_ok": res.guards_ok, "late": res.late,
                "poisoned": res.poisoned, "gate": res.gate, "changed": changed,
                "outs": kbh_wire.encode_values(list(res.outs), out)}
        self.reply(body, out)

    def time(self, h, ts):
        from kernelbot_harness.timing import evaluation as kbh_timing
        mods, why = kbh_timing.load_bench()
        if mods is None:
            return self.reply({"timing_error": why})
        args, grads = self._values(h, ts, "args"), self._values(h, ts, "grads")
        backward = self.pass_ == "backward"
        if self.kernel.abi == "native":
            self.caller.allocate(self._specs(h), torch.zeros(4096, dtype=torch.uint8))
            k = self.kernel.bind(args + grads, [g.out for g in self.caller.guarded])
        elif backward:
            case = _Case(h.get("has_model"))
            k = lambda: self.kernel.backward(self.task, case, args, grads)
        else:
            k = lambda: self.kernel.forward(args)
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
                                  method=t.get("method", "events"))
        self.reply({"stats": res.get("kernel")})

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


def _stream(device_type):
    """The runner's calls and timing on a non-default stream, as in the
    judge (kbh_run._stream): the legacy default stream would synchronise
    with a kernel's side streams and hide them."""
    if device_type == "cuda" and torch.cuda.is_available():
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
    with _stream(first.get("backend")):
        r.load(first)
        return r.serve()
