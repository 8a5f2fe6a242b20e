"""Operators in ordinary model code (issue 17, item 1), with the real
binary, the real harness in the real sandbox (bubblewrap) and torch on
the cpu backend:

- an [operator NAME] section of a src-layout package: `kernelbot operator`
  writes a KernelBench file beside the repository's files; `kernelbot
  verify` runs it (the class imported inside the sandbox) and verifies a
  correct CPU kernel on every shape set of the section (each a config of
  kind own), and rejects a wrong one;
- shapes from the repository's own tests: a real pytest run in the
  sandbox with the recorder, the most frequent calls as the shape sets,
  the recorded file kept and used again without running the tests;
- bad input: a selection that finds no test, a module that fails to
  import, a section without shapes (the lines to add): exit 1 and a
  message that says so, nothing written;
- a module whose import writes files (beside itself, in its working
  directory, in $HOME, /tmp and a path outside everything) leaves nothing
  outside scratch, neither while its tests run nor while it is verified.
"""

import json
import os
import shutil
import subprocess
import textwrap

import pytest

TOP = os.environ.get("KB_TOP") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("KB_BIN") or os.path.join(TOP, "build", "kernelbot")
CPU = os.path.join(TOP, "tests", "kernels", "cpu")

pytestmark = [
    pytest.mark.skipif(not os.path.exists(BIN), reason="kernelbot binary not built"),
    pytest.mark.skipif(shutil.which("bwrap") is None,
                       reason="bubblewrap is not installed (mk/deps.sh installs it)"),
]

FFN = '''\
import torch
import torch.nn as nn
import torch.nn.functional as F


class LinearGELU(nn.Module):
    """gelu(linear(x)): the layout of tests/kernels/cpu/ok_linear_gelu.cpp."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return F.gelu(self.linear(x))
'''

ACT = '''\
import torch
from torch import nn


class Act(nn.Module):
    def __init__(self, dim, slope=0.0):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        import act_helpers  # a flat repository's module, imported when forward runs
        return act_helpers.relu(x)
'''

HELPERS = "import torch\n\n\ndef relu(x):\n    return torch.relu(x)\n"

ACT_TESTS = '''\
import torch
from acts.act import Act


def test_batches():
    m = Act(64)
    for _ in range(3):
        assert m(torch.randn(4, 64)).shape == (4, 64)
    m(torch.randn(2, 3, 64))


def test_keyword():
    m = Act(dim=32)
    m(x=torch.randn(5, 32))
'''


def write(root, files):
    for rel, text in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    d = tmp_path_factory.mktemp("modop")
    path = d / "config.ini"
    path.write_text("[core]\nstate_dir = %s\n[harness]\nmax_configs = 4\n"
                    "[bench]\nwarmup = 1\nmin_time_ms = 5\nmax_reps = 10\n" % (d / "state"))
    return str(path)


def kb(config, *args, cwd=TOP, timeout=300):
    return subprocess.run([BIN, args[0], "-c", config] + list(args[1:]), capture_output=True,
                          text=True, timeout=timeout, cwd=cwd)


def verify(config, op, kernel, tmp_path):
    ev = tmp_path / ("ev-%s.json" % os.path.basename(kernel))
    r = kb(config, "verify", op, os.path.join(CPU, kernel), "--backend", "cpu", "--seeds", "1",
           "--no-timing", "--fresh", "--json", str(ev))
    return r, (json.loads(ev.read_text()) if ev.exists() else None)


