"""Several kernels in one `kernelbot verify`: one long-lived harness worker
(kb_harness.py --serve) evaluates them in turn, is restarted after a crash,
and every evidence file has its stages; --fresh gives the same verdicts
with one process per kernel. Real torch (cpu backend), real g++ builds.
Also serve mode spoken to directly."""

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading

import pytest

from test_harness_common import HARNESS, PYTHON, _as_fd3, _read_all, kernel, op, request

TOP = os.environ.get("KB_TOP") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("KB_BIN") or os.path.join(TOP, "build", "kernelbot")
OP = os.path.join(TOP, "tests", "operators", "kb_relu.py")
CPU = os.path.join(TOP, "tests", "kernels", "cpu")

needs_bin = pytest.mark.skipif(not os.path.exists(BIN), reason="kernelbot binary not built")

HARNESS_STAGES = ("load_s", "correctness_s", "timing_s", "total_s")
BOT_STAGES = ("static_s", "build_s", "harness_s")


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    d = tmp_path_factory.mktemp("verify-worker")
    path = d / "config.ini"
    path.write_text("[core]\nstate_dir = %s\n"
                    "[harness]\nmax_configs = 3\n"
                    "[bench]\nwarmup = 1\nmin_time_ms = 5\nmax_reps = 10\n"
                    % (d / "state"))
    return str(path)


def kb(config, *args, timeout=300):
    return subprocess.run([BIN, args[0], "-c", config] + list(args[1:]),
                          capture_output=True, text=True, timeout=timeout, cwd=TOP)


def four_kernels(d):
    """ok_relu, hack_cached, hack_crash, and ok_relu again under another name."""
    again = os.path.join(str(d), "ok_relu_again.cpp")
    shutil.copyfile(os.path.join(CPU, "ok_relu.cpp"), again)
    return [os.path.join(CPU, "ok_relu.cpp"), os.path.join(CPU, "hack_cached.cpp"),
            os.path.join(CPU, "hack_crash.cpp"), again]


def verify_four(config, d, *extra):
    kernels = four_kernels(d)
    out = os.path.join(str(d), "evidence")
    r = kb(config, "verify", OP, *kernels, "--backend", "cpu", "--seeds", "2",
           "--no-timing", "--json", out, *extra)
    evs = {}
    for k in kernels:
        path = os.path.join(out, os.path.basename(k) + ".json")
        if os.path.exists(path):
            with open(path) as f:
                evs[os.path.basename(k)] = json.load(f)
    return r, kernels, evs


@pytest.fixture(scope="module")
def worker_run(config, tmp_path_factory):
    return verify_four(config, tmp_path_factory.mktemp("worker-run"))


@pytest.fixture(scope="module")
def fresh_run(config, tmp_path_factory):
    return verify_four(config, tmp_path_factory.mktemp("fresh-run"), "--fresh")


def check_verdicts(r, kernels, evs):
    assert r.returncode == 1, r.stdout + r.stderr
    ok, cached, crash, again = kernels
    lines = r.stdout.splitlines()
    assert "verified %s" % ok in lines, r.stdout
    assert "verified %s" % again in lines, r.stdout
    assert any(l.startswith("%s: rejected: cached_result: " % cached) for l in lines), r.stdout
    assert any(l.startswith("%s: rejected: crash: " % crash) for l in lines), r.stdout
    assert not any(l.startswith("%s: rejected" % ok) for l in lines), r.stdout
    assert lines[-1] == "summary: 2 verified, 2 rejected, 0 errors of 4 kernels", r.stdout
    assert sorted(evs) == sorted(os.path.basename(k) for k in kernels)
    assert evs["ok_relu.cpp"]["verdict"] == "verified"
    assert evs["ok_relu_again.cpp"]["verdict"] == "verified"
    assert evs["hack_cached.cpp"]["verdict"] == "rejected"
    assert "cached_result" in {x["check"] for x in evs["hack_cached.cpp"]["reasons"]}
    assert evs["hack_crash.cpp"]["verdict"] == "rejected"
    assert evs["hack_crash.cpp"]["reasons"][0]["check"] == "crash"
    assert "SIGSEGV" in evs["hack_crash.cpp"]["reasons"][0]["message"]


@needs_bin
def test_worker_verdicts(worker_run):
    check_verdicts(*worker_run)


