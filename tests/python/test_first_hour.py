"""The first hour with kernelbot (issue 14 items 4 and 8): what a newcomer
meets before any kernel is fast. Help and README list every goal, command
and option; wrong input is refused at once with a message that names the
formats; an operator that raises says where; long commands are never
silent; `make test` leaves no service and no temporary file behind; state
lives in one place per user."""
import os
import re
import subprocess
import sys
import textwrap

import pytest

TOP = os.environ.get("KB_TOP") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("KB_BIN") or os.path.join(TOP, "build", "kernelbot")
OK_RELU = os.path.join(TOP, "tests", "kernels", "cpu", "ok_relu.cpp")
HANG = os.path.join(TOP, "tests", "kernels", "cpu", "hack_hang.cpp")
RELU = os.path.join(TOP, "tests", "operators", "kb_relu.py")

needs_bin = pytest.mark.skipif(not os.access(BIN, os.X_OK), reason="kernelbot binary not built")


def kb(*args, env=None, cwd=None, timeout=300):
    return subprocess.run([BIN] + list(args), capture_output=True, text=True, timeout=timeout,
                          env=env, cwd=cwd or TOP)


def config(tmp_path, extra=""):
    path = tmp_path / "config.ini"
    path.write_text("[core]\nstate_dir = %s\n[bench]\nwarmup = 1\nmin_time_ms = 5\nmax_reps = 10\n%s"
                    % (tmp_path / "state", extra))
    return str(path)


def readme_commands():
    text = open(os.path.join(TOP, "README.md")).read()
    return text.split("## Commands", 1)[1].split("\n## ", 1)[0]


# --- make help, README ---

def test_make_help_lists_every_goal():
    text = open(os.path.join(TOP, "Makefile")).read()
    goals = set()
    for line in re.findall(r"^\.PHONY:(.*)$", text, re.M):
        goals.update(line.split())
    goals.discard("all")           # plain `make`
    assert {"test", "demo", "bench-bot", "gpu-bundle", "clean"} <= goals, goals
    r = subprocess.run(["make", "-s", "help"], capture_output=True, text=True, cwd=TOP, timeout=60)
    assert r.returncode == 0, r.stderr
    missing = [g for g in sorted(goals) if not re.search(r"^  make %s\b" % re.escape(g), r.stdout, re.M)]
    assert not missing, "make help omits %s:\n%s" % (missing, r.stdout)


@needs_bin
def test_readme_lists_every_command_and_option():
    section = readme_commands()
    r = kb("--help")
    names = re.findall(r"^  (\S+)\s", r.stdout.split("commands:", 1)[1], re.M)
    assert "local" in names and "run" in names, r.stdout
    for name in names:
        if name in ("help", "version"):
            continue
        assert re.search(r"kernelbot %s\b" % name, section), "README's command list omits '%s'" % name
    for cmd in ("verify", "bench", "run", "status", "daemon", "action"):
        opts = re.findall(r"^\s+(?:-\w, )?(--[a-z][a-z-]+)", kb(cmd, "--help").stdout, re.M)
        entry = section.split("kernelbot %s " % cmd, 1)[1].split("\n    kernelbot ", 1)[0]
        for opt in opts:
            if opt in ("--help", "--config"):
                continue      # every command has them: said once below the list
            assert opt in entry, "README's '%s' omits %s:\n%s" % (cmd, opt, entry)
    readme = open(os.path.join(TOP, "README.md")).read()
    assert "make bench-bot" in readme
    assert "~/.local/state/kernelbot" in readme


# --- messages ---

@needs_bin
def test_unknown_command_says_it_once_with_a_guess():
    r = kb("stauts")
    assert r.returncode == 2
    assert r.stderr == ("kernelbot: unknown command 'stauts' (did you mean 'status'?)\n"
                        "Try 'kernelbot --help' for the list of commands.\n"), r.stderr
    r = kb("frobnicate")
    assert r.returncode == 2 and "did you mean" not in r.stderr
    assert r.stderr.count("unknown command") == 1 and r.stderr.count("--help") == 1, r.stderr
    r = kb("help", "verfy")
    assert r.returncode == 2 and "(did you mean 'verify'?)" in r.stderr, r.stderr


