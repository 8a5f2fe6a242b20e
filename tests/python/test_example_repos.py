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
(ops.CALLS > 0). The operator's folder lies inside the module's package
(<pkg>/_kernelbot/<slug>/) for tinymlp and ext_repo, at the root's
kernelbot/<slug>/ for the flat repository; the packages work installed:
tinymlp's branch installed by pip (pyproject.toml's package-data), ext_repo's
built by its setup.py (packages and package_data), each imported from
another directory, call the kernel.
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

# where each example's operator folder lies on the branch: inside its package, else at the root
OP_DIRS = {"tinymlp": "src/tinymlp/_kernelbot/%s", "flatnet": "kernelbot/%s", "ext_repo": "extpkg/_kernelbot/%s"}

CALLS = '''
import importlib, json, os, sys, torch
sys.path[:0] = %(path)s
ops = importlib.import_module("%(ops)s")
mod = importlib.import_module("%(module)s")
m = mod.%(ctor)s
x = torch.randn(%(shape)s)
y = m(x)
print(json.dumps({"calls": ops.CALLS, "shape": list(y.shape), "ops": os.path.abspath(ops.__file__)}))
'''


def ops_package(name, slug):
    """The ops module's import name: the folder's path under its import root, dotted."""
    d = OP_DIRS[name] % slug
    return (d[4:] if d.startswith("src/") else d).replace("/", ".") + ".ops"


def call_kernel(cwd, path, name, slug, module, ctor, shape):
    """CALLS run in cwd with path first on sys.path: its JSON."""
    c = subprocess.run([PY, "-c", CALLS % {"path": repr(path), "ops": ops_package(name, slug), "module": module,
                                           "ctor": ctor, "shape": ", ".join(map(str, shape))}],
                       cwd=cwd, capture_output=True, text=True, timeout=900,
                       env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert c.returncode == 0, c.stderr
    return json.loads(c.stdout.strip().splitlines()[-1])


def installed(tmp_path, name, clone):
    """The branch's package as an install would lay it out: tinymlp by pip (offline, no build
    isolation), ext_repo by its setup.py's build_py (packages and package data, not the C++
    extensions, which binding.py compiles on first use when absent). The folder that holds it."""
    site = str(tmp_path / "site")
    if name == "tinymlp":
        cmd = [PY, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
               "--target", site, clone]
    else:
        cmd = [PY, "setup.py", "-q", "build_py", "--build-lib", site]
    p = subprocess.run(cmd, cwd=clone, capture_output=True, text=True, timeout=900,
                       env=dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1"))
    assert p.returncode == 0, p.stdout + p.stderr
    return site


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
        op_dir = OP_DIRS[name] % slug
        for f in ("kernel.cpp", "binding.py", "ops.py", "evidence.json", "__init__.py"):
            assert "%s/%s" % (op_dir, f) in listed, listed
        assert not any(f.startswith("kernelbot/") for f in listed) or name == "flatnet", listed
        if name != "flatnet":
            # the new package between the top one and the folder
            assert op_dir.rsplit("/", 1)[0] + "/__init__.py" in listed, listed
        assert "kernelbot_op_%s.py" % section not in listed
        patched = E.git("--git-dir", w.bare, "show", "%s:%s" % (branch, path))
        assert "_kb_%s.supported(" % slug in patched, patched
        ev = json.loads(E.git("--git-dir", w.bare, "show", "%s:%s/evidence.json" % (branch, op_dir)))
        wiring = ev["wiring"]
        assert wiring["verdict"] == "wired", wiring
        assert wiring["tests"]["passed"] >= 2 and wiring["tests"]["failed"] == 0, wiring["tests"]
        assert wiring["tests"]["kernel_calls"] > 0, wiring["tests"]
        assert "Wired into the model" in prs[0]["body"], prs[0]["body"]
        assert "`%s`/ops.py" % op_dir in prs[0]["body"], prs[0]["body"]
        assert "%s/kernel.cpp" % op_dir in prs[0]["body"], prs[0]["body"]
        pkg = ops_package(name, slug)[:-4]
        if os.path.isfile(os.path.join(REPOS, name, "setup.py")):
            # a literal ext_modules list: the kernel builds ahead of time beside the repository's own;
            # the packages list and package_data carry the folder into an install
            setup = E.git("--git-dir", w.bare, "show", "%s:setup.py" % branch)
            assert 'CppExtension("%s._kernel", ["%s/kernel.cpp"]' % (pkg, op_dir) in setup, setup
            assert 'CppExtension("extpkg._clip"' in setup
            assert 'packages=["extpkg._kernelbot", "%s", "extpkg"],' % pkg in setup, setup
            assert '    package_data={"%s": ["*.cpp", ' % pkg in setup, setup
        if os.path.isfile(os.path.join(REPOS, name, "pyproject.toml")):
            toml = E.git("--git-dir", w.bare, "show", "%s:pyproject.toml" % branch)
            assert '\n[tool.setuptools.package-data]\n"%s" = ["*.cpp", ' % pkg in toml, toml

        # the branch as a maintainer would check it out: its tests pass, the kernel is called
        clone = str(tmp_path / "clone")
        E.git("clone", "-q", "--branch", branch, w.bare, clone)
        t = subprocess.run([PY, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=clone,
                           capture_output=True, text=True, timeout=900)
        assert t.returncode == 0 and " passed" in t.stdout, t.stdout + t.stderr
        got = call_kernel(clone, ["src", "."], name, slug, module, ctor, shape)
        assert got["calls"] > 0 and got["shape"] == list(shape), got

        if name != "flatnet":
            # installed, imported from a directory that is not the repository: the kernel runs
            site = installed(tmp_path, name, clone)
            for f in ("kernel.cpp", "include/kernelbot_abi.h", "evidence.json"):
                assert os.path.isfile(os.path.join(site, op_dir.split("/", 1)[1] if name == "tinymlp"
                                                   else op_dir, f)), f
            elsewhere = tmp_path / "elsewhere"
            elsewhere.mkdir()
            got = call_kernel(str(elsewhere), [site], name, slug, module, ctor, shape)
            assert got["calls"] > 0 and got["ops"].startswith(site), got
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
