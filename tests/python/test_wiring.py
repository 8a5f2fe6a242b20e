"""A verified kernel wired back into a real module (issue 17 items 2 and 3),
on the CPU backend with torch 1.13 (the "library" registration).

The run's folder comes from `kernelbot verify` of the CPU kernel
tests/kernels/cpu/ok_linear_gelu.cpp against tests/operators/kb_linear_gelu.py
(its evidence), plus the kernel.json record `kernelbot run` would write; then
`kernelbot wire` renders ops.py and binding.py into it and patches a small
repository's module. Checked: the patch is three added lines and nothing
else; the patched module with the kernel gives the original code's outputs
and gradients (input and parameters) and calls the kernel; a float64 call and
a 3-d input run the original code; the sandboxed wiring check says "wired",
runs the repository's tests on the patched tree and writes both into
evidence.json; a module whose code differs from the verified operator fails
the check; forward(*args) is refused with the reason.
"""
import difflib
import json
import os
import shutil
import subprocess
import sys

import pytest

from kb_wiring_run import BIN, MODEL, PROLOGUE, make_repo, make_run_dir, timed_run, wire

pytestmark = pytest.mark.skipif(not os.path.exists(BIN), reason="kernelbot binary not built")

# run in a fresh interpreter on the patched tree: with and without the kernel
COMPARE = PROLOGUE + '''
out = {"implementation": ops.IMPLEMENTATION}
m = model.Block(256, 512)
ref = copy.deepcopy(m)
x = torch.randn(8, 256, requires_grad=True)
xr = x.detach().clone().requires_grad_()
y = m(x)
out["calls"] = ops.CALLS
ops.ENABLED = False
yr = ref(xr)
ops.ENABLED = True
g = torch.randn_like(y)
y.backward(g)
yr.backward(g)
out["y"] = (y - yr).abs().max().item()
out["gx"] = (x.grad - xr.grad).abs().max().item()
out["gw"] = (m.linear.weight.grad - ref.linear.weight.grad).abs().max().item()
out["gb"] = (m.linear.bias.grad - ref.linear.bias.grad).abs().max().item()
# another dtype, another rank: the original code, no kernel call
calls = ops.CALLS
d = copy.deepcopy(ref).double()
xd = torch.randn(8, 256, dtype=torch.float64)
ops.ENABLED = False
want = d(xd)
ops.ENABLED = True
out["double"] = torch.equal(d(xd), want)
out["rank3"] = m(torch.randn(2, 8, 256)).shape == (2, 8, 512)
out["fallback_calls"] = ops.CALLS - calls
print(json.dumps(out))
'''


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return make_run_dir(tmp_path_factory.mktemp("wiring"))


def test_patch_and_kernel_in_the_module(run_dir):
    r = make_repo(run_dir["dir"], "repo-patch")
    p = wire(run_dir, r, "--module", "model.py:Block", "--write")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "import at line 5, the kernel's call at line 15" in p.stdout
    assert "no build (no setup.py)" in p.stdout
    assert (run_dir["run"] / "ops.py").is_file()
    # three lines added, none changed
    diff = [l for l in difflib.unified_diff(MODEL.splitlines(), (r / "model.py").read_text().splitlines(),
                                            lineterm="", n=0) if l[:1] in "+-" and l[:3] not in ("+++", "---")]
    assert diff == [
        "+import kernelbot.kb_linear_gelu.ops as _kb_kb_linear_gelu",
        "+        if _kb_kb_linear_gelu.supported(x, self.linear.weight, self.linear.bias) and "
        "_kb_kb_linear_gelu.configured(self):",
        "+            return _kb_kb_linear_gelu.kb_linear_gelu(x, self.linear.weight, self.linear.bias)",
    ], diff
    shutil.copytree(str(run_dir["run"]), str(r / "kernelbot" / "kb_linear_gelu"))
    c = subprocess.run([sys.executable, "-c", COMPARE], cwd=str(r), capture_output=True, text=True,
                       timeout=300)
    assert c.returncode == 0, c.stderr
    got = json.loads(c.stdout.strip().splitlines()[-1])
    import torch
    major, minor = (int("".join(ch for ch in p if ch.isdigit()) or 0)
                    for p in torch.__version__.split(".")[:2])
    assert got["implementation"] == ("custom_op" if (major, minor) >= (2, 4) else "library")
    assert got["calls"] == 1
    assert got["y"] < 1e-5
    # the reference's backward: the same gradients
    assert got["gx"] < 1e-5 and got["gw"] < 1e-4 and got["gb"] < 1e-4, got
    assert got["double"] and got["rank3"]
    assert got["fallback_calls"] == 0


