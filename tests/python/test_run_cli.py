"""End to end: `kernelbot run` on the CPU backend with real torch and real g++.

Small copies of the examples (examples/shrink.py) are analysed, generated,
tuned on a small space (max_points 2: the defaults and one neighbour),
verified in a fresh process and written out; the generated binding is then
imported and called on fresh inputs. A second run of the same operator
must come from the cache: nothing built, nothing timed.
"""
import importlib.util
import json
import os
import pty
import re
import signal
import subprocess
import sys
import time

import pytest
import torch
import torch.nn.functional as F

TOP = os.environ.get("KB_TOP") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("KB_BIN") or os.path.join(TOP, "build", "kernelbot")

pytestmark = pytest.mark.skipif(not os.path.exists(BIN),
                                reason="kernelbot binary not built")

# (example, format, family, kind)
EXAMPLES = [
    ("fused_pointwise", "kernelbench", "pointwise", "pointwise"),
    ("softmax", "kernelbench", "rowwise", "softmax"),
    ("layernorm", "kernelbench", "rowwise", "layer_norm"),
    ("rmsnorm", "robust-kbench", "rowwise", "rms_norm"),
    ("linear_gelu", "kernelbench", "matmul", "linear"),
]

CONV = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x):
        return self.conv(x)


batch_size = 2
channels = 4
size = 8


def get_inputs():
    return [torch.randn(batch_size, channels, size, size)]


def get_init_inputs():
    return [channels]
