"""SIGTERM and SIGINT stop kernelbot cleanly: the running evaluation's
process group is killed, nothing is left behind, and the exit is prompt."""

import os
import signal
import subprocess
import time

import pytest

TOP = os.environ.get("KB_TOP") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("KB_BIN") or os.path.join(TOP, "build", "kernelbot")
OP = os.path.join(TOP, "tests", "operators", "kb_relu.py")
HANG = os.path.join(TOP, "tests", "kernels", "cpu", "hack_hang.cpp")

pytestmark = pytest.mark.skipif(not os.path.exists(BIN),
                                reason="kernelbot binary not built")


def harness_pids(marker):
    """Processes whose command line mentions marker (our private state dir)."""
    pids = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmd and "kb_harness.py" in cmd:
            pids.append(int(pid))
    return pids


@pytest.mark.parametrize("signo", [signal.SIGTERM, signal.SIGINT])
def test_signal_stops_running_evaluation(tmp_path, signo):
    state = tmp_path / "state"
    cfg = tmp_path / "config.ini"
    cfg.write_text("[core]\nstate_dir = %s\n" % state)
    proc = subprocess.Popen(
        [BIN, "verify", "-c", str(cfg), "--backend", "cpu", "--no-timing",
         "--seeds", "1", "--timeout", "120", OP, HANG],
        cwd=TOP, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # wait until the harness child is running the hanging kernel
    deadline = time.time() + 60
    while time.time() < deadline and not harness_pids(str(state)):
        time.sleep(0.2)
    assert harness_pids(str(state)), "harness never started"
    time.sleep(1.0)
    t0 = time.time()
    proc.send_signal(signo)
    out, err = proc.communicate(timeout=30)
    assert time.time() - t0 < 10, "stop took too long"
    assert proc.returncode != 0
    assert "interrupted" in (out + err)
    time.sleep(0.3)
    assert harness_pids(str(state)) == [], "harness child left running"