def test_wiring_check_in_the_sandbox(run_dir):
    r = make_repo(run_dir["dir"], "repo-check")
    p = wire(run_dir, r, "-c", run_dir["config"], "--module", "model.py:Block", "--init",
             '{"args": [256, 512]}', "--tests", "tests/test_block.py", "--check")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "check: wired" in p.stdout
    w = json.loads((run_dir["run"] / "evidence.json").read_text())["wiring"]
    assert w["verdict"] == "wired"
    assert w["module"] == "model.py" and w["class"] == "Block" and w["guard_line"] == 15
    assert w["fallback"] == {"dtype": "float64", "kernel_calls": 0, "ok": True}
    # the configs of another in_features (other init arguments) are left out, the others checked
    assert w["configs_other_init"] >= 1
    assert w["configs"] and all(c["ok"] and c["kernel_calls"] == 1 and c["gradients"] == 3
                                for c in w["configs"])
    assert w["tests"]["ran"] and w["tests"]["passed"] == 2 and w["tests"]["failed"] == 0
    assert w["tests"]["kernel_calls"] >= 2
    # the repository was only read
    assert "_kb_" not in (r / "model.py").read_text()


def test_wiring_check_catches_another_computation(run_dir):
    """Relu's forward is not the operator the kernel was verified on: the check says so."""
    r = make_repo(run_dir["dir"], "repo-relu")
    p = wire(run_dir, r, "-c", run_dir["config"], "--module", "model.py:Relu", "--init",
             '{"args": [256, 512]}', "--check")
    assert p.returncode == 1, p.stdout + p.stderr
    assert "check: mismatch" in p.stdout
    assert "MISMATCH" in p.stdout


@pytest.mark.parametrize("cls,why", [
    ("Moody", "in eval mode (model.eval()) the module's output differs with the kernel"),
    ("Counting", "the module's buffers (running statistics, counters) end up different"),
])
def test_wiring_check_catches_mode_and_state(run_dir, cls, why):
    """The same computation in training mode, but another in eval mode, or a forward that
    updates a buffer the kernel's early return skips: not wired, the cause named."""
    r = make_repo(run_dir["dir"], "repo-" + cls.lower())
    p = wire(run_dir, r, "-c", run_dir["config"], "--module", "model.py:" + cls, "--init",
             '{"args": [256, 512]}', "--check")
    assert p.returncode == 1, p.stdout + p.stderr
    assert "check: mismatch" in p.stdout and why in p.stdout, p.stdout


SETTINGS = PROLOGUE + '''
import torch.nn.functional as F
out = {"attributes": ops.ATTRIBUTES}
x = torch.randn(8, 256)
for scale in (1.0, 2.0):
    m = model.Scaled(256, 512, scale=scale)
    calls = ops.CALLS
    y = m(x)
    out[str(scale)] = {"calls": ops.CALLS - calls,
                       "err": (y - F.gelu(m.linear(x)) * scale).abs().max().item()}
print(json.dumps(out))
'''


def test_settings_guard_the_kernel(run_dir):
    """The kernel computes with the verified module's settings baked in: the check records
    them into ops.py, and a module built with another scale runs its original code."""
    r = make_repo(run_dir["dir"], "repo-scaled")
    p = wire(run_dir, r, "-c", run_dir["config"], "--module", "model.py:Scaled", "--init",
             '{"args": [256, 512]}', "--check", "--write")
    assert p.returncode == 0, p.stdout + p.stderr
    w = json.loads((run_dir["run"] / "evidence.json").read_text())["wiring"]
    assert w["verdict"] == "wired" and w["attributes"][""] == {"scale": 1}, w
    assert w["attributes"]["linear"] == {"in_features": 256, "out_features": 512}, w
    shutil.copytree(str(run_dir["run"]), str(r / "kernelbot" / "kb_linear_gelu"))
    c = subprocess.run([sys.executable, "-c", SETTINGS], cwd=str(r), capture_output=True, text=True,
                       timeout=300)
    assert c.returncode == 0, c.stderr
    got = json.loads(c.stdout.strip().splitlines()[-1])
    assert got["1.0"]["calls"] == 1 and got["2.0"]["calls"] == 0, got
    assert got["1.0"]["err"] < 1e-5 and got["2.0"]["err"] < 1e-5, got


def test_settings_no_guard_can_compare(run_dir):
    """A plain tensor attribute (no buffer): the check cannot guard it, so no wiring."""
    r = make_repo(run_dir["dir"], "repo-masked")
    p = wire(run_dir, r, "-c", run_dir["config"], "--module", "model.py:Masked", "--init",
             '{"args": [256, 512]}', "--check")
    assert p.returncode == 1, p.stdout + p.stderr
    assert "check: unguarded" in p.stdout and "mask (Tensor)" in p.stdout, p.stdout
    assert "register_buffer" in p.stdout


def test_varargs_refused(run_dir):
    r = make_repo(run_dir["dir"], "repo-splat")
    p = wire(run_dir, r, "--module", "model.py:Splat")
    assert p.returncode == 1
    assert "Splat.forward takes '*xs'" in p.stderr
    assert MODEL == (r / "model.py").read_text()



