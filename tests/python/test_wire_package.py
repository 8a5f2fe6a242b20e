"""A kernel wired into a module of an installable package (issue 17): the
operator's folder goes inside the package (<pkg>/_kernelbot/<op>/), the
module imports it by its absolute name, and the build carries the folder's
kernel sources, headers and reference as package data, so the package works
installed (pip install --target, imported from another directory), not only
from the source tree.

The run's folder is test_wiring's (`kernelbot verify` of the CPU linear+gelu
kernel); `kernelbot wire --write` patches a src-layout package built by
pyproject.toml and a root package built by setup.py with a packages list;
the folder is then put where the branch puts it, and the package installed
with /usr/bin/python3's pip, offline. A build of another backend is left
alone, with the lines to add.
"""
import json
import os
import shutil
import subprocess
import sys

import pytest

from kb_wiring_run import BIN, MODEL, make_run_dir, wire

pytestmark = pytest.mark.skipif(not os.path.exists(BIN), reason="kernelbot binary not built")

PY = "/usr/bin/python3"
OP = "kb_linear_gelu"

PYPROJECT = '''[project]
name = "blocks"
version = "0.1.0"

[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[tool.setuptools.packages.find]
where = ["src"]
'''

SETUP = '''from setuptools import setup

setup(
    name="blocks",
    version="0.1.0",
    packages=["blocks"],
)
'''

# run from a directory that is not the repository, with only the install on sys.path
USE = '''
import json, os, sys, torch
import blocks.model as model
ops = sys.modules["blocks._kernelbot.%s.ops"]
y = model.Block(256, 512)(torch.randn(8, 256))
print(json.dumps({"calls": ops.CALLS, "shape": list(y.shape), "model": model.__file__,
                  "ops": ops.__file__}))
''' % OP


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return make_run_dir(tmp_path_factory.mktemp("wire-package"))


def make_package(base, name, root, build):
    """A repository with the package `blocks` under root ("src" or ""), built by build {file: text}."""
    r = base / name
    pkg = r / root / "blocks" if root else r / "blocks"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "model.py").write_text(MODEL)
    for f, text in build.items():
        (r / f).write_text(text)
    return r, os.path.relpath(str(pkg / "model.py"), str(r))


def install_and_use(repo, tmp_path):
    """pip install --target of the repository, offline; USE run elsewhere: its JSON."""
    site, elsewhere = tmp_path / "site", tmp_path / "elsewhere"
    elsewhere.mkdir()
    p = subprocess.run([PY, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                        "--target", str(site), str(repo)], capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1"))
    assert p.returncode == 0, p.stdout + p.stderr
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSTARTUP")}
    env["PYTHONPATH"] = str(site)
    c = subprocess.run([PY, "-c", USE], cwd=str(elsewhere), capture_output=True, text=True, timeout=600,
                       env=env)
    assert c.returncode == 0, c.stderr
    got = json.loads(c.stdout.strip().splitlines()[-1])
    assert got["model"].startswith(str(site)) and got["ops"].startswith(str(site)), got
    return site, got


def test_src_layout_pyproject(run_dir, tmp_path):
    repo, module = make_package(tmp_path, "src-layout", "src", {"pyproject.toml": PYPROJECT})
    p = wire(run_dir, repo, "--module", module + ":Block", "--sys-path", "src", "--sys-path", ".", "--write")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "pyproject.toml installs the kernel's folder with the package" in p.stdout, p.stdout
    text = (repo / module).read_text()
    assert "import blocks._kernelbot.%s.ops as _kb_%s\n" % (OP, OP) in text, text
    toml = (repo / "pyproject.toml").read_text()
    assert toml.startswith(PYPROJECT) and toml[len(PYPROJECT):].startswith(
        '\n[tool.setuptools.package-data]\n"blocks._kernelbot.%s" = ["*.cpp", ' % OP), toml
    assert (repo / "src" / "blocks" / "_kernelbot" / "__init__.py").is_file()
    assert (run_dir["run"] / "__init__.py").is_file()

    # the branch: the run's folder at src/blocks/_kernelbot/<op>/; then installed
    shutil.copytree(str(run_dir["run"]), str(repo / "src" / "blocks" / "_kernelbot" / OP))
    site, got = install_and_use(repo, tmp_path)
    assert got["calls"] == 1 and got["shape"] == [8, 512], got
    folder = site / "blocks" / "_kernelbot" / OP
    for f in ("kernel.cpp", "binding.py", "ops.py", "evidence.json", "include/kernelbot_abi.h",
              "reference/%s.py" % OP):
        assert (folder / f).is_file(), f


def test_setup_py_packages_list(run_dir, tmp_path):
    repo, module = make_package(tmp_path, "setup-py", "", {"setup.py": SETUP})
    p = wire(run_dir, repo, "--module", module + ":Block", "--write")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "setup.py installs the kernel's folder with the package" in p.stdout, p.stdout
    setup = (repo / "setup.py").read_text()
    assert '    packages=["blocks._kernelbot", "blocks._kernelbot.%s", "blocks"],\n' \
           '    package_data={"blocks._kernelbot.%s": ["*.cpp", ' % (OP, OP) in setup, setup
    shutil.copytree(str(run_dir["run"]), str(repo / "blocks" / "_kernelbot" / OP))
    _, got = install_and_use(repo, tmp_path)
    assert got["calls"] == 1, got


def test_other_backend_left_alone(run_dir, tmp_path):
    toml = PYPROJECT.replace('"setuptools.build_meta"', '"hatchling.build"')
    repo, module = make_package(tmp_path, "hatch", "src", {"pyproject.toml": toml})
    p = wire(run_dir, repo, "--module", module + ":Block", "--sys-path", "src", "--write")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "pyproject.toml is left alone for the install (pyproject.toml builds with hatchling.build" \
        in p.stdout, p.stdout
    assert 'add to pyproject.toml:\n[tool.setuptools.package-data]\n"blocks._kernelbot.%s" = [' % OP \
        in p.stdout, p.stdout
    assert (repo / "pyproject.toml").read_text() == toml
    # the module still imports the folder inside the package
    assert "import blocks._kernelbot.%s.ops" % OP in (repo / module).read_text()
