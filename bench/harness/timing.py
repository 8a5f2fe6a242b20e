"""Timing for the kernelbot harness: what decides "fast".

Imported as a top-level module (the harness puts bench/harness on sys.path).
Works on torch 1.13 (CPU only, no torch.compile) and torch 2.x with CUDA;
CUDA-only code runs only when device == "cuda".

Public API
----------
measure(fns, *, device, warmup=5, min_time_ms=100, max_reps=1000,
        l2_flush=True) -> {name: {"median_ms", "iqr_ms", "reps",
                                   "sync_median_ms", "min_ms", "total_ms",
                                   "host_median_ms", "side_stream_suspect"}}
    Times every zero-argument callable of `fns` in the same process,
    interleaved: repetition r calls every fn once, in an order rotated by r,
    so clock and thermal drift hit all of them alike. Warm-up calls are not
    timed. Repetitions continue until the slowest fn's summed time reaches
    `min_time_ms` or `max_reps` repetitions were done (at least
    min(3, max_reps)); "total_ms" is a fn's summed timed time. Statistics
    are the median and inter-quartile range of the per-call times, never
    the mean. Exceptions from a fn propagate.

    cuda: CUDA events on the current stream around each call. Before each
      timed call L2 is flushed by writing a buffer of FLUSH_FACTOR x the
      device's L2 size (allocated once per device); the flush is enqueued
      before the start event, so it is outside the timed region. The flush,
      topped up with torch.cuda._sleep to about 2x the fn's host-side time
      seen in the warm-up, keeps the device busy while the host enqueues the
      call, so the host's launch overhead (Python, ctypes, torch.compile
      guards) is not timed: the events time device work only. The device is
      synchronised after each timed call (after its end event), so work a
      fn leaves running on another stream cannot slow the next fn.
      Cross-check for work hidden on other streams: after every
      SYNC_EVERY-th repetition each fn
      is called once more (not part of "reps" or the event statistics) and
      timed on the host, from a synchronised idle device to the end of
      torch.cuda.synchronize() after fn(). "sync_median_ms" is the median of
      those, "host_median_ms" the median host time of fn() alone (launch
      cost). "side_stream_suspect" is True when
          sync_median - sync_latency > 1.5 * max(median, host_median) + 0.02 ms
      i.e. the device stayed busy well after both the timed stream's work and
      the host call had finished: work the events did not see.
    cpu: time.perf_counter_ns around each call; the cache flush writes a
      buffer of 2 x the last-level cache (read from sysfs, default 32 MB)
      before each call, outside the timed region. "sync_median_ms" equals
      "median_ms" and "side_stream_suspect" is False.

stats(samples_ms) -> {"median_ms", "iqr_ms", "min_ms", "reps"}
    The statistics measure() reports, for a list of per-call times. Quartiles
    interpolate linearly between order statistics (numpy's default).

compile_baseline(model_or_fn, example_inputs=None, *, device=None, mode=None)
        -> (callable | None, reason: str)
    torch.compile of the reference, mode "max-autotune-no-cudagraphs" on cuda
    and the default mode on cpu. With example_inputs (a list/tuple of
    arguments) the compiled callable is called once here, which is when
    torch.compile really compiles, so compile errors surface here and not in
    the timed loop. Never raises: torch 1.13 (no torch.compile), a failing
    compile or a failing first call give (None, reason). reason is "" on
    success. Pass the same example inputs as the timed calls will use.
    Test the result with `is not None`: a compiled nn.Module raises
    TypeError on bool() (it forwards len() to the module).

speedups(results) -> {"speedup_eager": x | None, "speedup_compile": x | None}
    From measure()'s result (or any dict with "kernel", "eager" and optional
    "compile" entries holding "median_ms"): baseline median / kernel median.

geomean(values) -> float | None
    Geometric mean of the positive finite values; None, missing, zero and
    non-finite entries are skipped; None when nothing is left.
"""

import math
import os
import time

FLUSH_FACTOR = 3            # flush buffer = FLUSH_FACTOR x the GPU's L2
DEFAULT_L2_BYTES = 64 << 20
DEFAULT_LLC_BYTES = 32 << 20
MIN_REPS = 3
SYNC_EVERY = 4              # every 4th repetition also gets the sync timing
SIDE_STREAM_FACTOR = 1.5
SIDE_STREAM_SLACK_MS = 0.02
# before each start event the device gets LEAD_HOST_FACTOR x the fn's median
# host-side time (from the warm-up) + LEAD_MARGIN_US of queued work (the L2
# flush, topped up by spinning), at most LEAD_MAX_US, so the host's launch
# overhead is not timed
LEAD_HOST_FACTOR = 2.0
LEAD_MARGIN_US = 20.0
LEAD_MAX_US = 2000.0
DEFAULT_HOST_US = 50.0
_sleep_rate = {}
_flush_time = {}

