"""Shared helpers for the harness tests (no tests here).

Kernels are built once per pytest process with the same flags the bot uses
for the CPU backend; the harness runs exactly as the bot starts it: its own
process group, the result pipe as descriptor 3, the nonce on stdin, a
wall-clock limit.
"""
import atexit
import concurrent.futures
import json
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import threading
import time

TOP = os.environ.get("KB_TOP") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))
HARNESS = os.path.join(TOP, "verifier", "harness", "kb_harness.py")
OPS = os.path.join(TOP, "tests", "operators")
KERNELS = os.path.join(TOP, "tests", "kernels", "cpu")
PYTHON = os.environ.get("KERNELBOT_PYTHON") or "/usr/bin/python3"

_tmp = tempfile.mkdtemp(prefix="kb-harness-test-")
atexit.register(shutil.rmtree, _tmp, True)
_lock = threading.Lock()
_built = {}


def _dlpack_flags():
    """-I for dlpack/dlpack.h when the system has none: $KERNELBOT_DLPACK_INCLUDE
    or the copy the Makefile keeps beside the binary ($KB_BIN's include/)."""
    dirs = [os.environ.get("KERNELBOT_DLPACK_INCLUDE")]
    if os.environ.get("KB_BIN"):
        dirs.append(os.path.join(os.path.dirname(os.environ["KB_BIN"]), "include"))
    return [f for d in dirs if d and os.path.exists(os.path.join(d, "dlpack", "dlpack.h"))
            for f in ("-I", d)]


def _compile(name):
    src = os.path.join(KERNELS, name + ".cpp")
    out = os.path.join(_tmp, name + ".so")
    cmd = ["g++", "-O2", "-shared", "-fPIC", "-fopenmp",
           "-I", os.path.join(TOP, "verifier", "include")] + _dlpack_flags() + [src, "-o", out]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError("could not build '%s': %s" % (src, p.stderr))
    return out


def build_all():
    """Build every native kernel of tests/kernels/cpu in parallel, once."""
    with _lock:
        if _built:
            return _built
        names = [f[:-4] for f in sorted(os.listdir(KERNELS))
                 if f.endswith(".cpp") and not f.startswith("ext_")]
        with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 2) as ex:
            for name, path in zip(names, ex.map(_compile, names)):
                _built[name] = path
        return _built


def scratch_dir():
    """A fresh directory removed when the test process ends."""
    return tempfile.mkdtemp(dir=_tmp)


def kernel(name):
    return build_all()[name]


def op(name):
    return os.path.join(OPS, name)


def request(operator, library=None, **kw):
    req = {"protocol": 1, "mode": "verify", "operator": operator,
           "backend": "cpu", "seeds": 2, "max_configs": 4}
    if library is not None:
        req["kernel"] = {"abi": "native", "library": library}
    req.update(kw)
    return req


class Run:
    """What one harness process left: exit status, channel records, logs."""

    def __init__(self, rc, records, stdout, stderr, timed_out, nonce, raw):
        self.rc, self.records, self.stdout, self.stderr = rc, records, stdout, stderr
        self.timed_out, self.nonce, self.raw = timed_out, nonce, raw

    @property
    def results(self):
        return [r for r in self.records if r.get("type") == "result"]

    @property
    def result(self):
        res = self.results
        assert len(res) == 1, "expected one result record, got %d\nstderr:\n%s" % (
            len(res), self.stderr[-3000:])
        return res[0]

    def checks(self):
        return {r["check"] for r in self.result["reasons"]}


def _read_all(fd, sink):
    while True:
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        sink.append(chunk)
    os.close(fd)


def _as_fd3(w):
    """In the child: the pipe becomes descriptor 3, inherited across exec
    (our other descriptors are close-on-exec, Python's default)."""
    if w == 3:
        os.set_inheritable(3, True)
    else:
        os.dup2(w, 3)
        os.close(w)


def run_harness(req, timeout=60, nonce=None, stdin=None, harness=HARNESS):
    """Run kb_harness.py like the bot: fd 3 = result pipe, nonce on stdin."""
    work = tempfile.mkdtemp(dir=_tmp)
    req = dict(req)
    req.setdefault("workdir", work)
    path = os.path.join(work, "request.json")
    with open(path, "w") as f:
        json.dump(req, f)
    nonce = nonce or secrets.token_hex(16)
    r, w = os.pipe()
    cmd = [PYTHON, "-I", "-B", "-u", harness, "--request", path]
    env = dict(os.environ, KB_RESULT_FD="3", TMPDIR=work)
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=env, close_fds=False,
                         preexec_fn=lambda: _as_fd3(w), start_new_session=True)
    os.close(w)
    chunks = []
    reader = threading.Thread(target=_read_all, args=(r, chunks))
    reader.start()
    timed_out = False
    try:
        out, err = p.communicate(stdin if stdin is not None else (nonce + "\n").encode(),
                                 timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
    reader.join(10)
    raw = b"".join(chunks).decode("utf-8", "replace")
    records = [json.loads(line) for line in raw.splitlines() if line.strip()]
    return Run(p.returncode, records, out.decode("utf-8", "replace"),
               err.decode("utf-8", "replace"), timed_out, nonce, raw)


def timed(fn, *a, **kw):
    t = time.time()
    v = fn(*a, **kw)
    return v, time.time() - t