@needs_bin
def test_unknown_section_gets_a_guess(tmp_path):
    cfg = tmp_path / "c.ini"
    cfg.write_text("[harnes]\nseeds = 2\n")
    r = kb("config", "check", "-c", str(cfg))
    assert r.returncode == 2
    assert "unknown section [harnes] (did you mean [harness]?)" in r.stderr, r.stderr


def _python_that_says_so(tmp_path):
    """A [harness] python that leaves a mark when anything starts it."""
    mark = tmp_path / "python-started"
    fake = tmp_path / "python3"
    fake.write_text("#!/bin/sh\ntouch '%s'\nexec %s \"$@\"\n" % (mark, sys.executable))
    fake.chmod(0o755)
    return fake, mark


@needs_bin
@pytest.mark.parametrize("cmd", ["run", "verify", "bench"])
def test_not_an_operator_is_refused_before_python_starts(tmp_path, cmd):
    """An empty folder (it took 19.6 s to be refused: the harness started to
    find out), a folder without func_forward.py and a .py that defines no
    Model are refused before any python starts, naming both formats."""
    fake, mark = _python_that_says_so(tmp_path)
    cfg = config(tmp_path, "[harness]\npython = %s\n" % fake)
    empty = tmp_path / "empty"
    empty.mkdir()
    other = tmp_path / "other"
    other.mkdir()
    (other / "config_forward.json").write_text("{}")
    plain = tmp_path / "plain.py"
    plain.write_text("def f(x):\n    return x\n")
    for op, what in ((empty, "is a folder without func_forward.py"),
                     (other, "is a folder without func_forward.py"),
                     (plain, "defines no class Model")):
        args = [cmd, "-c", cfg, str(op)] + ([OK_RELU] if cmd != "run" else [])
        r = kb(*args)
        assert r.returncode == 2, (op, r.stdout, r.stderr)
        assert what in r.stderr, r.stderr
        # the single-file format is named as well as the folder one
        assert "KernelBench .py file (class Model, get_inputs(), get_init_inputs())" in r.stderr
        assert "robust-kbench folder (func_forward.py, config_forward.json)" in r.stderr
        assert not mark.exists(), "a python started before '%s' was refused" % op


@needs_bin
def test_reference_that_raises_names_its_line(tmp_path):
    op = tmp_path / "raises.py"
    op.write_text(textwrap.dedent("""\
        import torch
        import torch.nn as nn


        class Model(nn.Module):
            def forward(self, x):
                y = torch.relu(x)
                raise ValueError("the author's bug")


        def get_inputs():
            return [torch.randn(4, 8)]


        def get_init_inputs():
            return []
        """))
    r = kb("verify", "-c", config(tmp_path), str(op), OK_RELU, "--backend", "cpu", "--no-timing")
    assert r.returncode != 0, r.stdout
    assert "ValueError: the author's bug (at raises.py:8 in forward)" in r.stdout, r.stdout + r.stderr


# --- progress ---

@needs_bin
def test_verify_is_never_silent_while_it_waits(tmp_path):
    """A kernel that hangs until the evaluation's timeout: the log (not a
    terminal) gets the stage line at once and a heartbeat with the
    harness's config and seed while it waits, not minutes of nothing."""
    env = dict(os.environ, KB_PROGRESS_HEARTBEAT_S="1")
    r = kb("verify", "-c", config(tmp_path), RELU, HANG, "--backend", "cpu", "--no-timing",
           "--timeout", "8", env=env)
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stderr.startswith("[verify 0/1]\n") or "\n[verify 0/1]\n" in r.stderr, r.stderr
    beats = re.findall(r"^\.\.\. verify 0/1 still running after (\d+) s: hack_hang\.cpp: (.*)$",
                       r.stderr, re.M)
    assert len(beats) >= 2, r.stderr
    assert any("config 0" in what for _, what in beats), beats
    assert "timeout" in r.stdout, r.stdout