def test_section_verified_in_the_sandbox(config, tmp_path):
    repo = str(tmp_path / "repo")
    write(repo, {"src/ffnpkg/__init__.py": "", "src/ffnpkg/ffn.py": FFN,
                 ".kernelbot.ini": "[operator ffn]\nmodule = src/ffnpkg/ffn.py:LinearGELU\n"
                                   "init = K, N\ninputs = float32[B,K]\nsizes = B=8|3, K=64, N=96\n"})
    r = kb(config, "operator", "--repo", repo, "ffn")
    assert r.returncode == 0, r.stderr
    op = r.stdout.strip()
    assert op == os.path.join(repo, "kernelbot_op_ffn.py")
    text = open(op).read()
    assert "from ffnpkg.ffn import LinearGELU as _Target" in text
    assert "KB_SHAPE_SETS = [\n    {\"KB_SET\": 0, \"B\": 3, \"K\": 64, \"N\": 96},\n]" in text
    assert "# |     def forward(self, x):" in text  # the module's code, for reading

    r, ev = verify(config, op, "ok_linear_gelu.cpp", tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert ev["verdict"] == "verified"
    own = [c for c in ev["configs"] if c["kind"] == "own"]
    assert sorted(c["params"]["B"] for c in own) == [3, 8], ev["configs"]
    assert all(c["params"]["N"] == 96 for c in own)

    r, ev = verify(config, op, "ok_relu.cpp", tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    assert ev["verdict"] != "verified"


def act_repo(root, ini, extra=None):
    files = {"acts/__init__.py": "", "acts/act.py": ACT, "tests/test_act.py": ACT_TESTS,
             "act_helpers.py": HELPERS, ".kernelbot.ini": ini}
    files.update(extra or {})
    write(root, files)
    return root


def test_shapes_recorded_from_the_tests(config, tmp_path):
    repo = act_repo(str(tmp_path / "repo"), "[operator act]\nmodule = acts/act.py:Act\n"
                    "tests = tests/test_act.py\n")
    shapes = str(tmp_path / "shapes.json")
    r = kb(config, "operator", "--repo", repo, "--shapes", shapes, "acts/act.py:Act")
    assert r.returncode == 0, r.stderr
    assert "2 tests selected: 2 passed, 0 failed" in r.stderr
    assert "5 calls of Act recorded, 3 distinct" in r.stderr
    rec = json.load(open(shapes))
    assert [c["count"] for c in rec["records"]] == [3, 1, 1]
    first = rec["records"][0]
    assert first["init"] == {"args": [["int", 64]], "kwargs": {}}
    assert first["inputs"] == [{"tensor": {"shape": [4, 64], "dtype": "float32",
                                           "requires_grad": False}}]
    # forward(x=...) is put in its position
    assert any(c["init"]["kwargs"] == {"dim": ["int", 32]} and
               c["inputs"][0]["tensor"]["shape"] == [5, 32] for c in rec["records"])
    assert os.path.exists(shapes + ".log")  # what pytest printed: kept aside, not shown

    op = r.stdout.strip()
    text = open(op).read()
    # the most frequent call is the constants' own values, named after Act's parameter
    assert "\ndim = 64\nDIM0 = 4\n" in text, text
    assert "return [dim]" in text and "_tensor(\"float32\", (DIM0, dim))" in text
    assert "return {\"dim\": 32}" in text
    r, ev = verify(config, op, "ok_relu.cpp", tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert len([c for c in ev["configs"] if c["kind"] == "own"]) >= 3

    # the kept record is used again: the tests do not run a second time
    os.remove(os.path.join(repo, "tests", "test_act.py"))
    r = kb(config, "operator", "--repo", repo, "--shapes", shapes, "act")
    assert r.returncode == 0, r.stderr
    assert open(op).read() == text


@pytest.mark.parametrize("ini,extra,message", [
    ("[operator act]\nmodule = acts/act.py:Act\ntests = tests/test_act.py::test_none\n", None,
     "the test selection found no test"),
    ("[operator act]\nmodule = acts/act.py:Act\ntests = tests/test_act.py\n",
     {"acts/act.py": "raise RuntimeError('no GPU here')\n" + ACT},
     "Act could not be imported: RuntimeError: no GPU here"),
    ("[operator act]\nmodule = acts/act.py:Act\n", None,
     "[operator act] gives no inputs and no tests; add, for example:"),
    ("[operator act]\nmodule = acts/act.py:Missing\ninputs = [4]\n", None,
     "acts/act.py has no class Missing"),
    ("[operator act]\nmodule = acts/act.py:Act\ninputs = [N]\n", None,
     "[operator act] has errors (above); nothing written"),
])
def test_bad_input_says_why(config, tmp_path, ini, extra, message):
    repo = act_repo(str(tmp_path / "repo"), ini, extra)
    r = kb(config, "operator", "--repo", repo, "act")
    assert r.returncode == 1, r.stdout + r.stderr
    assert message in r.stderr, r.stderr
    assert not os.path.exists(os.path.join(repo, "kernelbot_op_act.py"))
    if "gives no inputs" in message:
        # the lines to add parse, and name the module and its parameters
        assert "module = acts/act.py:Act\n" in r.stderr
        assert "init = dim=DIM\ninputs = float32[B,DIM]\nsizes = B=8, DIM=1024\n" in r.stderr


def test_import_that_writes_leaves_nothing_outside_scratch(config, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    writer = textwrap.dedent('''\
        import os
        for _p in (os.path.join(os.path.dirname(os.path.abspath(__file__)), "beside.txt"),
                   "in-cwd.txt", os.path.expanduser("~/in-home.txt"), "/tmp/kb-modop-in-tmp.txt",
                   %r):
            try:
                with open(_p, "w") as _f:
                    _f.write("escaped")
            except OSError:
                pass
        ''') % str(outside / "escaped.txt")
    repo = act_repo(str(tmp_path / "repo"), "[operator act]\nmodule = acts/act.py:Act\n"
                    "tests = tests/test_act.py\n", {"acts/act.py": writer + ACT})
    before = set(os.listdir("/tmp"))
    r = kb(config, "operator", "--repo", repo, "act")
    assert r.returncode == 0, r.stderr
    r, ev = verify(config, r.stdout.strip(), "ok_relu.cpp", tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    left = [p for p in (os.path.join(repo, "acts", "beside.txt"), os.path.join(repo, "in-cwd.txt"),
                        os.path.join(TOP, "in-cwd.txt"), os.path.expanduser("~/in-home.txt"),
                        "/tmp/kb-modop-in-tmp.txt", str(outside / "escaped.txt"))
            if os.path.exists(p)]
    assert left == []
    assert not [n for n in set(os.listdir("/tmp")) - before if "kb-modop" in n]
    # the only file the run left in the repository is the operator file kernelbot wrote
    mine = sorted(os.path.relpath(os.path.join(d, f), repo) for d, _, fs in os.walk(repo) for f in fs)
    assert mine == [".kernelbot.ini", "act_helpers.py", "acts/__init__.py", "acts/act.py",
                    "kernelbot_op_act.py", "tests/test_act.py"], mine


def test_shape_sets_are_own_configs():
    """configs.py: KB_SHAPE_SETS entries are configs of kind own right after the first;
    what is not a {name: int} is left out, a set met before too."""
    import types
    from kernelbot_harness import configs

    mod = types.ModuleType("kb_op_sets")
    exec("B = 8\nH = 64\nKB_SET = 0\n"
         "KB_SHAPE_SETS = [{'KB_SET': 1, 'B': 16}, 'junk', {'B': True, 'H': 32}, {'H': 'x'}]\n"
         "def get_inputs():\n    return [KB_SET, B, H]\n"
         "def get_init_inputs():\n    return []\n", mod.__dict__)
    out = configs.kernelbench_configs(mod)
    assert [c.kind for c in out[:3]] == ["own", "own", "own"]
    assert out[0].params == {"B": 8, "H": 64}
    assert out[1].params == {"B": 16, "H": 64, "KB_SET": 1}
    assert out[2].params == {"B": 8, "H": 32}       # the bool is no size
    assert out[3].kind == "half"                    # {'H': 'x'} is the first set again
