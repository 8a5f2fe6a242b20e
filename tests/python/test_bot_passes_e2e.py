"""A job of both passes end to end (bot/jobs/README.md, "Forward and
backward"): the daemon, the GitHub simulator, a real git server and two
real `kernelbot run` children on the CPU backend.

- a robust-kbench task that ships a backward (func_backward.py): the job
  searches the forward, then the backward with what is left of the budget
  (the forward got half); the bot's branch holds both kernels; the
  binding's autograd op, run from a checkout of the branch, gives the
  reference's output and gradients, and its gradients come from the
  backward kernel (the reference's backward is never called); the body's
  table has the forward, backward and forward+backward rows, their figures
  the evidence files' medians summed over the configs both passes timed;
- `.kernelbot.ini` asks for both passes of an operator whose backward no
  template covers: the forward kernel is still published, its binding
  takes the reference's backward (the gradients match), and the pull
  request and the progress comment say there is no backward kernel.

The world is test_bot_e2e's.
"""

import json
import os
import re
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
import test_bot_e2e as E  # noqa: E402
from test_run_cli import load_module as load  # noqa: E402  (a module, its folder on sys.path)

torch = pytest.importorskip("torch")

SS = "ops/scale_shift"
SS_BRANCH = "kernelbot/pr-1/scale_shift"
SS_FILES = ("func_forward.py", "config_forward.json", "func_backward.py", "config_backward.json")


def run_job(w, budget=600):
    p = w.daemon(w.config(budget=budget), "--until-idle")
    assert p.wait(480) == 0, w.log()
    pr = [it for it in w.bot_prs()]
    assert len(pr) == 1, [it["pr"]["head"]["ref"] for it in pr]
    return pr[0]


def branch_files(w, branch):
    return E.git("--git-dir", w.bare, "ls-tree", "-r", "--name-only", branch).split("\n")


def checkout(w, branch, dest):
    """The branch's files under dest, as a reviewer's checkout has them."""
    os.makedirs(dest)
    tar = subprocess.run(["git", "--git-dir", w.bare, "archive", branch], capture_output=True,
                         check=True).stdout
    subprocess.run(["tar", "-x", "-C", dest], input=tar, check=True)
    return dest


def table_rows(body):
    """{pass: (eager ms, kernel ms, speedup)} from the Forward and backward table."""
    section = body.split("### Forward and backward", 1)[1].split("###", 1)[0]
    rows = re.findall(r"^\| (\*\*forward\+backward\*\*|forward|backward) \| ([^|]+) \| ([^|]+) \| "
                      r"([^|]+) \|$", section, re.M)
    return {name.strip("*"): tuple(float(v.strip().rstrip("x")) for v in vals)
            for name, *vals in rows}


def matched_sums(fwd, bwd):
    """The evidence files' medians summed over the configs both timed (name and params)."""
    f, b = [0.0, 0.0], [0.0, 0.0]
    n = 0
    for c in fwd["configs"]:
        twin = [d for d in bwd["configs"] if d["name"] == c["name"] and d["params"] == c["params"]
                and d.get("timing") and c.get("timing")]
        if twin:
            n += 1
            for acc, cfg in ((f, c), (b, twin[0])):
                acc[0] += cfg["timing"]["eager"]["median_ms"]
                acc[1] += cfg["timing"]["kernel"]["median_ms"]
    return n, f, b


def close(shown, value):
    """A figure printed with three significant digits (or three decimals)."""
    return abs(shown - value) <= 0.006 * value + 0.0006


