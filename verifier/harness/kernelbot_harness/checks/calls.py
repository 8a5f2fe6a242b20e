"""One candidate call, observed: outputs poisoned and guarded before, a
snapshot right after (no extra sync), then the settled result.

A snapshot that differs from the settled buffer means work went on after
the call returned (another stream, a thread): check `stream`. On cuda the
snapshot is a copy enqueued on the harness stream, so it is ordered after
the kernel's work only if that work was on the given stream.

That snapshot misses work that is merely fast: a few-microsecond kernel on
the legacy default stream is done before the copy reads. So on cuda a call
can also be made behind a hold (`gate=True`, PROTOCOL.md `stream`): the
given stream is held back by a spin of HOLD_MS before the call, and the
float inputs reach their buffers only after the hold, copied on that
stream (before it they hold NaN). Work ordered on the given stream cannot
start before the hold ends, so:
- outputs that change while the stream is still held back (a snapshot on
  a stream of the harness's own, taken half-way through the hold and
  finished before it ends) were written by work on another stream: proof,
  whatever the kernel's size;
- a result that is wrong only under the hold (right when the inputs are
  ready before the call) was computed from inputs read before the given
  stream had written them: work that does not wait on that stream. The
  verifier judges that against a call without hold (kbh_verify).
The harness stream is non-blocking (torch's pool), so the legacy default
stream does not order itself behind it: work a kernel puts there is
observable instead of silently serialised.
"""
import math
import time

import torch

from kernelbot_harness.checks import memory as kbh_memory

CPU_SETTLE_S = 0.05  # a CPU kernel's stray thread has this long to show itself
HOLD_MS = 4.0        # first hold of the given stream before a gated call
HOLD_GROWTH = 4.0    # an inconclusive hold is tried again this much longer,
HOLD_MAX_MS = 64.0   # up to this (the call or the snapshot outlived the hold)
POLL_S = 5e-5
SLEEP_PROBE_CYCLES = 200000
_sleep_rate = []     # torch.cuda._sleep cycles per microsecond (fastest seen)
_probe_streams = {}


class DeviceFault(Exception):
    """The device failed during a candidate call (an illegal address, a
    launch failure): the CUDA context is lost, the evaluation ends `crash`."""


def _guarded_sync(device, check_stream):
    _guarded(_settle, device, check_stream)


def _guarded(fn, *args):
    """fn(*args), a CUDA error after a candidate call becoming DeviceFault."""
    try:
        return fn(*args)
    except RuntimeError as e:
        raise DeviceFault("device error after the kernel call: %s" % str(e)[:500])


class CallResult:
    def __init__(self):
        self.error = None       # kernel_error message
        self.outs = []          # settled outputs (copies)
        self.guards_ok = None   # None: not guarded (torch-ext)
        self.late = None        # None: stream not checked
        self.poisoned = False   # outputs were poisoned before the call
        self.gate = None        # a gated call: Gate.info()
        self.changed = []       # indices of arguments the call changed
        self.ext_calls = None   # ModelNew: calls into its extensions
        self.noop_ok = None     # a no-op call: the switch took (read back)


def stream_fix(abi):
    """The cause and the fix, for every `stream` reason (the repair loop
    hands it to the model)."""
    if abi == "native":
        fix = ("launch every kernel and copy on kb_forward's `stream` argument "
               "((cudaStream_t)stream)")
    elif abi in ("torch-ext", "modelnew"):
        fix = ("launch on at::cuda::getCurrentCUDAStream() (kernel<<<grid, block, 0, "
               "at::cuda::getCurrentCUDAStream()>>>; KernelBench's own evaluation runs on the "
               "default stream: `kernelbot verify --stream-mode kernelbench` checks under "
               "those semantics)")
    else:
        fix = ("launch on the ABI's stream argument ((cudaStream_t)stream) / "
               "at::cuda::getCurrentCUDAStream()")
    return ("the kernel launches on the legacy default stream (or another stream than "
            "the one handed in: cudaStreamPerThread, a stream of its own or from torch's "
            "pool, a CUDA graph launched elsewhere, a synchronous cudaMemcpy); %s, and "
            "do not return before that stream has all of the work" % fix)


def _settle(device, check_stream):
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif check_stream:
        time.sleep(CPU_SETTLE_S)


def _late(snap, outs):
    return any(not kbh_memory.same_bits(a, b) for a, b in zip(snap, outs))


def _cycles_per_us():
    """torch.cuda._sleep's cycles per microsecond: the fastest of a few
    measurements (clocks at their highest), so a hold is never shorter
    than asked, only longer at lower clocks."""
    if not _sleep_rate:
        best = 0.0
        for _ in range(3):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            torch.cuda._sleep(SLEEP_PROBE_CYCLES)
            end.record()
            end.synchronize()
            us = start.elapsed_time(end) * 1e3
            if us > 0:
                best = max(best, SLEEP_PROBE_CYCLES / us)
        _sleep_rate.append(best if best > 0 else 2000.0)
    return _sleep_rate[0]


