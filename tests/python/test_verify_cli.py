"""End to end: `kernelbot verify` / `kernelbot bench` with the real harness,
real torch (cpu backend) and real g++-built kernels."""

import json
import os
import subprocess

import pytest

TOP = os.environ.get("KB_TOP") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("KB_BIN") or os.path.join(TOP, "build", "kernelbot")
OP = os.path.join(TOP, "tests", "operators", "kb_relu.py")
CPU = os.path.join(TOP, "tests", "kernels", "cpu")

pytestmark = pytest.mark.skipif(not os.path.exists(BIN),
                                reason="kernelbot binary not built")


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    """A config with its own state dir and short timing."""
    d = tmp_path_factory.mktemp("verify-cli")
    path = d / "config.ini"
    path.write_text("[core]\nstate_dir = %s\n"
                    "[bench]\nwarmup = 1\nmin_time_ms = 5\nmax_reps = 10\n"
                    % (d / "state"))
    return str(path)


def kb(config, *args, timeout=240):
    env = dict(os.environ)
    return subprocess.run([BIN, args[0], "-c", config] + list(args[1:]),
                          capture_output=True, text=True, timeout=timeout,
                          env=env, cwd=TOP)


def test_correct_kernel_verified(config, tmp_path):
    out = tmp_path / "evidence.json"
    r = kb(config, "verify", OP, os.path.join(CPU, "ok_relu.cpp"),
           "--backend", "cpu", "--seeds", "2", "--no-timing", "--json", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "verdict: verified" in r.stdout
    assert "x 2 seeds" in r.stdout
    ev = json.loads(out.read_text())
    assert ev["verdict"] == "verified"
    assert "nonce" not in ev
    kbinfo = ev["kernelbot"]
    assert kbinfo["kernel"]["abi"] == "native"
    assert len(kbinfo["kernel"]["sha256"]) == 64
    assert kbinfo["build"]["ok"] is True
    assert os.path.exists(kbinfo["build"]["library"])
    assert kbinfo["static"] == []
    assert ev["environment"]["kernelbot"] == kbinfo["version"]
    assert ev["environment"]["backend"] == "cpu"


@pytest.mark.parametrize("kernel,check", [
    ("hack_cached.cpp", "cached_result"),
    ("hack_input_mutation.cpp", "input_mutation"),
    ("hack_crash.cpp", "crash"),
    ("hack_forge.cpp", "static"),
])
def test_hack_rejected(config, kernel, check):
    r = kb(config, "verify", OP, os.path.join(CPU, kernel),
           "--backend", "cpu", "--seeds", "2", "--no-timing")
    assert r.returncode == 1, r.stdout + r.stderr
    lines = [l for l in r.stdout.splitlines() if l.startswith("rejected: ")]
    assert lines, r.stdout
    assert any(l.startswith("rejected: %s: " % check) for l in lines), r.stdout


def test_hang_times_out(config):
    r = kb(config, "verify", OP, os.path.join(CPU, "hack_hang.cpp"),
           "--backend", "cpu", "--seeds", "1", "--no-timing", "--timeout", "4")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "rejected: timeout: " in r.stdout


def test_compile_error_rejected_with_trimmed_message(config, tmp_path):
    k = tmp_path / "broken.cpp"
    k.write_text('#include "kernelbot_abi.h"\n'
                 "KB_EXPORT int kb_forward(const DLTensor *i, int ni, DLTensor *o,"
                 " int no, void *s)\n{\n\treturn nope;\n}\n")
    out = tmp_path / "ev.json"
    r = kb(config, "verify", OP, str(k), "--json", str(out))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "rejected: build: compile failed: broken.cpp:4" in r.stdout
    ev = json.loads(out.read_text())
    errors = ev["kernelbot"]["build"]["errors"]
    assert "nope" in errors and "build-cache" not in errors


def test_torch_ext_static_rejection(config, tmp_path):
    k = tmp_path / "ext_cheat.cpp"
    k.write_text("#include <torch/extension.h>\n"
                 "torch::Tensor forward(torch::Tensor x) {\n"
                 "  try { return torch::relu(x); } catch (...) { return x; }\n"
                 "}\n"
                 "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def(\"forward\", &forward); }\n")
    r = kb(config, "verify", OP, str(k), "--backend", "cpu")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "rejected: static: line 3: try_catch" in r.stdout
    assert "rejected: static: line 3: torch_compute" in r.stdout


def test_usage_errors(config, tmp_path):
    ok = os.path.join(CPU, "ok_relu.cpp")
    r = kb(config, "verify", OP, "/nonexistent/k.cpp")
    assert r.returncode == 2 and "'/nonexistent/k.cpp'" in r.stderr
    r = kb(config, "verify", "/nonexistent/op.py", ok)
    assert r.returncode == 2 and "'/nonexistent/op.py'" in r.stderr
    r = kb(config, "verify", OP, ok, "--backend", "tpu")
    assert r.returncode == 2 and "'tpu'" in r.stderr
    r = kb(config, "verify", OP)
    assert r.returncode == 2
    cu = os.path.join(TOP, "tests", "kernels", "cuda", "ok_relu.cu")
    r = kb(config, "verify", OP, cu, "--backend", "cpu")
    assert r.returncode == 2 and "ok_relu.cu" in r.stderr and "'cpu'" in r.stderr
    txt = tmp_path / "notes.cpp"
    txt.write_text("int main() { return 0; }\n")
    r = kb(config, "verify", OP, str(txt))
    assert r.returncode == 2 and "kb_forward" in r.stderr
    r = kb(config, "verify", "--help")
    assert r.returncode == 0 and "usage: kernelbot verify" in r.stdout
    r = kb(config, "bench", "--help")
    assert r.returncode == 0 and "usage: kernelbot bench" in r.stdout


def test_no_python_with_torch_is_environment_error(tmp_path):
    cfg = tmp_path / "config.ini"
    cfg.write_text("[core]\nstate_dir = %s\n[harness]\npython = /bin/true\n"
                   % (tmp_path / "state"))
    r = kb(str(cfg), "verify", OP, os.path.join(CPU, "ok_relu.cpp"))
    assert r.returncode == 2
    assert "/bin/true" in r.stderr


def test_bench_table(config, tmp_path):
    out = tmp_path / "bench.json"
    r = kb(config, "bench", OP, os.path.join(CPU, "ok_relu.cpp"),
           "--backend", "cpu", "--seeds", "1", "--json", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    header = [l for l in lines if l.startswith("config ")]
    assert header and "eager ms" in header[0] and "kernel ms" in header[0]
    assert "speedup" in header[0] and "roofline" in header[0]
    assert any(l.startswith("geomean ") and l.rstrip().endswith("x") for l in lines)
    ev = json.loads(out.read_text())
    timed = [c for c in ev["configs"] if c.get("timing")]
    assert timed
    # one table row per timed config
    assert sum(1 for l in lines if any(l.startswith(c["name"] + " ")
                                       for c in timed)) == len(timed)
