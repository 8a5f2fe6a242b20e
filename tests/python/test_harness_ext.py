"""The torch-extension format. SLOW: one torch extension build (about half
a minute on 2 cores); keep it the only one in the suite."""
import os

from test_harness_common import KERNELS, op, request, run_harness


def test_harness_torch_extension_verified():
    req = request(op("kb_relu.py"), max_configs=3)
    req["kernel"] = {"abi": "torch-ext", "source": os.path.join(KERNELS, "ext_ok_relu.cpp"),
                     "name": "kb_ext_test_ok_relu"}
    run = run_harness(req, timeout=400)
    res = run.result
    assert res["verdict"] == "verified", res["reasons"]
    checks = res["configs"][0]["checks"]
    # the extension allocates its own outputs: nothing to poison or guard
    assert checks["unwritten_output"] == "skip" and checks["out_of_bounds"] == "skip"
    assert checks["input_mutation"] == "pass" and checks["cached_result"] == "pass"
