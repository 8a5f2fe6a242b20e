"""The error bound (PROTOCOL.md "Error bound"): a candidate beyond the
fixed tolerances is judged against float64 by the error its own dtype
commits. Here the fixed fp32 tolerances are set tighter (1e-7) than an
ordinary reordering of a K = 4096 sum meets, as a tiled matmul at
N = 4113 exceeds the defaults on the GPU."""
from test_harness_common import kernel, op, request, run_harness

TIGHT = {"float32": {"atol": 1e-7, "rtol": 1e-7}}


def _run(name, **kw):
    req = request(op("kb_long_dot.py"), kernel(name), max_configs=2, seeds=2,
                  tolerances=TIGHT, **kw)
    return run_harness(req, timeout=300).result


def test_reordered_sum_passes_within_the_bound():
    res = _run("ok_dot_lanes")
    assert res["verdict"] == "verified", res["reasons"]
    for c in res["configs"]:
        eb = c["error_bound"]
        # beyond 1e-7 (so the bound decided), within 16x fp32's own error
        assert eb is not None and eb["ok"] and eb["factor"] == 16.0, c
        assert c["max_abs_err"] > 1e-7
        assert 0 < eb["worst_ratio"] <= 16.0 and eb["cand_err_rms"] > 0, eb


def test_without_the_bound_the_fixed_tolerances_reject_it():
    res = _run("ok_dot_lanes", error_factor=0)
    assert res["verdict"] == "rejected"
    assert {r["check"] for r in res["reasons"]} <= {"correctness", "precision"}, res["reasons"]
    assert all(c["error_bound"] is None for c in res["configs"])


def test_half_precision_result_is_still_rejected():
    res = _run("hack_dot_half")
    assert res["verdict"] == "rejected"
    assert any(r["check"] == "precision" for r in res["reasons"]), res["reasons"]
    msg = next(r["message"] for r in res["reasons"] if r["check"] == "precision")
    assert "beyond the error bound" in msg, msg
    assert max(c["error_bound"]["worst_ratio"] for c in res["configs"]) > 100


def test_partial_garbage_is_still_rejected():
    res = _run("hack_dot_garbage")
    assert res["verdict"] == "rejected"
    assert any(r["check"] == "correctness" for r in res["reasons"]), res["reasons"]
    eb = res["configs"][0]["error_bound"]
    assert not eb["ok"] and 0 < eb["bad"] < eb["numel"], eb


def test_bad_error_factor_is_a_request_error():
    req = request(op("kb_long_dot.py"), kernel("ok_dot_lanes"), error_factor="big")
    res = run_harness(req, timeout=120).result
    assert res["verdict"] == "error" and "error_factor" in str(res["reasons"]), res
