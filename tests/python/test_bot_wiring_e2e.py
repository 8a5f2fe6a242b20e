"""The wiring of a module's kernel back into the module, in the daemon
(issue 17): the `kernelbot wire` child runs while the loop goes on, a stop
ends it, a killed daemon wires again at its next start, and a module whose
constructor needs an argument is built with the one its tests used.

The repository's module, Scaled(scale) (no default), gets its shapes only
from its tests ([operator scaled] names tests and no inputs, no init). Its
test waits on the patched tree (the wiring check runs it there), and only
there, for a file the test makes in the job's run folder, which the sandbox
shows read-only at its own path: the wiring child lasts as long as the test
wants, with no clock in it. The world is test_bot_e2e's: the daemon, the
GitHub simulator, a real git server, children on the CPU backend.
"""
import json
import os
import shutil
import signal
import sys

sys.path.insert(0, os.path.dirname(__file__))
import test_bot_e2e as E  # noqa: E402

MODULE = '''\
import torch
from torch import nn


class Scaled(nn.Module):
    """tanh(x * scale): the constructor's argument has no default."""

    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return torch.tanh(x * self.scale)
'''

TESTS = '''\
import os
import time

import torch

from acts.act import Scaled

GO = %(go)r


def wait_when_wired():
    """On the patched tree (the wiring check), wait for the go file (5 minutes at most)."""
    with open(os.path.join(os.path.dirname(__file__), "..", "acts", "act.py")) as f:
        if "_kb_" not in f.read():
            return
    end = time.time() + 300
    while not os.path.exists(GO) and time.time() < end:
        time.sleep(0.2)


def test_scaled():
    wait_when_wired()
    x = torch.randn(64, 256)
    torch.testing.assert_close(Scaled(0.5)(x), torch.tanh(x * 0.5))
'''

INI = '''\
[operator scaled]
module = acts/act.py:Scaled
tests = tests/test_act.py
'''

BRANCH = "kernelbot/pr-1/scaled"


def world(tmp_path):
    """Pull request 1 changes acts/act.py; job 1 is its module's; the go file is in job 1's run folder."""
    go = str(tmp_path / "state" / "jobs" / "1" / "out" / ".go")
    w = E.World(tmp_path, files={
        "ops/kb_relu.py": "# no operator any more\n", "acts/__init__.py": "",
        "acts/act.py": MODULE, "tests/test_act.py": TESTS % {"go": go}, ".kernelbot.ini": INI})
    return w, go


def wire_children(p):
    return [k for k in E.children_of(p.pid) if " wire " in E.cmdline(k)]


def wait_for_wiring(w, p):
    """The job in stage 'wire' and its `kernelbot wire` child (which cannot end before the go file)."""
    E.wait_for("the wiring to start", lambda: w.db(
        "SELECT 1 FROM jobs WHERE id = 1 AND state = 'running' AND stage = 'wire'"), timeout=900)
    return E.wait_for("the wire child", lambda: wire_children(p), timeout=30)


def add_relu_pull(w):
    """Pull request 2: the world's kb_relu.py on a branch of its own, not labelled yet."""
    E.git("checkout", "-q", "-b", "relu", w.main_sha, cwd=w.work)
    os.makedirs(os.path.join(w.work, "ops"), exist_ok=True)
    shutil.copy(os.path.join(E.TOP, "tests", "operators", "kb_relu.py"), os.path.join(w.work, E.OP))
    E.git("add", "-A", cwd=w.work)
    E.git("commit", "-q", "-m", "relu", cwd=w.work)
    sha = E.git("rev-parse", "HEAD", cwd=w.work)
    E.git("push", "-q", w.bare, "relu", "relu:refs/pull/2/head", cwd=w.work)
    w.sim.add_pull(E.REPO, number=2, title="Add relu", user="alice", head={"ref": "relu", "sha": sha},
                   base={"ref": "main"}, files=[E.OP], labels=[], labeled_by=None)


def branch_file(w, path):
    return E.git("--git-dir", w.bare, "show", "%s:%s" % (BRANCH, path))


