"""Correct kernels are verified on every test operator, forward and
backward, with evidence that follows PROTOCOL.md."""
import pytest

from test_harness_common import kernel, op, request, run_harness

CASES = [
    ("kb_relu.py", "ok_relu", "forward"),
    ("kb_softmax.py", "ok_softmax", "forward"),
    ("kb_linear_gelu.py", "ok_linear_gelu", "forward"),
    ("kb_log.py", "ok_log", "forward"),
    ("kb_two_outputs.py", "ok_two_outputs", "forward"),
    ("rk_scale_shift", "ok_scale_shift", "forward"),
    ("rk_scale_shift", "ok_scale_shift", "backward"),
]


@pytest.mark.parametrize("operator,kern,pass_", CASES)
def test_harness_correct_kernel_verified(operator, kern, pass_):
    run = run_harness(request(op(operator), kernel(kern), **{"pass": pass_}))
    res = run.result
    assert run.rc == 0
    assert res["verdict"] == "verified", res["reasons"]
    assert res["reasons"] == []
    assert len(res["configs"]) >= 2
    for c in res["configs"]:
        assert c["trials"] == 2
        assert set(c["checks"].values()) <= {"pass", "skip"}
        assert c["checks"]["correctness"] == "pass"
        assert c["max_abs_err"] is not None


def test_harness_evidence_schema():
    run = run_harness(request(op("kb_linear_gelu.py"), kernel("ok_linear_gelu")))
    res = run.result
    assert all(r["nonce"] == run.nonce for r in run.records)
    assert run.records[-1]["type"] == "result"
    env = res["environment"]
    assert env["backend"] == "cpu" and env["harness"] == 1
    assert env["torch"] and env["python"]
    assert res["operator"]["format"] == "kernelbench"
    # x, then linear.weight and linear.bias in named_parameters() order
    assert res["operator"]["n_inputs"] == 3 and res["operator"]["n_outputs"] == 1
    c0 = res["configs"][0]
    assert [i["name"] for i in c0["inputs"]] == ["input0", "param:linear.weight",
                                                 "param:linear.bias"]
    assert c0["inputs"][0]["shape"] == [8, 256]
    assert c0["outputs"] == [{"shape": [8, 512], "dtype": "float32"}]
    assert c0["kind"] == "own" and c0["atol"] == 1e-4
    for key in ("index", "name", "params", "trials", "max_abs_err",
                "max_rel_err", "rtol", "checks", "timing"):
        assert key in c0
    assert res["summary"]["trials"] == 2 * len(res["configs"])


def test_harness_backward_gradients_in_abi_order():
    res = run_harness(request(op("rk_scale_shift"), kernel("ok_scale_shift"),
                              **{"pass": "backward"})).result
    c0 = res["configs"][0]
    names = [i["name"] for i in c0["inputs"]]
    assert names == ["x", "weight", "bias", "alpha"]
    assert c0["inputs"][3]["scalar"] is True
    # one gradient per floating tensor argument: x, weight, bias
    assert [o["shape"] for o in c0["outputs"]] == [[32, 64], [64], [64]]


def test_harness_backward_needs_kb_backward():
    """A library without kb_backward cannot serve a backward pass: `load`."""
    res = run_harness(request(op("kb_relu.py"), kernel("ok_relu"),
                              **{"pass": "backward"})).result
    assert res["verdict"] == "rejected"
    assert "load" in {r["check"] for r in res["reasons"]}


def test_harness_refused_distribution_falls_back_to_own():
    res = run_harness(request(op("kb_positive.py"), kernel("ok_relu"), seeds=4,
                              max_configs=2)).result
    assert res["verdict"] == "verified", res["reasons"]
    c0 = res["configs"][0]
    assert c0["trials"] == 4
    notes = " ".join(c0["notes"])
    assert "'normal' refused" in notes and "'uniform_large' refused" in notes
