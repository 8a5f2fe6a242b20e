"""One candidate call, observed: outputs poisoned and guarded before, a
snapshot right after (no extra sync), then the settled result.

A snapshot that differs from the settled buffer means work went on after
the call returned (another stream, a thread): check `stream`. On cuda the
snapshot is a copy enqueued on the harness stream, so it is ordered after
the kernel's work only if that work was on the given stream.
"""
import time

import torch

import kbh_memory

CPU_SETTLE_S = 0.05  # a CPU kernel's stray thread has this long to show itself


class DeviceFault(Exception):
    """The device failed during a candidate call (an illegal address, a
    launch failure): the CUDA context is lost, the evaluation ends `crash`."""


def _guarded_sync(device, check_stream):
    try:
        _settle(device, check_stream)
    except RuntimeError as e:
        raise DeviceFault("device error after the kernel call: %s" % str(e)[:500])


class CallResult:
    def __init__(self):
        self.error = None       # kernel_error message
        self.outs = []          # settled outputs (copies)
        self.guards_ok = None   # None: not guarded (torch-ext)
        self.late = None        # None: stream not checked
        self.poisoned = False   # outputs were poisoned before the call


def _settle(device, check_stream):
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif check_stream:
        time.sleep(CPU_SETTLE_S)


def _late(snap, outs):
    return any(not kbh_memory.same_bits(a, b) for a, b in zip(snap, outs))


class Caller:
    """Calls one kernel (native or torch-ext) the same observed way."""

    def __init__(self, kernel, task, device, pass_):
        self.kernel, self.task = kernel, task
        self.device, self.pass_ = device, pass_
        self.guarded = []
        self.retired = []

    def allocate(self, out_specs, pattern):
        """Guarded outputs for a config (native ABI only). Old buffers are
        kept on the CPU backend: a stray kernel thread may still write."""
        if self.device.type == "cuda":
            _guarded_sync(self.device, False)
        else:
            self.retired.extend(self.guarded)
        self.guarded = []
        if self.kernel.abi == "native":
            self.guarded = [kbh_memory.Guarded(s, d, self.device, pattern)
                            for s, d in out_specs]

    def call(self, case, kargs, grad_outs, check_stream):
        if self.kernel.abi == "native":
            return self._native(kargs + grad_outs, check_stream)
        return self._ext(case, kargs, grad_outs, check_stream)

    def _native(self, args, check_stream):
        res = CallResult()
        outs = [g.out for g in self.guarded]
        fn = self.kernel.bind(args, outs)
        for g in self.guarded:
            g.arm()
        _guarded_sync(self.device, False)
        rc = fn()
        snap = [o.clone() for o in outs]
        _guarded_sync(self.device, check_stream)
        if rc != 0:
            res.error = "kernel returned %d" % rc
            return res
        res.poisoned = True
        res.late = _late(snap, outs) if check_stream or self.device.type == "cuda" else None
        res.guards_ok = all(g.guards_intact() for g in self.guarded)
        res.outs = [o.clone() for o in outs]
        return res

    def _ext(self, case, kargs, grad_outs, check_stream):
        res = CallResult()
        try:
            if self.pass_ == "backward":
                outs = self.kernel.backward(self.task, case, kargs, grad_outs)
            else:
                outs = self.kernel.forward(kargs)
            snap = [o.clone() for o in outs]
        except Exception as e:  # any exception from kernel code is its failure
            if self.device.type == "cuda" and "CUDA" in str(e):
                raise DeviceFault("device error in the kernel call: %s" % str(e)[:500])
            res.error = "kernel raised %s: %s" % (type(e).__name__, str(e)[:500])
            return res
        _guarded_sync(self.device, check_stream)
        res.late = _late(snap, outs) if check_stream or self.device.type == "cuda" else None
        res.outs = [o.detach().clone() for o in outs]
        return res