_flush_buffers = {}


# --------------------------------------------------------------- statistics

def _quantile(sorted_vals, q):
    """Linear interpolation between order statistics (numpy's default)."""
    n = len(sorted_vals)
    if n == 0:
        return float("nan")
    pos = (n - 1) * q
    lo = int(math.floor(pos))
    hi = min(lo + 1, n - 1)
    frac = pos - lo
    return sorted_vals[lo] + (sorted_vals[hi] - sorted_vals[lo]) * frac


def _median(vals):
    return _quantile(sorted(vals), 0.5)


def stats(samples_ms):
    """Median, inter-quartile range, minimum and count of per-call times."""
    s = sorted(float(v) for v in samples_ms)
    if not s:
        return {"median_ms": None, "iqr_ms": None, "min_ms": None, "reps": 0}
    return {
        "median_ms": _quantile(s, 0.5),
        "iqr_ms": _quantile(s, 0.75) - _quantile(s, 0.25),
        "min_ms": s[0],
        "reps": len(s),
    }


# ------------------------------------------------------------ cache flushes

def _parse_size(text):
    text = text.strip().upper()
    mult = 1
    for suffix, m in (("K", 1 << 10), ("M", 1 << 20), ("G", 1 << 30)):
        if text.endswith(suffix):
            text, mult = text[:-1], m
            break
    return int(text) * mult


def cpu_llc_bytes(root="/sys/devices/system/cpu/cpu0/cache"):
    """Size of the highest-level data or unified cache of cpu0."""
    best_level, best_size = -1, None
    try:
        entries = sorted(os.listdir(root))
    except OSError:
        return DEFAULT_LLC_BYTES
    for entry in entries:
        if not entry.startswith("index"):
            continue
        d = os.path.join(root, entry)
        try:
            with open(os.path.join(d, "level")) as f:
                level = int(f.read())
            with open(os.path.join(d, "size")) as f:
                size = _parse_size(f.read())
            ctype = ""
            if os.path.exists(os.path.join(d, "type")):
                with open(os.path.join(d, "type")) as f:
                    ctype = f.read().strip()
        except (OSError, ValueError):
            continue
        if ctype == "Instruction":
            continue
        if level > best_level or (level == best_level and size > best_size):
            best_level, best_size = level, size
    return best_size if best_size else DEFAULT_LLC_BYTES


def gpu_l2_bytes(torch, dev):
    """The device's L2 size, or DEFAULT_L2_BYTES where torch does not say."""
    try:
        size = int(getattr(torch.cuda.get_device_properties(dev),
                           "L2_cache_size", 0))
    except Exception:
        size = 0
    return size if size > 0 else DEFAULT_L2_BYTES


