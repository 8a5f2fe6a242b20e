"""Two harness workers on one device (`[harness] workers_per_device = 2` on
the cpu backend, where the device is only a label): `kernelbot verify`
spreads a batch over both, gives the one-worker run's verdicts, loses only
the kernel whose worker is killed in the middle of it (the worker is
started again for the next kernel, the other worker's results stand), and
every evidence names its worker and, in kernelbot.placement, the workers
that shared the device meanwhile (verifier/harness_pool.h). Real torch,
real g++ builds; the tests judge verdicts and counts, never times."""

import json
import os
import shutil
import signal
import subprocess
import time

import pytest

from test_harness_common import KERNELS as CPU, OPS, TOP

BIN = os.environ.get("KB_BIN") or os.path.join(TOP, "build", "kernelbot")
OP = os.path.join(OPS, "kb_relu.py")

needs_bin = pytest.mark.skipif(not os.path.exists(BIN), reason="kernelbot binary not built")


def config(d, per_device):
    path = d / ("config-%d.ini" % per_device)
    path.write_text("[core]\nstate_dir = %s\n"
                    "[harness]\nmax_configs = 3\nworkers_per_device = %d\n"
                    % (d / ("state-%d" % per_device), per_device))
    return str(path)


def copy(d, name, as_name):
    path = os.path.join(str(d), as_name)
    shutil.copyfile(os.path.join(CPU, name), path)
    return path


def kernels(d):
    """ok_relu, hack_cached, hack_crash (its own process dies, not the worker),
    hack_forge (refused by the static checks: never sent), two more ok_relu."""
    return [os.path.join(CPU, "ok_relu.cpp"), os.path.join(CPU, "hack_cached.cpp"),
            os.path.join(CPU, "hack_crash.cpp"), os.path.join(CPU, "hack_forge.cpp"),
            copy(d, "ok_relu.cpp", "ok_relu_2.cpp"), copy(d, "ok_relu.cpp", "ok_relu_3.cpp")]


def args(cfg, ks, out, *extra):
    return [BIN, "verify", "-c", cfg, OP] + ks + ["--backend", "cpu", "--seeds", "2",
                                                 "--no-timing", "--json", out] + list(extra)


def read_json(path):
    with open(path) as f:
        return json.load(f)


def evidence(out, ks):
    """The evidence files --json wrote, by kernel file name."""
    paths = {os.path.basename(k): os.path.join(out, os.path.basename(k) + ".json") for k in ks}
    return {name: read_json(p) for name, p in paths.items() if os.path.exists(p)}


def verdict(ev):
    """The verdict and the first reason's check: what must not depend on the workers."""
    reasons = ev.get("reasons") or [{}]
    return ev["verdict"], reasons[0].get("check")


def placement(ev):
    return ev["kernelbot"]["placement"]


def judged(evs):
    """The evidence that came from a harness worker: all but the static check's rejections."""
    assert "placement" not in evs["hack_forge.cpp"]["kernelbot"]
    return {k: ev for k, ev in evs.items() if k != "hack_forge.cpp"}


@needs_bin
def test_two_workers_one_device_same_verdicts(tmp_path):
    ks = kernels(tmp_path)
    runs = {}
    for per_device in (1, 2):
        out = str(tmp_path / ("ev-%d" % per_device))
        r = subprocess.run(args(config(tmp_path, per_device), ks, out), capture_output=True,
                           text=True, timeout=600, cwd=TOP)
        assert r.returncode == 1, r.stdout + r.stderr
        assert r.stdout.splitlines()[-1] == "summary: 3 verified, 3 rejected, 0 errors of 6 kernels"
        runs[per_device] = evidence(out, ks)
        assert len(runs[per_device]) == 6
    assert {k: verdict(ev) for k, ev in runs[1].items()} == \
        {k: verdict(ev) for k, ev in runs[2].items()}
    assert verdict(runs[2]["hack_forge.cpp"]) == ("rejected", "static")
    one, two = judged(runs[1]), judged(runs[2])
    assert "cached_result" in {x["check"] for x in two["hack_cached.cpp"]["reasons"]}

    # one worker: every kernel on it, the device never shared
    for ev in one.values():
        assert placement(ev) == {"device": "cpu", "worker": 1, "workers_on_device": 1,
                                 "shared_with": []}
    # two: both used, in two processes, and the first two kernels were sent together
    assert {placement(ev)["worker"] for ev in two.values()} == {1, 2}
    pids = {placement(ev)["worker"]: ev["environment"]["worker_pid"] for ev in two.values()}
    assert pids[1] != pids[2]
    for ev in two.values():
        pl = placement(ev)
        assert pl["device"] == "cpu" and pl["workers_on_device"] == 2
        assert all(s["worker"] != pl["worker"] for s in pl["shared_with"])
    first, second = placement(two["ok_relu.cpp"]), placement(two["hack_cached.cpp"])
    assert first["worker"] != second["worker"]
    assert second["worker"] in {s["worker"] for s in first["shared_with"]}
    assert first["worker"] in {s["worker"] for s in second["shared_with"]}
    sha = two["hack_cached.cpp"]["kernelbot"]["kernel"]["sha256"]
    assert sha in {s["kernel_sha256"] for s in first["shared_with"]}