@E.needs_gitserver
def test_forward_and_backward_kernels(tmp_path):
    w = E.World(tmp_path, extra_ops=[("rk_scale_shift/" + f, SS + "/" + f) for f in SS_FILES],
                files={".kernelbot.ini": "[operators]\npaths = %s\n" % SS})
    try:
        pr = run_job(w)
        assert w.db("SELECT operator, state FROM jobs") == [(SS, "done")]
        assert pr["pr"]["head"]["ref"] == SS_BRANCH
        # two children: the forward with half the budget, the backward with what was left
        budgets = dict(re.findall(r"searching '%s' of [^,]+, (forward|backward) pass, budget (\d+) s"
                                  % SS, w.log()))
        assert set(budgets) == {"forward", "backward"}, w.log()
        assert int(budgets["forward"]) <= 300 < int(budgets["backward"]), budgets

        files = branch_files(w, SS_BRANCH)
        for name in ("kernel.cpp", "binding.py", "evidence.json", "kernel.json",
                     "backward/kernel.cpp", "backward/evidence.json", "backward/kernel.json",
                     "backward/report.md"):
            assert "kernelbot/scale_shift/%s" % name in files, files
        # the backward child's own binding, headers and reference copy stay out
        assert "kernelbot/scale_shift/backward/binding.py" not in files

        show = lambda p: E.git("--git-dir", w.bare, "show", "%s:kernelbot/scale_shift/%s"
                               % (SS_BRANCH, p))
        fwd, bwd = json.loads(show("evidence.json")), json.loads(show("backward/evidence.json"))
        assert fwd["operator"]["pass"] == "forward" and bwd["operator"]["pass"] == "backward"
        assert json.loads(show("backward/kernel.json"))["verdict"] == "verified"

        # the table: three rows, the evidence's medians summed over the configs both timed
        body = pr["body"]
        rows = table_rows(body)
        assert set(rows) == {"forward", "backward", "forward+backward"}, body
        n, f, b = matched_sums(fwd, bwd)
        assert n >= 1
        assert "summed over the %d config%s both passes timed" % (n, "" if n == 1 else "s") in body
        for name, (eager, kernel) in (("forward", f), ("backward", b),
                                      ("forward+backward", (f[0] + b[0], f[1] + b[1]))):
            assert close(rows[name][0], eager) and close(rows[name][1], kernel), (name, rows, f, b)
            assert abs(rows[name][2] - eager / kernel) <= 0.006 * eager / kernel + 0.006, (name, rows)
        assert "the sum of the two kernel times against the sum of the two baselines" in body
        assert "kernelbot/scale_shift/backward/kernel.cpp --backend cpu --pass backward" in body
        assert "No backward kernel" not in body

        # the binding from a checkout of the branch: the reference's output and gradients,
        # the gradients from the backward kernel
        top = checkout(w, SS_BRANCH, str(tmp_path / "checkout"))
        op = load(os.path.join(top, "kernelbot", "scale_shift", "binding.py"), "kb_ss_binding")
        assert op.BACKWARD_KERNEL == "backward/kernel.cpp"

        def never(*a):
            raise AssertionError("the reference's backward was called")
        op._reference_backward = never
        ref = load(os.path.join(top, SS, "func_forward.py"), "kb_ss_reference")
        torch.manual_seed(5)
        x = torch.randn(7, 33, requires_grad=True)
        wt = torch.randn(33, requires_grad=True)
        bias = torch.randn(33, requires_grad=True)
        y = op.apply(x, wt, bias, -0.5)
        g = torch.randn_like(y)
        y.backward(g)
        got = [t.grad.clone() for t in (x, wt, bias)]
        for t in (x, wt, bias):
            t.grad = None
        want = ref.forward_fn(x, wt, bias, -0.5)
        want.backward(g)
        torch.testing.assert_close(y.detach(), want.detach(), rtol=1e-5, atol=1e-5)
        for a, t in zip(got, (x, wt, bias)):
            torch.testing.assert_close(a, t.grad, rtol=1e-4, atol=1e-5)
        comment = E.check_progress_and_labels(w)
        assert "No backward kernel" not in comment["body"]
    finally:
        w.close()


@E.needs_gitserver
def test_backward_search_finds_nothing(tmp_path):
    op_path = "ops/kb_linear_gelu.py"
    w = E.World(tmp_path, extra_ops=[("kb_linear_gelu.py", op_path)],
                files={".kernelbot.ini": "[operators]\npaths = %s\n[kernelbot]\n"
                       "passes = forward,backward\n" % op_path})
    try:
        pr = run_job(w)
        branch = "kernelbot/pr-1/kb_linear_gelu"
        assert w.db("SELECT operator, state FROM jobs") == [(op_path, "done")]
        assert pr["pr"]["head"]["ref"] == branch
        assert re.match(r"kernelbot: (slower than eager on \d+ of \d+ configs: )?kb_linear_gelu",
                        pr["title"]), pr["title"]
        assert re.search(r"searching '%s' of [^,]+, backward pass" % op_path, w.log()), w.log()
        files = branch_files(w, branch)
        assert "kernelbot/kb_linear_gelu/kernel.cpp" in files
        assert not [f for f in files if "/backward/" in f], files

        # said: in the pull request and in the progress comment
        body = pr["body"].replace("\\", "")
        assert "**No backward kernel:** The backward search found no verified kernel" in body, body
        assert "no built-in template" in body
        assert "runs this forward kernel with the reference's backward" in body
        assert "forward+backward" not in body and "--pass backward" not in body
        comment = E.check_progress_and_labels(w)["body"].replace("\\", "")
        assert "No backward kernel: The backward search found no verified kernel" in comment

        # the binding's autograd op takes the reference's backward: its gradients
        top = checkout(w, branch, str(tmp_path / "checkout"))
        op = load(os.path.join(top, "kernelbot", "kb_linear_gelu", "binding.py"), "kb_lg_binding")
        assert op.BACKWARD_KERNEL is None
        m = op.Module()
        torch.manual_seed(9)
        x = torch.randn(8, 256, requires_grad=True)
        y = m(x)
        g = torch.randn_like(y)
        y.backward(g)
        params = list(m.ref.parameters())
        got = [x.grad.clone()] + [p.grad.clone() for p in params]
        x.grad = None
        m.ref.zero_grad()
        want = m.ref(x)
        want.backward(g)
        torch.testing.assert_close(y.detach(), want.detach(), rtol=1e-4, atol=1e-4)
        for a, t in zip(got, [x] + params):
            torch.testing.assert_close(a, t.grad, rtol=1e-4, atol=1e-4)
    finally:
        w.close()
