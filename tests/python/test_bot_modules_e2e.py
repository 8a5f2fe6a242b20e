"""A pull request that changes the repository's own nn.Modules, end to end
(issue 17, item 1): the daemon, the GitHub simulator, a real git server,
`kernelbot operator` and `kernelbot run` children on the CPU backend.

The pull request changes acts/act.py (Act, with an [operator act]
section giving its inputs; Gate, a module no section names) and
acts/broken.py (Broken, whose section names a test selection that finds
nothing):
- Act is a job like a KernelBench file: its operator file is made in the
  job's checkout, searched, and published as kernelbot/pr-1/act;
- Broken's job fails at once, saying why, and costs Act nothing;
- the progress comment lists Gate with the .kernelbot.ini lines that
  would give it inputs.

The world is test_bot_e2e's.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import test_bot_e2e as E  # noqa: E402

ACTS = '''\
import torch
from torch import nn


class Act(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.relu(x)


class Gate(nn.Module):
    def __init__(self, hidden):
        super().__init__()

    def forward(self, x, g):
        return x * torch.sigmoid(g)
'''

BROKEN = '''\
from torch import nn


class Broken(nn.Module):
    def forward(self, x):
        return x
'''

INI = '''\
[operator act]
module = acts/act.py:Act
init = N
inputs = float32[B,N]
sizes = B=16, N=512

[operator broken]
module = acts/broken.py:Broken
tests = tests/test_acts.py::test_nothing_here
'''

TESTS = '''\
def test_something():
    pass
'''


@E.needs_gitserver
def test_modules_of_a_pull_request(tmp_path):
    w = E.World(tmp_path, files={
        "ops/kb_relu.py": "# no operator any more\n",
        "acts/__init__.py": "", "acts/act.py": ACTS, "acts/broken.py": BROKEN,
        "tests/test_acts.py": TESTS, ".kernelbot.ini": INI})
    try:
        p = w.daemon(w.config(max_jobs=2), "--until-idle")
        assert p.wait(480) == 0, w.log()
        jobs = {op: (state, err) for op, state, err in w.db("SELECT operator, state, error FROM jobs")}
        assert set(jobs) == {"acts/act.py:Act", "acts/broken.py:Broken"}, jobs
        assert jobs["acts/act.py:Act"][0] == "done", (jobs, w.log())
        state, err = jobs["acts/broken.py:Broken"]
        assert state == "failed"
        assert "could not make the operator of `acts/broken.py:Broken`" in err, err
        assert "the test selection found no test" in err, err
        assert "making the operator file of 'acts/act.py:Act'" in w.log()
        # the operator file, in the root of the job's checkout, names the commit it was made at
        (job_id,) = w.db("SELECT id FROM jobs WHERE operator = 'acts/act.py:Act'")[0]
        with open(os.path.join(w.state, "jobs", str(job_id), "src", "kernelbot_op_act.py")) as f:
            assert " of acts/act.py at %s.\n" % w.head_sha in f.read()

        prs = w.bot_prs()
        assert [pr["pr"]["head"]["ref"] for pr in prs] == ["kernelbot/pr-1/act"]
        files = E.git("--git-dir", w.bare, "ls-tree", "-r", "--name-only", "kernelbot/pr-1/act")
        # acts/ is a package: the folder lies inside it (acts/_kernelbot/<slug>/)
        for name in ("kernel.cpp", "binding.py", "evidence.json", "kernel.json"):
            assert "acts/_kernelbot/act/%s" % name in files.split("\n"), files
        # the operator file made in the checkout is not committed beside the repository's files
        assert "kernelbot_op_act.py" not in files.split("\n")

        comments = w.progress_comments()
        assert len(comments) == 1
        body = comments[0]["body"]
        assert "**1 module without shapes.**" in body, body
        assert "[operator gate]\nmodule = acts/act.py:Gate\n" in body, body
        assert "init = hidden=HIDDEN\ninputs = float32[B,HIDDEN], float32[B,HIDDEN]\n" in body, body
        assert "```ini\n" in body
        assert "the test selection found no test" in body
    finally:
        w.close()


@E.needs_gitserver
def test_module_without_shapes_gets_the_lines_to_add(tmp_path):
    """No job at all: the progress comment says why and shows the section to paste."""
    w = E.World(tmp_path, files={"ops/kb_relu.py": "# no operator any more\n",
                                 "acts/__init__.py": "", "acts/act.py": ACTS,
                                 ".kernelbot.ini": "[operator act]\nmodule = acts/act.py:Act\n"
                                                   "[operator gone]\nmodule = acts/gone.py:Gone\n"
                                                   "inputs = [4]\n"})
    try:
        p = w.daemon(w.config(), "--until-idle")
        assert p.wait(120) == 0, w.log()
        assert w.db("SELECT count(*) FROM jobs") == [(0,)]
        comments = w.progress_comments()
        assert len(comments) == 1
        body = comments[0]["body"]
        assert "### kernelbot: nothing to optimise" in body
        assert "no 'inputs' and no 'tests': kernelbot has nothing to call Act with" in body, body
        assert "**2 modules without shapes.**" in body, body
        # the section without shapes keeps its name; the module no section names gets one
        assert "[operator act]\nmodule = acts/act.py:Act\n" in body
        assert "init = dim=DIM\ninputs = float32[B,DIM]\nsizes = B=8, DIM=1024\n" in body
        assert "tests = tests/test_x.py::test_y\n\n[operator gate]\nmodule = acts/act.py:Gate\n" in body
        # .kernelbot.ini changed: every section is looked at, a missing file said
        assert "operator gone\\]: there is no file 'acts/gone.py' (at most 1 MiB) at this commit" in body
    finally:
        w.close()