def _cpu_flush_buffer():
    buf = _flush_buffers.get("cpu")
    if buf is None:
        import numpy as np
        buf = np.empty(2 * cpu_llc_bytes() // 8, dtype=np.float64)
        _flush_buffers["cpu"] = buf
    return buf


def _cuda_flush_buffer(torch, dev):
    key = ("cuda", dev)
    buf = _flush_buffers.get(key)
    if buf is None:
        nbytes = FLUSH_FACTOR * gpu_l2_bytes(torch, dev)
        buf = torch.empty(nbytes // 4, dtype=torch.int32,
                          device=torch.device("cuda", dev))
        _flush_buffers[key] = buf
    return buf


# ------------------------------------------------------------------ measure

def _flush_us(torch, buf):
    """Device time of one L2 flush, in microseconds (measured once)."""
    key = buf.data_ptr()
    if key not in _flush_time:
        buf.fill_(0)
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        buf.fill_(0)
        end.record()
        end.synchronize()
        _flush_time[key] = start.elapsed_time(end) * 1e3
    return _flush_time[key]


def _sleep_cycles_per_us(torch):
    """torch.cuda._sleep cycles per microsecond on this device (measured)."""
    dev = torch.cuda.current_device()
    if dev not in _sleep_rate:
        torch.cuda._sleep(1000)
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        cycles = 2000000
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        end.synchronize()
        us = start.elapsed_time(end) * 1e3
        _sleep_rate[dev] = cycles / us if us > 0 else 1000.0
    return _sleep_rate[dev]


def _rotated(names, r):
    k = r % len(names)
    return names[k:] + names[:k]


def _enough(totals, reps, min_time_ms, max_reps):
    if reps >= max_reps:
        return True
    if reps < min(MIN_REPS, max_reps):
        return False
    return max(totals.values()) >= min_time_ms


def _measure_cpu(fns, names, warmup, min_time_ms, max_reps, l2_flush):
    buf = _cpu_flush_buffer() if l2_flush else None
    for _ in range(warmup):
        for name in names:
            fns[name]()
    samples = {n: [] for n in names}
    totals = {n: 0.0 for n in names}
    reps = 0
    while not _enough(totals, reps, min_time_ms, max_reps):
        for name in _rotated(names, reps):
            fn = fns[name]
            if buf is not None:
                buf.fill(float(reps))
            t0 = time.perf_counter_ns()
            fn()
            t1 = time.perf_counter_ns()
            ms = (t1 - t0) / 1e6
            samples[name].append(ms)
            totals[name] += ms
        reps += 1
    out = {}
    for name in names:
        st = stats(samples[name])
        st["total_ms"] = totals[name]
        st["sync_median_ms"] = st["median_ms"]
        st["host_median_ms"] = st["median_ms"]
        st["side_stream_suspect"] = False
        out[name] = st
    return out


def _measure_cuda(fns, names, warmup, min_time_ms, max_reps, l2_flush):
    import torch

    dev = torch.cuda.current_device()
    buf = _cuda_flush_buffer(torch, dev) if l2_flush else None
    sleep = getattr(torch.cuda, "_sleep", None)
    rate = _sleep_cycles_per_us(torch) if sleep is not None else None

    # warm-up, noting each fn's host-side cost (launch overhead, guards)
    host_warm = {n: [] for n in names}
    for _ in range(warmup):
        for name in names:
            t0 = time.perf_counter()
            fns[name]()
            host_warm[name].append((time.perf_counter() - t0) * 1e6)
        torch.cuda.synchronize()

    # Device time queued ahead of each start event, so the device is still
    # busy when the host has finished enqueueing the call: otherwise the
    # host's launch overhead lands between the events and is timed.
    flush_us = _flush_us(torch, buf) if buf is not None else 0.0
    lead_cycles = {}
    for name in names:
        host_us = _median(host_warm[name]) if host_warm[name] else \
            DEFAULT_HOST_US
        lead_us = min(LEAD_HOST_FACTOR * host_us + LEAD_MARGIN_US,
                      LEAD_MAX_US) - flush_us
        lead_cycles[name] = int(lead_us * rate) if rate and lead_us > 0 \
            else 0

    def lead(name, spin=True):
        if buf is not None:
            buf.fill_(0)
        if spin and lead_cycles[name] > 0:
            sleep(lead_cycles[name])

    # latency of synchronize() on an idle device, subtracted in the check
    lat = []
    for _ in range(5):
        t0 = time.perf_counter()
        torch.cuda.synchronize()
        lat.append((time.perf_counter() - t0) * 1e3)
    sync_latency_ms = _median(lat)

    samples = {n: [] for n in names}
    sync_samples = {n: [] for n in names}
    host_samples = {n: [] for n in names}
    totals = {n: 0.0 for n in names}
    reps = 0
    while not _enough(totals, reps, min_time_ms, max_reps):
        stream = torch.cuda.current_stream()
        order = _rotated(names, reps)
        for name in order:
            fn = fns[name]
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            lead(name)
            start.record(stream)
            fn()
            end.record(stream)
            # device-wide, after the end event: work one fn left running on
            # another stream cannot slow down the next fn's timing
            torch.cuda.synchronize()
            ms = start.elapsed_time(end)
            samples[name].append(ms)
            totals[name] += ms
        if reps % SYNC_EVERY == 0:
            # extra, untimed-by-events calls: from an idle device to the end
            # of a device-wide sync, which also waits for other streams
            for name in order:
                fn = fns[name]
                lead(name, spin=False)
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                fn()
                t1 = time.perf_counter()
                torch.cuda.synchronize()
                t2 = time.perf_counter()
                host_samples[name].append((t1 - t0) * 1e3)
                sync_samples[name].append((t2 - t0) * 1e3)
        reps += 1

    out = {}
    for name in names:
        st = stats(samples[name])
        st["total_ms"] = totals[name]
        sync_med = _median(sync_samples[name]) if sync_samples[name] else None
        host_med = _median(host_samples[name]) if host_samples[name] else None
        st["sync_median_ms"] = sync_med
        st["host_median_ms"] = host_med
        suspect = False
        if sync_med is not None and st["median_ms"] is not None:
            ref = max(st["median_ms"], host_med or 0.0)
            suspect = (sync_med - sync_latency_ms >
                       SIDE_STREAM_FACTOR * ref + SIDE_STREAM_SLACK_MS)
        st["side_stream_suspect"] = bool(suspect)
        out[name] = st
    return out


def measure(fns, *, device, warmup=5, min_time_ms=100, max_reps=1000,
            l2_flush=True):
    """Time each zero-argument callable of `fns`, interleaved; see module doc."""
    if not fns:
        return {}
    if device not in ("cpu", "cuda"):
        raise ValueError("unknown timing device '%s'" % device)
    names = list(fns)
    warmup = max(0, int(warmup))
    max_reps = max(1, int(max_reps))
    min_time_ms = float(min_time_ms)
    if device == "cuda":
        return _measure_cuda(fns, names, warmup, min_time_ms, max_reps,
                             l2_flush)
    return _measure_cpu(fns, names, warmup, min_time_ms, max_reps, l2_flush)


# ---------------------------------------------------------------- baselines

def _infer_device(torch, model_or_fn):
    params = []
    if isinstance(model_or_fn, torch.nn.Module):
        params = list(model_or_fn.parameters()) + list(model_or_fn.buffers())
    for p in params:
        return "cuda" if p.is_cuda else "cpu"
    return None


def _inputs_device(torch, inputs):
    for x in inputs or ():
        if isinstance(x, torch.Tensor):
            return "cuda" if x.is_cuda else "cpu"
    return None


def compile_baseline(model_or_fn, example_inputs=None, *, device=None,
                     mode=None):
    """torch.compile the reference; (callable, "") or (None, reason)."""
    try:
        import torch
    except Exception as e:  # pragma: no cover - the harness always has torch
        return None, "torch unavailable: %s" % e
    if not hasattr(torch, "compile"):
        return None, ("torch.compile unavailable in torch %s (needs 2.0 or "
                      "later)" % torch.__version__)
    try:
        if device is None:
            device = (_inputs_device(torch, example_inputs)
                      or _infer_device(torch, model_or_fn)
                      or ("cuda" if torch.cuda.is_available() else "cpu"))
        if mode is None and str(device).startswith("cuda"):
            # Not "max-autotune": that mode adds CUDA graphs, whose replays
            # write every output into the same static buffers (an output
            # kept from an earlier call is overwritten by the next), copy
            # inputs into static buffers inside the call, and hide launch
            # overhead that the candidate, launched eagerly, pays. Without
            # graphs the baseline gets the same autotuned kernels and is
            # timed like the candidate.
            mode = "max-autotune-no-cudagraphs"
        if mode is None:
            compiled = torch.compile(model_or_fn)
        else:
            compiled = torch.compile(model_or_fn, mode=mode)
    except Exception as e:
        return None, "torch.compile failed: %s" % _one_line(e)
    if example_inputs is not None:
        try:
            compiled(*example_inputs)
            if str(device).startswith("cuda"):
                torch.cuda.synchronize()
        except Exception as e:
            return None, "torch.compile'd reference failed on its first " \
                         "call: %s" % _one_line(e)
    return compiled, ""


def _one_line(e):
    text = ("%s: %s" % (type(e).__name__, e)).strip()
    text = text.splitlines()[0] if text else type(e).__name__
    return text[:300]


# ----------------------------------------------------------------- speedups

def _median_of(entry):
    if not isinstance(entry, dict):
        return None
    v = entry.get("median_ms")
    if v is None or not isinstance(v, (int, float)):
        return None
    if not math.isfinite(v) or v <= 0:
        return None
    return float(v)


def speedups(results):
    """Baseline median over kernel median, for eager and compile."""
    k = _median_of(results.get("kernel"))
    out = {"speedup_eager": None, "speedup_compile": None}
    for base, key in (("eager", "speedup_eager"),
                      ("compile", "speedup_compile")):
        b = _median_of(results.get(base))
        if k is not None and b is not None:
            out[key] = b / k
    return out


def geomean(values):
    """Geometric mean of the positive finite values, None if there are none."""
    logs = []
    for v in values:
        if v is None or not isinstance(v, (int, float)):
            continue
        if not math.isfinite(v) or v <= 0:
            continue
        logs.append(math.log(v))
    if not logs:
        return None
    return math.exp(sum(logs) / len(logs))