@E.needs_gitserver
def test_daemon_works_while_wiring_and_wires_again_after_a_kill(tmp_path):
    """While job 1's wiring child waits in the repository's tests, the daemon
    posts the 'wiring' progress, takes a label on another pull request and
    runs that job to its pull request. Killed then (SIGKILL, the wiring child
    with it), the restarted daemon wires again and publishes the module wired,
    built with the init its tests recorded (Scaled(0.5)); one pull request."""
    w, go = world(tmp_path)
    try:
        add_relu_pull(w)
        cfg = w.config(max_jobs=2)
        p = w.daemon(cfg)
        kids = wait_for_wiring(w, p)
        E.wait_for("the progress comment to say so", lambda: "| wiring into the module |"
                   in w.progress_comments()[0]["body"], timeout=30)
        assert 'wiring the kernel into acts/act.py:Scaled, built with {"args":[0.5],"kwargs":{}}' \
            in w.log(), w.log()

        # meanwhile: pull request 2 is labelled, searched and published
        w.sim.label(E.REPO, 2, ["optimize-kernel"], "alice")
        E.wait_for("the other job to finish", lambda: w.db(
            "SELECT state FROM jobs WHERE operator = ?", E.OP) == [("done",)], timeout=600)
        assert [pr["pr"]["head"]["ref"] for pr in w.bot_prs()] == ["kernelbot/pr-2/" + E.SLUG]
        # ... all of it while the wiring child still waited
        assert all(E.alive(k) for k in kids) and wire_children(p) == kids
        assert w.db("SELECT state, stage FROM jobs WHERE id = 1") == [("running", "wire")]
        assert not os.path.exists(go)

        p.kill()                                   # SIGKILL: no cleanup at all
        p.wait(10)
        E.wait_for("the wiring child to die with it", lambda: not any(E.alive(k) for k in kids),
                   timeout=30)
        E.wait_for("its sandbox to go", lambda: not E.procs_using(w.state), timeout=60)
        assert w.db("SELECT state FROM jobs WHERE id = 1") == [("running",)]

        with open(go, "w"):
            pass                                   # the next wiring's tests need not wait
        p = w.daemon(cfg, "--until-idle")
        assert p.wait(900) == 0, w.log()
        assert w.db("SELECT state, attempts FROM jobs WHERE id = 1") == [("done", 1)], w.log()
        assert "wiring check started" in w.log()
        prs = [pr for pr in w.bot_prs() if pr["pr"]["head"]["ref"] == BRANCH]
        assert len(prs) == 1, w.bot_prs()
        assert "_kb_scaled.supported(" in branch_file(w, "acts/act.py")
        ev = json.loads(branch_file(w, "acts/_kernelbot/scaled/evidence.json"))
        assert ev["wiring"]["verdict"] == "wired", ev["wiring"]
        assert ev["wiring"]["tests"]["passed"] == 1 and ev["wiring"]["tests"]["kernel_calls"] > 0
        assert "Wired into the model" in prs[0]["body"]
        assert ".go" not in E.git("--git-dir", w.bare, "ls-tree", "-r", "--name-only", BRANCH)
        opened = [r for r in w.sim.requests() if r["method"] == "POST" and
                  r["path"] == "/repos/%s/pulls" % E.REPO]
        assert len(opened) == 2                    # pull request 2's and this one's, once each
    finally:
        w.close()


@E.needs_gitserver
def test_stop_during_wiring_publishes_unwired(tmp_path):
    """`/kernelbot stop` while the wiring child waits in the tests: the child
    is killed at once, and the verified kernel is published unwired, its
    evidence and the pull request saying the wiring was stopped and by whom."""
    w, go = world(tmp_path)
    try:
        p = w.daemon(w.config(poll=1))
        kids = wait_for_wiring(w, p)
        w.sim.comment(E.REPO, 1, "alice", "/kernelbot stop")
        E.wait_for("the job to be published", lambda: w.db(
            "SELECT state FROM jobs") == [("done",)], timeout=120)
        E.wait_for("the wiring child to stop", lambda: not any(E.alive(k) for k in kids), timeout=30)
        E.wait_for("its sandbox to go", lambda: not E.procs_using(w.state), timeout=60)
        assert not os.path.exists(go)
        assert w.db("SELECT state FROM triggers") == [("cancelled",)]
        prs = w.bot_prs()
        assert [pr["pr"]["head"]["ref"] for pr in prs] == [BRANCH]
        # the module on the branch is the repository's own; the kernel and its evidence are there
        assert branch_file(w, "acts/act.py") == MODULE.rstrip("\n")
        ev = json.loads(branch_file(w, "acts/_kernelbot/scaled/evidence.json"))
        assert ev["verdict"] == "verified"
        assert ev["wiring"]["verdict"] == "not_wired", ev["wiring"]
        assert ev["wiring"]["reasons"][0]["message"] == "the wiring check was stopped by @alice"
        assert "Not wired into the model" in prs[0]["body"], prs[0]["body"]
        assert "the wiring check was stopped by @alice" in prs[0]["body"]
        p.send_signal(signal.SIGTERM)
        assert p.wait(30) == 0
    finally:
        w.close()
