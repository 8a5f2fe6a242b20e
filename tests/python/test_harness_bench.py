"""Timing after correctness, through the harness's timing package (measure, roofline)."""
import os
import shutil

from test_harness_common import TOP, kernel, op, request, run_harness, scratch_dir

TIMING = {"warmup": 1, "min_time_ms": 5, "max_reps": 20, "l2_flush": False,
          "baselines": ["eager", "compile"]}


def test_harness_bench_times_verified_kernel():
    peaks = os.path.join(scratch_dir(), "peaks.json")
    res = run_harness(request(op("kb_softmax.py"), kernel("ok_softmax"), mode="bench",
                              max_configs=2, timing=TIMING, peaks_cache=peaks),
                      timeout=120).result
    assert res["verdict"] == "verified", res["reasons"]
    for c in res["configs"]:
        t = c["timing"]
        assert t["kernel"]["median_ms"] > 0 and t["eager"]["median_ms"] > 0
        assert t["kernel"]["reps"] >= 3
        assert t["speedup_eager"] > 0
        assert t["flops"] > 0 and t["bytes"] > 0 and t["gbps"] > 0
        if t["compile"] is None:  # torch 1.13 has no torch.compile
            assert t["compile_reason"]
    assert res["summary"]["geomean_speedup_eager"] > 0
    assert os.path.exists(peaks)


def test_harness_bench_skips_timing_when_rejected():
    res = run_harness(request(op("kb_relu.py"), kernel("hack_unwritten"), mode="bench",
                              timing=TIMING)).result
    assert res["verdict"] == "rejected"
    assert all(c["timing"] is None for c in res["configs"])


def test_harness_without_timing_module_reports_null_timing():
    """A harness whose timing code cannot be imported still verifies:
    timing null, and why."""
    d = scratch_dir()
    hdir = os.path.join(d, "verifier", "harness")
    shutil.copytree(os.path.join(TOP, "verifier", "harness"), hdir,
                    ignore=shutil.ignore_patterns("__pycache__"))
    os.unlink(os.path.join(hdir, "kernelbot_harness", "timing", "measure.py"))
    res = run_harness(request(op("kb_relu.py"), kernel("ok_relu"), mode="bench",
                              max_configs=2, timing=TIMING),
                      harness=os.path.join(hdir, "kb_harness.py")).result
    assert res["verdict"] == "verified"
    assert "could not import the timing harness" in res["timing_note"]
    assert all(c["timing"] is None for c in res["configs"])