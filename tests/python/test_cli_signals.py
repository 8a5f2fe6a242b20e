"""SIGTERM and SIGINT stop kernelbot cleanly: the running evaluation's
process group is killed, nothing is left behind, and the exit is prompt
(judged on a machine no other job loads, machine_load). SIGKILL leaves
nothing behind either: the kernel kills the harness worker with its parent,
and the next run removes the dead worker's directory."""

import os
import signal
import subprocess
import time

import pytest

import machine_load  # beside this file

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
    # wait until the harness child is running the hanging kernel (a hang guard, not a judgement)
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None and not harness_pids(str(state)):
        time.sleep(0.2)
    assert harness_pids(str(state)), "harness never started"
    time.sleep(1.0)
    load = machine_load.Contention()
    t0 = time.time()
    proc.send_signal(signo)
    out, err = proc.communicate(timeout=300)
    took = time.time() - t0
    assert proc.returncode != 0
    assert "interrupted" in (out + err)
    left = harness_pids(str(state))
    for _ in range(100):  # the group is killed before the exit; give its reaping a grace
        if not left:
            break
        time.sleep(0.1)
        left = harness_pids(str(state))
    assert left == [], "harness child left running"
    load.judge(took < 10, "stopped in %.1f s, limit 10 s" % took)


# --- kill -9: nothing can clean up, so the kernel must (parent-death signal) ---

def proc_table():
    """pid -> (ppid, pgid, state, cpu ticks, start time) of every process."""
    table = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name) as f:
                stat = f.read()
        except OSError:
            continue
        rest = stat[stat.rindex(")") + 2:].split()
        # state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt utime stime ...
        table[int(name)] = (int(rest[1]), int(rest[2]), rest[0], int(rest[11]) + int(rest[12]),
                            rest[19])
    return table


def descendants(root, table):
    """{pid: start time} of root and every process below it."""
    tree = {root: table[root][4]} if root in table else {}
    grew = True
    while grew:
        grew = False
        for pid, (ppid, _, _, _, start) in table.items():
            if pid not in tree and ppid in tree:
                tree[pid] = start
                grew = True
    return tree


def survivors(tree, groups):
    """The processes of tree (same pid, same start) or of its groups still alive."""
    left = []
    for pid, (_, pgid, state, _, start) in proc_table().items():
        if state in ("Z", "X"):
            continue
        if tree.get(pid) == start or (pgid in groups and pid not in tree):
            left.append(pid)
    return left


def bwrap_works():
    try:
        return subprocess.run(["bwrap", "--unshare-all", "--unshare-user", "--die-with-parent",
                               "--ro-bind", "/", "/", "true"], capture_output=True,
                              timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def worker_dirs(state):
    tmp = state / "tmp"
    return sorted(p.name for p in tmp.iterdir() if p.name.startswith("kb-worker-")) \
        if tmp.is_dir() else []


@pytest.mark.parametrize("sandbox", ["on", "off"])
def test_kill9_leaves_no_worker(tmp_path, sandbox):
    """SIGKILL of `kernelbot verify` while the kernel spins: the harness
    worker and everything it started die too (PR_SET_PDEATHSIG; in the
    sandbox bwrap's --die-with-parent), and the next run removes the dead
    worker's directory."""
    if sandbox == "on" and not bwrap_works():
        pytest.skip("bubblewrap cannot make a sandbox on this machine")
    state = tmp_path / "state"
    cfg = tmp_path / "config.ini"
    cfg.write_text("[core]\nstate_dir = %s\n[sandbox]\nenabled = %s\n" % (state, sandbox))
    errf = open(tmp_path / "verify.err", "w+")
    proc = subprocess.Popen(
        [BIN, "verify", "-c", str(cfg), "--backend", "cpu", "--no-timing",
         "--seeds", "1", "--timeout", "900", OP, HANG],
        cwd=TOP, stdout=subprocess.DEVNULL, stderr=errf, start_new_session=True)
    tree, groups = {}, set()
    try:
        # The kernel spins once the request is in and the tree burns CPU
        # steadily: 3 s of CPU after the request appeared (loading the
        # operator and the reference takes a fraction of that). No wall
        # clock deadline but the harness's own, far away; a loaded machine
        # only makes this slower.
        base = None
        while proc.poll() is None:
            table = proc_table()
            tree = descendants(proc.pid, table)
            cpu = sum(table[p][3] for p in tree if p in table)
            requested = any(d.name.startswith("eval-")
                            for w in worker_dirs(state) for d in (state / "tmp" / w).iterdir())
            if requested and base is None:
                base = cpu
            if base is not None and cpu - base >= 3 * os.sysconf("SC_CLK_TCK"):
                break
            time.sleep(0.2)
        assert proc.poll() is None, (tmp_path / "verify.err").read_text()
        assert harness_pids(str(state)), "no harness worker runs"
        groups = {table[p][1] for p in tree if p in table} - {os.getpgrp()}
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        # the kernel delivers the signals at once; a loaded machine gets
        # a generous grace to run the exits
        left = survivors(tree, groups)
        for _ in range(300):
            if not left:
                break
            time.sleep(0.1)
            left = survivors(tree, groups)
        assert left == [], "left running after kill -9: %s" % [
            open("/proc/%d/cmdline" % p, "rb").read().replace(b"\0", b" ")[:200] for p in left]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in survivors(tree, groups):  # a failed run leaves no spinning process behind
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        errf.close()

    # the dead worker's directory stays until the next run, which removes it
    stale = worker_dirs(state)
    assert len(stale) == 1, stale
    r = subprocess.run([BIN, "verify", "-c", str(cfg), "--backend", "cpu", "--no-timing",
                        "--seeds", "1", OP, os.path.join(TOP, "tests", "kernels", "cpu", "ok_relu.cpp")],
                       cwd=TOP, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "left by processes that are gone" in r.stderr, r.stderr
    assert worker_dirs(state) == []
