"""Untrusted output stays out of what the bot writes (issue 12, item 3).

An operator file prints a registered secret (the config's webhook secret)
and a GitHub token on stdout and stderr, and raises with both in the
message on one config; a kernel crashes right after. Whatever the bot
writes from that: `kernelbot verify --json` evidence, `kernelbot run`'s
output folder (committed with the kernel by the daemon) and the state
database hold neither the secret nor the token nor the raw output. The
runner operator's log under <state_dir>/logs/harness has the output with
*** in their place, in private files.
"""
import json
import os
import stat
import subprocess
import sys

import pytest

TOP = os.environ.get("KB_TOP") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("KB_BIN") or os.path.join(TOP, "build", "kernelbot")
CPU = os.path.join(TOP, "tests", "kernels", "cpu")

pytestmark = pytest.mark.skipif(not os.path.exists(BIN),
                                reason="kernelbot binary not built")

SECRET = "kbWebhookSecret-7f3a9c2e51d0"
TOKEN = "ghp_" + "Zq7" * 12

# The values are put together at run time: the operator file itself is
# copied into the run's output (reference/), as it is in the pull request.
LEAKY = '''"""ReLU that prints what it should not."""
import sys

import torch
import torch.nn as nn

SECRET = "%s" + "%s"
TOKEN = "ghp_" + "Zq7" * 12


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        print("forward" + " sees", SECRET, TOKEN)
        print("stderr" + " too: token=" + TOKEN + " secret=" + SECRET, file=sys.stderr)
        if x.shape[0] == 7:
            raise ValueError("refused: " + SECRET + " " + TOKEN)
        return torch.relu(x)


batch_size = 16
dim = 1024


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
''' % (SECRET[:8], SECRET[8:])


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    d = tmp_path_factory.mktemp("untrusted")
    op = d / "leaky_relu.py"
    op.write_text(LEAKY)
    cfg = d / "config.ini"
    cfg.write_text("[core]\nstate_dir = %s\n"
                   "[github]\nwebhook_secret = %s\n"
                   "[harness]\npython = %s\nbackend = cpu\nseeds = 1\nmax_configs = 6\n"
                   "[bench]\nwarmup = 1\nmin_time_ms = 5\nmax_reps = 10\n"
                   "[templates]\nmax_points = 2\nexhaustive_limit = 1\nrefine_rounds = 1\n"
                   % (d / "state", SECRET, sys.executable))
    return {"dir": d, "op": str(op), "config": str(cfg), "state": d / "state"}


def kb(env, *args, timeout=400):
    return subprocess.run([BIN, args[0], "-c", env["config"]] + list(args[1:]),
                          capture_output=True, text=True, timeout=timeout, cwd=TOP)


def leaks(data):
    """What of the secret, the token and the raw output data holds."""
    if isinstance(data, str):
        data = data.encode("utf-8", "replace")
    return [w for w in (SECRET, TOKEN, "forward sees", "stderr too")
            if w.encode() in data]


def tree_bytes(path):
    out = {}
    for root, _, files in os.walk(path):
        for f in files:
            p = os.path.join(root, f)
            with open(p, "rb") as fh:
                out[p] = fh.read()
    return out


def operator_logs(env):
    d = env["state"] / "logs" / "harness"
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o700
    logs = {}
    for name in sorted(os.listdir(d)):
        p = d / name
        assert stat.S_IMODE(os.stat(p).st_mode) == 0o600, p
        logs[str(p)] = p.read_bytes()
    return logs


def test_verify_evidence_holds_no_output(env, tmp_path):
    out = tmp_path / "ev"
    # the crash first: the operator has printed (validating its configs) when it comes
    r = kb(env, "verify", env["op"], os.path.join(CPU, "hack_crash.cpp"),
           os.path.join(CPU, "ok_relu.cpp"), "--backend", "cpu", "--no-timing",
           "--json", str(out))
    assert r.returncode == 1, r.stdout + r.stderr
    assert not leaks(r.stdout), r.stdout
    assert not leaks(r.stderr), r.stderr
    evs = {}
    for name in os.listdir(out):
        text = (out / name).read_text()
        assert not leaks(text), (name, leaks(text))
        evs[name] = json.loads(text)
    ok = next(e for n, e in evs.items() if "ok_relu" in n)
    crash = next(e for n, e in evs.items() if "hack_crash" in n)
    assert ok["verdict"] == "verified"
    assert crash["verdict"] == "rejected"
    for ev in evs.values():
        assert "log_tail" not in ev
    # the operator's exception, redacted, is still the reason a config was dropped
    dropped = [d for d in ok["dropped_configs"] if d["kind"] == "seven"]
    assert dropped and "refused: *** ***" in dropped[0]["reason"], ok["dropped_configs"]
    # the crash names the signal, not the stderr it followed
    msg = crash["reasons"][0]["message"]
    assert crash["reasons"][0]["check"] == "crash" and "SIGSEGV" in msg, msg
    # the local pointer leads to the redacted output
    logs = operator_logs(env)
    assert crash["operator_log"] in logs
    assert "log: the harness's output is in %s" % crash["operator_log"] in r.stdout, r.stdout
    text = logs[crash["operator_log"]].decode()
    assert "forward sees *** ***" in text
    assert "stderr too: token=*** secret=***" in text
    for p, data in logs.items():
        assert SECRET.encode() not in data and TOKEN.encode() not in data, p
        assert len(data) < 70 * 1024, p


def test_run_output_and_state_hold_no_output(env, tmp_path):
    out = tmp_path / "out"
    r = kb(env, "run", env["op"], "--out", str(out), "--backend", "cpu", "--time-budget", "240")
    assert r.returncode == 0, r.stdout + r.stderr
    files = tree_bytes(out)
    assert any(p.endswith("evidence.json") for p in files)
    for p, data in files.items():
        assert not leaks(data), (p, leaks(data))
    ev = json.loads(files[str(out / "evidence.json")])
    assert ev["verdict"] == "verified"
    assert "log_tail" not in ev and "operator_log" not in ev
    assert "errors" not in ev["kernelbot"]["build"]
    # every file of the state database (WAL included) and the caches
    state = {p: d for p, d in tree_bytes(env["state"]).items()
             if "/logs/harness/" not in p}
    assert any(p.endswith(".db") for p in state)
    for p, data in state.items():
        assert not leaks(data), (p, leaks(data))
    # while the operator's log has what was printed, redacted
    logs = operator_logs(env)
    assert any(b"forward sees *** ***" in d for d in logs.values())
    assert not any(SECRET.encode() in d or TOKEN.encode() in d for d in logs.values())