'''


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """Shrunk examples, a config with a small search and short timing."""
    d = tmp_path_factory.mktemp("run-cli")
    subprocess.run([sys.executable, os.path.join(TOP, "examples", "shrink.py"), str(d / "ex"),
                    "--factor", "32"], check=True, capture_output=True)
    cfg = d / "config.ini"
    cfg.write_text("[core]\nstate_dir = %s\n"
                   "[harness]\npython = %s\nbackend = cpu\nseeds = 2\nmax_configs = 3\n"
                   "[bench]\nwarmup = 1\nmin_time_ms = 5\nmax_reps = 20\n"
                   "[templates]\nmax_points = 2\nexhaustive_limit = 1\nrefine_rounds = 1\n"
                   % (d / "state", sys.executable))
    return {"dir": d, "config": str(cfg), "runs": {}}


def cpu_s():
    """CPU seconds of the children waited for so far (theirs and their children's)."""
    t = os.times()
    return t.children_user + t.children_system


def kb(env, *args, timeout=300):
    t, c = time.monotonic(), cpu_s()
    r = subprocess.run([BIN, "run", "-c", env["config"]] + list(args), capture_output=True,
                       text=True, timeout=timeout, cwd=str(env["dir"]))
    r.seconds = time.monotonic() - t
    r.cpu_s = cpu_s() - c
    return r


def operator_path(env, name, fmt):
    base = env["dir"] / "ex" / fmt
    return str(base / (name + ".py")) if fmt == "kernelbench" else str(base / name)


def run_example(env, name, fmt):
    """The first run of an example (once per module)."""
    key = (name, fmt)
    if key not in env["runs"]:
        out = env["dir"] / "out" / ("%s-%s" % (name, fmt))
        r = kb(env, operator_path(env, name, fmt), "--seeds", "2", "--out", str(out))
        env["runs"][key] = (r, out)
    return env["runs"][key]


def load_binding(out, tag):
    spec = importlib.util.spec_from_file_location("kb_binding_" + tag, str(out / "binding.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def load_module(path, tag):
    folder = os.path.dirname(path)
    spec = importlib.util.spec_from_file_location("kb_ref_" + tag, path)
    mod = importlib.util.module_from_spec(spec)
    sys.path.insert(0, folder)
    try:
        spec.loader.exec_module(mod)
    finally:
        sys.path.remove(folder)
    return mod


def check_binding(env, name, fmt, out):
    """Import binding.py and call it on fresh inputs; compare with the reference."""
    op = load_binding(out, "%s_%s" % (name, fmt.replace("-", "_")))
    torch.manual_seed(1234)
    if fmt == "kernelbench":
        ref = load_module(operator_path(env, name, fmt), name)
        m = op.Module()
        inputs = ref.get_inputs()
        got = m(*inputs)
        want = m.ref(*inputs)
        # the same through forward(), inputs then parameters in ABI order
        params = [p for _, p in m.ref.named_parameters()]
        got2 = op.forward(*inputs, *params)
        torch.testing.assert_close(got2, got)
    else:
        ref = load_module(os.path.join(operator_path(env, name, fmt), "func_forward.py"), name)
        model = ref.Model(hidden_size=96)
        with torch.no_grad():
            for p in model.parameters():
                p.normal_()
        x = torch.randn(5, 96)
        captured = []
        model.forward(x, fn=lambda *a: captured.extend(a))
        got = op.forward(*captured)
        want = ref.forward_fn(*captured)
    torch.testing.assert_close(got, want.detach(), rtol=1e-4, atol=1e-4)
    # a shape never seen: the output shape comes from the reference on meta
    if name in ("softmax", "fused_pointwise"):
        x = torch.randn(3, 37)
        extra = [p for _, p in op.Module().ref.named_parameters()]
        if extra:
            x = torch.randn(3, extra[0].shape[-1])
        y = op.forward(x, *extra)
        torch.testing.assert_close(y, op.reference_model()(x), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name,fmt,family,kind", EXAMPLES)
def test_run_produces_verified_kernel(env, name, fmt, family, kind):
    r, out = run_example(env, name, fmt)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "verified kernel for" in r.stdout
    assert "verdict: verified" in r.stdout
    # plain progress lines without a terminal
    for line in ("[analyse]", "[generate 1/", "[build 1/", "[verify 1/", "[time 1/",
                 "[final check] verified"):
        assert line in r.stderr, r.stderr
    assert "\r" not in r.stderr
    assert re.search(r"^\[build 2/2\] .*: ok", r.stderr, re.M) or \
        re.search(r"^\[build 1/1\] .*: ok", r.stderr, re.M), r.stderr

    for f in ("kernel.cpp", "kernel.json", "evidence.json", "report.md", "binding.py",
              "include/kernelbot_abi.h", "include/dlpack/dlpack.h"):
        assert (out / f).is_file(), f
    ev = json.loads((out / "evidence.json").read_text())
    assert ev["verdict"] == "verified"
    assert ev["summary"]["seeds"] == 2
    assert ev["kernelbot"]["kernel"]["path"] == os.path.realpath(str(out / "kernel.cpp"))
    kj = json.loads((out / "kernel.json").read_text())
    assert kj["template"]["family"] == family
    assert kj["template"]["kind"] == kind
    assert kj["tuning"]["points_tried"] <= 2
    assert kj["build"]["ok"] is True
    assert set(kj["template"]["point"]) == {p["name"] for p in kj["template"]["space"]}

    md = (out / "report.md").read_text()
    assert "| config | eager | torch.compile | kernel | speedup | roofline share |" in md
    assert "| **geomean** |" in md
    assert "| points tried | verified | best point | time spent |" in md
    assert "kernelbot verify %s %s/kernel.cpp" % (operator_path(env, name, fmt), out) in md
    check_binding(env, name, fmt, out)


def test_second_run_is_cached(env):
    r1, out = run_example(env, "softmax", "kernelbench")
    assert r1.returncode == 0, r1.stderr
    r2 = kb(env, operator_path(env, "softmax", "kernelbench"), "--seeds", "2", "--out", str(out))
    assert r2.returncode == 0, r2.stderr
    assert "cached" in r2.stderr
    assert "[build" not in r2.stderr and "[time" not in r2.stderr and "[verify" not in r2.stderr
    assert "[final check] verified (cached)" in r2.stderr
    assert "0 built, 0 timed" in r2.stdout
    # the work it spared, as CPU time: wall time would judge the machine's
    # load between the two runs as much as the cache
    assert r2.cpu_s < r1.cpu_s / 3, (r1.cpu_s, r2.cpu_s, r1.seconds, r2.seconds)
    md = (out / "report.md").read_text()
    assert "Every measurement came from the cache of an earlier run" in md
    # the same kernel as the first time
    kj = json.loads((out / "kernel.json").read_text())
    assert kj["tuning"]["all_cached"] is True

    # on a terminal: a bar redrawn with '\r', no plain lines
    pid, fd = pty.fork()
    if pid == 0:
        os.chdir(str(env["dir"]))
        os.execv(BIN, [BIN, "run", "-c", env["config"], operator_path(env, "softmax", "kernelbench"),
                       "--seeds", "2", "--out", str(out)])
    data = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        data += chunk
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0, data
    text = data.decode(errors="replace")
    assert "\r\x1b[K[" in text and "final check" in text, text
    assert "[final check] verified" not in text


def test_no_template_exits_1(env):
    path = env["dir"] / "conv.py"
    path.write_text(CONV)
    out = env["dir"] / "out" / "conv"
    r = kb(env, str(path), "--out", str(out))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "kernelbot run: no built-in template for this operator: " in r.stderr
    assert "conv" in r.stderr.split("no built-in template for this operator: ")[1]
    assert not out.exists()


def test_bad_arguments_exit_2(env, tmp_path):
    op = operator_path(env, "softmax", "kernelbench")
    notpy = tmp_path / "x.txt"
    notpy.write_text("")
    cases = [
        ([], "expected one OPERATOR"),
        ([op, op], "expected one OPERATOR"),
        ([op, "--backend", "gpu"], "unknown backend 'gpu'"),
        ([op, "--seeds", "0"], "--seeds '0'"),
        ([op, "--bogus"], "unknown option"),
        ([str(tmp_path / "missing.py")], "does not exist"),
        ([str(notpy)], "neither a .py file nor a folder: an operator is one KernelBench .py file"),
    ]
    for args, msg in cases:
        r = kb(env, *args)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert msg in r.stderr, (args, r.stderr)
    r = subprocess.run([BIN, "run", "-c", str(tmp_path / "missing.ini"), op], capture_output=True,
                       text=True)
    assert r.returncode == 2
    if not torch.cuda.is_available():
        r = kb(env, op, "--backend", "cuda")
        assert r.returncode == 2, r.stderr
        assert "backend 'cuda' needs a gpu" in r.stderr
    r = subprocess.run([BIN, "run", "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "usage: kernelbot run OPERATOR" in r.stdout


def test_backward_pass(env):
    name, fmt = "fused_pointwise", "robust-kbench"
    out = env["dir"] / "out" / "fused_pointwise-backward"
    r = kb(env, operator_path(env, name, fmt), "--pass", "backward", "--seeds", "2",
           "--out", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    kj = json.loads((out / "kernel.json").read_text())
    assert kj["pass"] == "backward"
    assert kj["template"]["has_backward"] is True
    assert kj["forward_check"]["verdict"] == "verified"
    md = (out / "report.md").read_text()
    assert "backward pass (kb_backward" in md
    assert "--pass backward" in md
    # the binding's autograd op: gradients from kb_backward match torch's
    op = load_binding(out, "fused_pointwise_backward")
    torch.manual_seed(7)
    x = torch.randn(6, 40, requires_grad=True)
    b = torch.randn(40, requires_grad=True)
    y = op.apply(x, b, 0.3)
    (y * torch.arange(40.0)).sum().backward()
    gx, gb = x.grad.clone(), b.grad.clone()
    x.grad = b.grad = None
    (torch.tanh(F.gelu(x * 0.3 + b)) * torch.arange(40.0)).sum().backward()
    torch.testing.assert_close(y.detach(), torch.tanh(F.gelu(x * 0.3 + b)).detach())
    torch.testing.assert_close(gx, x.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(gb, b.grad, rtol=1e-4, atol=1e-5)


def test_no_point_verified_exits_1(env):
    # tolerances no float kernel meets, and no error bound: every point is rejected
    cfg = env["dir"] / "strict.ini"
    cfg.write_text(open(env["config"]).read().replace(
        "seeds = 2\n", "seeds = 2\natol_fp32 = 1e-12\nrtol_fp32 = 1e-12\nerror_factor = 0\n"))
    out = env["dir"] / "out" / "strict"
    r = subprocess.run([BIN, "run", "-c", str(cfg), operator_path(env, "fused_pointwise", "kernelbench"),
                        "--out", str(out)], capture_output=True, text=True, timeout=300,
                       cwd=str(env["dir"]))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "kernelbot run: no point of the pointwise template verified: " in r.stderr
    assert "rejected" in r.stderr and "beyond atol" in r.stderr
    assert "[time" not in r.stderr  # a point that fails is never timed
    assert not out.exists()


VERIFY_LINE = re.compile(r"^\[verify \d+/\d+\] (.+): verified$", re.M)
TIME_LINE = re.compile(r"^\[time \d+/\d+\] (.+): [0-9.]+x$", re.M)


def test_killed_run_reuses_finished_points(env, tmp_path):
    """SIGKILL while a batch is being timed, then the same run again: no
    point verified before the kill is verified again, none timed is timed
    again; the points verified but not yet timed are only timed."""
    op = operator_path(env, "softmax", "kernelbench")
    cfg = tmp_path / "kill.ini"
    # a state of its own; a first batch of 3 points (default + sample), then refinement
    cfg.write_text(open(env["config"]).read()
                   .replace(str(env["dir"] / "state"), str(tmp_path / "state"))
                   .replace("max_points = 2", "max_points = 6"))
    argv = [BIN, "run", "-c", str(cfg), op, "--seeds", "2", "--out", str(tmp_path / "out")]
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                         cwd=str(env["dir"]), start_new_session=True)
    first, killed = [], False
    try:
        for line in p.stderr:
            first.append(line)
            if line.startswith("[time 1/"):
                os.kill(p.pid, signal.SIGKILL)  # what was printed is stored: see below
                killed = True
                break
        first.append(p.stderr.read())  # whatever it finished before the signal landed
    finally:
        p.wait()
        p.stderr.close()
    assert killed, "".join(first)
    first = "".join(first)
    verified, timed = set(VERIFY_LINE.findall(first)), set(TIME_LINE.findall(first))
    assert len(verified) >= 2 and timed and timed <= verified, first

    r = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=str(env["dir"]))
    assert r.returncode == 0, r.stdout + r.stderr
    again_verified = set(VERIFY_LINE.findall(r.stderr))
    again_timed = set(TIME_LINE.findall(r.stderr))
    assert not again_verified & verified, (again_verified & verified, r.stderr)
    assert not again_timed & timed, (again_timed & timed, r.stderr)
    # verified, not timed: timed now, on the earlier verification
    assert verified - timed <= again_timed, r.stderr
    if verified - timed:
        assert "verified earlier, to be timed" in r.stderr, r.stderr
    hits = re.search(r"(\d+) from the cache", r.stdout)
    assert hits and int(hits.group(1)) >= len(timed), r.stdout


def _budget_run(env, tag, budget):
    """`kernelbot run --time-budget` on the layernorm template with a
    space larger than the budget, in a state dir of its own (nothing
    cached): (completed process with .seconds, kernel.json)."""
    cfg = env["dir"] / ("budget-%s.ini" % tag)
    text = open(env["config"]).read().replace(
        str(env["dir"] / "state"), str(env["dir"] / ("state-budget-" + tag)))
    cfg.write_text(text.replace("max_points = 2\nexhaustive_limit = 1\nrefine_rounds = 1\n",
                                "max_points = 12\nexhaustive_limit = 1\nrefine_rounds = 2\n"))
    out = env["dir"] / "out" / ("budget-" + tag)
    t = time.monotonic()
    r = subprocess.run([BIN, "run", "-c", str(cfg), operator_path(env, "layernorm", "kernelbench"),
                        "--out", str(out), "--time-budget", str(budget)],
                       capture_output=True, text=True, timeout=600, cwd=str(env["dir"]))
    r.seconds = time.monotonic() - t
    assert r.returncode == 0, r.stdout + r.stderr
    with open(out / "kernel.json") as f:
        return r, json.load(f)


def test_time_budget_bounds_wall_time(env):
    """The budget bounds the run's wall time within 10%, the best so far is
    published. A budget of 1 s runs the first chunk of points (nothing to
    publish otherwise) and its final check: that minimal run's wall time,
    measured here, sizes the budget of the second run, so the test judges
    a ratio on this machine, whatever its speed or load. 1.3 x the minimal
    run leaves room for about one more chunk but not for it and a final
    check: a run that starts points until the deadline and only then
    checks its best overruns."""
    r1, kj1 = _budget_run(env, "min", 1)
    assert kj1["tuning"]["cut_short"] is True and kj1["verdict"] == "verified"
    assert "time budget reached after" in r1.stderr, r1.stderr
    budget = max(3, int(round(1.3 * r1.seconds)))
    r2, kj2 = _budget_run(env, "ratio", budget)
    assert kj2["verdict"] == "verified", kj2
    print("budget: minimal run %.1f s, budget %d s, run %.1f s" % (r1.seconds, budget, r2.seconds))
    assert r2.seconds <= 1.1 * budget, (r2.seconds, budget, r2.stderr)
    assert kj2["tuning"]["cut_short"] is True, kj2["tuning"]
    # no point started once the estimate said it would not fit
    note = r2.stderr[r2.stderr.index("time budget reached after"):]
    assert "[generate" not in note and "[build" not in note, note
