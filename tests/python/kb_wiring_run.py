"""The pieces of the wiring tests (tests/python/test_wiring.py, and
tests/gpu/test_gpu_wiring.py on a GPU runner): a run's folder for the
linear+gelu kernel of a backend, as `kernelbot run` leaves it, and a small
repository whose module computes the same operator."""
import json
import os
import shutil
import subprocess
import sys

TOP = os.environ.get("KB_TOP") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("KB_BIN") or os.path.join(TOP, "build", "kernelbot")

MODEL = '''"""A tiny model."""
import torch
from torch import nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        """gelu(linear(x))"""
        return F.gelu(self.linear(x))


class Relu(Block):
    def forward(self, x):
        return F.relu(self.linear(x))


class Splat(Block):
    def forward(self, *xs):
        return F.gelu(self.linear(xs[0]))


class Moody(Block):
    def forward(self, x):
        y = F.gelu(self.linear(x))
        return y if self.training else y * 0.5


class Scaled(Block):
    def __init__(self, in_features, out_features, scale=1.0):
        super().__init__(in_features, out_features)
        self.scale = scale

    def forward(self, x):
        return F.gelu(self.linear(x)) * self.scale


class Masked(Block):
    def __init__(self, in_features, out_features):
        super().__init__(in_features, out_features)
        self.mask = torch.ones(out_features)

    def forward(self, x):
        return F.gelu(self.linear(x)) * self.mask


class Counting(Block):
    def __init__(self, in_features, out_features):
        super().__init__(in_features, out_features)
        self.register_buffer("seen", torch.zeros((), dtype=torch.long))

    def forward(self, x):
        self.seen += 1
        return F.gelu(self.linear(x))
'''

TESTS = '''import torch
from model import Block


def test_shape():
    assert Block(256, 512)(torch.randn(3, 256)).shape == (3, 512)


def test_grad():
    x = torch.randn(4, 256, requires_grad=True)
    Block(256, 512)(x).sum().backward()
    assert x.grad is not None
'''

# the start of a script run on the patched tree: the module, its ops, a Block and its copy
PROLOGUE = """
import copy, json, sys
import torch
import model
ops = sys.modules["kernelbot.kb_linear_gelu.ops"]
torch.manual_seed(0)
"""


def make_run_dir(d, backend="cpu"):
    """A run's folder for the linear+gelu kernel of backend: the verified
    evidence (`kernelbot verify`), the kernel, headers, reference copy and
    the kernel.json record `kernelbot wire` renders binding.py from."""
    out = d / "run"
    (out / "include" / "dlpack").mkdir(parents=True)
    (out / "reference").mkdir()
    cfg = d / "config.ini"
    cfg.write_text("[core]\nstate_dir = %s\n[harness]\npython = %s\nbackend = %s\n"
                   % (d / "state", sys.executable, backend))
    op = os.path.join(TOP, "tests", "operators", "kb_linear_gelu.py")
    kernel = os.path.join(TOP, "tests", "kernels", backend, "ok_linear_gelu." + ("cu" if backend == "cuda" else "cpp"))
    r = subprocess.run([BIN, "verify", "-c", str(cfg), op, kernel, "--backend", backend, "--seeds", "1",
                        "--max-configs", "4", "--no-timing", "--json", str(out / "evidence.json")],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    source = "kernel.cu" if backend == "cuda" else "kernel.cpp"
    shutil.copy(kernel, out / source)
    shutil.copy(op, out / "reference" / "kb_linear_gelu.py")
    shutil.copy(os.path.join(TOP, "verifier", "include", "kernelbot_abi.h"), out / "include")
    # the build's copy first: a GPU runner carries it and has no dlpack package
    for inc in (os.path.join(os.path.dirname(BIN), "include", "dlpack", "dlpack.h"),
                "/usr/include/dlpack/dlpack.h", "/usr/local/include/dlpack/dlpack.h"):
        if os.path.exists(inc):
            shutil.copy(inc, out / "include" / "dlpack")
            break
    else:
        raise AssertionError("no dlpack/dlpack.h beside %s nor in /usr/include or /usr/local/include" % BIN)
    (out / "kernel.json").write_text(json.dumps({
        "source": source, "backend": backend, "verdict": "verified", "pass": "forward",
        "binding": {"file": "binding.py", "operator_name": "kb_linear_gelu", "format": "kernelbench",
                    "reference": "reference/kb_linear_gelu.py",
                    "input_names": ["input0", "param:linear.weight", "param:linear.bias"],
                    "has_backward": False}}))
    return {"dir": d, "run": out, "config": str(cfg)}


def make_repo(base, name):
    r = base / name
    (r / "tests").mkdir(parents=True)
    (r / "model.py").write_text(MODEL)
    (r / "tests" / "test_block.py").write_text(TESTS)
    return r


def wire(env, r, *args):
    """`kernelbot wire` of env's run folder on r. The run's evidence is not timed
    (--no-timing): without a --min-speedup of the caller's the speed gate is off."""
    gate = [] if any(a.startswith("--min-speedup") for a in args) else ["--min-speedup", "0"]
    return subprocess.run([BIN, "wire", str(env["run"]), "--repo", str(r)] + gate + list(args),
                          capture_output=True, text=True, timeout=600)


def timed_run(run_dir, tmp_path, speedups):
    """A copy of the run's folder whose evidence timed each config at speedups[name's kind]."""
    env = dict(run_dir, run=tmp_path / "run")
    shutil.copytree(str(run_dir["run"]), str(env["run"]))
    path = env["run"] / "evidence.json"
    ev = json.loads(path.read_text())
    for c in ev["configs"]:
        c["timing"] = {"speedup_eager": speedups[c["name"].split("(")[0]], "kernel_ms": 0.1,
                       "eager_ms": 0.1 * speedups[c["name"].split("(")[0]]}
    path.write_text(json.dumps(ev))
    return env
