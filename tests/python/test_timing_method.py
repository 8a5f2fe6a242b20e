"""How bench/harness/timing.py picks a CUDA timing method and falls back,
run here without a GPU: _measure_device, the real CUDA measurement loop,
drives a stand-in device with a virtual clock (FakeDevice), and TorchCuda's
capture and recovery run against a stand-in torch.cuda."""

import math
import os
import random
import sys
import time
import types

import pytest

TOP = os.environ.get("KB_TOP") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))

from kernelbot_harness.timing import measure as timing  # noqa: E402


# ------------------------------------------------------------ a fake device

class FakeGraph:
    def __init__(self, ops):
        self.ops = ops
        self.dropped = False


class FakeDevice:
    """A device whose work runs at once on a virtual clock (microseconds):
    events read the clock, a capture records ops instead of running them,
    a replay runs the recorded ops. jitter(op) adds noise per op run.
    `hidden_s` is real time the next sync() waits: work on another stream."""

    def __init__(self, flush_us=50.0, jitter=None):
        self.flush_us = flush_us
        self.jitter = jitter or (lambda op: 0.0)
        self.now = 0.0
        self.capturing = None
        self.invalid = False
        self.unsupported = None
        self.hidden_s = 0.0
        self.log = []           # ops run, in order
        self.graphs = []        # every graph captured
        self.replays = []       # graph of each replay
        self.eager_calls = 0    # fn calls outside a capture

    # work
    def _run(self, op, us):
        if self.capturing is not None:
            self.capturing.append((op, us))
            return
        self.now += us + self.jitter(op)
        self.log.append(op)

    def kernel(self, us):
        if self.capturing is None:
            self.eager_calls += 1
        self._run("kernel", us)

    def unsafe(self):
        """Like cudaMalloc in a global-mode capture: refused, capture invalid."""
        if self.capturing is not None:
            self.invalid = True
            return 1
        return 0

    # the device interface of timing._measure_device
    def sync(self):
        if self.hidden_s:
            time.sleep(self.hidden_s)
            self.hidden_s = 0.0

    def flush(self):
        self._run("flush", self.flush_us)

    def flush_ms(self):
        return self.flush_us / 1e3

    def spin_us(self, us):
        self._run("spin", us)

    def event(self):
        return [None]

    def record(self, ev):
        assert self.capturing is None, "event recorded inside a capture"
        ev[0] = self.now

    def wait_event(self, ev):
        """The timed stream's work ran at once: nothing to wait for."""

    def elapsed_ms(self, a, b):
        return (b[0] - a[0]) / 1e3

    def warm_clocks(self, ms):
        self.log.append(("warm", ms))
        self.now += ms * 1e3

    def capture_unsupported(self):
        return self.unsupported

    def capture(self, body):
        self.capturing, self.invalid = [], False
        failure = None
        try:
            body()
        except Exception as e:
            failure = e
        ops, self.capturing = self.capturing, None
        if failure is not None or self.invalid:
            raise timing.CaptureError(str(failure) if failure else "invalidated")
        g = FakeGraph(ops)
        self.graphs.append(g)
        return g

    def replay(self, g):
        assert not g.dropped
        self.replays.append(g)
        for op, us in g.ops:
            self.now += us + self.jitter(op)

    def drop(self, g):
        g.dropped = True


def run(dev, fns, **kw):
    args = dict(warmup=2, min_time_ms=100, max_reps=1000)
    args.update(kw)
    return timing._measure_device(dev, fns, list(fns), args.pop("warmup"),
                                  args.pop("min_time_ms"), args.pop("max_reps"), **args)


def methods(res):
    return {r["method"] for r in res.values()}


# ---------------------------------------------------------- method choice

def test_short_calls_use_graphs_and_subtract_the_flushes():
    dev = FakeDevice()
    res = run(dev, {"kernel": lambda: dev.kernel(4.0), "eager": lambda: dev.kernel(6.0)})
    assert methods(res) == {"graph"}
    k, e = res["kernel"], res["eager"]
    assert k["median_ms"] == pytest.approx(0.004)
    assert e["median_ms"] == pytest.approx(0.006)
    # one batch size for all: sized by the shortest call
    assert k["batch"] == e["batch"] == math.ceil(timing.GRAPH_BATCH_MS / 0.004)
    assert k["flush_ms"] == pytest.approx(0.05)
    assert k["events_median_ms"] == pytest.approx(0.004)
    # noiseless: the CI target is met at the first chance
    assert k["samples"] == timing.GRAPH_MIN_ROUNDS
    assert k["reps"] == k["samples"] * k["batch"] <= 1000
    assert k["ci_rel"] == 0.0
    assert "graph replay" in k["method_reason"]
    assert all(g.dropped for g in dev.graphs)