# --- tests/run.sh and the pytest plugin ---

def _fake_suite(build, body):
    t = build / "tests"
    t.mkdir(parents=True, exist_ok=True)
    suite = t / "test_zzfake"
    suite.write_text("#!/bin/sh\n" + body)
    suite.chmod(0o755)


def test_run_sh_progress_skip_reasons_and_cleanup(tmp_path):
    """run.sh prints each suite as it ends with a running count, the reason
    of every skipped test, and the summary line; the temporary directory it
    gives the suites is gone afterwards."""
    build = tmp_path / "build"
    _fake_suite(build, textwrap.dedent("""\
        echo "left behind" > "$TMPDIR/scratch-file"
        echo "$XDG_STATE_HOME" > "%s/xdg-seen"
        echo "[==========] Running 3 test(s)."
        echo "[ RUN      ] test_a"
        echo "[       OK ] test_a"
        echo "[ RUN      ] test_b"
        echo "kb-skip: no widget here"
        echo "[  SKIPPED ] test_b"
        echo "[ RUN      ] test_c"
        echo "[  SKIPPED ] test_c"
        echo "[==========] 3 test(s) run."
        echo "[  PASSED  ] 1 test(s)."
        echo "[  SKIPPED ] 2 test(s), listed below:"
        echo "[  SKIPPED ] test_b"
        echo "[  SKIPPED ] test_c"
        """ % tmp_path))
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = dict(os.environ, KB_BUILD=str(build), KB_TEST_FILTER="test_zzfake", TMPDIR=str(tmp))
    r = subprocess.run(["sh", os.path.join(TOP, "tests", "run.sh")], capture_output=True,
                       text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert re.match(r"^test_zzfake +1 passed, 0 failed, 2 skipped  \[1/1 suites, \d+ s\]$", lines[0]), lines
    assert [ln for ln in lines if ln.startswith("  skipped ")] == [
        "  skipped test_b: no widget here", "  skipped test_c: no reason given"], lines
    assert lines[-1] == "1 passed, 0 failed, 2 skipped", lines
    # the suite's TMPDIR and state dir were inside one scratch dir, removed at the end
    assert (tmp_path / "xdg-seen").read_text().startswith(str(tmp) + "/kb-test.")
    assert os.listdir(tmp) == [], os.listdir(tmp)


def test_pytest_plugin_reports_each_file_with_reasons(tmp_path):
    (tmp_path / "test_one.py").write_text(textwrap.dedent("""\
        import pytest

        def test_ok():
            pass

        def test_skipped():
            pytest.skip("needs a GPU")

        @pytest.mark.skipif(True, reason="not on this machine")
        def test_marked():
            pass
        """))
    (tmp_path / "test_two.py").write_text("def test_bad():\n    assert 1 == 2\n")
    r_fd, w_fd = os.pipe()
    env = dict(os.environ, KB_PROGRESS_FD=str(w_fd), KB_PROGRESS_HEARTBEAT_S="0",
               PYTHONPATH=os.path.dirname(os.path.abspath(__file__)))
    p = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p",
                          "kb_progress", "--basetemp", str(tmp_path / "bt"), str(tmp_path)],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                         pass_fds=(w_fd,), cwd=str(tmp_path))
    os.close(w_fd)
    with os.fdopen(r_fd) as f:
        progress = f.read().splitlines()
    out = p.communicate(timeout=120)[0].decode()
    assert p.returncode == 1, out
    assert progress[0] == "pytest: 4 tests in 2 files", progress
    # a long file says how far it got (the heartbeat is 0 s here)
    assert progress[1:3] == ["... test_one.py: 1 of 3 tests done, 0 min",
                             "... test_one.py: 2 of 3 tests done, 0 min"], progress
    assert re.match(r"^pytest test_one\.py +1 passed, 0 failed, 2 skipped  \[1/2 files, 3/4 tests, \d+ min\]$",
                    progress[3]), progress
    assert "  skipped test_skipped: needs a GPU" in progress
    assert "  skipped test_marked: not on this machine" in progress
    assert any(re.match(r"^pytest test_two\.py +0 passed, 1 failed, 0 skipped  \[2/2 files, 4/4 tests", ln)
               for ln in progress), progress
    assert "  failed test_bad (call)" in progress


