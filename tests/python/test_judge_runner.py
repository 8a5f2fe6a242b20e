"""The judge/runner split (PROTOCOL.md "Judge and runner"): the kernel
runs in a process of its own; what it does to that process cannot change
the verdict, and timing it forges there does not match the wall clock the
judge sees."""
from test_harness_common import kernel, op, request, run_harness

TIMING = {"enabled": True, "warmup": 2, "min_time_ms": 50, "max_reps": 300,
          "l2_flush": False, "baselines": ["eager"]}


def test_patched_compare_changes_only_the_runner():
    run = run_harness(request(op("kb_relu.py"), kernel("hack_patch_judge")))
    res = run.result
    assert res["environment"]["runner"] == "process"
    assert res["verdict"] == "rejected"
    assert "correctness" in run.checks()


def test_forged_clock_rejected_by_the_wall_check():
    run = run_harness(request(op("kb_relu.py"), kernel("hack_slow_clock"),
                              mode="bench", max_configs=1, seeds=1, timing=TIMING),
                      timeout=300)
    res = run.result
    assert res["verdict"] == "rejected", res["reasons"]
    assert "timing" in run.checks()
    wc = res["configs"][0]["timing"]["wall_check"]
    assert wc["wall_ms"] > wc["bound_ms"] and wc["attempts"] == 3


def test_honest_kernel_passes_the_wall_check():
    run = run_harness(request(op("kb_relu.py"), kernel("ok_relu"),
                              mode="bench", max_configs=1, seeds=1, timing=TIMING),
                      timeout=300)
    res = run.result
    assert res["verdict"] == "verified", res["reasons"]
    wc = res["configs"][0]["timing"]["wall_check"]
    assert wc["wall_ms"] <= wc["bound_ms"]
    # kernel and baselines timed in turns (ABAB), merged from both
    k = res["configs"][0]["timing"]["kernel"]
    assert wc["turns"] == 2 and k["turns"] == 2
    assert 0 < wc["reps"] < k["reps"]
    assert "sample_ms" not in k and res["configs"][0]["timing"]["eager"]["turns"] == 2


def _verify(tmp_path, config):
    import json
    import os
    import subprocess
    top = os.environ.get("KB_TOP") or os.path.abspath(
        os.path.join(os.path.dirname(__file__), "..", ".."))
    binary = os.environ.get("KB_BIN") or os.path.join(top, "build", "kernelbot")
    (tmp_path / "config.ini").write_text(config)
    out = tmp_path / "ev.json"
    r = subprocess.run([binary, "verify", os.path.join(top, "tests", "operators", "kb_relu.py"),
                        os.path.join(top, "tests", "kernels", "cpu", "ok_relu.cpp"),
                        "--backend", "cpu", "--no-timing", "--seeds", "1", "--json", str(out)],
                       cwd=str(tmp_path), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(out.read_text())


def test_bot_runs_the_kernel_in_a_sandbox_of_its_own(tmp_path):
    """With the sandbox on, the bot starts the kernel's side (the runner
    zygote) in a second sandbox; off, the judge starts it as its child."""
    import os
    import shutil
    import pytest
    binary = os.environ.get("KB_BIN")
    if not binary or not os.path.exists(binary):
        pytest.skip("kernelbot binary not built")
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed (mk/deps.sh installs it)")
    state = "[core]\nstate_dir = %s\n" % (tmp_path / "state")
    ev = _verify(tmp_path, state)
    assert ev["verdict"] == "verified" and ev["environment"]["runner"] == "sandbox"
    ev = _verify(tmp_path, state + "[sandbox]\nenabled = false\n")
    assert ev["verdict"] == "verified" and ev["environment"]["runner"] == "process"
