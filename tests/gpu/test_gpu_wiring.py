"""The wired kernel on a GPU runner with torch >= 2.4 (issue 17): the CUDA
linear+gelu kernel registered with torch.library.custom_op, the patched
module compiled with torch.compile(fullgraph=True) (a graph break at the
custom op would raise), its outputs and gradients against the original
code, and the sandboxed wiring check on cuda. Skipped, with the reason,
below torch 2.4 or without a GPU (the CPU suite, tests/python/test_wiring.py,
covers the rest on torch 1.13).
"""
import json
import os
import shutil
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from kb_wiring_run import PROLOGUE, make_repo, make_run_dir, timed_run, wire  # noqa: E402

torch = pytest.importorskip("torch")


def _torch_version():
    return tuple(int("".join(ch for ch in p if ch.isdigit()) or 0) for p in torch.__version__.split(".")[:2])


pytestmark = pytest.mark.skipif(_torch_version() < (2, 4) or not torch.cuda.is_available(),
                                reason="needs torch >= 2.4 (torch.library.custom_op) and a CUDA GPU")

COMPILED = PROLOGUE + '''
m = model.Block(256, 512).cuda()
ref = copy.deepcopy(m)
c = torch.compile(m, fullgraph=True)
x = torch.randn(8, 256, device="cuda", requires_grad=True)
xr = x.detach().clone().requires_grad_()
y = c(x)
calls = ops.CALLS
ops.ENABLED = False
yr = ref(xr)
ops.ENABLED = True
g = torch.randn_like(y)
y.backward(g)
yr.backward(g)
print(json.dumps({"implementation": ops.IMPLEMENTATION, "calls": calls,
                  "y": (y - yr).abs().max().item(), "gx": (x.grad - xr.grad).abs().max().item(),
                  "gw": (m.linear.weight.grad - ref.linear.weight.grad).abs().max().item()}))
'''


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return make_run_dir(tmp_path_factory.mktemp("gpu-wiring"), "cuda")


def test_compile_fullgraph_custom_op(run_dir):
    r = make_repo(run_dir["dir"], "repo-compile")
    p = wire(run_dir, r, "--module", "model.py:Block", "--write")
    assert p.returncode == 0, p.stdout + p.stderr
    shutil.copytree(str(run_dir["run"]), str(r / "kernelbot" / "kb_linear_gelu"))
    c = subprocess.run([sys.executable, "-c", COMPILED], cwd=str(r), capture_output=True, text=True,
                       timeout=900)
    assert c.returncode == 0, c.stderr[-4000:]
    got = json.loads(c.stdout.strip().splitlines()[-1])
    assert got["implementation"] == "custom_op"
    assert got["calls"] >= 1
    assert got["y"] < 1e-4 and got["gx"] < 1e-4 and got["gw"] < 1e-3, got


def test_wiring_check_cuda(run_dir):
    r = make_repo(run_dir["dir"], "repo-check")
    p = wire(run_dir, r, "-c", run_dir["config"], "--module", "model.py:Block", "--init",
             '{"args": [256, 512]}', "--tests", "tests/test_block.py", "--check")
    assert p.returncode == 0, p.stdout + p.stderr
    w = json.loads((run_dir["run"] / "evidence.json").read_text())["wiring"]
    assert w["verdict"] == "wired" and w["implementation"] == "custom_op"


GATED = PROLOGUE + """
m = model.Block(256, 512).cuda()
c = torch.compile(m, fullgraph=True, dynamic=False)
out = {}
for batch in (8, 100):   # 133632 elements with the parameters: timed fast; 157184: above the range
    calls = ops.CALLS
    x = torch.randn(batch, 256, device="cuda")
    y = c(x)
    ops.ENABLED = False
    want = m(x)
    ops.ENABLED = True
    out[str(batch)] = {"calls": ops.CALLS - calls, "err": (y - want).abs().max().item()}
print(json.dumps(out))
"""


def test_compile_fullgraph_with_the_speed_gate(run_dir, tmp_path):
    """The speed gate inside torch.compile(fullgraph=True): the kernel traced where it was
    timed fast, the original code where it was not, no graph break either way."""
    env = timed_run(run_dir, tmp_path, {"half": 0.5, "own": 1.5, "odd": 1.2, "double": 0.8})
    r = make_repo(env["dir"], "repo-gated")
    p = wire(env, r, "--module", "model.py:Block", "--min-speedup", "1", "--write")
    assert p.returncode == 0, p.stdout + p.stderr
    shutil.copytree(str(env["run"]), str(r / "kernelbot" / "kb_linear_gelu"))
    c = subprocess.run([sys.executable, "-c", GATED], cwd=str(r), capture_output=True, text=True,
                       timeout=900)
    assert c.returncode == 0, c.stderr[-4000:]
    got = json.loads(c.stdout.strip().splitlines()[-1])
    assert got["8"]["calls"] >= 1 and got["100"]["calls"] == 0, got
    assert got["8"]["err"] < 1e-4 and got["100"]["err"] < 1e-4, got