@needs_bin
def test_worker_reused_and_survives_a_kernel_crash(worker_run):
    _, _, evs = worker_run
    env = {k: v["environment"] for k, v in evs.items() if "environment" in v}
    ok, cached, crash = env["ok_relu.cpp"], env["hack_cached.cpp"], env["hack_crash.cpp"]
    again = env["ok_relu_again.cpp"]
    # one judge for all four: the crash took down only the kernel's own
    # process (the runner, PROTOCOL.md "Judge and runner")
    assert ok["worker_pid"] == cached["worker_pid"] == crash["worker_pid"] == again["worker_pid"]
    assert [e["worker_seq"] for e in (ok, cached, crash, again)] == [1, 2, 3, 4]
    # the operator was loaded and its configs validated once per worker
    assert ok["operator_cached"] is False
    assert cached["operator_cached"] is True and again["operator_cached"] is True


@needs_bin
def test_worker_evidence_has_stages(worker_run):
    _, _, evs = worker_run
    for name, ev in evs.items():
        st = ev["stages"]
        for key in BOT_STAGES:
            assert isinstance(st[key], (int, float)) and st[key] >= 0, (name, st)
        # a kernel's crash is the runner's: the judge still reports its stages
        for key in HARNESS_STAGES:
            assert isinstance(st[key], (int, float)) and st[key] >= 0, (name, st)
        assert st["correctness_s"] > 0
        assert st["total_s"] <= st["harness_s"] + 0.05, (name, st)
        assert st["load_s"] + st["correctness_s"] <= st["total_s"] + 0.01
        assert ev["kernelbot"]["seconds"] >= st["harness_s"]


@needs_bin
def test_fresh_same_verdicts_one_process_each(fresh_run):
    r, kernels, evs = fresh_run
    check_verdicts(r, kernels, evs)
    envs = [ev["environment"] for ev in evs.values() if "worker_pid" in ev["environment"]]
    assert len(envs) == 4  # the crash killed the kernel's process, not the judge
    assert len({e["worker_pid"] for e in envs}) == 4
    assert all(e["worker_seq"] == 1 for e in envs)
    for ev in evs.values():
        assert set(BOT_STAGES) <= set(ev["stages"])


@needs_bin
def test_timed_kernels_share_worker(config, tmp_path):
    again = os.path.join(str(tmp_path), "ok_relu_2.cpp")
    shutil.copyfile(os.path.join(CPU, "ok_relu.cpp"), again)
    out = str(tmp_path / "ev") + "/"
    r = kb(config, "verify", OP, os.path.join(CPU, "ok_relu.cpp"), again,
           "--backend", "cpu", "--seeds", "1", "--json", out)
    assert r.returncode == 0, r.stdout + r.stderr
    evs = [json.load(open(os.path.join(out, n))) for n in ("ok_relu.cpp.json", "ok_relu_2.cpp.json")]
    assert evs[0]["environment"]["worker_pid"] == evs[1]["environment"]["worker_pid"]
    for ev in evs:
        assert ev["stages"]["timing_s"] > 0
        assert all(c["timing"] for c in ev["configs"])


@needs_bin
def test_json_dir_for_one_kernel_and_name_clash(config, tmp_path):
    out = str(tmp_path / "one") + "/"
    r = kb(config, "verify", OP, os.path.join(CPU, "ok_relu.cpp"), "--backend", "cpu",
           "--seeds", "1", "--no-timing", "--json", out)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "verdict: verified" in r.stdout       # one kernel: the usual output
    ev = json.load(open(os.path.join(out, "ok_relu.cpp.json")))
    assert ev["verdict"] == "verified" and "stages" in ev

    other = tmp_path / "x"
    other.mkdir()
    shutil.copyfile(os.path.join(CPU, "ok_relu.cpp"), str(other / "ok_relu.cpp"))
    r = kb(config, "verify", OP, os.path.join(CPU, "ok_relu.cpp"), str(other / "ok_relu.cpp"),
           "--json", str(tmp_path / "clash"))
    assert r.returncode == 2 and "ok_relu.cpp.json" in r.stderr, r.stderr
    r = kb(config, "verify", OP, os.path.join(CPU, "ok_relu.cpp"), "/nonexistent/k.cpp")
    assert r.returncode == 2 and "'/nonexistent/k.cpp'" in r.stderr


# --- serve mode, spoken to directly ---