def test_captured_graphs_hold_a_flush_before_every_call():
    dev = FakeDevice()
    res = run(dev, {"kernel": lambda: dev.kernel(4.0)})
    n = res["kernel"]["batch"]
    flushes, pairs = dev.graphs
    assert [op for op, _ in flushes.ops] == ["flush"] * n
    assert [op for op, _ in pairs.ops] == ["flush", "kernel"] * n


@pytest.mark.parametrize("method", ["graph", "events"])
def test_prepare_runs_before_every_call_and_is_not_timed(method):
    """A kernel that skips its work when its output already holds the
    answer, with a prepare hook that spoils the output (30 us of device
    work): every call computes, in the timed loop, in graphs and in the
    cross-check batches, and the hook's device time is not in the figures."""
    dev = FakeDevice()
    state = {"fresh": True}

    def kernel():
        if state["fresh"]:
            dev._run("mine", 4.0)
        state["fresh"] = False

    def prepare():
        state["fresh"] = True
        dev._run("prep", 30.0)
    res = run(dev, {"kernel": kernel, "eager": lambda: dev.kernel(6.0)},
              method=method, prepare={"kernel": prepare})
    assert methods(res) == {method}
    assert res["kernel"]["median_ms"] == pytest.approx(0.004)
    assert res["eager"]["median_ms"] == pytest.approx(0.006)
    assert not res["kernel"]["side_stream_suspect"]
    # every call outside graphs (warm-up, timed, cross-check batches) came
    # right after the hook: nothing ran twice on one output
    ops = [op for op in dev.log if op in ("prep", "mine")]
    assert ops and ops == ["prep", "mine"] * (len(ops) // 2)
    if method == "graph":
        n = res["kernel"]["batch"]
        assert [op for op, _ in dev.graphs[1].ops] == ["prep", "flush"] * n
        assert [op for op, _ in dev.graphs[2].ops] == ["prep", "flush", "mine"] * n
    # without the hook the skipped work times as free
    dev = FakeDevice()
    state["fresh"] = True
    res = run(dev, {"kernel": kernel, "eager": lambda: dev.kernel(6.0)}, method=method)
    assert res["kernel"]["median_ms"] < 0.001


def test_long_calls_use_events():
    dev = FakeDevice()
    res = run(dev, {"kernel": lambda: dev.kernel(150.0), "eager": lambda: dev.kernel(300.0)})
    assert methods(res) == {"events"}
    assert res["kernel"]["median_ms"] == pytest.approx(0.15)
    assert res["kernel"]["batch"] == 1
    assert ">=" in res["kernel"]["method_reason"]
    assert not dev.graphs
    # the flush's cost is in the figures, so its share of a timing can be told
    assert res["kernel"]["flush_ms"] == pytest.approx(dev.flush_ms())


def test_one_short_call_puts_every_fn_on_graphs():
    """Like for like: a longer eager baseline is graph-timed with a short kernel."""
    dev = FakeDevice()
    res = run(dev, {"kernel": lambda: dev.kernel(20.0), "eager": lambda: dev.kernel(500.0)})
    assert methods(res) == {"graph"}
    assert res["kernel"]["batch"] == 10
    assert res["eager"]["median_ms"] == pytest.approx(0.5)


def test_a_slow_baseline_keeps_a_short_kernel_on_events():
    """A batch of a slow baseline would make every round long: events."""
    dev = FakeDevice()
    res = run(dev, {"kernel": lambda: dev.kernel(5.0), "eager": lambda: dev.kernel(500.0)})
    assert methods(res) == {"events"}
    assert "longest" in res["kernel"]["method_reason"]
    assert not dev.graphs


def test_forced_methods():
    dev = FakeDevice()
    res = run(dev, {"kernel": lambda: dev.kernel(4.0)}, method="events")
    assert methods(res) == {"events"} and res["kernel"]["method_reason"] == "events requested"
    dev = FakeDevice()
    res = run(dev, {"kernel": lambda: dev.kernel(200.0)}, method="graph")
    assert methods(res) == {"graph"}
    assert res["kernel"]["batch"] == timing.GRAPH_MIN_BATCH
    assert res["kernel"]["median_ms"] == pytest.approx(0.2)
    with pytest.raises(ValueError):
        timing.measure({"a": lambda: None}, device="cpu", method="sometimes")


def test_graph_batch_bounds():
    assert timing.graph_batch(0.004, 1000) == 50
    assert timing.graph_batch(0.0001, 1000) == timing.GRAPH_MAX_BATCH
    assert timing.graph_batch(0.09, 1000) == timing.GRAPH_MIN_BATCH
    assert timing.graph_batch(0.004, 200) == 200 // timing.GRAPH_MIN_ROUNDS
    assert timing.graph_batch(0.0, 1000) == timing.GRAPH_MAX_BATCH


def test_no_capture_where_the_device_cannot():
    dev = FakeDevice()
    dev.unsupported = "timing runs on the default stream, which cannot be captured"
    res = run(dev, {"kernel": lambda: dev.kernel(4.0)})
    assert methods(res) == {"events"}
    assert res["kernel"]["method_reason"] == dev.unsupported
    dev = FakeDevice()
    res = run(dev, {"kernel": lambda: dev.kernel(4.0)}, max_reps=50)
    assert methods(res) == {"events"} and "max_reps 50" in res["kernel"]["method_reason"]
    assert res["kernel"]["reps"] == 50


# -------------------------------------------------------------- fallbacks

def test_uncapturable_kernel_puts_every_fn_on_events():
    """A kernel that allocates inside its call: the capture is invalidated,
    and eager is timed per call with it."""
    dev = FakeDevice()

    def kernel():
        dev.unsafe()
        dev.kernel(4.0)
    res = run(dev, {"eager": lambda: dev.kernel(6.0), "kernel": kernel})
    assert methods(res) == {"events"}
    why = res["kernel"]["method_reason"]
    assert "'kernel'" in why and "failed" in why
    assert res["eager"]["method_reason"] == why
    assert res["kernel"]["median_ms"] == pytest.approx(0.004)
    assert res["eager"]["median_ms"] == pytest.approx(0.006)
    assert dev.capturing is None
    assert dev.graphs and all(g.dropped for g in dev.graphs)
    # the events method then ran to its own stopping rule: noiseless, the
    # +-1% interval holds at the first look
    assert res["kernel"]["reps"] == timing.EVENTS_CI_MIN_REPS


def test_native_call_refused_under_capture():
    """A native ABI call that returns non-zero while captured (its
    cudaMalloc was refused) is not graph-timed, even if nothing raised."""
    dev = FakeDevice()

    def native():
        if dev.capturing is not None:
            return 2
        dev.kernel(4.0)
        return 0
    res = run(dev, {"kernel": native})
    assert methods(res) == {"events"}
    assert "non-zero" in res["kernel"]["method_reason"]


def test_exception_under_capture_falls_back():
    dev = FakeDevice()

    def kernel():
        if dev.capturing is not None:
            raise RuntimeError("operation not permitted when stream is capturing")
        dev.kernel(4.0)
    res = run(dev, {"kernel": kernel})
    assert methods(res) == {"events"}
    assert "not permitted" in res["kernel"]["method_reason"]


def test_exception_outside_capture_propagates():
    dev = FakeDevice()

    def boom():
        raise RuntimeError("kernel failed")
    with pytest.raises(RuntimeError):
        run(dev, {"kernel": boom})


def test_work_skipped_while_captured_is_not_trusted():
    """A kernel that does less when it sees a capture must not look fast."""
    dev = FakeDevice()

    def sly():
        dev.kernel(0.01 if dev.capturing is not None else 8.0)
    res = run(dev, {"kernel": sly, "eager": lambda: dev.kernel(8.0)})
    assert methods(res) == {"events"}
    assert "timed alone" in res["kernel"]["method_reason"]
    assert res["kernel"]["median_ms"] == pytest.approx(0.008)


# ---------------------------------------------------------- rounds and order

def test_ci_target_and_max_reps_bound_the_rounds():
    rng = random.Random(5)
    noise = lambda op: rng.gauss(0.0, 0.4) if op == "kernel" else rng.gauss(0.0, 0.5)  # noqa: E731
    dev = FakeDevice(jitter=noise)
    res = run(dev, {"kernel": lambda: dev.kernel(4.0)}, ci_target=1e-9, max_reps=1000)
    k = res["kernel"]
    assert k["samples"] == 1000 // k["batch"]
    assert k["reps"] <= 1000
    assert k["median_ms"] == pytest.approx(0.004, rel=0.1)
    assert k["ci_rel"] is not None and k["ci_rel"] > 0
    dev = FakeDevice(jitter=noise)
    res = run(dev, {"kernel": lambda: dev.kernel(4.0)}, ci_target=0.5)
    assert res["kernel"]["samples"] == timing.GRAPH_MIN_ROUNDS


def test_events_stop_once_every_median_is_known_to_the_target():
    """Per-call events of a launch-bound kernel stop at the CI target, not
    at max_reps: noisier samples take more repetitions, a target of 0
    (or one never met) runs to max_reps, and every fn must meet it."""
    def reps_for(sd_us, target, eager_sd_us=None):
        rng = random.Random(7)
        who = ["kernel"]
        sds = {"kernel": sd_us, "eager": sd_us if eager_sd_us is None else eager_sd_us}

        def noise(op):
            return rng.gauss(0.0, sds[who[0]]) if op == "kernel" else 0.0
        dev = FakeDevice(jitter=noise)

        def call(name, us):
            who[0] = name
            dev.kernel(us)
        res = run(dev, {"kernel": lambda: call("kernel", 4.0), "eager": lambda: call("eager", 5.0)},
                  method="events", ci_target=target, max_reps=1000)
        assert methods(res) == {"events"}
        # repetitions: the samples plus those dropped as host-starved (the
        # host's real clock against the fake device's: a loaded machine
        # drops a few)
        for st in res.values():
            st["repetitions"] = st["reps"] + st["host_starved"]
        for st in res.values():
            assert st["repetitions"] == res["kernel"]["repetitions"]
        return res
    quiet = reps_for(0.05, 0.01)
    noisy = reps_for(0.4, 0.01)
    assert quiet["kernel"]["repetitions"] == timing.EVENTS_CI_MIN_REPS
    assert timing.EVENTS_CI_MIN_REPS < noisy["kernel"]["repetitions"] < 1000
    assert noisy["kernel"]["repetitions"] % timing.EVENTS_CI_EVERY == 0
    assert noisy["kernel"]["ci_rel"] <= 0.01
    # a noisy eager holds the quiet kernel's measurement too
    both = reps_for(0.0, 0.01, eager_sd_us=0.5)
    assert both["kernel"]["repetitions"] > timing.EVENTS_CI_MIN_REPS
    assert reps_for(0.4, 1e-9)["kernel"]["repetitions"] == 1000


def test_events_stop_at_the_timer_resolution():
    """Samples on a 0.5 us grid (CUDA events' step) whose median sits
    between two steps never reach +-1% (one step is 6% of 8 us): the
    interval spanning one step is as known as it gets, and the measurement
    stops; spread over many steps it goes on."""
    rng = random.Random(3)
    two = [8.0 if rng.random() < 0.5 else 8.5 for _ in range(64)]
    assert timing.ci_rel(two) > 0.01
    assert timing._known_to(two, 0.01)
    wide = [7.0] * 30 + [7.5] * 4 + [10.0] * 30
    assert not timing._known_to(wide, 0.01)
    assert timing._known_to([8.0] * 64, 0.01)
    assert not timing._known_to([8.0], 0.01)


def test_min_time_ends_rounds_after_the_minimum():
    rng = random.Random(6)
    dev = FakeDevice(jitter=lambda op: rng.gauss(0.0, 0.5))
    res = run(dev, {"kernel": lambda: dev.kernel(4.0)}, ci_target=1e-9, min_time_ms=0.5)
    assert res["kernel"]["samples"] == timing.GRAPH_MIN_ROUNDS


def test_rounds_rotate_and_are_interleaved():
    dev = FakeDevice()
    res = run(dev, {"kernel": lambda: dev.kernel(4.0), "eager": lambda: dev.kernel(5.0),
                    "compile": lambda: dev.kernel(4.5)})
    rounds = res["kernel"]["samples"]
    timed = dev.replays[len(dev.graphs):]     # after one untimed replay each
    assert len(timed) == rounds * len(dev.graphs)
    firsts = {id(g) for g in (timed[i * 4] for i in range(rounds))}
    assert firsts == {id(g) for g in dev.graphs}


def test_clock_warm_up_comes_first():
    dev = FakeDevice()
    run(dev, {"kernel": lambda: dev.kernel(4.0)})
    assert dev.log[0] == ("warm", timing.CLOCK_WARM_MS)


# ------------------------------------------------------- side-stream guard

@pytest.mark.parametrize("kernel_us", [4.0, 300.0])
def test_side_stream_guard_with_either_method(kernel_us):
    dev = FakeDevice()

    def hidden():
        dev.kernel(kernel_us)
        dev.hidden_s = 0.005          # 5 ms left on another stream

    res = run(dev, {"hidden": hidden, "honest": lambda: dev.kernel(kernel_us)},
              max_reps=400)
    assert methods(res) == {"graph" if kernel_us < 100 else "events"}
    assert res["hidden"]["side_stream_suspect"] is True, res
    assert res["honest"]["side_stream_suspect"] is False, res
    assert res["hidden"]["sync_median_ms"] >= 4.0
    assert res["honest"]["host_median_ms"] is not None


class SlowWakeDevice(FakeDevice):
    """A loaded host: every blocking sync that waits for queued work
    (anything run since the last sync) returns wake_s late; an idle sync
    does not, nor does polling an event (the host is awake)."""

    def __init__(self, wake_s, **kw):
        super().__init__(**kw)
        self.wake_s = wake_s
        self.pending = False

    def _run(self, op, us):
        super()._run(op, us)
        self.pending = True

    def wait_event(self, ev):
        self.pending = False

    def sync(self):
        super().sync()
        if self.pending:
            time.sleep(self.wake_s)
            self.pending = False


def test_side_stream_guard_sees_a_slow_wake_as_the_host_not_the_kernel():
    # 0.3 ms late on every blocking sync that waits (as on the H200 under a
    # loaded host, a 12 us backward kernel): polled end events keep it out
    dev = SlowWakeDevice(0.0003)
    res = run(dev, {"kernel": lambda: dev.kernel(12.0)}, method="events", max_reps=40)
    k = res["kernel"]
    assert k["sync_excess_ms"] < 0.05, k
    assert k["side_stream_suspect"] is False, k


class SharedGpuDevice(SlowWakeDevice):
    """Other processes' time slices: a waiting sync returns 0-3 ms late,
    at random, half of the time."""

    def __init__(self, seed, **kw):
        super().__init__(0.0, **kw)
        self.rng = random.Random(seed)

    def sync(self):
        self.wake_s = 0.0 if self.rng.random() < 0.5 else self.rng.uniform(0.0, 0.003)
        super().sync()


class ContendedGpuDevice(FakeDevice):
    """A GPU shared with busy processes: a call's kernels wait for other
    contexts' time slices, so the timed stream finishes late_s (real time)
    after the host call whenever it ran a kernel; a spin alone is not held
    up. As seen on the H200 with 18 runs at once: a call's kernels ended
    0.1-0.3 ms after a spin of the same length did."""

    def __init__(self, late_s, **kw):
        super().__init__(**kw)
        self.late_s = late_s
        self.kernels = 0

    def kernel(self, us):
        super().kernel(us)
        self.kernels += 1

    def wait_event(self, ev):
        if self.kernels:
            time.sleep(self.late_s)
            self.kernels = 0

    def sync(self):
        super().sync()
        if self.kernels:  # a sync with no event waited on first
            time.sleep(self.late_s)
            self.kernels = 0


def test_side_stream_guard_on_a_contended_gpu():
    # the lateness is before the end event: not work on another stream
    dev = ContendedGpuDevice(0.0003)
    three = lambda: [dev.kernel(4.0) for _ in range(3)]  # noqa: E731
    res = run(dev, {"three": three, "one": lambda: dev.kernel(12.0)}, method="events",
              max_reps=40)
    for name in ("three", "one"):
        assert res[name]["sync_median_ms"] >= 0.25, res[name]
        assert res[name]["sync_excess_ms"] < 0.05, res[name]
        assert res[name]["side_stream_suspect"] is False, res[name]
    # and hidden work is still seen there
    hidden_vs_honest(ContendedGpuDevice(0.0003), 6.0, 40)


def hidden_vs_honest(dev, kernel_us, max_reps):
    """Time a call that leaves 4 ms on another stream beside an honest one."""
    def hidden():
        dev.kernel(kernel_us)
        dev.hidden_s = 0.004

    res = run(dev, {"hidden": hidden, "honest": lambda: dev.kernel(kernel_us)},
              method="events", max_reps=max_reps)
    assert res["hidden"]["side_stream_suspect"] is True, res["hidden"]
    assert res["honest"]["side_stream_suspect"] is False, res["honest"]
    return res


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_side_stream_guard_on_a_shared_gpu(seed):
    res = hidden_vs_honest(SharedGpuDevice(seed), 6.0, 50)
    assert res["hidden"]["sync_excess_ms"] >= 3.5


def test_side_stream_guard_still_flags_hidden_work_on_a_slow_host():
    hidden_vs_honest(SlowWakeDevice(0.0003), 12.0, 40)


def host_stall(dev, us):
    """The host busy for us microseconds while the device idles (its clock
    runs on): what a descheduled or loaded host does to a timed call."""
    t = time.perf_counter()
    while time.perf_counter() - t < us / 1e6:
        pass
    dev.now += us


def test_host_starved_repetitions_are_dropped_and_the_lead_grows():
    # every 3rd call the host stalls 400 us after the start event: the
    # device idles and the events time the stall
    dev = FakeDevice(flush_us=10.0)
    calls = [0]

    def stalling():
        calls[0] += 1
        if calls[0] > 5 and calls[0] % 3 == 0:
            host_stall(dev, 400.0)
        dev.kernel(10.0)

    res = run(dev, {"kernel": stalling}, method="events", warmup=3, max_reps=60)
    k = res["kernel"]
    # the first stall is dropped; after it the lead (2 x 400 us + margin)
    # covers the later ones on a real device (this fake does not model a
    # lead absorbing a stall, so it only counts the first)
    assert k["host_starved"] >= 1, k
    assert k["median_ms"] == pytest.approx(0.010), k


def test_host_starved_drops_are_capped(monkeypatch):
    # a call whose host cost always exceeds LEAD_MAX_US keeps its samples
    monkeypatch.setattr(timing, "LEAD_MAX_US", 100.0)
    dev = FakeDevice(flush_us=10.0)

    def slow_host():
        host_stall(dev, 300.0)
        dev.kernel(10.0)

    res = run(dev, {"kernel": slow_host}, method="events", warmup=2, max_reps=40)
    k = res["kernel"]
    assert 1 <= k["host_starved"] <= max(4, timing.HOST_STARVED_MAX_SHARE * 40) + 1, k
    assert k["reps"] + k["host_starved"] == 40, k


def test_graph_rounds_keep_the_sync_cross_check():
    dev = FakeDevice()
    res = run(dev, {"kernel": lambda: dev.kernel(4.0)}, warmup=0)
    rounds = res["kernel"]["samples"]
    probe_calls = timing.PROBE_REPS + math.ceil(timing.PROBE_REPS / timing.SYNC_EVERY)
    # after the probe each cross-check is a batch of back-to-back calls
    k = res["kernel"]["tail_batch"]
    assert 1 < k <= timing.TAIL_MAX_BATCH   # 4 us calls: capped (less if the host lags)
    assert dev.eager_calls == probe_calls + math.ceil(rounds / timing.SYNC_EVERY) * k
    assert res["kernel"]["sync_median_ms"] is not None


class QueueDevice(FakeDevice):
    """Work hidden on another stream that queues up there: each hidden call
    adds hidden_us of real time to that stream's queue, which drains while
    the host goes on (the legacy default stream, a stream of the kernel's
    own, torch's pool, a graph replayed there). The timed stream's own
    work runs at once; a device-wide sync waits (spinning: microseconds
    matter) until the queue has drained."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.busy_until = 0.0

    def hide(self, us):
        now = time.perf_counter()
        self.busy_until = max(self.busy_until, now) + us / 1e6

    def sync(self):
        super().sync()
        while time.perf_counter() < self.busy_until:
            pass


def test_back_to_back_batches_see_small_hidden_work_queue_up():
    """15 us hidden per call, 2 us on the timed stream: a single call's
    tail is under the 20 us slack, a batch's grows to hundreds of us."""
    dev = QueueDevice()

    def hidden():
        dev.kernel(2.0)
        dev.hide(15.0)

    res = run(dev, {"hidden": hidden, "honest": lambda: dev.kernel(2.0)},
              method="events", max_reps=60, warmup=5)
    h, o = res["hidden"], res["honest"]
    # 2 us calls: TAIL_MAX_BATCH, fewer when the warm-up's host time lagged
    assert h["tail_batch"] >= 8 and o["tail_batch"] >= 8, (h, o)
    assert h["side_stream_suspect"] is True, h
    assert h["sync_excess_ms"] > 0.1, h
    assert o["side_stream_suspect"] is False, o
    assert o["sync_excess_ms"] < 0.05, o


def test_single_calls_miss_what_a_batch_sees(monkeypatch):
    """The same hidden work checked one call at a time stays under the
    threshold: why the cross-check batches its calls."""
    monkeypatch.setattr(timing, "TAIL_MAX_BATCH", 1)
    dev = QueueDevice()

    def hidden():
        dev.kernel(2.0)
        dev.hide(15.0)

    res = run(dev, {"hidden": hidden}, method="events", max_reps=60)
    assert res["hidden"]["tail_batch"] == 1
    assert res["hidden"]["sync_excess_ms"] < 0.05, res["hidden"]


def test_tail_batch_follows_the_call_length():
    dev = FakeDevice()
    res = run(dev, {"long": lambda: dev.kernel(300.0), "mid": lambda: dev.kernel(100.0)},
              method="events", max_reps=40, warmup=5)
    assert res["long"]["tail_batch"] == 2       # ceil(0.5 ms / 0.3 ms)
    assert res["mid"]["tail_batch"] == 5
    dev = FakeDevice()
    res = run(dev, {"long": lambda: dev.kernel(800.0)}, method="events", max_reps=20)
    assert res["long"]["tail_batch"] == 1


@pytest.mark.parametrize("make", [
    lambda: ContendedGpuDevice(0.0003),
    lambda: SlowWakeDevice(0.0003),
    lambda: SharedGpuDevice(7),
])
def test_honest_tiny_kernel_in_batches_on_a_loaded_device(make):
    """A 2 us honest kernel (three launches, as a torch extension makes)
    checked in full batches on a contended GPU or a slow host: not flagged."""
    dev = make()
    res = run(dev, {"kernel": lambda: [dev.kernel(0.7) for _ in range(3)],
                    "eager": lambda: dev.kernel(2.0)}, method="events", max_reps=60)
    for name in ("kernel", "eager"):
        assert res[name]["tail_batch"] > 1, res[name]
        assert res[name]["side_stream_suspect"] is False, res[name]
        assert res[name]["sync_excess_ms"] < 0.05, res[name]


def test_hidden_work_that_queues_is_seen_on_a_contended_gpu():
    """Other contexts' time slices hold the timed stream 0.3 ms late (and a
    loaded host sleeps longer); the hidden queue (32 x 150 us) outlasts
    that and is still seen."""
    class ContendedQueue(QueueDevice, ContendedGpuDevice):
        pass

    dev = ContendedQueue(late_s=0.0003)

    def hidden():
        dev.kernel(2.0)
        dev.hide(150.0)

    res = run(dev, {"hidden": hidden, "honest": lambda: dev.kernel(2.0)},
              method="events", max_reps=60)
    assert res["hidden"]["side_stream_suspect"] is True, res["hidden"]
    assert res["honest"]["side_stream_suspect"] is False, res["honest"]


# ------------------------------------------------------ statistics helpers

def test_median_ci():
    assert timing.median_ci([1.0, 2.0, 3.0]) is None
    assert timing.median_ci([]) is None
    s = list(range(1, 21))
    lo, hi = timing.median_ci(s)
    assert (lo, hi) == (5, 16)       # ranks 5 and 16 of 20
    assert timing.ci_rel([2.0] * 20) == 0.0
    assert timing.ci_rel(s) == pytest.approx((16 - 5) / 2 / 10.5)
    assert timing.ci_rel([0.0] * 20) is None


def test_cpu_path_reports_wall():
    r = timing.measure({"a": lambda: None}, device="cpu", warmup=0, max_reps=12,
                       min_time_ms=1e9, l2_flush=False)["a"]
    assert r["method"] == "wall" and r["batch"] == 1
    assert r["samples"] == r["reps"] == 12
    assert r["side_stream_suspect"] is False


# ------------------------------------------- TorchCuda against a fake torch

def fake_torch(begin_takes_mode=True, end_fails=False, replay_fails=False,
               sync_fails_after=None, sync_fails_at=(), default=False, graphs=True):
    calls = []
    state = {"syncs": 0}

    class Graph:
        def capture_begin(self, *a, **k):
            if k and not begin_takes_mode:
                raise TypeError("unexpected keyword argument 'capture_error_mode'")
            calls.append(("begin", k.get("capture_error_mode")))

        def capture_end(self):
            calls.append("end")
            if end_fails:
                raise RuntimeError("CUDA error: operation failed due to a previous "
                                   "error during capture")

        def replay(self):
            calls.append("replay")
            if replay_fails:
                raise RuntimeError("CUDA error: an illegal memory access was encountered")

        def reset(self):
            calls.append("reset")

    def synchronize():
        state["syncs"] += 1
        calls.append("sync")
        if sync_fails_after is not None and state["syncs"] > sync_fails_after:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        if state["syncs"] in sync_fails_at:
            raise RuntimeError("CUDA error: operation not permitted when stream is capturing")

    stream, other = object(), object()
    cuda = types.SimpleNamespace(
        current_device=lambda: 0, synchronize=synchronize,
        current_stream=lambda: stream, default_stream=lambda: stream if default else other,
        is_current_stream_capturing=lambda: False)
    if graphs:
        cuda.CUDAGraph = Graph
    return types.SimpleNamespace(cuda=cuda), calls


def test_torch_cuda_capture_and_modes():
    torch, calls = fake_torch()
    dev = timing.TorchCuda(torch, l2_flush=False)
    assert dev.capture_unsupported() is None
    g = dev.capture(lambda: None)
    assert ("begin", "global") in calls and "end" in calls and "replay" in calls
    dev.drop(g)
    assert calls[-1] == "reset"
    torch, calls = fake_torch(begin_takes_mode=False)          # torch 2.0
    timing.TorchCuda(torch, l2_flush=False).capture(lambda: None)
    assert ("begin", None) in calls
    torch, _ = fake_torch(default=True)
    assert "default stream" in timing.TorchCuda(torch, False).capture_unsupported()
    torch, _ = fake_torch(graphs=False)
    assert "no CUDA graphs" in timing.TorchCuda(torch, False).capture_unsupported()


def test_torch_cuda_failed_capture_ends_and_recovers():
    torch, calls = fake_torch()
    dev = timing.TorchCuda(torch, l2_flush=False)

    def body():
        raise RuntimeError("operation not permitted when stream is capturing")
    with pytest.raises(timing.CaptureError) as e:
        dev.capture(body)
    assert "not permitted" in str(e.value)
    # the capture was ended even though the body raised, then the device checked
    assert calls[-3:] == ["end", "sync", "reset"]
    torch, calls = fake_torch(end_fails=True)
    with pytest.raises(timing.CaptureError):
        timing.TorchCuda(torch, False).capture(lambda: None)
    assert "replay" not in calls
    torch, calls = fake_torch(replay_fails=True)
    with pytest.raises(timing.CaptureError):
        timing.TorchCuda(torch, False).capture(lambda: None)


def test_torch_cuda_pending_error_after_a_refused_call_is_forgiven_once():
    """The first sync after the failed capture reports an error a refused
    call left behind; the device works after that: a capture failure."""
    torch, calls = fake_torch(sync_fails_at=(2,))

    def body():
        raise RuntimeError("cudaMalloc refused under capture")
    with pytest.raises(timing.CaptureError):
        timing.TorchCuda(torch, False).capture(body)
    assert calls.count("sync") == 3


def test_torch_cuda_fault_is_not_a_capture_failure():
    """A replay that broke the context: the error propagates (a crash), it
    is not quietly timed per call."""
    torch, calls = fake_torch(replay_fails=True, sync_fails_after=1)
    with pytest.raises(RuntimeError) as e:
        timing.TorchCuda(torch, False).capture(lambda: None)
    assert not isinstance(e.value, timing.CaptureError)
    assert "illegal memory access" in str(e.value)


# ----------------------------------------------------------- kbh_timing

def test_harness_timing_method_from_request_and_environment(monkeypatch):
    pytest.importorskip("torch")  # kbh_timing imports torch
    from kernelbot_harness.timing import evaluation as kbh_timing
    monkeypatch.delenv("KB_TIMING_METHOD", raising=False)
    assert kbh_timing.timing_method({"timing": {}}) == "events"
    monkeypatch.setenv("KB_TIMING_METHOD", "events")
    assert kbh_timing.timing_method({"timing": {}}) == "events"
    assert kbh_timing.timing_method({"timing": {"method": "graph"}}) == "graph"
    monkeypatch.setenv("KB_TIMING_METHOD", "bogus")
    assert kbh_timing.timing_method({"timing": {}}) == "events"
    monkeypatch.setenv("KB_TIMING_METHOD", "auto")
    assert kbh_timing.timing_method({"timing": {}}) == "auto"


# ------------------------------------------------------ on a GPU (skipped here)

def _cuda():
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


cuda = pytest.mark.skipif(_cuda() is None, reason="no CUDA device")


@cuda
def test_cuda_short_calls_graph_timed_on_a_side_stream_only():
    torch = _cuda()
    x = torch.randn(1 << 16, device="cuda")
    fns = {"a": lambda: x.mul_(1.0), "b": lambda: torch.relu(x)}
    # the default stream cannot be captured: per-call events
    res = timing.measure(fns, device="cuda", min_time_ms=20)
    assert methods(res) == {"events"}, res
    with torch.cuda.stream(torch.cuda.Stream()):
        r1 = timing.measure(fns, device="cuda", min_time_ms=20)
        r2 = timing.measure(fns, device="cuda", min_time_ms=20)
    for r in (r1, r2):
        assert methods(r) == {"graph"}, r
        assert 0 < r["a"]["median_ms"] < 0.05, r
        assert r["a"]["side_stream_suspect"] is False
    a1, a2 = r1["a"]["median_ms"], r2["a"]["median_ms"]
    assert abs(a1 - a2) / min(a1, a2) < 0.1 or abs(a1 - a2) < 0.0005, (r1, r2)


@cuda
def test_cuda_uncapturable_call_falls_back_to_events():
    torch = _cuda()
    x = torch.randn(1 << 16, device="cuda")

    def syncing():
        x.mul_(1.0)
        torch.cuda.synchronize()
    with torch.cuda.stream(torch.cuda.Stream()):
        res = timing.measure({"kernel": syncing, "eager": lambda: torch.relu(x)},
                             device="cuda", min_time_ms=20)
        assert methods(res) == {"events"}, res
        assert "'kernel'" in res["kernel"]["method_reason"]
        torch.relu(x)       # the stream still works
        torch.cuda.synchronize()


@cuda
def test_cuda_work_skipped_under_capture_falls_back():
    torch = _cuda()
    x = torch.randn(1 << 22, device="cuda")

    def sly():
        if torch.cuda.is_current_stream_capturing():
            x[:16].mul_(1.0)
        else:
            x.mul_(1.0)
    with torch.cuda.stream(torch.cuda.Stream()):
        res = timing.measure({"kernel": sly}, device="cuda", min_time_ms=20,
                             method="graph")
    assert methods(res) == {"events"}, res
    assert "timed alone" in res["kernel"]["method_reason"]