def _probe_stream(device):
    """A stream of the harness's own for snapshots under a hold:
    non-blocking (torch's pool), so it waits for nothing."""
    key = device.index if device.index is not None else torch.cuda.current_device()
    if key not in _probe_streams:
        _probe_streams[key] = torch.cuda.Stream(device)
    return _probe_streams[key]


def _span(t):
    lo = t.data_ptr()
    return lo, lo + t.numel() * t.element_size()


def _overlaps(t, args):
    """t's memory overlaps that of a tensor argument on its device."""
    lo, hi = _span(t)
    for a in args:
        if torch.is_tensor(a) and a.device == t.device and a.numel():
            alo, ahi = _span(a)
            if lo < ahi and alo < hi:
                return True
    return False


def gate_supported(device):
    return device.type == "cuda" and hasattr(torch.cuda, "_sleep")


class Gate:
    """One call behind a hold of the given (current) stream; see the
    module text. Use: hold_inputs(args), close(), the call, returned(),
    snapshot(outs), sync, then early_writes(...)."""

    def __init__(self, device, hold_ms):
        self.device, self.hold_ms = device, hold_ms
        self.saved = []
        self.end = torch.cuda.Event()
        self.done = torch.cuda.Event()
        self.snaps = []
        self.t0 = None
        self.open_at_return = None  # the hold had ended when the call returned
        self.conclusive = False     # the snapshot finished inside the hold

    def hold_inputs(self, args):
        """NaN in every float input on the device until the hold ends (the
        values are copied back on the given stream after it)."""
        for a in args:
            if torch.is_tensor(a) and a.is_cuda and a.is_floating_point() and a.numel():
                self.saved.append((a, a.detach().clone()))
        for a, _ in self.saved:
            a.detach().fill_(float("nan"))
        _guarded_sync(self.device, False)

    def close(self):
        """Enqueue the hold, its end event and the inputs' late arrival on
        the given stream; the call comes next."""
        torch.cuda._sleep(int(math.ceil(self.hold_ms * 1e3 * _cycles_per_us())))
        self.end.record()
        for a, v in self.saved:
            a.detach().copy_(v)
        self.t0 = time.perf_counter()

    def prepare(self, outs):
        """The snapshot's buffers, allocated before the hold: an allocation
        that needs new device memory waits for the whole device (the hold
        included), which would leave the snapshot late."""
        with torch.cuda.stream(_probe_stream(self.device)):
            self.snaps = [torch.empty_like(o) for o in outs]

    def returned(self):
        self.open_at_return = bool(self.end.query())

    def snapshot(self, outs):
        """Half-way through the hold, copy the outputs on the probe stream;
        conclusive when the copy finished before the hold ended."""
        wait = self.t0 + self.hold_ms / 2e3 - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        probe = _probe_stream(self.device)
        with torch.cuda.stream(probe):
            if len(self.snaps) == len(outs):
                for b, o in zip(self.snaps, outs):
                    b.copy_(o.detach())
            else:   # outputs allocated inside the call (torch-ext)
                self.snaps = [o.detach().clone() for o in outs]
            self.done.record(probe)
        while True:
            if self.done.query():
                # done seen first, then the hold still on: done came before it ended
                self.conclusive = not self.end.query() and not self.open_at_return
                return
            if self.end.query():
                return
            time.sleep(POLL_S)

    def early_writes(self, outs, poison=None, skip=()):
        """(output index, elements written under the hold, numel) of the
        first output written while the given stream was held back, else
        None. Native outputs were poisoned: any element no longer holding
        the poison was written. Extension outputs were allocated inside the
        call: written when the snapshot already holds the final result
        (and that result is not a constant fill an allocation could have
        held before)."""
        if not self.conclusive:
            return None
        for i, (s, o) in enumerate(zip(self.snaps, outs)):
            if s.numel() == 0 or i in skip:
                continue
            if poison is not None:
                n = int((kbh_memory.bits(s) != poison[i]).sum())
                if n:
                    return i, n, s.numel()
            elif kbh_memory.same_bits(s, o):
                raw = s.reshape(-1).view(torch.uint8)
                if bool((raw != raw[0]).any()):
                    return i, s.numel(), s.numel()
        return None

    def info(self, early=None):
        return {"hold_ms": self.hold_ms, "conclusive": self.conclusive,
                "open_at_return": self.open_at_return,
                "early_write": None if early is None else
                {"output": early[0], "written": early[1], "numel": early[2]}}