def workers_evaluating(state_dir, kernel_name):
    """Pids of the harness workers (and their sandboxes) under state_dir
    whose request in flight is kernel_name's: the worker's dir (its
    --serve argument) holds eval-*/request.json while it evaluates."""
    tmp = os.path.realpath(os.path.join(state_dir, "tmp"))
    by_dir = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if b"--serve" in argv[:-1]:
            d = argv[argv.index(b"--serve") + 1].decode()
            if d.startswith(tmp + "/"):
                by_dir.setdefault(d, []).append(int(pid))
    hits = []
    for d, pids in by_dir.items():
        try:
            evals = [e for e in os.listdir(d) if e.startswith("eval-")]
        except OSError:
            continue
        for e in evals:
            try:
                with open(os.path.join(d, e, "request.json")) as f:
                    src = json.load(f)["kernel"]["source"]
            except (OSError, ValueError, KeyError):
                continue
            if os.path.basename(src) == kernel_name:
                hits += pids
    return hits


@needs_bin
def test_worker_killed_mid_kernel_restarted_alone(tmp_path):
    # victim: its worker is killed while it runs; blocker: holds the other
    # worker until its own time runs out, so every kernel after the victim
    # goes to the victim's worker, started again
    victim = copy(tmp_path, "hack_hang.cpp", "victim.cpp")
    blocker = copy(tmp_path, "hack_hang.cpp", "blocker.cpp")
    ks = [victim, blocker] + kernels(tmp_path)
    cfg = config(tmp_path, 2)
    out = str(tmp_path / "ev")
    p = subprocess.Popen(args(cfg, ks, out, "--timeout", "20"), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, cwd=TOP)
    killed = set()
    try:
        while p.poll() is None:
            for pid in workers_evaluating(str(tmp_path / "state-2"), "victim.cpp"):
                if pid not in killed:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    killed.add(pid)
            time.sleep(0.05)
        stdout, stderr = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert killed, "no worker was ever seen evaluating victim.cpp"
    assert p.returncode == 1, stdout + stderr
    evs = evidence(out, ks)
    assert len(evs) == 8, stdout + stderr
    assert verdict(evs["victim.cpp"]) == ("rejected", "crash"), evs["victim.cpp"]["reasons"]
    assert "harness" in evs["victim.cpp"]["reasons"][0]["message"]
    assert verdict(evs["blocker.cpp"]) == ("rejected", "timeout")
    # the others stand, as in a run without the kill
    assert verdict(evs["ok_relu.cpp"]) == ("verified", None)
    assert verdict(evs["ok_relu_2.cpp"]) == ("verified", None)
    assert verdict(evs["ok_relu_3.cpp"]) == ("verified", None)
    assert "cached_result" in {x["check"] for x in evs["hack_cached.cpp"]["reasons"]}
    assert verdict(evs["hack_crash.cpp"]) == ("rejected", "crash")
    assert verdict(evs["hack_forge.cpp"]) == ("rejected", "static")

    w_victim = placement(evs["victim.cpp"])["worker"]
    w_blocker = placement(evs["blocker.cpp"])["worker"]
    assert w_victim != w_blocker
    after = [ev for k, ev in judged(evs).items() if k not in ("victim.cpp", "blocker.cpp")]
    # the next kernel went to the victim's worker at once (the other was
    # held by the blocker), started again: one fresh process for all it ran
    on_victim = [ev for ev in after if placement(ev)["worker"] == w_victim]
    assert on_victim
    pids = {ev["environment"]["worker_pid"] for ev in on_victim}
    assert len(pids) == 1 and not pids & killed
    assert sorted(ev["environment"]["worker_seq"] for ev in on_victim) == \
        list(range(1, len(on_victim) + 1))
    # the blocker shared the device with the victim and what followed it
    shared = [s["worker"] for s in placement(evs["blocker.cpp"])["shared_with"]]
    assert shared.count(w_victim) >= 2
