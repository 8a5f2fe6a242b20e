"""The example repositories of examples/repos/ end to end (issue 17, item 4):
each one's pull request (the files of its pr-files.txt, the rest being the
base) on the local forge of test_bot_e2e (the GitHub simulator and a real
git server), the daemon and its `kernelbot operator`, `kernelbot run` and
`kernelbot wire` children on the CPU backend.

Checked for each: the bot's pull request's branch holds the kernel, ops.py,
binding.py and the patched module; evidence.json's "wiring" says "wired"
and that the repository's tests passed on the patched tree with kernel
calls; and, on a clone of that branch, the repository's own tests pass with
/usr/bin/python3 (torch 1.13 CPU) and the module calls the kernel
(ops.CALLS > 0).
"""
import json
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
import test_bot_e2e as E  # noqa: E402

PY = "/usr/bin/python3"
REPOS = os.path.join(E.TOP, "examples", "repos")

# (example, section, module file, class, constructor, input shape)
EXAMPLES = [
    ("tinymlp", "gelu_tanh", "src/tinymlp/act.py", "tinymlp.act", "GeluTanh(0.5)", (64, 256)),
    ("flatnet", "silu_gate", "model.py", "model", "SiluGate()", (128, 256)),
    ("ext_repo", "soft_clip", "extpkg/layers.py", "extpkg.layers", "ScaledTanh()", (64, 512)),
]

CALLS = '''
import importlib, json, sys, torch
sys.path[:0] = ["src", "."]
ops = importlib.import_module("kernelbot.%(slug)s.ops")
mod = importlib.import_module("%(module)s")
m = mod.%(ctor)s
x = torch.randn(%(shape)s)
y = m(x)
print(json.dumps({"calls": ops.CALLS, "shape": list(y.shape)}))
'''


def repo_files(name):
    """{path: text} of an example's files (the pull request's head), pr-files.txt left out."""
    root = os.path.join(REPOS, name)
    out = {}
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if not x.startswith("__pycache__")]
        for f in files:
            rel = os.path.relpath(os.path.join(d, f), root)
            if rel != "pr-files.txt" and not f.endswith(".pyc"):
                with open(os.path.join(d, f)) as fp:
                    out[rel] = fp.read()
    return out


def test_examples_are_complete():
    """Every example has its section, its pull request's files and tests that pass at the head."""
    for name, section, path, *_ in EXAMPLES:
        root = os.path.join(REPOS, name)
        with open(os.path.join(root, ".kernelbot.ini")) as f:
            ini = f.read()
        assert "[operator %s]" % section in ini and "module = %s:" % path in ini
        with open(os.path.join(root, "pr-files.txt")) as f:
            changed = f.read().split()
        assert path in changed and all(os.path.isfile(os.path.join(root, p)) for p in changed)
        p = subprocess.run([PY, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=root,
                           capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, p.stdout + p.stderr


@E.needs_gitserver
@pytest.mark.parametrize("name,section,path,module,ctor,shape", EXAMPLES,
                         ids=[e[0] for e in EXAMPLES])
def test_example_pull_request(tmp_path, name, section, path, module, ctor, shape):
    files = repo_files(name)
    files["ops/kb_relu.py"] = "# no operator any more\n"  # the world's own operator, gone
    w = E.World(tmp_path, files=files)
    try:
        p = w.daemon(w.config(), "--until-idle")
        assert p.wait(900) == 0, w.log()
        jobs = w.db("SELECT operator, state, error FROM jobs")
        assert [(op, st) for op, st, _ in jobs] == [("%s:%s" % (path, ctor.split("(")[0]), "done")], \
            (jobs, w.log())
        prs = w.bot_prs()
        assert len(prs) == 1, prs
        branch = prs[0]["pr"]["head"]["ref"]
        slug = branch.rsplit("/", 1)[-1]  # the class, lowercased
        assert branch == "kernelbot/pr-1/" + slug and slug == ctor.split("(")[0].lower()
        listed = E.git("--git-dir", w.bare, "ls-tree", "-r", "--name-only", branch).split("\n")
        for f in ("kernel.cpp", "binding.py", "ops.py", "evidence.json"):
            assert "kernelbot/%s/%s" % (slug, f) in listed, listed
        assert "kernelbot_op_%s.py" % section not in listed
        patched = E.git("--git-dir", w.bare, "show", "%s:%s" % (branch, path))
        assert "_kb_%s.supported(" % slug in patched, patched
        ev = json.loads(E.git("--git-dir", w.bare, "show", "%s:kernelbot/%s/evidence.json" % (branch, slug)))
        wiring = ev["wiring"]
        assert wiring["verdict"] == "wired", wiring
        assert wiring["tests"]["passed"] >= 2 and wiring["tests"]["failed"] == 0, wiring["tests"]
        assert wiring["tests"]["kernel_calls"] > 0, wiring["tests"]
        assert "Wired into the model" in prs[0]["body"], prs[0]["body"]
        if os.path.isfile(os.path.join(REPOS, name, "setup.py")):
            # a literal ext_modules list: the kernel builds ahead of time beside the repository's own
            setup = E.git("--git-dir", w.bare, "show", "%s:setup.py" % branch)
            assert 'CppExtension("kernelbot.%s._kernel"' % slug in setup, setup
            assert 'CppExtension("extpkg._clip"' in setup

        # the branch as a maintainer would check it out: its tests pass, the kernel is called
        clone = str(tmp_path / "clone")
        E.git("clone", "-q", "--branch", branch, w.bare, clone)
        t = subprocess.run([PY, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=clone,
                           capture_output=True, text=True, timeout=900)
        assert t.returncode == 0 and " passed" in t.stdout, t.stdout + t.stderr
        c = subprocess.run([PY, "-c", CALLS % {"slug": slug, "module": module, "ctor": ctor,
                                               "shape": ", ".join(map(str, shape))}],
                           cwd=clone, capture_output=True, text=True, timeout=900)
        assert c.returncode == 0, c.stderr
        got = json.loads(c.stdout.strip().splitlines()[-1])
        assert got["calls"] > 0 and got["shape"] == list(shape), got
    finally:
        w.close()


@E.needs_gitserver
def test_slower_kernel_is_not_wired(tmp_path):
    """[bot] wire_min_speedup above every timed config's speedup: the pull request carries
    the kernel and its evidence, the module on the branch is the repository's own, and the
    body says why, with the figures."""
    name, section, path, module, ctor, shape = EXAMPLES[0]
    w = E.World(tmp_path, files=dict(repo_files(name), **{"ops/kb_relu.py": "# no operator\n"}))
    try:
        p = w.daemon(w.config(wire_min_speedup=1000), "--until-idle")
        assert p.wait(900) == 0, w.log()
        prs = w.bot_prs()
        assert len(prs) == 1, (prs, w.log())
        branch = prs[0]["pr"]["head"]["ref"]
        head = E.git("--git-dir", w.bare, "show", "feature:%s" % path)
        assert E.git("--git-dir", w.bare, "show", "%s:%s" % (branch, path)) == head
        body = prs[0]["body"]
        assert "### Not wired into the model\n\n`%s`: `%s` is left unchanged: it measured below " \
               "1000.00x the module's own code on every timed config" % (path, ctor.split("(")[0]) \
               in body, body
        assert "### Wired into the model" not in body
    finally:
        w.close()
