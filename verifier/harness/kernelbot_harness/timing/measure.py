"""Timing for the kernelbot harness: what decides "fast".

Part of the harness package (kernelbot_harness.timing); bench/ scripts import it from there.
Works on torch 1.13 (CPU only, no torch.compile) and torch 2.x with CUDA;
CUDA-only code runs only when device == "cuda".

Public API
----------
measure(fns, *, device, warmup=5, min_time_ms=100, max_reps=1000,
        l2_flush=True, method="auto", ci_target=None, graph_below_ms=None)
        -> {name: {"median_ms", "iqr_ms", "min_ms", "reps", "total_ms",
                   "sync_median_ms", "host_median_ms", "sync_null_ms",
                   "sync_excess_ms", "tail_batch", "host_starved",
                   "side_stream_suspect", "method", "method_reason", "batch", "samples", "ci_rel",
                   "sample_ms", and with method "graph": "flush_ms", "events_median_ms"}}
    Times every zero-argument callable of `fns` in the same process,
    interleaved: each repetition (or round) calls every fn once, in an
    order rotated by its number, so clock and thermal drift hit all of them
    alike. Warm-up calls are not timed. Every fn of one call is timed by
    the same method ("method", with "method_reason" saying why), so a
    speedup compares like with like. Statistics are the median and
    inter-quartile range of per-call samples, never the mean; "ci_rel" is
    the half-width of the median's distribution-free 95% confidence
    interval over the median (None with too few samples). "reps" counts
    the calls timed, "samples" the per-call figures the statistics are
    over (a graph sample is the mean of a batch of "batch" calls) and
    "sample_ms" those figures, so that timings taken in turns can be
    merged (merge()).
    Exceptions from a fn propagate (outside a graph capture).
    prepare: {name: zero-argument callable}, optional per fn: called before
    every call of that fn (warm-up, timed, cross-check), never timed (cpu:
    each call of a batch is clocked on its own; cuda: enqueued on the
    timed stream before the flush and the start event; graph: in the
    captured pairs and in that fn's own flush graph, subtracted). The
    runner re-poisons a native kernel's outputs with it, so a kernel that
    returns early when its output already holds the answer computes.

    cpu ("wall"): time.perf_counter_ns around each call; the cache flush
      writes a buffer of 2 x the last-level cache (read from sysfs, default
      32 MB; at most CPU_FLUSH_MAX_BYTES: a VM that reports its host's L3
      would otherwise write half a gigabyte per call) before each call,
      outside the timed region. The flush never takes more than a quarter
      of the measurement: one flush is timed, and a fn whose warm call is
      shorter than FLUSH_SHARE_CALLS flushes is timed in batches of
      "batch" back-to-back calls per flush (a sample is the batch's mean;
      only its first call is cold, as in a model where a small op's inputs
      were just written). Repetitions until the slowest fn's summed time
      reaches `min_time_ms` or `max_reps` samples were taken (at least
      min(3, max_reps)); the batch grows when later calls run faster than
      the warm-up's ("batch" is the last one); "flush_ms" is one flush. "sync_median_ms" equals
      "median_ms" and "side_stream_suspect" is False.

    cuda: on torch's current stream. First a fixed warm-up of CLOCK_WARM_MS
      of device work (so the clocks have left idle; they are never set),
      then `warmup` untimed calls of each fn, then PROBE_REPS repetitions
      timed per call by "events" (below). Their medians pick the method:
      "auto" uses "graph" when the shortest fn's median is below
      `graph_below_ms` (default GRAPH_BELOW_MS: CUDA events resolve about
      0.5 us, a few percent of a ~5 us kernel) and a batch of the longest
      fn replays within GRAPH_REPLAY_MAX_MS (a slow baseline beside a fast
      kernel would make graph rounds costly), else "events"; "events" and
      "graph" ask for one (graph still falls back).

      "events": CUDA events around each call. Before each timed call L2
      is flushed by reading a buffer of FLUSH_FACTOR x the device's L2
      size (allocated once per device; a max into one value), so L2 holds
      only clean lines of that buffer. A flush by writing would leave L2
      full of dirty lines whose write-back lands inside the next timed
      call: on the H200 a 256 MB read-only kernel timed 7-9 us (about 10%)
      slower after a written flush than after a read one. The flush is
      enqueued before the start event, so it is outside the timed region. The flush, topped up
      with torch.cuda._sleep to about 2x the fn's host-side time seen in
      the warm-up, keeps the device busy while the host enqueues the call,
      so the host's launch overhead (Python, ctypes, torch.compile guards)
      is not timed: the events time device work only. The device is
      synchronised after each timed call (after its end event), so work a
      fn leaves running on another stream cannot slow the next fn.
      Repetitions until the slowest fn's summed time reaches min_time_ms,
      or max_reps (the probe's repetitions count), or, after
      EVENTS_CI_MIN_REPS, every fn's median is known to +-ci_target
      (default EVENTS_CI_TARGET, +-1%) or to one step of the timer.

      "graph": for short calls, where the events' resolution and jitter
      are a large part of a call. Per fn one CUDA graph of `batch` (L2
      flush, call) pairs, plus one graph of `batch` flushes alone; each
      round replays all of them, rotated, each between two events after a
      spin that lets the host enqueue the replay. A fn's sample of a round
      is (its replay - the flushes' replay) / batch: its calls' device
      time, each after a flush, with the flushes subtracted ("flush_ms"
      is the median flush). batch: about GRAPH_BATCH_MS of the shortest
      fn, within [GRAPH_MIN_BATCH, GRAPH_MAX_BATCH]. Rounds: at least
      GRAPH_MIN_ROUNDS, then until every fn's ci_rel <= ci_target (default
      CI_TARGET) or the calls' summed time reaches min_time_ms; never more
      than max_reps calls. Graph capture runs in global mode: a fn that is
      not capturable (an allocation, a synchronisation, the legacy default
      stream, a non-zero return of a native ABI call, an exception) ends
      the attempt, and then every fn is timed by "events" instead, with
      the failure in "method_reason". So does a graph that gives a fn less
      than GRAPH_TRUST x its per-call median ("events_median_ms", from the
      probe): work skipped while capturing must not look fast.

      Cross-check for work hidden on other streams, with either method:
      after every SYNC_EVERY-th repetition or round each fn is called
      again (not part of the statistics) from a synchronised idle device:
      a batch of "tail_batch" calls back to back, with nothing between
      them; an end event is recorded on the timed stream after the last,
      the host polls that event until it has passed, then synchronises
      the whole device. "sync_median_ms" is the median from the batch's
      first call to the idle device, "host_median_ms" the median host
      time of one fn() (launch cost). What counts is the tail: from the
      end event passing to the device being idle, i.e. work still running
      when the timed stream was done. Work a fn hides on another stream
      (the legacy default stream, the per-thread default stream, a stream
      of its own or from torch's pool, a graph replayed there) queues up
      there across the batch whenever it takes longer than the host needs
      to enqueue a call, so its tail grows with the batch while an honest
      fn's stays at the cost of an idle sync. tail_batch: about
      TAIL_BATCH_MS of the fn's calls (the longer of its events median and
      its host time), within [1, TAIL_MAX_BATCH]; 1 until the probe has
      measured the fn, whose tails are then dropped. Each batch is paired
      with its null stand-in, timed alike right after it: a spin on the
      timed stream as long as the batch's events medians ("sync_null_ms":
      its start to idle). "sync_excess_ms" is the fn's shortest tail minus
      its null's shortest (hidden work is in every batch; batches where the
      host stalled, taking over twice its median time to enqueue them or
      seeing the end event that much later after the timed stream's span
      than usual, are left out: a stalled host lets the hidden queue
      drain unseen). Whatever delays
      the timed stream itself (a loaded host waking late, other processes'
      time slices on a shared GPU between a call's launches) is before the
      end event and out of the tail. "side_stream_suspect" is True when
          sync_excess > 1.5 * max(median, host_median) + 0.02 ms
      i.e. the device stayed busy well after the timed stream's work had
      finished: work the events did not see; a fn that is suspect gets
      CONFIRM_CHECKS more paired checks first and is flagged only when it
      still is.
      What this check cannot see: hidden work that ends before the host
      has enqueued the next call (a ~2 us kernel behind ~5 us of launch
      cost never queues up), and work that starts on another stream
      early (before the start event) but is joined back to the timed
      stream. The harness proves the first kind at correctness time
      instead, by holding the given stream back (verifier/PROTOCOL.md,
      `stream`); the second reads its inputs before the given stream has
      written them, which the same hold shows.

      Host-starved repetitions (events): when the host took longer to
      enqueue (start event, call, end event) than the device work queued
      ahead lasted, the events timed the host's gap; such a sample is
      dropped (at most HOST_STARVED_MAX_SHARE of the repetitions) and the
      fn's lead grows. "host_starved" counts the drops.

median_ci(samples) -> (low, high) | None;  ci_rel(samples) -> float | None
    The 95% confidence interval of a median from order statistics, and its
    half-width over the median.

stats(samples_ms) -> {"median_ms", "iqr_ms", "min_ms", "reps"}
    The statistics measure() reports, for a list of per-call times. Quartiles
    interpolate linearly between order statistics (numpy's default).

compile_baseline(model_or_fn, example_inputs=None, *, device=None, mode=None)
        -> (callable | None, reason: str)
    torch.compile of the reference, mode "max-autotune-no-cudagraphs" on cuda
    and the default mode on cpu; the environment's KB_COMPILE_MODE, when
    set, names the mode instead ("default": torch's default). With example_inputs (a list/tuple of
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
CPU_FLUSH_MAX_BYTES = 64 << 20  # one cpu flush writes at most this
FLUSH_SHARE_CALLS = 3.0     # a batch's calls take >= 3 flushes: flushing <= 1/4
CPU_MAX_BATCH = 4096
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
# a repetition whose host-side enqueue (start event, call, end event) took
# longer than the device work queued ahead of it timed the host's gap, not
# the call: it is dropped and that fn's lead grows, at most this share of
# the repetitions (a call whose host cost always exceeds LEAD_MAX_US keeps
# its samples)
HOST_STARVED_MAX_SHARE = 0.25
# the side-stream cross-check's null stand-in spins this long when its fn
# has no events median yet; a suspect fn gets CONFIRM_CHECKS more paired
# checks before it is flagged
NULL_SPIN_US = 20.0
CONFIRM_CHECKS = 9
# the side-stream check calls each fn this many times back to back: about
# TAIL_BATCH_MS of its calls, at most TAIL_MAX_BATCH (hidden work queues up
# across the batch; an honest fn's tail does not grow with it)
TAIL_BATCH_MS = 0.5
TAIL_MAX_BATCH = 32
# a batch the host took longer than this to enqueue, or saw its end event
# this much later than usual (x the median, + slack), is left out of the
# shortest tail: a stalled host lets hidden work drain unseen
STEADY_FACTOR = 2.0
STEADY_SLACK_MS = 0.05
# the side-stream check polls its end event for at most this long (a
# call's own length, normally), then waits for it blocking
EVENT_POLL_S = 2.0
METHODS = ("auto", "graph", "events")
CLOCK_WARM_MS = 20.0        # device work before anything is timed (clocks up)
PROBE_REPS = 8              # per-call repetitions that pick the method
GRAPH_BELOW_MS = 0.1        # "auto": graphs when the shortest call is below this
GRAPH_BATCH_MS = 0.2        # device time of the shortest fn per captured batch
GRAPH_MIN_BATCH = 8
GRAPH_MAX_BATCH = 64
GRAPH_MIN_ROUNDS = 10
GRAPH_REPLAY_MAX_MS = 10.0  # "auto": no graphs when a batch of the longest fn takes longer
CI_TARGET = 0.005           # rounds stop once every median is known to +-0.5%
# "events" stops once every median is known to +-1% (95%): on the H200
# (2026-12-03, bench-eval) a 4 us kernel's 1000 repetitions, each behind
# its flush, lead and device sync, cost 0.5 s per fn and config, 8.7 s of
# a 10.4 s candidate, for a +-0.42% interval nobody reads at that grain
EVENTS_CI_TARGET = 0.01
EVENTS_CI_MIN_REPS = 64
EVENTS_CI_EVERY = 16
GRAPH_TRUST = 0.5           # a graph under half the per-call median is not trusted
GRAPH_TRUST_SLACK_MS = 0.002
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

def valid_samples(st):
    """Whether stats `st` carry a well-formed "sample_ms": as many finite
    numbers as "samples" says (a graph sample, a difference, may be
    slightly negative) (a runner's figures are
    untrusted input)."""
    vals, n = st.get("sample_ms"), st.get("samples")
    if not isinstance(vals, list) or not isinstance(n, int) or isinstance(n, bool) \
            or len(vals) != n:
        return False
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) and
               math.isfinite(v) for v in vals)


def merge(parts):
    """One fn's stats from timings taken in turns with other fns' (the
    kernel in its runner, the baselines in the judge, ABAB): statistics
    over all samples together, reps and totals summed. A flag set in any
    turn stays set; the rest comes from the last turn. Parts must pass
    valid_samples (ValueError otherwise); None parts are skipped."""
    parts = [p for p in parts if p]
    if not parts:
        return None
    for p in parts:
        if not valid_samples(p):
            raise ValueError("malformed timing samples")
    vals = [float(v) for p in parts for v in p["sample_ms"]]
    out = dict(parts[-1])
    out.update(stats(vals))
    out.update({"reps": sum(int(p.get("reps") or 0) for p in parts),
                "total_ms": sum(float(p.get("total_ms") or 0.0) for p in parts),
                "samples": len(vals), "ci_rel": ci_rel(vals), "sample_ms": vals,
                "turns": len(parts)})
    for key in ("side_stream_suspect", "host_starved"):
        if any(p.get(key) for p in parts):
            out[key] = True
    excess = [p["sync_excess_ms"] for p in parts
              if isinstance(p.get("sync_excess_ms"), (int, float))]
    if excess:
        out["sync_excess_ms"] = max(excess)
    return out


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
        buf = np.empty(min(2 * cpu_llc_bytes(), CPU_FLUSH_MAX_BYTES) // 8, dtype=np.float64)
        _flush_buffers["cpu"] = buf
    return buf


def _cuda_flush_buffer(torch, dev):
    key = ("cuda", dev)
    buf = _flush_buffers.get(key)
    if buf is None:
        nbytes = FLUSH_FACTOR * gpu_l2_bytes(torch, dev)
        buf = torch.zeros(nbytes // 4, dtype=torch.int32,
                          device=torch.device("cuda", dev))
        _flush_buffers[key] = buf
        # where _l2_flush's max goes: allocated once, so a flush allocates
        # nothing (CUDA-graph capture included)
        _flush_buffers[("sink", buf.data_ptr())] = torch.zeros(
            (), dtype=torch.int32, device=buf.device)
    return buf


# ------------------------------------------------------------------ measure

class CaptureError(Exception):
    """A CUDA graph could not be captured (or replayed) from the fns."""


def _l2_flush(torch, buf):
    """Enqueue one L2 flush: buf (a _cuda_flush_buffer) read into its sink."""
    torch.amax(buf, 0, out=_flush_buffers[("sink", buf.data_ptr())])


def _flush_us(torch, buf):
    """Device time of one L2 flush, in microseconds (measured once)."""
    key = buf.data_ptr()
    if key not in _flush_time:
        _l2_flush(torch, buf)
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        _l2_flush(torch, buf)
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


def median_ci(samples, z=1.96):
    """Distribution-free confidence interval of the median (order
    statistics, normal approximation of the binomial; 95% for z=1.96):
    (low, high), or None with too few samples for one."""
    s = sorted(float(v) for v in samples)
    n = len(s)
    if n == 0:
        return None
    half = z * math.sqrt(n) / 2.0
    lo = int(math.floor(n / 2.0 - half))        # 1-based ranks
    hi = int(math.ceil(1 + n / 2.0 + half))
    if lo < 1 or hi > n:
        return None
    return s[lo - 1], s[hi - 1]


def ci_rel(samples):
    """Half-width of median_ci over the median: the relative uncertainty of
    a median (None with too few samples or a median of 0)."""
    ci = median_ci(samples)
    if ci is None:
        return None
    med = _median(samples)
    if not med or not math.isfinite(med) or med <= 0:
        return None
    return (ci[1] - ci[0]) / 2.0 / med


def _quantum(sorted_vals):
    """The timer's step as the samples show it: their smallest positive
    difference (None when all are equal)."""
    gaps = [b - a for a, b in zip(sorted_vals, sorted_vals[1:]) if b > a]
    return min(gaps) if gaps else None


def _known_to(samples, target):
    """True when the median's 95% interval is within +-target, or spans no
    more than one step of the timer: CUDA events resolve about 0.5 us (H200,
    2026-12-03: a 7.6 us eager call stayed at ci_rel 2.3% after 999
    repetitions, its median between two adjacent steps), and no number of
    repetitions narrows an interval below that."""
    c = ci_rel(samples)
    if c is None:
        return False
    if c <= target:
        return True
    s = sorted(samples)
    lo, hi = median_ci(s)
    q = _quantum(s)
    return q is not None and hi - lo <= q * (1.0 + 1e-9)


def _bad_rc(value):
    """A native ABI call returns an int: non-zero means it failed."""
    return isinstance(value, int) and not isinstance(value, bool) and value != 0


# --------------------------------------------------------- the CPU (wall)

def _cpu_flush_ms(buf):
    """Wall milliseconds of one cpu flush (the faster of two)."""
    best = None
    for i in range(2):
        t0 = time.perf_counter_ns()
        buf.fill(float(i))
        ms = (time.perf_counter_ns() - t0) / 1e6
        best = ms if best is None else min(best, ms)
    return best


def _cpu_batches(fns, names, warmup, flush_ms, prepare):
    """Calls per flush for each fn: 1 unless its warm call (the fastest of
    the warm-up's, timed) is shorter than FLUSH_SHARE_CALLS flushes; the
    warm-up calls themselves (at least one per fn) are not samples."""
    best = {n: None for n in names}
    for _ in range(max(1, warmup)):
        for name in names:
            ms = _clocked_calls(fns[name], 1, prepare.get(name))
            best[name] = ms if best[name] is None else min(best[name], ms)
    out = {}
    for name in names:
        if flush_ms is None:
            out[name] = 1
            continue
        out[name] = _batch_for(flush_ms, best[name])
    return out


def _batch_for(flush_ms, call_ms):
    """Calls per flush so that the calls take FLUSH_SHARE_CALLS flushes."""
    call = max(call_ms or 0.0, 1e-4)
    return int(min(CPU_MAX_BATCH, max(1, math.ceil(FLUSH_SHARE_CALLS * flush_ms / call))))


def _clocked_calls(fn, b, prep):
    """Wall ms of b calls of fn; with prep, prep() before each call and
    each call clocked on its own, so the preparation is never timed."""
    if prep is None:
        t0 = time.perf_counter_ns()
        for _ in range(b):
            fn()
        return (time.perf_counter_ns() - t0) / 1e6
    ns = 0
    for _ in range(b):
        prep()
        t0 = time.perf_counter_ns()
        fn()
        ns += time.perf_counter_ns() - t0
    return ns / 1e6


def _measure_cpu(fns, names, warmup, min_time_ms, max_reps, l2_flush, prepare):
    buf = _cpu_flush_buffer() if l2_flush else None
    flush_ms = _cpu_flush_ms(buf) if buf is not None else None
    batch = _cpu_batches(fns, names, warmup, flush_ms, prepare)
    samples = {n: [] for n in names}
    totals = {n: 0.0 for n in names}
    calls = {n: 0 for n in names}
    reps = 0
    while not _enough(totals, reps, min_time_ms, max_reps):
        for name in _rotated(names, reps):
            fn, b = fns[name], batch[name]
            if buf is not None:
                buf.fill(float(reps))
            ms = _clocked_calls(fn, b, prepare.get(name))
            samples[name].append(ms / b)
            totals[name] += ms
            calls[name] += b
            if flush_ms is not None:
                # a warm-up that ran slow sized the batch too small: grow it
                batch[name] = max(b, _batch_for(flush_ms, min(samples[name])))
        reps += 1
    out = {}
    for name in names:
        st = stats(samples[name])
        b = batch[name]
        st["reps"] = calls[name]
        st["total_ms"] = totals[name]
        st["sync_median_ms"] = st["median_ms"]
        st["host_median_ms"] = st["median_ms"]
        st["side_stream_suspect"] = False
        why = "cpu: host clock around each call"
        if b > 1:
            why = ("cpu: host clock around batches of %d calls, one cache flush (%.2f ms) "
                   "before each: a flush per call would be most of the measurement"
                   % (b, flush_ms))
        st.update({"method": "wall", "method_reason": why, "batch": b,
                   "flush_ms": flush_ms, "samples": len(samples[name]),
                   "ci_rel": ci_rel(samples[name]), "sample_ms": samples[name]})
        out[name] = st
    return out


# ------------------------------------------------------- the CUDA device

class TorchCuda:
    """The device side of a CUDA measurement, on torch's current stream:
    what _measure_device needs and nothing else, so that the method
    selection and its fallbacks can be tested without a GPU (tests give
    _measure_device a stand-in with the same methods)."""

    def __init__(self, torch, l2_flush):
        self.torch = torch
        self.index = torch.cuda.current_device()
        self.buf = _cuda_flush_buffer(torch, self.index) if l2_flush else None
        self._sleep = getattr(torch.cuda, "_sleep", None)
        self.rate = _sleep_cycles_per_us(torch) if self._sleep is not None else None

    def sync(self):
        self.torch.cuda.synchronize()

    def flush(self):
        """Enqueue an L2 flush (nothing without a flush buffer)."""
        if self.buf is not None:
            _l2_flush(self.torch, self.buf)

    def flush_ms(self):
        return _flush_us(self.torch, self.buf) / 1e3 if self.buf is not None else 0.0

    def spin_us(self, us):
        """Enqueue about us microseconds of device work that touches no memory."""
        if self._sleep is not None and self.rate and us > 0:
            self._sleep(int(us * self.rate))

    def event(self):
        return self.torch.cuda.Event(enable_timing=True)

    def record(self, ev):
        ev.record(self.torch.cuda.current_stream())

    def wait_event(self, ev):
        """Return once the timed stream has passed ev: polled, so no late
        wake-up of a blocking wait is timed (at most EVENT_POLL_S, then a
        blocking wait)."""
        t = time.perf_counter()
        while not ev.query():
            if time.perf_counter() - t > EVENT_POLL_S:
                ev.synchronize()
                return

    def elapsed_ms(self, start, end):
        return start.elapsed_time(end)

    def warm_clocks(self, ms):
        """A fixed warm-up: ms of device work (flushes: every SM and the
        memory busy), so clocks have left their idle state before anything
        is timed. The clocks themselves are never set (METHOD.md)."""
        if ms <= 0:
            return
        if self.buf is not None:
            per = max(self.flush_ms(), 1e-3)
            for _ in range(min(int(math.ceil(ms / per)), 4000)):
                self.flush()
        else:
            self.spin_us(ms * 1e3)
        self.sync()

    def capture_unsupported(self):
        """Why graphs cannot be captured here, or None."""
        cuda = self.torch.cuda
        if not hasattr(cuda, "CUDAGraph"):
            return "this torch has no CUDA graphs"
        try:
            if cuda.current_stream() == cuda.default_stream():
                return "timing runs on the default stream, which cannot be captured"
        except Exception as e:  # pragma: no cover - torch without streams
            return "could not read the current stream: %s" % _one_line(e)
        return None

    def capture(self, body):
        """A CUDAGraph of what body() enqueues on the current stream, replayed
        once (untimed). Global capture mode: a call that is not capturable
        (an allocation, a synchronisation, the legacy stream) fails and
        invalidates the capture instead of running. Raises CaptureError and
        leaves the stream usable when anything fails; an error the device
        does not recover from propagates as it is."""
        cuda = self.torch.cuda
        g = cuda.CUDAGraph()
        self.sync()
        try:
            try:
                g.capture_begin(capture_error_mode="global")
            except TypeError:   # torch 2.0: no capture_error_mode
                g.capture_begin()
        except Exception as e:
            raise CaptureError("could not begin a capture: %s" % _one_line(e))
        failure = None
        try:
            body()
        except Exception as e:  # a fn that fails under capture: not graph-timed
            failure = e
        try:
            g.capture_end()     # ends the capture even when it was invalidated
        except Exception as e:
            failure = failure or e
        if failure is None:
            try:
                g.replay()
                self.sync()
            except Exception as e:
                failure = e
        if failure is not None:
            self._recover()
            self.drop(g)
            if isinstance(failure, CaptureError):
                raise failure
            raise CaptureError(_one_line(failure))
        return g

    def _recover(self):
        """After a failed capture: the device must still work, or the error
        is real (a fault in the kernel) and propagates."""
        cuda = self.torch.cuda
        try:
            capturing = cuda.is_current_stream_capturing()
        except Exception:
            capturing = False
        if capturing:  # pragma: no cover - capture_end always ends it
            raise RuntimeError("the timing stream is still capturing after a failed capture")
        # A refused call may leave its error pending in the runtime a kernel
        # shares with torch; the first checked launch reports (and clears)
        # it, so one failure is forgiven. A sticky error fails twice.
        zeros = getattr(self.torch, "zeros", None)
        for attempt in (1, 2):
            try:
                self.sync()
                if zeros is not None:
                    zeros(1, device="cuda:%d" % self.index).add_(1)
                    self.sync()
                return
            except RuntimeError:
                if attempt == 2:
                    raise

    def replay(self, g):
        g.replay()

    def drop(self, g):
        try:
            g.reset()
        except Exception:
            pass


# ------------------------------------------------------ CUDA measurement

class _EventTimer:
    """Per-call CUDA events (the "events" method), plus the device-sync
    cross-check calls that every method shares. Each step is one repetition
    of every fn, in an order rotated by the repetition number."""

    def __init__(self, dev, fns, names, lead_us, sync_latency_ms, flush_us=0.0,
                 prepare=None):
        self.dev, self.fns, self.names = dev, fns, names
        self.prepare = prepare or {}
        self.lead_us = lead_us
        self.flush_us = flush_us
        self.starved = {n: 0 for n in names}
        self.sync_latency_ms = sync_latency_ms
        self.null_samples = {n: [] for n in names}  # sync_check's null stand-ins
        self.tails = {n: [] for n in names}         # end event passed -> device idle
        self.null_tails = {n: [] for n in names}
        self.samples = {n: [] for n in names}
        self.sync_samples = {n: [] for n in names}
        self.host_samples = {n: [] for n in names}
        self.totals = {n: 0.0 for n in names}
        self.reps = 0
        self.tail_batch = {n: 1 for n in names}     # calls per cross-check batch
        self.enqueue = {n: [] for n in names}       # host time to enqueue each batch
        self.lag = {n: [] for n in names}           # host saw the end event this late

    def size_tail_batches(self, host_us):
        """Calls per cross-check batch, once the probe has measured each fn
        (host_us: its median host time per call from the warm-up): about
        TAIL_BATCH_MS of calls, within [1, TAIL_MAX_BATCH]. Tails of the
        single calls checked so far are dropped: the shortest tail is what
        counts, and a single call's hides what queues up over a batch."""
        for name in self.names:
            med = _median(self.samples[name]) if self.samples[name] else None
            per = max(med or 0.0, (host_us.get(name) or 0.0) / 1e3, 1e-3)
            k = max(1, min(TAIL_MAX_BATCH, int(math.ceil(TAIL_BATCH_MS / per))))
            self.tail_batch[name] = k
            if k > 1:
                self.tails[name], self.null_tails[name] = [], []
                self.enqueue[name], self.lag[name] = [], []

    def _lead(self, name, spin=True, prep=True):
        # the fn's preparation is enqueued first: the flush then evicts
        # what it wrote, and both end before the start event
        if prep:
            self._prep(name)
        self.dev.flush()
        if spin:
            self.dev.spin_us(self.lead_us[name])

    def _prep(self, name):
        prep = self.prepare.get(name)
        if prep is not None:
            prep()

    def step(self):
        dev = self.dev
        order = _rotated(self.names, self.reps)
        for name in order:
            start, end = dev.event(), dev.event()
            self._lead(name)
            t0 = time.perf_counter()
            dev.record(start)
            self.fns[name]()
            dev.record(end)
            host_us = (time.perf_counter() - t0) * 1e6
            # device-wide, after the end event: work one fn left running on
            # another stream cannot slow down the next fn's timing
            dev.sync()
            ms = dev.elapsed_ms(start, end)
            if self._host_starved(name, host_us, ms):
                continue
            self.samples[name].append(ms)
            self.totals[name] += ms
        if self.reps % SYNC_EVERY == 0:
            self.sync_check(order)
        self.reps += 1

    def _host_starved(self, name, host_us, ms):
        """True when the host took longer to enqueue the repetition than the
        device work queued ahead of it lasted, and the events' time holds
        that gap (the events then timed the host): the lead grows, and the
        sample is dropped while drops stay under HOST_STARVED_MAX_SHARE of
        the repetitions."""
        gap_us = host_us - (self.lead_us[name] + self.flush_us)
        if gap_us <= 0 or ms * 1e3 < gap_us:
            return False
        want = min(LEAD_HOST_FACTOR * host_us + LEAD_MARGIN_US, LEAD_MAX_US) - self.flush_us
        self.lead_us[name] = max(self.lead_us[name], want)
        if self.starved[name] >= max(4, HOST_STARVED_MAX_SHARE * (self.reps + 1)):
            return False
        self.starved[name] += 1
        return True

    def _sync_one(self, name, null=False):
        """One cross-check of fn name (or, null=True, of its stand-in: a
        spin on the timed stream as long as tail_batch of the fn's events
        median so far), from an idle device: tail_batch calls back to back,
        an end event on the timed stream after them, polled until passed,
        then a device-wide sync. The tail (event passed to device idle) is
        work on other streams, queued up over the batch. No spin goes
        first: work a call starts on another stream would run under it
        unseen."""
        dev = self.dev
        k = self.tail_batch[name]
        self._lead(name, spin=False, prep=not null)
        dev.sync()
        start, end = dev.event(), dev.event()
        dev.record(start)
        t0 = time.perf_counter()
        prep_s = 0.0
        if null:
            med = _median(self.samples[name]) if self.samples[name] else None
            dev.spin_us(k * med * 1e3 if med else NULL_SPIN_US)
        else:
            fn, prep = self.fns[name], self.prepare.get(name)
            for i in range(k):
                if prep is not None and i > 0:
                    # each call of the batch on fresh outputs; the
                    # preparation's host time is not the fn's launch cost
                    t_p = time.perf_counter()
                    prep()
                    prep_s += time.perf_counter() - t_p
                fn()
        t1 = time.perf_counter()
        dev.record(end)
        dev.wait_event(end)
        te = time.perf_counter()
        dev.sync()
        t2 = time.perf_counter()
        if null:
            self.null_samples[name].append((t2 - t0) * 1e3)
            self.null_tails[name].append((t2 - te) * 1e3)
        else:
            self.host_samples[name].append((t1 - t0 - prep_s) * 1e3 / k)
            self.sync_samples[name].append((t2 - t0) * 1e3)
            self.tails[name].append((t2 - te) * 1e3)
            self.enqueue[name].append((t1 - t0) * 1e3)
            # how long after the timed stream's span the host saw its end
            # event (a host descheduled while polling sees it late, and
            # the hidden queue drains meanwhile)
            self.lag[name].append((te - t0) * 1e3 - dev.elapsed_ms(start, end))

    def sync_check(self, order):
        """Extra calls, untimed by events: from an idle device to the end of
        a device-wide sync, which also waits for other streams; each paired
        with its null stand-in, timed alike right after it."""
        for name in order:
            self._sync_one(name)
            self._sync_one(name, null=True)

    def _excess_ms(self, name):
        """The fn's shortest tail minus its null's shortest: how long the
        device stayed busy after the timed stream had passed the fn's end
        event, beyond what an idle sync costs. Minima, because what a
        loaded host or other processes add is never negative and comes
        and goes, while work hidden on another stream is in every call."""
        if self.tails[name] and self.null_tails[name]:
            return min(self._steady_tails(name)) - min(self.null_tails[name])
        sync_med = _median(self.sync_samples[name]) if self.sync_samples[name] else None
        return None if sync_med is None else sync_med - self.sync_latency_ms

    def _steady_tails(self, name):
        """The fn's tails, less those of batches where the host stalled:
        it took over STEADY_FACTOR x the median (+ STEADY_SLACK_MS) to
        enqueue the batch, or saw the end event that much later after the
        timed stream's span than usual. A stalled host lets work hidden
        on another stream drain while it should queue up or be seen, and
        the shortest tail would then hide it. Never empty."""
        tails, enq, lag = self.tails[name], self.enqueue[name], self.lag[name]
        if not (len(enq) == len(lag) == len(tails)) or len(tails) < 3:
            return tails
        lim_e = STEADY_FACTOR * _median(enq) + STEADY_SLACK_MS
        med_l = _median(lag)
        lim_l = med_l + abs(med_l) * (STEADY_FACTOR - 1.0) + STEADY_SLACK_MS
        kept = [t for t, e, g in zip(tails, enq, lag) if e <= lim_e and g <= lim_l]
        return kept or tails

    def _suspect(self, name, median_ms):
        excess = self._excess_ms(name)
        host_med = _median(self.host_samples[name]) if self.host_samples[name] else None
        if excess is None or median_ms is None:
            return False
        ref = max(median_ms, host_med or 0.0)
        return excess > SIDE_STREAM_FACTOR * ref + SIDE_STREAM_SLACK_MS

    def enough(self, min_time_ms, max_reps):
        return _enough(self.totals, self.reps, min_time_ms, max_reps)

    def precise(self, target):
        """True once every fn's median is known to +-target (ci_rel), after
        at least EVENTS_CI_MIN_REPS repetitions, checked every
        EVENTS_CI_EVERY: a launch-bound call never reaches min_time_ms, and
        its last hundreds of repetitions only narrow an interval that is
        already far inside what a speedup is reported to."""
        if not target or self.reps < EVENTS_CI_MIN_REPS or self.reps % EVENTS_CI_EVERY:
            return False
        return all(_known_to(self.samples[name], target) for name in self.names)

    def medians(self):
        return {n: _median(self.samples[n]) if self.samples[n] else None
                for n in self.names}

    def stats(self, name):
        st = stats(self.samples[name])
        st["total_ms"] = self.totals[name]
        st.update({"batch": 1, "samples": st["reps"],
                   "ci_rel": ci_rel(self.samples[name]),
                   "sample_ms": list(self.samples[name])})
        return st

    def finish(self, per_name, method, reason):
        """Add the cross-check figures and the method to each fn's stats."""
        out = {}
        for name in self.names:
            st = per_name[name]
            suspect = self._suspect(name, st["median_ms"])
            if suspect:
                # a loaded host wakes late now and then: only a fn that
                # stays suspect over more paired checks is flagged
                for _ in range(CONFIRM_CHECKS):
                    self._sync_one(name)
                    self._sync_one(name, null=True)
                suspect = self._suspect(name, st["median_ms"])
            sync_med = _median(self.sync_samples[name]) if self.sync_samples[name] else None
            host_med = _median(self.host_samples[name]) if self.host_samples[name] else None
            st["sync_median_ms"] = sync_med
            st["host_median_ms"] = host_med
            st["sync_null_ms"] = _median(self.null_samples[name]) \
                if self.null_samples[name] else None
            st["sync_excess_ms"] = self._excess_ms(name)
            st["tail_batch"] = self.tail_batch[name]
            st["host_starved"] = self.starved[name]
            st["side_stream_suspect"] = bool(suspect)
            st["method"] = method
            st["method_reason"] = reason
            out[name] = st
        return out


def _choose(dev, method, est_ms, max_reps, graph_below_ms):
    """("graph" | "events", why) before any capture is tried."""
    shortest = min((v for v in est_ms.values() if v is not None), default=None)
    if method == "events":
        return "events", "events requested"
    if method == "auto":
        if shortest is None:
            return "events", "no per-call estimate"
        if shortest >= graph_below_ms:
            return "events", ("shortest call %.4f ms >= %.4f ms: per-call events resolve it"
                              % (shortest, graph_below_ms))
        longest = max(v for v in est_ms.values() if v is not None)
        n = graph_batch(shortest, max_reps)
        if n * longest > GRAPH_REPLAY_MAX_MS:
            return "events", ("a batch of %d calls of %.4f ms (the longest) would replay for "
                              "over %.0f ms: per-call events" % (n, longest, GRAPH_REPLAY_MAX_MS))
    why = dev.capture_unsupported()
    if why:
        return "events", why
    if max_reps < GRAPH_MIN_ROUNDS * GRAPH_MIN_BATCH:
        return "events", ("max_reps %d leaves too few calls for %d graph batches of %d"
                          % (max_reps, GRAPH_MIN_ROUNDS, GRAPH_MIN_BATCH))
    return "graph", None


def graph_batch(shortest_ms, max_reps):
    """Calls per captured batch: about GRAPH_BATCH_MS of the shortest fn's
    device time, within [GRAPH_MIN_BATCH, GRAPH_MAX_BATCH], and small enough
    that GRAPH_MIN_ROUNDS batches fit in max_reps calls."""
    per = shortest_ms if shortest_ms and shortest_ms > 0 else 1e-4
    n = int(math.ceil(GRAPH_BATCH_MS / max(per, 1e-4)))
    n = max(GRAPH_MIN_BATCH, min(GRAPH_MAX_BATCH, n))
    return max(1, min(n, max_reps // GRAPH_MIN_ROUNDS))


_FLUSH = object()   # key of the flushes-only graph


def _measure_graph(dev, fns, names, ev, est_ms, min_time_ms, max_reps, ci_target,
                   prepare=None):
    """The "graph" method: per fn a CUDA graph of n (L2 flush, call) pairs
    and one graph of n flushes alone, replayed in rotated order each round,
    each replay between two events. A round gives every fn one sample,
    (its replay - the flush replay of the same round) / n. Rounds run until
    the median's relative CI is within ci_target (or min_time_ms of
    measured call time) after GRAPH_MIN_ROUNDS, or max_reps calls.
    Returns (per-fn stats, None) or (None, why it fell back)."""
    n = graph_batch(min(v for v in est_ms.values() if v is not None), max_reps)
    prepare = prepare or {}
    graphs = {}
    current = "flushes"

    def pairs(fn, name):
        prep = prepare.get(name)

        def body():
            for _ in range(n):
                if prep is not None:
                    prep()
                dev.flush()
                if _bad_rc(fn()):
                    raise CaptureError("'%s' returned non-zero under capture" % name)
        return body

    def flushes(prep=None):
        def body():
            for _ in range(n):
                if prep is not None:
                    prep()
                dev.flush()
        return body

    # a fn with a preparation is measured against (preparation, flush)
    # pairs: its sample is its calls alone
    base = {name: (_FLUSH, name) if name in prepare else _FLUSH for name in names}
    try:
        try:
            graphs[_FLUSH] = dev.capture(flushes())
            for name in names:
                current = name
                if name in prepare:
                    graphs[base[name]] = dev.capture(flushes(prepare[name]))
                graphs[name] = dev.capture(pairs(fns[name], name))
        except CaptureError as e:
            return None, "graph capture of '%s' failed (%s): timed per call" % (current, e)

        # the host enqueues each replay while a spin ahead of it keeps the
        # device busy, so the start event is not reached early
        host = []
        for g in graphs.values():
            t0 = time.perf_counter()
            dev.replay(g)
            host.append((time.perf_counter() - t0) * 1e6)
            dev.sync()
        lead_us = min(LEAD_HOST_FACTOR * max(host) + LEAD_MARGIN_US, LEAD_MAX_US)

        def timed(g):
            start, end = dev.event(), dev.event()
            dev.spin_us(lead_us)
            dev.record(start)
            dev.replay(g)
            dev.record(end)
            dev.sync()
            return dev.elapsed_ms(start, end)

        keys = list(graphs)
        samples = {name: [] for name in names}
        flush_samples = []
        rounds = 0
        while True:
            order = _rotated(keys, rounds)
            t = {}
            for key in order:
                t[key] = timed(graphs[key])
            for name in names:
                samples[name].append((t[name] - t[base[name]]) / n)
            flush_samples.append(t[_FLUSH] / n)
            if rounds % SYNC_EVERY == 0:
                ev.sync_check([k for k in order if k in samples])
            rounds += 1
            if (rounds + 1) * n > max_reps:
                break
            if rounds >= GRAPH_MIN_ROUNDS:
                cis = [ci_rel(samples[name]) for name in names]
                if all(c is not None and c <= ci_target for c in cis):
                    break
                if max(sum(samples[name]) * n for name in names) >= min_time_ms:
                    break
    finally:
        for g in graphs.values():
            dev.drop(g)

    # a graph much faster than the same fn timed alone measured something
    # else (e.g. work skipped while capturing): trust the per-call events
    out = {}
    for name in names:
        med, alone = _median(samples[name]), est_ms.get(name)
        if alone is not None and med < GRAPH_TRUST * alone and \
                alone - med > GRAPH_TRUST_SLACK_MS:
            return None, ("graph replay of '%s' gave %.4f ms a call against %.4f ms "
                          "timed alone: timed per call" % (name, med, alone))
        st = stats(samples[name])
        st.update({"reps": rounds * n, "total_ms": sum(samples[name]) * n,
                   "batch": n, "samples": rounds, "ci_rel": ci_rel(samples[name]),
                   "flush_ms": _median(flush_samples), "events_median_ms": alone,
                   "sample_ms": samples[name]})
        out[name] = st
    return out, None


def _measure_device(dev, fns, names, warmup, min_time_ms, max_reps,
                    method="auto", ci_target=None, graph_below_ms=None, prepare=None):
    """measure() on a CUDA device (dev: TorchCuda or a stand-in)."""
    events_ci = EVENTS_CI_TARGET if ci_target is None else float(ci_target)
    ci_target = CI_TARGET if ci_target is None else float(ci_target)
    graph_below_ms = GRAPH_BELOW_MS if graph_below_ms is None else float(graph_below_ms)
    dev.warm_clocks(CLOCK_WARM_MS)

    # warm-up, noting each fn's host-side cost (launch overhead, guards)
    host_warm = {n: [] for n in names}
    for _ in range(warmup):
        for name in names:
            if prepare and name in prepare:
                prepare[name]()
            t0 = time.perf_counter()
            fns[name]()
            host_warm[name].append((time.perf_counter() - t0) * 1e6)
        dev.sync()

    # Device time queued ahead of each start event, so the device is still
    # busy when the host has finished enqueueing the call: otherwise the
    # host's launch overhead lands between the events and is timed.
    flush_us = dev.flush_ms() * 1e3
    lead_us = {}
    for name in names:
        host_us = _median(host_warm[name]) if host_warm[name] else DEFAULT_HOST_US
        lead_us[name] = max(0.0, min(LEAD_HOST_FACTOR * host_us + LEAD_MARGIN_US,
                                     LEAD_MAX_US) - flush_us)

    # latency of synchronize() on an idle device, subtracted in the check
    lat = []
    for _ in range(5):
        t0 = time.perf_counter()
        dev.sync()
        lat.append((time.perf_counter() - t0) * 1e3)
    ev = _EventTimer(dev, fns, names, lead_us, _median(lat), flush_us, prepare)

    # a few per-call repetitions first: the estimate that picks the method,
    # and the reference a graph's result is checked against
    while ev.reps < min(PROBE_REPS, max_reps):
        ev.step()
    ev.size_tail_batches({n: _median(host_warm[n]) if host_warm[n] else None
                          for n in names})
    est = ev.medians()
    chosen, why = _choose(dev, method, est, max_reps, graph_below_ms)
    if chosen == "graph":
        per_name, fell_back = _measure_graph(dev, fns, names, ev, est, min_time_ms,
                                             max_reps, ci_target, prepare)
        if per_name is not None:
            shortest = min(v for v in est.values() if v is not None)
            return ev.finish(per_name, "graph", (
                "graph replay of %d (L2 flush, call) pairs minus %d flushes: "
                "shortest call %.4f ms" % (per_name[names[0]]["batch"],
                                           per_name[names[0]]["batch"], shortest)))
        why = fell_back
    while not ev.enough(min_time_ms, max_reps) and not ev.precise(events_ci):
        ev.step()
    out = ev.finish({n: ev.stats(n) for n in names}, "events", why)
    for st in out.values():
        st["flush_ms"] = flush_us / 1e3   # one flush, before each timed call
    return out


def _measure_cuda(fns, names, warmup, min_time_ms, max_reps, l2_flush, method,
                  ci_target, graph_below_ms, prepare):
    import torch

    dev = TorchCuda(torch, l2_flush)
    return _measure_device(dev, fns, names, warmup, min_time_ms, max_reps,
                           method, ci_target, graph_below_ms, prepare)


def measure(fns, *, device, warmup=5, min_time_ms=100, max_reps=1000,
            l2_flush=True, method="auto", ci_target=None, graph_below_ms=None,
            prepare=None):
    """Time each zero-argument callable of `fns`, interleaved; see module doc."""
    if not fns:
        return {}
    prepare = {n: p for n, p in (prepare or {}).items() if p is not None}
    unknown = sorted(set(prepare) - set(fns))
    if unknown:
        raise ValueError("prepare names no fn: %s" % ", ".join(map(str, unknown)))
    if device not in ("cpu", "cuda"):
        raise ValueError("unknown timing device '%s'" % device)
    if method not in METHODS:
        raise ValueError("unknown timing method '%s'" % method)
    names = list(fns)
    warmup = max(0, int(warmup))
    max_reps = max(1, int(max_reps))
    min_time_ms = float(min_time_ms)
    if device == "cuda":
        return _measure_cuda(fns, names, warmup, min_time_ms, max_reps,
                             l2_flush, method, ci_target, graph_below_ms, prepare)
    return _measure_cpu(fns, names, warmup, min_time_ms, max_reps, l2_flush, prepare)


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
        if mode is None:
            # a runner-wide override (KB_COMPILE_MODE), e.g. "default" where
            # max-autotune's GEMM search would not fit a benchmark's time
            env_mode = os.environ.get("KB_COMPILE_MODE") or None
            mode = None if env_mode == "default" else env_mode
        if mode is None and str(device).startswith("cuda") and \
                os.environ.get("KB_COMPILE_MODE") != "default":
            # Not "max-autotune": that mode adds CUDA graphs, whose replays
            # write every output into the same static buffers (an output
            # kept from an earlier call is overwritten by the next), copy
            # inputs into static buffers inside the call, and hide launch
            # overhead that the candidate, launched eagerly, pays. Without
            # graphs the baseline gets the same autotuned kernels and is
            # timed like the candidate.
            mode = "max-autotune-no-cudagraphs"
        # dynamic=False: one graph specialised to each config's shapes.
        # Otherwise dynamo's automatic dynamic shapes compile every config
        # after the first as a dynamic-shape graph, a weaker baseline than
        # what a user who compiles for one shape gets.
        kwargs = {"dynamic": False}
        if mode is not None:
            kwargs["mode"] = mode
        try:
            compiled = torch.compile(model_or_fn, **kwargs)
        except TypeError:  # a torch.compile without the dynamic argument
            kwargs.pop("dynamic")
            compiled = torch.compile(model_or_fn, **kwargs)
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