def serve(reqs, timeout=120):
    """Start kb_harness.py --serve, send each request's path, close stdin;
    returns (rc, records, stderr, paths)."""
    work = tempfile.mkdtemp(prefix="kb-serve-test-")
    paths = []
    for i, req in enumerate(reqs):
        d = os.path.join(work, "eval-%d" % i)
        os.mkdir(d)
        req = dict(req, workdir=d)
        paths.append(os.path.join(d, "request.json"))
        with open(paths[-1], "w") as f:
            json.dump(req, f)
    nonce = secrets.token_hex(16)
    r, w = os.pipe()
    env = dict(os.environ, KB_RESULT_FD="3", TMPDIR=work)
    p = subprocess.Popen([PYTHON, "-I", "-B", "-u", HARNESS, "--serve"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=env, close_fds=False, cwd=work,
                         preexec_fn=lambda: _as_fd3(w), start_new_session=True)
    os.close(w)
    chunks = []
    reader = threading.Thread(target=_read_all, args=(r, chunks))
    reader.start()
    text = nonce + "\n" + "".join(p_ + "\n" for p_ in paths)
    try:
        _, err = p.communicate(text.encode(), timeout=timeout)
    finally:
        if p.poll() is None:
            p.kill()
        reader.join(10)
        shutil.rmtree(work, True)
    records = [json.loads(l) for l in b"".join(chunks).decode().splitlines() if l.strip()]
    assert all(rec["nonce"] == nonce for rec in records)
    return p.returncode, records, err.decode("utf-8", "replace"), paths


def results_by_request(records, paths):
    res = [r for r in records if r["type"] == "result"]
    assert [r["request"] for r in res] == paths  # one each, in order
    assert all(r["request"] in paths for r in records)
    return res


def test_serve_answers_each_request_then_exits_at_eof():
    reqs = [request(op("kb_relu.py"), mode="describe"),
            request(op("kb_relu.py"), kernel("ok_relu")),
            {"protocol": 1, "mode": "verify", "operator": op("kb_relu.py"), "backend": "cpu"},
            request(op("kb_relu.py"), kernel("hack_cached")),
            request(op("kb_relu.py"), kernel("ok_relu"))]
    rc, records, err, paths = serve(reqs)
    assert rc == 0, err
    res = results_by_request(records, paths)
    assert [r["verdict"] for r in res] == ["described", "verified", "error", "rejected", "verified"]
    assert res[2]["reasons"][0]["check"] == "request"  # a bad request costs nothing more
    assert len({r["environment"]["worker_pid"] for r in res}) == 1
    assert [r["environment"]["worker_seq"] for r in res] == [1, 2, 3, 4, 5]
    for r in res:
        assert set(HARNESS_STAGES) <= set(r["stages"])
        assert "worker_exit" not in r
    # operator and configs come from the worker's cache after the first request
    assert res[4]["stages"]["load_s"] < res[1]["stages"]["load_s"] + 0.05
    assert res[4]["configs"] == res[1]["configs"]


def test_serve_operator_sees_no_stdin(tmp_path):
    probe = tmp_path / "kb_probe_serve.py"
    log = tmp_path / "probe.json"
    probe.write_text(
        "import json, os, torch, torch.nn as nn\n"
        "def _desc(fd):\n"
        "    try:\n        return os.readlink('/proc/self/fd/%%d' %% fd)\n"
        "    except OSError:\n        return None\n"
        "json.dump({'fd3': _desc(3), 'fd0': _desc(0)}, open(%r, 'w'))\n"
        "class Model(nn.Module):\n"
        "    def forward(self, x):\n        return x\n"
        "def get_inputs():\n    return [torch.randn(8)]\n"
        "def get_init_inputs():\n    return []\n" % str(log))
    rc, records, err, paths = serve([request(str(probe), mode="describe")])
    assert rc == 0, err
    seen = json.loads(log.read_text())
    assert seen == {"fd3": "/dev/null", "fd0": "/dev/null"}


def _rk_folder(d, take):
    d.mkdir()
    (d / "helper_mod_serve.py").write_text("def cut(x):\n    return x[:%d]\n" % take)
    (d / "func_forward.py").write_text(
        "import torch, torch.nn as nn\nfrom helper_mod_serve import cut\n"
        "def forward_fn(x):\n    return cut(x) * 2\n"
        "class Model(nn.Module):\n"
        "    def forward(self, x, fn=forward_fn):\n        return fn(x)\n"
        "def get_inputs(n=32):\n    return [torch.randn(n)]\n"
        "input_names = ['x']\n")


def test_serve_operators_keep_their_own_modules_and_edits(tmp_path):
    """Two task folders with a same-named helper each get their own, and an
    edited operator file is imported again."""
    _rk_folder(tmp_path / "a", 4)
    _rk_folder(tmp_path / "b", 8)
    kb_file = tmp_path / "kb_edit.py"
    src = ("import torch, torch.nn as nn\n"
           "class Model(nn.Module):\n    def forward(self, x):\n        return x[:%d]\n"
           "def get_inputs():\n    return [torch.randn(64)]\n"
           "def get_init_inputs():\n    return []\n")
    kb_file.write_text(src % 3)
    reqs = [request(str(tmp_path / "a"), mode="describe"),
            request(str(tmp_path / "b"), mode="describe"),
            request(str(kb_file), mode="describe"),
            request(str(kb_file), mode="describe")]

    # the file edits itself while request 3 imports it (all requests are
    # sent at once): request 4 must see the new version
    kb_file.write_text(src % 3 + "open(%r, 'w').write(%r)\nimport os\n"
                       "os.utime(%r, ns=(1, 1))\n" % (str(kb_file), src % 5, str(kb_file)))
    rc, records, err, paths = serve(reqs)
    assert rc == 0, err
    res = results_by_request(records, paths)
    shapes = [r["configs"][0]["outputs"][0]["shape"] for r in res]
    assert shapes == [[4], [8], [3], [5]], (shapes, err[-2000:])


def test_serve_device_fault_ends_worker():
    sys.path.insert(0, os.path.dirname(HARNESS))
    try:
        import kb_harness
    finally:
        sys.path.pop(0)
    assert kb_harness.device_fault(RuntimeError(
        "CUDA error: an illegal memory access was encountered"))
    assert kb_harness.device_fault(type("AcceleratorError", (RuntimeError,), {})("x"))
    assert not kb_harness.device_fault(ValueError("bad shape"))
    # a kernel's crash took its own process (the runner), not the judge's
    # device: no cuda here, so the judge is healthy and stays
    body = {"verdict": "rejected", "reasons": [{"check": "crash", "message": "x"}]}
    assert not kb_harness._worker_must_exit(body)
    body = {"verdict": "verified", "reasons": []}
    assert not kb_harness._worker_must_exit(body)  # no cuda here: healthy
    assert body["verdict"] == "verified"


def test_cache_compiles_once_and_hands_out_fresh_configs():
    """In-process: what serve mode caches, and that candidates never share
    their per-evaluation marks."""
    import torch
    sys.path.insert(0, os.path.dirname(HARNESS))  # its lazy imports need it
    try:
        _cache_checks(torch)
    finally:
        sys.path.remove(os.path.dirname(HARNESS))


def _cache_checks(torch):
    from kernelbot_harness import cache as kbh_cache

    class FakeTiming:
        calls = 0

        def compile_baseline(self, model, inputs, device=None):
            FakeTiming.calls += 1
            return (lambda *a: model(*a)), ""

    req = {"operator": op("kb_relu.py"), "pass": "forward", "max_configs": 3,
           "max_numel": 1 << 20, "extra_configs": []}
    dev = torch.device("cpu")
    kbh_cache.clear()
    kbh_cache.enabled = True
    try:
        task = kbh_cache.load_task(req["operator"], "forward")
        assert kbh_cache.load_task(req["operator"], "forward") is task
        first, _ = kbh_cache.prepare(task, req, dev)
        first[0].failed = {"correctness"}  # one evaluation's mark
        first[0].timing = {"x": 1}
        second, _ = kbh_cache.prepare(task, req, dev)
        assert [c.name for c in second] == [c.name for c in first]
        assert not hasattr(second[0], "failed") and not hasattr(second[0], "timing")
        tm = FakeTiming()
        for cfg in second + second:
            with task.activate(cfg):
                case = task.make_case(cfg, 1, "own", "default", dev)
            fn, why = kbh_cache.compile_baseline(tm, task, cfg, case.model, case.model_inputs, dev)
            assert fn is not None and why == ""
        assert FakeTiming.calls == len(second)  # once per config
    finally:
        kbh_cache.enabled = False
        kbh_cache.clear()
    # disabled: no caching at all
    assert kbh_cache.load_task(req["operator"], "forward") is not task