def early_write_message(info):
    e = info["early_write"]
    return ("outputs written while the stream handed in was still held back (%d of %d "
            "elements of output %d changed during a %g ms hold of that stream, before "
            "any work ordered on it could run)" % (e["written"], e["numel"], e["output"],
                                                    info["hold_ms"]))


class Caller:
    """Calls one kernel (native or torch-ext) the same observed way."""

    def __init__(self, kernel, task, device, pass_):
        self.kernel, self.task = kernel, task
        self.device, self.pass_ = device, pass_
        self.guarded = []
        self.retired = []
        self.reasons = None     # the verifier's Reasons: timing adds `stream` there
        self.device_sync = False  # KernelBench's mode: a device-wide sync after each call

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

    def call(self, case, kargs, grad_outs, check_stream, gate=False):
        """One observed call. gate=True (cuda): behind a hold of the given
        stream, tried again with a longer hold while inconclusive (up to
        HOLD_MAX_MS); the last try is the result, res.gate says what the
        hold showed."""
        gate = gate and gate_supported(self.device)
        hold = HOLD_MS
        while True:
            if self.kernel.abi == "native":
                res = self._native(kargs + grad_outs, check_stream, hold if gate else None)
            else:
                res = self._ext(case, kargs, grad_outs, check_stream, hold if gate else None)
            g = res.gate
            if g is None or g["conclusive"] or res.error or hold * HOLD_GROWTH > HOLD_MAX_MS:
                return res
            hold *= HOLD_GROWTH

    def _native(self, args, check_stream, hold_ms=None):
        res = CallResult()
        outs = [g.out for g in self.guarded]
        fn = self.kernel.bind(args, outs)
        # allocated before the call: no allocation between the call and the copy
        snap = [torch.empty_like(o) for o in outs]
        for g in self.guarded:
            g.arm()
        gate = None
        if hold_ms is not None:
            gate = Gate(self.device, hold_ms)
            gate.prepare(outs)
        _guarded_sync(self.device, False)
        if gate is not None:
            gate.hold_inputs(args)
            gate.close()
        rc = fn()
        if self.device_sync:
            _guarded_sync(self.device, False)
        if gate is not None:
            _guarded(gate.returned)
        for b, o in zip(snap, outs):
            b.copy_(o)
        if gate is not None:
            _guarded(gate.snapshot, outs)
        _guarded_sync(self.device, check_stream)
        if gate is not None:
            res.gate = gate.info(gate.early_writes(
                outs, [g.poison_value for g in self.guarded]))
        if rc != 0:
            res.error = "kernel returned %d" % rc
            return res
        res.poisoned = True
        res.late = _late(snap, outs) if check_stream or self.device.type == "cuda" else None
        res.guards_ok = all(g.guards_intact() for g in self.guarded)
        res.outs = [o.clone() for o in outs]
        return res

    def _ext(self, case, kargs, grad_outs, check_stream, hold_ms=None):
        res = CallResult()
        gate = None
        if self.device.type == "cuda":
            # from a settled device, like a native call: a candidate's late
            # work then shows as late, not as a race with the harness's own
            _guarded_sync(self.device, False)
        if hold_ms is not None:
            # an output allocated inside the call gets a block of NaN bytes
            # (or fresh memory), never a result an earlier call left there
            kbh_memory.poison_free_memory(self.device)
            gate = Gate(self.device, hold_ms)
            gate.hold_inputs(list(kargs) + list(grad_outs))
            gate.close()
        try:
            if self.pass_ == "backward":
                outs = self.kernel.backward(self.task, case, kargs, grad_outs)
            else:
                outs = self.kernel.forward(kargs)
            if self.device_sync:
                _guarded_sync(self.device, False)
            if gate is not None:
                _guarded(gate.returned)
            snap = [o.clone() for o in outs]
        except Exception as e:  # any exception from kernel code is its failure
            if self.device.type == "cuda" and "CUDA" in str(e):
                raise DeviceFault("device error in the kernel call: %s" % str(e)[:500])
            res.error = "kernel raised %s: %s" % (type(e).__name__, str(e)[:500])
            _guarded_sync(self.device, False)
            return res
        if gate is not None:
            _guarded(gate.snapshot, outs)
        _guarded_sync(self.device, check_stream)
        if gate is not None:
            # an output that is (a view of) an argument held its values before
            res.gate = gate.info(gate.early_writes(outs, skip={
                i for i, o in enumerate(outs) if _overlaps(o, list(kargs) + list(grad_outs))}))
        res.late = _late(snap, outs) if check_stream or self.device.type == "cuda" else None
        res.outs = [o.detach().clone() for o in outs]
        return res