GATE = PROLOGUE + '''
out = {"faster": {k: [list(r) for r in v] for k, v in ops.FASTER.items()}, "min": ops.MIN_SPEEDUP}
def calls(m, batch):
    before = ops.CALLS
    m(torch.randn(batch, m.linear.in_features))
    return ops.CALLS - before
out["own"] = calls(model.Block(256, 512), 8)        # 133632 elements with the parameters: timed fast
out["bigger"] = calls(model.Block(256, 512), 100)   # 157184: above the fast range
out["half"] = calls(model.Block(128, 256), 4)       # 33536: timed slow
ops.SPEED_GATE = False
out["ungated"] = calls(model.Block(256, 512), 100)
print(json.dumps(out))
'''


def test_speed_gate_calls_the_kernel_only_where_it_was_faster(run_dir, tmp_path):
    """Slower than the module's own code on the smallest and the largest timed configs,
    faster between: the module calls the kernel only on sizes within the fast configs."""
    env = timed_run(run_dir, tmp_path, {"half": 0.5, "own": 1.5, "odd": 1.2, "double": 0.8})
    r = make_repo(env["dir"], "repo-gate")
    p = wire(env, r, "--module", "model.py:Block", "--min-speedup", "1", "--write")
    assert p.returncode == 0, p.stdout + p.stderr
    ops_py = (env["run"] / "ops.py").read_text()
    assert 'MIN_SPEEDUP = 1\n' in ops_py and '"float32": ((133632, 147403),),' in ops_py, ops_py
    shutil.copytree(str(env["run"]), str(r / "kernelbot" / "kb_linear_gelu"))
    c = subprocess.run([sys.executable, "-c", GATE], cwd=str(r), capture_output=True, text=True,
                       timeout=300)
    assert c.returncode == 0, c.stderr
    got = json.loads(c.stdout.strip().splitlines()[-1])
    assert got["faster"] == {"float32": [[133632, 147403]]} and got["min"] == 1
    assert (got["own"], got["bigger"], got["half"], got["ungated"]) == (1, 0, 0, 1), got
    # the sandboxed check proves the kernel with the gate off and says where it is used
    p = wire(env, make_repo(env["dir"], "repo-gate-check"), "-c", env["config"], "--module",
             "model.py:Block", "--min-speedup", "1", "--init", '{"args": [256, 512]}', "--check")
    assert p.returncode == 0, p.stdout + p.stderr
    w = json.loads((env["run"] / "evidence.json").read_text())["wiring"]
    assert w["speed_gate"] == {"min_speedup": 1, "faster": {"float32": [[133632, 147403]]}}, w
    assert w["configs"] and all(c["ok"] and c["used"] for c in w["configs"]), w["configs"]
    assert "speed gate: the kernel runs where it measured >= 1.00x the module's own code: float32 " \
           "of 133632 to 147403 elements" in p.stdout, p.stdout


def test_speed_gate_open_ranges(run_dir, tmp_path):
    """Fast at the smallest and the largest timed sizes: ranges open below and above."""
    env = timed_run(run_dir, tmp_path, {"half": 2.0, "own": 2.0, "odd": 0.5, "double": 3.0})
    r = make_repo(env["dir"], "repo-open")
    p = wire(env, r, "--module", "model.py:Block", "--min-speedup", "1.5")
    assert p.returncode == 0, p.stdout + p.stderr
    ops_py = (env["run"] / "ops.py").read_text()
    assert '"float32": ((0, 133632), (533504, None)),' in ops_py, ops_py


def test_speed_gate_slower_everywhere_is_not_wired(run_dir, tmp_path):
    """Slower than the module's own code on every timed config: no patch, the figures named;
    the sandboxed check's proof is not even started."""
    env = timed_run(run_dir, tmp_path, {"half": 0.5, "own": 0.9, "odd": 0.7, "double": 0.16})
    r = make_repo(env["dir"], "repo-slow")
    p = wire(env, r, "-c", env["config"], "--module", "model.py:Block", "--min-speedup", "1",
             "--write", "--check")
    assert p.returncode == 1, p.stdout + p.stderr
    assert "measured below 1.00x the module's own code on every timed config (best 0.90x at " \
           "'own(batch_size=8,in_features=256,out_features=512)'; [bot] wire_min_speedup)" in p.stderr, p.stderr
    assert MODEL == (r / "model.py").read_text()
    w = json.loads((env["run"] / "evidence.json").read_text())["wiring"]
    assert w["verdict"] == "not_wired" and w["class"] == "Block", w
    assert "measured below 1.00x" in w["reasons"][0]["message"]
    # an evidence with no timing at all says so
    p = wire(run_dir, r, "--module", "model.py:Block", "--min-speedup", "1")
    assert p.returncode == 1 and "no config of the evidence was timed" in p.stderr, p.stderr
    p = wire(run_dir, r, "--module", "model.py:Block", "--min-speedup", "fast")
    assert p.returncode == 2 and "--min-speedup takes a ratio" in p.stderr, p.stderr