# --- the host as it was found ---

def test_deps_services_leave_nothing_enabled(tmp_path):
    """mk/deps.sh stops and disables what a package it installed ships
    (lighttpd's unit was left enabled on the host): here with stand-ins for
    dpkg, systemctl, deb-systemd-helper and update-rc.d that log their
    calls."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    stubs = {
        "dpkg": "[ \"$1\" = -L ] && [ \"$2\" = kbfake ] && printf '%s\\n' /etc /lib/systemd/system "
                "/lib/systemd/system/kbfake.service /lib/systemd/system/kbfake@.service "
                "/usr/lib/systemd/system/kbfake-extra.service\n",
        "systemctl": "echo \"systemctl $*\" >> '%s'\n" % calls,
        "deb-systemd-helper": "echo \"deb-systemd-helper $*\" >> '%s'\n" % calls,
        "update-rc.d": "echo \"update-rc.d $*\" >> '%s'\n" % calls,
        "id": "echo 0\n",
    }
    for name, body in stubs.items():
        f = bin_dir / name
        f.write_text("#!/bin/sh\n" + body)
        f.chmod(0o755)
    env = dict(os.environ, PATH="%s:%s" % (bin_dir, os.environ["PATH"]))
    r = subprocess.run(["sh", os.path.join(TOP, "mk", "deps.sh"), "services", "kbfake"],
                       capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    done = calls.read_text().splitlines()
    systemd = os.path.isdir("/run/systemd/system")
    for unit in ("kbfake.service", "kbfake-extra.service"):
        want = ("systemctl disable --now " if systemd else "deb-systemd-helper disable ") + unit
        assert want in done, done
        assert "%s (package kbfake) left stopped and disabled" % unit in r.stderr
    assert not any("kbfake@" in c for c in done), done     # a template unit is no service
    # deps.sh keeps no service from starting while it installs
    text = open(os.path.join(TOP, "mk", "deps.sh")).read()
    assert "policy-rc.d" in text and "exit 101" in text


@needs_bin
def test_state_lives_in_one_place(tmp_path):
    """No config: state goes to $XDG_STATE_HOME/kernelbot, not to
    ./.kernelbot of whatever directory the command ran in."""
    cwd = tmp_path / "somewhere"
    cwd.mkdir()
    bare = tmp_path / "r.git"
    subprocess.run(["git", "init", "-q", "--bare", str(bare)], check=True)
    env = dict(os.environ, XDG_STATE_HOME=str(tmp_path / "xdg"))
    r = kb("config", "check", env=env, cwd=str(cwd))
    assert r.returncode == 0, r.stderr
    assert "state_dir = %s/kernelbot\n" % (tmp_path / "xdg") in r.stdout, r.stdout
    r = kb("local", "add-repo", "o/n", str(bare), env=env, cwd=str(cwd))
    assert r.returncode == 0, r.stderr
    assert os.path.isdir(tmp_path / "xdg" / "kernelbot" / "local-forge" / "o" / "n")
    assert os.listdir(cwd) == []
    env.pop("XDG_STATE_HOME")
    env["HOME"] = str(tmp_path / "home")
    r = kb("config", "check", env=env, cwd=str(cwd))
    assert "state_dir = %s/.local/state/kernelbot\n" % (tmp_path / "home") in r.stdout, r.stdout
