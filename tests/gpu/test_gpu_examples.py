"""The example repositories (examples/repos) on a GPU runner (issue 17): each
pull request's module through the bot's own steps, without the forge (the
forge side is tests/python/test_example_repos.py, on the CPU):

  kernelbot operator SECTION --repo REPO        the module as a KernelBench file
  kernelbot run FILE --backend cuda             templates, tuned, verified, timed
  kernelbot wire RUN --repo REPO --check --write the speed gate, ops.py, the patch,
                                                the sandboxed wiring check and
                                                the repository's tests (their
                                                cuda cases call the kernel)

then, on the patched tree in a fresh interpreter: the module on the GPU
compiled with torch.compile(fullgraph=True) (a graph break at the custom op
raises) against its original code, and the kernel's calls. Figures (the
run's headline speedup, the wiring verdict, the tests' counts) are printed
and kept in $KB_GPU_EVIDENCE/examples.json.

KB_GPU_SUITE_BACKEND=cpu runs it on the CPU (torch.compile only where torch
has it): a dry run of this driver on a machine without a GPU, where
KB_WIRE_MIN_SPEEDUP=0 lets a kernel slower than torch be wired all the same.
KB_GPU_EXAMPLES_BUDGET_S: each `kernelbot run`'s time budget (default 90).
"""
import json
import os
import shutil
import subprocess
import sys

import pytest

