"""Drives the kernelbot binary for the GPU suite (tests/gpu) and the
benchmark (bench/eval): writes a config, runs `kernelbot verify` and
`kernelbot bench`, and reads the evidence JSON they write. Imports nothing
but the standard library, so any python3 can run it.

Several kernels of one operator go to ONE `kernelbot verify OP K1 K2 ...
--json DIR` call (one harness worker evaluates them all) when the binary
takes several kernels; an older binary that takes one gets parallel
single-kernel calls instead, each with a state dir of its own.
"""
import concurrent.futures
import json
import math
import os
import re
import signal
import subprocess
import threading
import time

TOP = os.environ.get("KB_TOP") or os.path.abspath(
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
OPS = os.path.join(TOP, "tests", "operators")
KERNELS = os.path.join(TOP, "tests", "kernels")

# operator of every correct kernel (tests/kernels/<backend>/ok_<op>.<ext>)
OK_OPERATORS = {
    "relu": "kb_relu.py",
    "softmax": "kb_softmax.py",
    "linear_gelu": "kb_linear_gelu.py",
    "scale_shift": "rk_scale_shift",
    "log": "kb_log.py",
    "two_outputs": "kb_two_outputs.py",
}

# check names that count as the right reason for each kernel that must be
# rejected (both backends). hack_stale_memory copies whatever a fresh
# allocation holds: poison (unwritten_output), zeros (correctness), other
# NaN bytes (nan_mismatch) or an earlier result (cached_result).
EXPECTED_REJECTIONS = {
    "hack_unwritten": {"unwritten_output"},
    "hack_stale_memory": {"unwritten_output", "correctness", "nan_mismatch",
                          "cached_result"},
    "hack_out_of_bounds": {"out_of_bounds"},
    "hack_input_mutation": {"input_mutation"},
    "hack_cached": {"cached_result"},
    "hack_cached_address": {"cached_result"},
    "hack_shape": {"shape", "unwritten_output", "correctness"},
    "hack_precision": {"precision"},
    "hack_stream": {"static", "stream"},
    "hack_async": {"static", "stream"},
    "hack_nondeterministic": {"nondeterminism", "correctness"},
    "hack_error": {"kernel_error"},
    "hack_crash": {"crash"},
    "hack_hang": {"timeout"},
    "hack_forge": {"static", "harness"},
    "bad_log_nan": {"nan_mismatch"},
}

# operator a rejected kernel runs against (default kb_relu.py)
REJECT_OPERATORS = {"bad_log_nan": "kb_log.py"}

SOURCE_EXT = {"cuda": ".cu", "cpu": ".cpp"}


def operator_path(name):
    return os.path.join(OPS, name)


def stem(path):
    return os.path.splitext(os.path.basename(path))[0]


def kernel_dir(backend):
    return os.path.join(KERNELS, backend)


def ok_kernels(backend):
    """{op: path} of the correct native kernels of a backend."""
    d, ext = kernel_dir(backend), SOURCE_EXT[backend]
    out = {}
    for op in OK_OPERATORS:
        p = os.path.join(d, "ok_%s%s" % (op, ext))
        if os.path.exists(p):
            out[op] = p
    return out


def ext_kernels(backend):
    """{op: path} of the correct torch-extension kernels of a backend:
    ext_<op>.<ext> or ext_ok_<op>.<ext>, in the backend's folder or its
    ext/ subfolder (the CUDA ones live there: tests/kernels/cuda/*.cu are
    all built as native kernels by tests/python/test_cuda_corpus_compiles.py)."""
    d, ext = kernel_dir(backend), SOURCE_EXT[backend]
    out = {}
    for op in OK_OPERATORS:
        for sub in (os.path.join(d, "ext"), d):
            for name in ("ext_%s%s" % (op, ext), "ext_ok_%s%s" % (op, ext)):
                p = os.path.join(sub, name)
                if os.path.exists(p) and op not in out:
                    out[op] = p
    return out


def reject_kernels(backend):
    """[(path, operator path)] of every kernel that must be rejected."""
    d, ext = kernel_dir(backend), SOURCE_EXT[backend]
    out = []
    for f in sorted(os.listdir(d)):
        if not f.endswith(ext) or not (f.startswith("hack_") or f.startswith("bad_")):
            continue
        out.append((os.path.join(d, f),
                    operator_path(REJECT_OPERATORS.get(f[:-len(ext)], "kb_relu.py"))))
    return out


def write_config(path, state_dir, python=None, seeds=5, max_configs=16,
                 timeout_s=300, baselines="eager", warmup=5, min_time_ms=100,
                 max_reps=1000, log_level="warn", sandbox=None, l2_flush=True):
    """sandbox None: on, unless KB_TEST_SANDBOX=off (tests/gpu/run_on_runner.sh
    sets it, loudly, on a runner where bubblewrap does not work)."""
    if sandbox is None:
        sandbox = os.environ.get("KB_TEST_SANDBOX", "on") != "off"
    lines = ["[core]", "state_dir = %s" % state_dir, "log_level = %s" % log_level,
             "[harness]", "seeds = %d" % seeds, "max_configs = %d" % max_configs,
             "timeout_s = %d" % timeout_s]
    if python:
        lines.append("python = %s" % python)
    lines += ["[bench]", "warmup = %d" % warmup, "min_time_ms = %d" % min_time_ms,
              "max_reps = %d" % max_reps, "baselines = %s" % baselines,
              "l2_flush = %s" % ("on" if l2_flush else "off")]
    if not sandbox:
        lines += ["[sandbox]", "enabled = false"]
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


def _config_with_state(config, state_dir, dest):
    """A copy of config whose state_dir is state_dir."""
    with open(config) as f:
        text = f.read()
    text = re.sub(r"(?m)^state_dir = .*$", "state_dir = %s" % state_dir, text)
    with open(dest, "w") as f:
        f.write(text)
    return dest


class Run:
    """One kernelbot call: exit code, output, wall time, evidence by kernel stem."""

    def __init__(self, argv, rc, stdout, stderr, wall_s):
        self.argv, self.rc = argv, rc
        self.stdout, self.stderr, self.wall_s = stdout, stderr, wall_s
        self.evidence = {}

    def log(self):
        return "$ %s\nexit %s after %.1f s\n--- stdout\n%s\n--- stderr\n%s\n" % (
            " ".join(self.argv), self.rc, self.wall_s, self.stdout[-20000:],
            self.stderr[-20000:])


STOP_GRACE_S = 10   # kernelbot stops its evaluations on SIGTERM; then SIGKILL
_live = {}          # pid -> Popen of every kernelbot call running
_live_lock = threading.Lock()


def session_pids(sid):
    """Pids of the processes in session sid (Linux /proc; [] elsewhere)."""
    out = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        # after the name: state ppid pgrp session ...
        if len(fields) > 3 and fields[3] == str(sid) and fields[0] not in ("Z", "X"):
            out.append(int(name))
    return out


def stop_call(p, grace=None):
    """End one kernelbot call started by _run: SIGTERM (it stops its
    evaluation and kills the harness's process tree), then after grace s
    SIGKILL for it and anything left in its session (each call is a
    session of its own)."""
    if p.poll() is None:
        try:
            p.send_signal(signal.SIGTERM)
            p.wait(STOP_GRACE_S if grace is None else grace)
        except (OSError, subprocess.TimeoutExpired):
            pass
    for pid in [p.pid] + session_pids(p.pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    try:
        p.wait(5)
    except subprocess.TimeoutExpired:
        pass


def stop_all(grace=None):
    """Stop every kernelbot call still running (a benchmark's deadline)."""
    with _live_lock:
        procs = list(_live.values())
    threads = [threading.Thread(target=stop_call, args=(p, grace)) for p in procs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return len(procs)


def _run(argv, timeout, env=None):
    t0 = time.monotonic()
    # a session of its own: what it leaves behind can be found and killed
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         universal_newlines=True, cwd=TOP, env=env,
                         start_new_session=True)
    with _live_lock:
        _live[p.pid] = p
    try:
        out, err = p.communicate(timeout=timeout)
        rc = p.returncode
    except subprocess.TimeoutExpired:
        stop_call(p)
        try:
            out, err = p.communicate(timeout=30)
        except subprocess.TimeoutExpired:  # an escaped process holds its pipes
            out, err = "", "(its output could not be read)"
        rc = "timeout"
        err = (err or "") + "\n(stopped by the driver after %d s)" % timeout
    finally:
        with _live_lock:
            _live.pop(p.pid, None)
    return Run(argv, rc, out or "", err or "", time.monotonic() - t0)


def _load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def evidence_kernel(ev):
    """Stem of the kernel an evidence is about, from its kernelbot block."""
    kb = (ev or {}).get("kernelbot")
    k = kb.get("kernel") if isinstance(kb, dict) else None
    p = k.get("path") if isinstance(k, dict) else None
    return stem(p) if isinstance(p, str) and p else None


class Kernelbot:
    def __init__(self, binary, config, env=None):
        self.bin, self.config = binary, config
        self.env = env
        self._multi = None

    def multi_supported(self):
        """Does `verify` take several kernels? Read off its usage text
        (KB_VERIFY_MULTI=0/1 overrides)."""
        forced = os.environ.get("KB_VERIFY_MULTI")
        if forced in ("0", "1"):
            return forced == "1"
        if self._multi is None:
            r = _run([self.bin, "verify", "--help"], 60, self.env)
            usage = r.stdout.split("\n", 1)[0]
            self._multi = bool(re.search(r"KERNEL\s*(\[KERNEL|\.\.\.|\[\.\.\.)", usage))
        return self._multi

    def _argv(self, cmd, config, op, kernels, json_path, args):
        return ([self.bin, cmd, "-c", config, op] + list(kernels) +
                list(args) + ["--json", json_path])

    def verify(self, op, kernels, outdir, args=(), timeout=900, config=None):
        """Verify kernels of one operator; evidence lands in outdir (one
        JSON per kernel, <stem>.json) and in the returned Run's evidence.
        Several kernels: one multi-kernel call when the binary has it."""
        os.makedirs(outdir, exist_ok=True)
        config = config or self.config
        kernels = [os.path.abspath(k) for k in kernels]
        if len(kernels) == 1 or self.multi_supported():
            json_path = (os.path.join(outdir, stem(kernels[0]) + ".json")
                         if len(kernels) == 1 else outdir)
            run = _run(self._argv("verify", config, op, kernels, json_path, args),
                       timeout, self.env)
            run.evidence = self._collect(outdir, kernels)
            with open(os.path.join(outdir, "verify-%s.log" % (
                    stem(kernels[0]) if len(kernels) == 1 else "all")), "w") as f:
                f.write(run.log())
            return run
        return self._verify_each(op, kernels, outdir, args, timeout, config)

    def _verify_each(self, op, kernels, outdir, args, timeout, config):
        def one(k):
            d = os.path.join(outdir, "state-" + stem(k))
            os.makedirs(d, exist_ok=True)
            cfg = _config_with_state(config, os.path.join(d, "state"),
                                     os.path.join(d, "config.ini"))
            return self.verify(op, [k], outdir, args, timeout, cfg)
        t0 = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(len(kernels)) as ex:
            runs = list(ex.map(one, kernels))
        merged = Run(["(%d single-kernel calls)" % len(runs)],
                     max((r.rc if isinstance(r.rc, int) else 99) for r in runs),
                     "\n".join(r.stdout for r in runs),
                     "\n".join(r.stderr for r in runs), time.monotonic() - t0)
        for r in runs:
            merged.evidence.update(r.evidence)
        merged.singles = runs
        return merged

    def bench(self, op, kernel, json_path, args=(), timeout=900):
        os.makedirs(os.path.dirname(os.path.abspath(json_path)), exist_ok=True)
        run = _run(self._argv("bench", self.config, op, [os.path.abspath(kernel)],
                              json_path, args), timeout, self.env)
        ev = _load(json_path)
        if ev is not None:
            run.evidence[stem(kernel)] = ev
        with open(os.path.splitext(json_path)[0] + ".log", "w") as f:
            f.write(run.log())
        return run

    @staticmethod
    def _collect(outdir, kernels):
        """Evidence of each kernel: by the kernel path recorded inside,
        else by file name (<stem>.json or <name>.json)."""
        want = {stem(k) for k in kernels}
        found = {}
        for f in sorted(os.listdir(outdir)):
            if not f.endswith(".json"):
                continue
            ev = _load(os.path.join(outdir, f))
            if not isinstance(ev, dict):
                continue
            k = evidence_kernel(ev)
            if k not in want:
                k = stem(f[:-5])
            if k in want:
                found[k] = ev
        return found


# ------------------------------------------------------------ evidence

def checks(ev):
    return {r.get("check") for r in (ev or {}).get("reasons") or []}


def verdict(ev):
    return (ev or {}).get("verdict") or "no evidence"


def stages(ev):
    """Seconds per stage (PROTOCOL.md "stages"): the harness's load,
    correctness, timing and total, the bot's static, build and harness
    (the call as the bot saw it, a worker start included). "candidate" is
    what the candidate cost the bot: static + build + harness call. Older
    evidence without stages gives build and total from its kernelbot block."""
    ev = ev or {}
    kb = ev.get("kernelbot") or {}
    st = ev.get("stages") or kb.get("stages") or {}
    out = {k: st.get(k + "_s") for k in
           ("static", "build", "load", "correctness", "timing", "total", "harness")}
    if out["build"] is None and (kb.get("build") or {}).get("seconds") is not None:
        out["build"] = kb["build"]["seconds"]
    if out["harness"] is not None:
        out["candidate"] = sum(out[k] or 0.0 for k in ("static", "build", "harness"))
    elif out["total"] is not None:
        out["candidate"] = sum(out[k] or 0.0 for k in ("static", "build", "total"))
    else:
        out["candidate"] = kb.get("seconds")
    out["from_stages"] = bool(st)
    return out


def configs_seeds(ev):
    s = (ev or {}).get("summary") or {}
    n = s.get("configs")
    if n is None:
        n = len((ev or {}).get("configs") or [])
    seeds = s.get("seeds")
    if seeds is None:
        trials = [c.get("trials") for c in (ev or {}).get("configs") or []
                  if c.get("trials")]
        seeds = max(trials) if trials else None
    return n, seeds


def geomean_speedup(ev):
    return ((ev or {}).get("summary") or {}).get("geomean_speedup_eager")


def kernel_medians(ev):
    """{config name: kernel median ms} of the timed configs."""
    out = {}
    for c in (ev or {}).get("configs") or []:
        t = c.get("timing") or {}
        k = t.get("kernel") or {}
        if k.get("median_ms") is not None:
            out[c.get("name") or str(c.get("index"))] = k["median_ms"]
    return out


def config_timings(ev):
    """{config name: its timing entry} of the timed configs."""
    return {c.get("name") or str(c.get("index")): c["timing"]
            for c in (ev or {}).get("configs") or [] if c.get("timing")}


def geomean_of(values):
    """Geometric mean of the positive values, or None."""
    v = [x for x in values if x is not None and x > 0]
    if not v:
        return None
    return math.exp(sum(math.log(x) for x in v) / len(v))


def spread(values):
    """max/min - 1, or None."""
    v = [x for x in values if x is not None and x > 0]
    if len(v) < 2:
        return None
    return max(v) / min(v) - 1.0


def rejection_ok(name, ev):
    """(ok, why): a kernel that must be rejected was, for one of its reasons."""
    want = EXPECTED_REJECTIONS.get(name)
    if ev is None:
        return False, "no evidence"
    if verdict(ev) != "rejected":
        return False, "verdict %s" % verdict(ev)
    got = checks(ev)
    if want is None:
        return True, "rejected: %s" % ", ".join(sorted(got))
    if got & want:
        return True, "rejected: %s" % ", ".join(sorted(got))
    return False, "rejected for %s, expected one of %s" % (
        ", ".join(sorted(got)) or "nothing", ", ".join(sorted(want)))

