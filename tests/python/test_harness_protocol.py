"""The channel: nonce first, one result record last, nothing for a bad
start; requests and operators that cannot be used give verdict "error"."""
import json

from test_harness_common import kernel, op, request, run_harness


def test_harness_records_carry_nonce_and_one_result_last():
    run = run_harness(request(op("kb_relu.py"), kernel("ok_relu")))
    assert run.rc == 0
    assert len(run.results) == 1 and run.records[-1]["type"] == "result"
    assert all(r["nonce"] == run.nonce for r in run.records)
    assert all(r["type"] in ("progress", "result") for r in run.records)
    assert run.result["protocol"] == 1


def test_harness_bad_nonce_no_records():
    run = run_harness(request(op("kb_relu.py"), kernel("ok_relu")),
                      stdin=b"not-a-nonce\n")
    assert run.records == []
    assert run.rc == 2
    assert "nonce" in run.stderr


def test_harness_kernel_sees_no_channel_or_stdin(tmp_path):
    """Descriptor 3 and stdin are closed (on /dev/null) before the operator
    is imported: an operator file that probes them finds nothing."""
    probe = tmp_path / "kb_probe.py"
    log = tmp_path / "probe.json"
    probe.write_text(
        "import json, os, stat, torch, torch.nn as nn\n"
        "def _desc(fd):\n"
        "    try:\n        return os.readlink('/proc/self/fd/%%d' %% fd)\n"
        "    except OSError:\n        return None\n"
        "json.dump({'fd3': _desc(3), 'fd0': _desc(0),\n"
        "           'env': os.environ.get('KB_RESULT_FD')}, open(%r, 'w'))\n"
        "class Model(nn.Module):\n"
        "    def forward(self, x):\n        return x\n"
        "n = 64\n"
        "def get_inputs():\n    return [torch.randn(n)]\n"
        "def get_init_inputs():\n    return []\n" % str(log))
    run = run_harness(request(str(probe), mode="describe"))
    assert run.result["verdict"] == "described"
    seen = json.loads(log.read_text())
    assert seen["fd3"] == "/dev/null" and seen["fd0"] == "/dev/null"
    assert seen["env"] is None


def test_harness_bad_request_is_error():
    run = run_harness({"protocol": 1, "mode": "verify", "operator": op("kb_relu.py"),
                       "backend": "cpu"})  # no kernel
    res = run.result
    assert res["verdict"] == "error"
    assert res["reasons"][0]["check"] == "request"
    assert "kernel" in res["reasons"][0]["message"]


def test_harness_broken_operator_is_error(tmp_path):
    bad = tmp_path / "kb_broken.py"
    bad.write_text("import torch\nraise RuntimeError('boom')\n")
    res = run_harness(request(str(bad), kernel("ok_relu"))).result
    assert res["verdict"] == "error"
    assert res["reasons"][0]["check"] == "operator"
    assert "boom" in res["reasons"][0]["message"]


def test_harness_operator_sibling_import(tmp_path):
    """A task folder's own helper modules import while it loads."""
    d = tmp_path / "rk_sib"
    d.mkdir()
    (d / "helper_mod_kb.py").write_text("def twice(x):\n    return x * 2\n")
    (d / "func_forward.py").write_text(
        "import torch, torch.nn as nn\nfrom helper_mod_kb import twice\n"
        "def forward_fn(x):\n    return twice(x)\n"
        "class Model(nn.Module):\n"
        "    def forward(self, x, fn=forward_fn):\n        return fn(x)\n"
        "def get_inputs(n=16):\n    return [torch.randn(n)]\n"
        "input_names = ['x']\n")
    res = run_harness(request(str(d), mode="describe")).result
    assert res["verdict"] == "described"
    assert res["configs"][0]["inputs"][0]["shape"] == [16]