TOP = os.environ.get("KB_TOP") or os.path.abspath(
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
BIN = os.environ.get("KB_BIN") or os.path.join(TOP, "build", "kernelbot")
BACKEND = os.environ.get("KB_GPU_SUITE_BACKEND") or "cuda"
REPOS = os.path.join(TOP, "examples", "repos")
torch = pytest.importorskip("torch")

# (example, section, module file, class, init JSON, input shape)
EXAMPLES = [
    ("tinymlp", "gelu_tanh", "src/tinymlp/act.py", "GeluTanh", {"kwargs": {"scale": 0.5}}, (64, 256)),
    ("flatnet", "silu_gate", "model.py", "SiluGate", None, (128, 256)),
    ("ext_repo", "soft_clip", "extpkg/layers.py", "ScaledTanh", None, (64, 512)),
]


def _torch_version():
    return tuple(int("".join(ch for ch in p if ch.isdigit()) or 0) for p in torch.__version__.split(".")[:2])


pytestmark = pytest.mark.skipif(
    not os.path.exists(BIN) or (BACKEND == "cuda" and not torch.cuda.is_available()),
    reason="needs the kernelbot binary and, on the cuda backend, a CUDA GPU")

CHECK = """
import copy, importlib, json, sys
import torch
sys.path[:0] = %(sys_path)r
mod = importlib.import_module(%(module)r)
ops = sys.modules[%(ops)r]
m = getattr(mod, %(cls)r)(*%(args)r, **%(kwargs)r).to(%(device)r)
x = torch.randn(*%(shape)r, device=%(device)r)
ops.ENABLED = False
want = m(x)
ops.ENABLED = True
out = {"implementation": ops.IMPLEMENTATION, "torch": torch.__version__}
calls = ops.CALLS
y = m(x)
out["eager_calls"], out["eager_err"] = ops.CALLS - calls, (y - want).abs().max().item()
if hasattr(torch, "compile") and %(compile)r:
    calls = ops.CALLS
    y = torch.compile(m, fullgraph=True)(x)
    out["compiled_calls"], out["compiled_err"] = ops.CALLS - calls, (y - want).abs().max().item()
print(json.dumps(out))
"""


def _kb(*args, timeout=900):
    p = subprocess.run([BIN] + list(args), capture_output=True, text=True, timeout=timeout)
    return p


def _evidence_dir(tmp_path):
    d = os.environ.get("KB_GPU_EVIDENCE")
    if d:
        os.makedirs(d, exist_ok=True)
        return d
    return str(tmp_path)


def _record(tmp_path, name, fig):
    path = os.path.join(_evidence_dir(tmp_path), "examples.json")
    try:
        with open(path) as f:
            all_ = json.load(f)
    except (OSError, ValueError):
        all_ = {}
    all_[name] = fig
    with open(path, "w") as f:
        json.dump(all_, f, indent=1)
    print("example %s: %s" % (name, json.dumps(fig)))


@pytest.mark.parametrize("name,section,path,cls,init,shape", EXAMPLES, ids=[e[0] for e in EXAMPLES])
def test_example_wired_on_the_device(tmp_path, name, section, path, cls, init, shape):
    repo = tmp_path / name
    s = subprocess.run(["sh", os.path.join(REPOS, "scenario.sh"), name, str(repo)],
                       capture_output=True, text=True, timeout=120)
    assert s.returncode == 0, s.stderr
    subprocess.run(["git", "-C", str(repo), "checkout", "-q", "pr"], check=True, timeout=60)
    cfg = tmp_path / "config.ini"
    cfg.write_text("[core]\nstate_dir = %s\n[harness]\npython = %s\nbackend = %s\n"
                   "[templates]\nmax_points = 4\nrefine_rounds = 0\n"
                   % (tmp_path / "state", sys.executable, BACKEND))
    p = _kb("operator", section, "--repo", str(repo), "-c", str(cfg))
    assert p.returncode == 0, p.stdout + p.stderr
    opfile = p.stdout.strip().splitlines()[-1]
    run = tmp_path / "run"
    p = _kb("run", opfile, "--out", str(run), "-c", str(cfg), "--backend", BACKEND,
            "--time-budget", os.environ.get("KB_GPU_EXAMPLES_BUDGET_S") or "90")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    ev = json.loads((run / "evidence.json").read_text())
    sys_path = (["src"] if path.startswith("src/") else []) + ["."]
    tests = "tests" if (repo / "tests").is_dir() else "."
    args = ["wire", str(run), "--repo", str(repo), "--module", "%s:%s" % (path, cls), "-c", str(cfg),
            "--tests", tests, "--check", "--write",
            "--min-speedup", os.environ.get("KB_WIRE_MIN_SPEEDUP", "1")]
    for sp in sys_path:
        args += ["--sys-path", sp]
    if init:
        args += ["--init", json.dumps(init)]
    p = _kb(*args)
    w = json.loads((run / "evidence.json").read_text()).get("wiring") or {}
    fig = {"backend": BACKEND,
           "speedups_eager": {c["name"]: (c.get("timing") or {}).get("speedup_eager")
                              for c in ev.get("configs", [])},
           "wiring": w.get("verdict"), "speed_gate": w.get("speed_gate"),
           "reason": ((w.get("reasons") or [{}])[0]).get("message"),
           "tests": {k: (w.get("tests") or {}).get(k) for k in ("passed", "failed", "kernel_calls")}}
    if w.get("verdict") == "not_wired":
        # slower than the module's own code on every timed config: honest, and said so
        _record(tmp_path, name, fig)
        assert p.returncode == 1 and "measured below" in fig["reason"], p.stdout + p.stderr
        pytest.skip("%s: not wired: %s" % (name, fig["reason"]))
    assert p.returncode == 0 and w.get("verdict") == "wired", p.stdout + p.stderr
    assert w["tests"]["ran"] and w["tests"]["failed"] == 0 and w["tests"]["passed"] >= 2, w["tests"]
    # the branch: the run's folder at the operator's folder, the patched module
    shutil.copytree(str(run), str(repo / w["op_dir"]), dirs_exist_ok=True)
    ops_module = w["op_dir"].replace("/", ".")
    for sp in sys_path:
        if sp != "." and ops_module.startswith(sp + "."):
            ops_module = ops_module[len(sp) + 1:]
    module = path[:-3].replace("/", ".")
    for sp in sys_path:
        if sp != "." and module.startswith(sp + "."):
            module = module[len(sp) + 1:]
    script = CHECK % {"sys_path": sys_path, "module": module, "ops": ops_module + ".ops", "cls": cls,
                      "args": (init or {}).get("args", []), "kwargs": (init or {}).get("kwargs", {}),
                      "device": BACKEND, "shape": list(shape), "compile": _torch_version() >= (2, 4)}
    c = subprocess.run([sys.executable, "-c", script], cwd=str(repo), capture_output=True, text=True,
                       timeout=900)
    assert c.returncode == 0, c.stderr[-4000:]
    got = json.loads(c.stdout.strip().splitlines()[-1])
    fig["module_check"] = got
    _record(tmp_path, name, fig)
    assert got["eager_err"] < 1e-4, got
    if "compiled_calls" in got:
        assert got["compiled_err"] < 1e-4, got
    # the kernel runs on the example's own shape unless its speed gate keeps it out there
    gate = (w.get("speed_gate") or {}).get("faster")
    assert got["eager_calls"] >= 1 or gate is not None, got
