"""KernelBench's candidate format (class ModelNew, load_inline) through
`kernelbot verify` and `kernelbot bench` as they are, and the custom-work
proof of mixed kernels (torch does part, custom code the rest).

SLOW: four torch extension builds (about 15 s each on 2 cores), one
`kernelbot verify` call for three of them (one worker)."""
import json
import os
import subprocess

import pytest

TOP = os.environ.get("KB_TOP") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("KB_BIN") or os.path.join(TOP, "build", "kernelbot")
OPS = os.path.join(TOP, "tests", "operators")
MN = os.path.join(TOP, "tests", "kernels", "modelnew")

pytestmark = pytest.mark.skipif(not os.path.exists(BIN),
                                reason="kernelbot binary not built")


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    d = tmp_path_factory.mktemp("modelnew")
    path = d / "config.ini"
    path.write_text("[core]\nstate_dir = %s\n"
                    "[bench]\nwarmup = 1\nmin_time_ms = 5\nmax_reps = 20\n" % (d / "state"))
    return str(path)


def kb(config, *args, timeout=600):
    return subprocess.run([BIN, args[0], "-c", config] + list(args[1:]),
                          capture_output=True, text=True, timeout=timeout, cwd=TOP)


@pytest.fixture(scope="module")
def mixed(config, tmp_path_factory):
    """The conv + fused epilogue solution, the same with its work thrown
    away, evaluated in one call; evidence by kernel file name."""
    out = tmp_path_factory.mktemp("mixed-ev")
    r = kb(config, "verify", os.path.join(OPS, "kb_conv_bias_relu.py"),
           os.path.join(MN, "mn_conv_epilogue.py"), os.path.join(MN, "mn_thrown_away.py"),
           "--backend", "cpu", "--seeds", "2", "--max-configs", "4", "--no-timing",
           "--json", str(out) + "/")
    return r, {f: json.loads((out / f).read_text()) for f in os.listdir(out)}


def test_conv_with_fused_epilogue_verifies(mixed):
    r, ev = mixed
    e = ev["mn_conv_epilogue.py.json"]
    assert e["verdict"] == "verified", (e["reasons"], r.stdout + r.stderr)
    assert e["kernelbot"]["kernel"]["abi"] == "modelnew"
    # custom code proven to do work: its outputs poisoned, the result broke
    assert e["custom_work"] == {"method": "poison", "kernels": 0, "ext_calls": 1,
                                "does_work": True}
    assert all(c["checks"]["no_custom_work"] == "pass" for c in e["configs"])
    # configs that scale out_channels scale the derived bias_shape with it
    assert any(c["params"].get("out_channels") != 8 for c in e["configs"])


def test_custom_work_thrown_away_is_rejected(mixed):
    r, ev = mixed
    e = ev["mn_thrown_away.py.json"]
    assert e["verdict"] == "rejected"
    checks = [x["check"] for x in e["reasons"]]
    assert checks == ["no_custom_work"], e["reasons"]
    assert "custom code does no work" in e["reasons"][0]["message"]
    assert e["custom_work"]["does_work"] is False
    assert "no_custom_work" in r.stdout


def test_modelnew_verifies_and_benches_unedited(config, tmp_path):
    """The file as KernelBench writes it, through bench: verified, timed,
    its custom share reported."""
    out = tmp_path / "ev.json"
    r = kb(config, "bench", os.path.join(OPS, "kb_relu.py"), os.path.join(MN, "mn_relu.py"),
           "--backend", "cpu", "--seeds", "2", "--max-configs", "2", "--json", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    e = json.loads(out.read_text())
    assert e["verdict"] == "verified", e["reasons"]
    t = e["configs"][0]["timing"]
    assert t["kernel"]["median_ms"] > 0 and t["speedup_eager"] > 0
    # the whole of ModelNew's forward is its extension call
    assert 0.5 <= t["custom_share"] <= 1.0


def test_torch_only_modelnew_is_a_fallback(config, tmp_path):
    out = tmp_path / "ev.json"
    r = kb(config, "verify", os.path.join(OPS, "kb_relu.py"), os.path.join(MN, "mn_torch_only.py"),
           "--backend", "cpu", "--seeds", "2", "--max-configs", "2", "--no-timing",
           "--json", str(out))
    e = json.loads(out.read_text())
    assert e["verdict"] == "rejected", r.stdout + r.stderr
    assert [x["check"] for x in e["reasons"]] == ["torch_fallback"]
    assert "called none of its extension's functions" in e["reasons"][0]["message"]


def test_bad_modelnew_files_get_errors_naming_file_and_line(config, tmp_path):
    """No extension: static, with the class's line; a syntax error: the
    file and line; a .py without ModelNew: a usage error; backward: what
    the format cannot express. None of these builds anything."""
    relu = os.path.join(OPS, "kb_relu.py")
    r = kb(config, "verify", relu, os.path.join(MN, "mn_no_extension.py"), "--backend", "cpu",
           "--no-timing")
    assert "line 6: torch_fallback: ModelNew builds no extension" in r.stdout, r.stdout + r.stderr
    r = kb(config, "verify", relu, os.path.join(MN, "mn_syntax_error.py"), "--backend", "cpu",
           "--no-timing")
    assert "SyntaxError" in r.stdout and "mn_syntax_error.py:8" in r.stdout, r.stdout + r.stderr
    plain = tmp_path / "plain.py"
    plain.write_text("import torch\n\nclass Model(torch.nn.Module):\n    pass\n")
    r = kb(config, "verify", relu, str(plain), "--backend", "cpu", "--no-timing")
    assert r.returncode == 2
    assert "defines no class ModelNew" in r.stderr and "plain.py" in r.stderr
    r = kb(config, "verify", relu, os.path.join(MN, "mn_relu.py"), "--backend", "cpu",
           "--pass", "backward", "--no-timing")
    assert "has no backward" in r.stdout, r.stdout + r.stderr
    rk = os.path.join(OPS, "rk_scale_shift")
    r = kb(config, "verify", rk, os.path.join(MN, "mn_relu.py"), "--backend", "cpu")
    assert r.returncode == 2 and "robust-kbench folder" in r.stderr


def test_kernelbench_stream_mode_is_said_and_stream_checks_skip(config, tmp_path):
    """--stream-mode kernelbench reaches the evidence (settings and the
    stream check skipped) and the output; a bad mode is a usage error. A
    native kernel: no extension build."""
    out = tmp_path / "ev.json"
    relu = os.path.join(OPS, "kb_relu.py")
    ok = os.path.join(TOP, "tests", "kernels", "cpu", "ok_relu.cpp")
    r = kb(config, "verify", relu, ok, "--backend", "cpu", "--seeds", "1", "--max-configs", "2",
           "--no-timing", "--stream-mode", "kernelbench", "--json", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "mode: kernelbench" in r.stdout
    e = json.loads(out.read_text())
    assert e["settings"]["stream_mode"] == "kernelbench"
    assert all(c["checks"]["stream"] == "skip" for c in e["configs"])
    r = kb(config, "verify", relu, ok, "--stream-mode", "fast")
    assert r.returncode == 2 and "unknown --stream-mode 'fast'" in r.stderr
    r = kb(config, "verify", relu, ok, "--backend", "cpu", "--seeds", "1", "--max-configs", "1",
           "--no-timing", "--json", str(out))
    assert json.loads(out.read_text())["settings"]["stream_mode"] == "strict"
