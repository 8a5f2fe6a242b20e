"""Every known hack is rejected for its own reason; crashes and hangs end
without a verdict (the bot reports them); forged verdicts reach nothing."""
import signal

import pytest

from test_harness_common import kernel, op, request, run_harness

HACKS = [
    ("hack_unwritten", "unwritten_output"),
    ("hack_out_of_bounds", "out_of_bounds"),
    ("hack_input_mutation", "input_mutation"),
    ("hack_cached", "cached_result"),
    ("hack_cached_address", "cached_result"),
    ("hack_shape", "shape"),
    ("hack_precision", "precision"),
    ("hack_async", "stream"),
    ("hack_nondeterministic", "nondeterminism"),
    ("hack_error", "kernel_error"),
]


@pytest.mark.parametrize("hack,check", HACKS)
def test_harness_hack_rejected(hack, check):
    run = run_harness(request(op("kb_relu.py"), kernel(hack), max_configs=6))
    res = run.result
    assert run.rc == 0
    assert res["verdict"] == "rejected"
    assert check in run.checks(), res["reasons"]
    for r in res["reasons"]:
        assert r["message"] and "check" in r and "config" in r and "seed" in r


def _speedups(name):
    res = run_harness(request(op("kb_relu.py"), kernel(name), mode="bench", max_configs=2,
                              timing={"warmup": 2, "min_time_ms": 40, "max_reps": 200,
                                      "l2_flush": True, "baselines": ["eager"]}),
                      timeout=180).result
    assert res["verdict"] == "verified", res["reasons"]
    return [c["timing"]["speedup_eager"] for c in res["configs"]]


def test_harness_output_cache_times_as_it_computes():
    """A ReLU that returns at once when its output already holds the
    answer passes every check (checked calls find poisoned outputs) and
    used to time as nearly free (the timed loop reused its outputs). Its
    speedup is now an honest ReLU's, within noise: judged against the
    honest kernel's speedup over the same baseline (ratios, not clocks)."""
    hack, honest = _speedups("timed_output_cache"), _speedups("ok_relu")
    for h, o in zip(hack, honest):
        assert h < 2.5 * o, (hack, honest)


def test_harness_shape_only_on_other_sizes():
    res = run_harness(request(op("kb_relu.py"), kernel("hack_shape"), max_configs=6)).result
    own = res["configs"][0]
    assert own["kind"] == "own" and set(own["checks"].values()) <= {"pass", "skip"}
    assert any("fail" in c["checks"].values() for c in res["configs"][1:])


def test_harness_input_mutation_alone():
    """The mutation is caught on its own: the reference ran on a pristine copy."""
    run = run_harness(request(op("kb_relu.py"), kernel("hack_input_mutation")))
    assert run.checks() == {"input_mutation"}


def test_harness_nan_positions_must_match():
    run = run_harness(request(op("kb_log.py"), kernel("bad_log_nan")))
    assert run.result["verdict"] == "rejected"
    assert "nan_mismatch" in run.checks()


def test_harness_crash_is_the_kernels_crash():
    """The kernel crashes its own process (the runner); the judge lives on
    and rejects it `crash`, naming the signal."""
    run = run_harness(request(op("kb_relu.py"), kernel("hack_crash")))
    assert any(r.get("stage") == "trial" for r in run.records)  # died in the call
    assert run.result["verdict"] == "rejected"
    crash = [r for r in run.result["reasons"] if r["check"] == "crash"]
    assert crash and "SIGSEGV, signal %d" % signal.SIGSEGV in crash[0]["message"]
    assert run.rc == 0


def test_harness_hang_killed_without_verdict():
    run = run_harness(request(op("kb_relu.py"), kernel("hack_hang")), timeout=8)
    assert run.timed_out
    assert any(r.get("stage") == "trial" for r in run.records)  # hung in the call
    assert run.results == []


def test_harness_forged_verdict_ignored():
    run = run_harness(request(op("kb_relu.py"), kernel("hack_forge")))
    assert '"verdict": "verified"' in run.stderr  # the kernel did print it (its
    # output reaches the judge's log as the kernel process's tail)
    assert len(run.results) == 1                  # but only the judge's verdict counts
    assert run.result["verdict"] == "rejected"    # its process ended in the call
    assert '"verdict": "verified"' not in run.raw
    assert all(r["nonce"] == run.nonce for r in run.records)


def test_harness_missing_library_is_load():
    run = run_harness(request(op("kb_relu.py"), "/nonexistent/kernel.so"))
    assert run.result["verdict"] == "rejected"
    assert run.checks() == {"load"}
