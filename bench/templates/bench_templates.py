"""make bench-templates: the built-in templates vs eager and torch.compile.

Per family and size (issue 4). A benchmark, not a test: it prints tables
and target lines and exits 0 when everything it started finished (targets
met or missed, deadline skips said), 1 when a kernelbot call failed (no
verified kernel, a kernel rejected when benched, a call killed), 2 when it
could not run at all.

For each operator of bench/templates/operators.py (fused pointwise chains,
row-wise reductions, linear + epilogue), at the sizes of its table:
 1. tune: the operator is written as a robust-kbench folder whose configs
    are its sizes, and `kernelbot run OP --backend B --out DIR` tunes one
    kernel over all of them (tuning seconds and points tried come from
    DIR/kernel.json). Runs go --jobs at a time: tuning decides which point
    wins, the figures below do not come from it;
 2. bench: after every run has finished, one `kernelbot bench OP KERNEL`
    per operator, one at a time on a quiet device: eager, torch.compile and
    the kernel timed interleaved in one process, at every size, with the
    roofline shares of the measured copy bandwidth and matmul rate. Runs
    and benches have separate state dirs, so the peaks are measured by a
    bench, never under the runs' load;
 3. a table per family and the targets: memory-bound kernels at the
    largest size >= 85% of the copy bandwidth, fused pointwise chains of
    >= 3 ops at a geometric-mean speedup >= 1.0 over torch.compile and
    >= 1.5 over eager, linear + epilogue >= eager.
--deadline S: start nothing that would not fit in S seconds (estimates
from the calls done so far), kill a call that runs past it, and say what
was skipped. An operator tuned but not benched is reported from its run's
final check (marked, eager only, not counted for the targets).
--out DIR: DIR/bench-templates-report.txt, DIR/bench-templates.json (every
row and call) and DIR/bench-templates-evidence.tar.gz (operators, kernels,
kernel.json, evidence, logs).
"""
import argparse
import concurrent.futures
import io
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import operators  # noqa: E402

MARKER = ".bench-templates"
BW_TARGET = 0.85
CHAIN_VS_COMPILE = 1.0
CHAIN_VS_EAGER = 1.5
CHAIN_MIN_OPS = 3
LINEAR_VS_EAGER = 1.0
KILL_GRACE_S = 10

# first guesses of a call's seconds, until calls of the kind have finished
FIRST_ESTIMATE = {"cuda": {"run": 60.0, "bench": 35.0}, "cpu": {"run": 12.0, "bench": 4.0}}

# [bench] and [templates] settings per backend: tuning times briefly, the
# figures (bench) with the defaults
SETTINGS = {
    "cuda": {"tune": {"warmup": 2, "min_time_ms": 20, "max_reps": 200},
             "bench": {"warmup": 5, "min_time_ms": 100, "max_reps": 1000},
             "max_points": 12, "exhaustive_limit": 16, "refine_rounds": 1, "jobs": 4},
    "cpu": {"tune": {"warmup": 1, "min_time_ms": 10, "max_reps": 20},
            "bench": {"warmup": 2, "min_time_ms": 20, "max_reps": 50},
            "max_points": 3, "exhaustive_limit": 3, "refine_rounds": 1, "jobs": 1},
}


def fmt(x, nd=2, suffix=""):
    return "-" if x is None else "%.*f%s" % (nd, x, suffix)


def rate(x, unit):
    """"3950 GB/s", "9.5 GB/s", "0.012 TFLOP/s"."""
    if x is None:
        return "-"
    if x >= 100:
        return "%.0f %s" % (x, unit)
    if x >= 1:
        return "%.1f %s" % (x, unit)
    return "%.2g %s" % (x, unit)


def ms(x):
    if x is None:
        return "-"
    return "%.4f" % x if x < 1 else "%.3f" % x


def pct(x):
    return "-" if x is None else "%.0f%%" % (100 * x)


def geomean(values):
    v = [x for x in values if x is not None and x > 0]
    if not v:
        return None
    return math.exp(sum(math.log(x) for x in v) / len(v))


def table(rows, header):
    rows = [[str(c) for c in r] for r in rows]
    w = [max([len(header[i])] + [len(r[i]) for r in rows]) for i in range(len(header))]
    out = ["  ".join(h.ljust(w[i]) for i, h in enumerate(header)).rstrip(),
           "  ".join("-" * w[i] for i in range(len(header)))]
    for r in rows:
        out.append("  ".join(c.ljust(w[i]) for i, c in enumerate(r)).rstrip())
    return "\n".join(out)


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


class Call:
    """One kernelbot process: exit code ("timeout" when killed), wall time, log."""

    def __init__(self, argv, log):
        self.argv, self.log = argv, log
        self.rc, self.wall_s = None, 0.0

    def tail(self, n=3000):
        try:
            with open(self.log, errors="replace") as f:
                return f.read()[-n:]
        except OSError:
            return ""

    def as_json(self):
        return {"argv": self.argv, "rc": self.rc, "wall_s": round(self.wall_s, 2),
                "log": self.log}


class Unit:
    """One operator at its sizes: a folder, a run, a bench."""

    def __init__(self, name, sizes, folder):
        self.name, self.sizes, self.folder = name, sizes, folder
        self.spec = operators.OPS[name]
        self.out = os.path.join(folder + "-out")
        self.run = self.bench = None
        self.kernel_json = self.run_evidence = self.bench_evidence = None
        self.state = "planned"   # tuned, no-kernel, failed, skipped
        self.why = None
        self.bench_state = None  # benched, rejected, failed, skipped
        self.bench_why = None

    @property
    def label(self):
        if len(self.sizes) == 1:
            return "%s %s" % (self.name, self.sizes[0][0])
        return self.name

    def kernel_path(self):
        src = (self.kernel_json or {}).get("source") or "kernel.cu"
        return os.path.join(self.out, src)


class Bench:
    def __init__(self, a):
        self.a = a
        self.backend = a.backend
        self.work = a.workdir
        self.set = dict(SETTINGS[a.backend])
        for k in ("max_points", "exhaustive_limit", "refine_rounds", "jobs"):
            if getattr(a, k) is not None:
                self.set[k] = getattr(a, k)
        self.state_base = a.state_dir or os.path.join(self.work, "state")
        self.env = dict(os.environ)
        # torch.compile's cache next to the state (a fresh one per run
        # unless --state-dir is given); kernelbot passes it to the harness
        self.env.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(self.state_base, "inductor"))
        self.units = []
        self.skipped = []
        self.walls = {}
        self.observed = {"run": [], "bench": []}
        self.procs = set()
        # re-entrant: the signal handler (stop) runs in the main thread,
        # which may hold it inside call()
        self.lock = threading.RLock()
        self.stopping = False
        self.t0 = time.monotonic()

    # ------------------------------------------------------------ plumbing

    def log(self, msg):
        print("[bench-templates %6.1fs] %s" % (time.monotonic() - self.t0, msg), flush=True)

    def left(self):
        if not self.a.deadline:
            return None
        return self.a.deadline - (time.monotonic() - self.t0)

    def estimate(self, kind, u):
        """Seconds a run or bench of unit u may take: the longest of its
        family so far (a matmul's torch.compile autotunes for longer), else
        the longest of any, else a first guess."""
        fam = [w for f, w in self.observed[kind] if f == u.spec["family"]]
        seen = fam or [w for _, w in self.observed[kind]]
        return max(seen) if seen else FIRST_ESTIMATE[self.backend][kind]

    def bench_reserve(self, extra=None):
        """Seconds the benches still owed will take: units running or tuned
        and not benched yet (and extra)."""
        owed = [u for u in self.units if u.state == "running"
                or (u.state == "tuned" and u.bench_state is None)]
        if extra is not None and extra not in owed:
            owed.append(extra)
        return sum(self.estimate("bench", u) for u in owed)

    def write_config(self, path, state_dir, phase, n_configs):
        s = self.set
        t = s["tune"] if phase == "tune" else s["bench"]
        lines = ["[core]", "state_dir = %s" % state_dir, "log_level = warn",
                 "[harness]", "backend = %s" % self.backend,
                 "seeds = %d" % (2 if phase == "tune" else 1),
                 "max_configs = %d" % max(1, n_configs),
                 "timeout_s = %d" % self.a.eval_timeout]
        if self.a.python:
            lines.append("python = %s" % self.a.python)
        lines += ["[bench]", "warmup = %d" % t["warmup"], "min_time_ms = %d" % t["min_time_ms"],
                  "max_reps = %d" % t["max_reps"],
                  # tuning ranks points by the speedup over eager; torch.compile
                  # is compiled and timed by the bench alone
                  "baselines = %s" % ("eager" if phase == "tune" else "eager,compile"),
                  "[templates]", "max_points = %d" % s["max_points"],
                  "exhaustive_limit = %d" % s["exhaustive_limit"],
                  "refine_rounds = %d" % s["refine_rounds"]]
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        return path

    def call(self, argv, log, timeout):
        """Run argv (stdout and stderr to log) with a wall-clock limit:
        SIGTERM when it passes (kernelbot then kills its harness), SIGKILL
        KILL_GRACE_S later."""
        c = Call(argv, log)
        t = time.monotonic()
        with open(log, "w") as f:
            f.write("$ %s\n" % " ".join(argv))
            f.flush()
            with self.lock:
                if self.stopping:
                    c.rc = "stopped"
                    return c
                p = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, cwd=self.work,
                                     env=self.env, start_new_session=True)
                self.procs.add(p)
                if self.stopping:  # a signal came while it started
                    p.send_signal(signal.SIGTERM)
            try:
                c.rc = p.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.terminate(p)
                c.rc = "timeout"
            finally:
                with self.lock:
                    self.procs.discard(p)
            c.wall_s = time.monotonic() - t
            f.write("\n(exit %s after %.1f s%s)\n" % (
                c.rc, c.wall_s, ", killed at the time limit of %.0f s" % timeout
                if c.rc == "timeout" else ""))
        return c

    @staticmethod
    def terminate(p):
        try:
            p.send_signal(signal.SIGTERM)
            p.wait(KILL_GRACE_S)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                pass
            p.wait()
        except OSError:
            pass

    def stop(self, *_):
        """SIGTERM/SIGINT: stop every running call; the report still gets written."""
        with self.lock:
            self.stopping = True
            procs = list(self.procs)
        for p in procs:
            try:
                p.send_signal(signal.SIGTERM)
            except OSError:
                pass

    def call_timeout(self, reserve=0.0):
        left = self.left()
        if left is None:
            return self.a.call_timeout
        return max(5.0, min(self.a.call_timeout, left - reserve))

    # ------------------------------------------------------------ plan

    def plan(self):
        table_ = None
        if self.a.sizes:
            with open(self.a.sizes) as f:
                table_ = json.load(f)
        names = self.a.ops.split(",") if self.a.ops else list(operators.PRIORITY)
        bad = [n for n in names if n not in operators.OPS]
        if bad:
            raise SystemExit("bench-templates: unknown operator '%s' (known: %s)" % (
                bad[0], ", ".join(operators.PRIORITY)))
        names = [n for n in operators.PRIORITY if n in names]
        opdir = os.path.join(self.work, "operators")
        if self.a.split_sizes:
            # one operator per size: each tuned alone, the largest first
            per = {n: operators.sizes_for(n, self.backend, table_) for n in names}
            depth = max(len(v) for v in per.values())
            for i in range(depth):
                for n in names:
                    sizes = per[n]
                    if i < len(sizes):
                        label, dims = sizes[len(sizes) - 1 - i]
                        self.units.append(Unit(n, [(label, dims)],
                                               os.path.join(opdir, "%s-%s" % (n, label))))
        else:
            for n in names:
                self.units.append(Unit(n, operators.sizes_for(n, self.backend, table_),
                                       os.path.join(opdir, n)))
        for u in self.units:
            operators.write_operator(u.folder, u.name, [d for _, d in u.sizes])

    # ------------------------------------------------------------ phases

    def tune(self, u):
        state = os.path.join(self.state_base, "tune")
        os.makedirs(state, exist_ok=True)
        cfg = self.write_config(u.folder + "-tune.ini", state, "tune", len(u.sizes))
        reserve = self.bench_reserve(u)
        limit = self.call_timeout(reserve)
        # the run's own budget ends its tuning with the best point so far
        # (and leaves time for its final check) before the hard limit kills it
        budget = max(5, int(limit * 0.6))
        u.run = self.call([self.a.bin, "run", "-c", cfg, u.folder, "--backend", self.backend,
                           "--out", u.out, "--seeds", "2", "--time-budget", str(budget)],
                          u.folder + "-run.log", limit)
        if isinstance(u.run.rc, int) and u.run.rc in (0, 1):
            self.observed["run"].append((u.spec["family"], u.run.wall_s))
        u.kernel_json = load_json(os.path.join(u.out, "kernel.json"))
        u.run_evidence = load_json(os.path.join(u.out, "evidence.json"))
        if u.run.rc == 0 and u.kernel_json and u.kernel_json.get("verdict") == "verified":
            u.state = "tuned"
            t = u.kernel_json.get("template") or {}
            if t.get("family") != u.spec["family"] or t.get("kind") != u.spec["kind"]:
                u.why = "template %s/%s, expected %s/%s" % (
                    t.get("family"), t.get("kind"), u.spec["family"], u.spec["kind"])
        else:
            u.state = "no-kernel" if u.run.rc == 1 else "failed"
            u.why = self.reason(u.run)
        self.log("run   %-28s %s (%.0f s%s)" % (
            u.label, u.state if u.state != "tuned" else "tuned: " + str(
                ((u.kernel_json or {}).get("template") or {}).get("point_name")),
            u.run.wall_s, "" if u.state == "tuned" else ": " + (u.why or "")))

    @staticmethod
    def reason(call):
        if call.rc == "timeout":
            return "killed at its time limit"
        if call.rc == "stopped":
            return "stopped"
        lines = [ln.strip() for ln in call.tail(4000).splitlines() if ln.strip()]
        for ln in reversed(lines):
            if ln.startswith("kernelbot ") or "error" in ln.lower():
                return ln[:300]
        return "exit %s" % call.rc

    def tune_all(self):
        """Tune the planned units, --jobs at a time, in priority order. A
        unit whose run and bench (and the benches of the units already
        tuned) would not fit before the deadline stays planned, for a later
        round. True when a run was started."""
        pending = [u for u in self.units if u.state == "planned"]
        running = {}
        started = False
        jobs = max(1, self.set["jobs"])
        with concurrent.futures.ThreadPoolExecutor(jobs) as ex:
            while pending or running:
                while pending and len(running) < jobs and not self.stopping:
                    left = self.left()
                    # the first in priority order whose run and bench fit
                    need = [self.estimate("run", v) + self.bench_reserve(v) for v in pending]
                    fit = [i for i, n in enumerate(need) if left is None or n <= left]
                    if not fit:
                        self.log("deadline: %d operator(s) wait (%.0f s left, at least %.0f s "
                                 "needed)" % (len(pending), max(0, left), min(need)))
                        pending = []
                        break
                    u = pending.pop(fit[0])
                    u.state = "running"
                    started = True
                    running[ex.submit(self.tune, u)] = u
                if self.stopping:
                    pending = []
                if running:
                    done, _ = concurrent.futures.wait(
                        running, return_when=concurrent.futures.FIRST_COMPLETED)
                    for f in done:
                        u = running.pop(f)
                        try:
                            f.result()
                        except Exception as e:  # a driver bug must not lose the report
                            u.state, u.why = "failed", "driver: %s: %s" % (type(e).__name__, e)
        return started

    def bench_one(self, u):
        state = os.path.join(self.state_base, "bench")
        os.makedirs(state, exist_ok=True)
        cfg = self.write_config(u.folder + "-bench.ini", state, "bench", len(u.sizes))
        js = u.folder + "-bench.json"
        u.bench = self.call([self.a.bin, "bench", "-c", cfg, u.folder, u.kernel_path(),
                             "--backend", self.backend, "--seeds", "1", "--json", js],
                            u.folder + "-bench.log", self.call_timeout())
        if isinstance(u.bench.rc, int) and u.bench.rc in (0, 1):
            self.observed["bench"].append((u.spec["family"], u.bench.wall_s))
        u.bench_evidence = load_json(js) if u.bench.rc in (0, 1) else None
        verdict = (u.bench_evidence or {}).get("verdict")
        if u.bench.rc == 0 and verdict == "verified":
            u.bench_state = "benched"
        elif verdict == "rejected":
            u.bench_state = "rejected"
            u.bench_why = "; ".join("%s: %s" % (r.get("check"), (r.get("message") or "")[:160])
                                    for r in (u.bench_evidence.get("reasons") or [])[:3])
        else:
            u.bench_state = "failed"
            u.bench_why = self.reason(u.bench)
        self.log("bench %-28s %s (%.0f s)%s" % (u.label, u.bench_state, u.bench.wall_s,
                                                ": " + u.bench_why if u.bench_why else ""))

    def bench_all(self):
        for u in self.units:
            if u.state != "tuned" or u.bench_state is not None:
                continue
            left = self.left()
            if self.stopping:
                u.bench_state, u.bench_why = "skipped", "stopped"
                continue
            if left is not None and self.estimate("bench", u) > left:
                u.bench_state = "skipped"
                u.bench_why = "deadline (%.0f s left, about %.0f s needed)" % (
                    max(0, left), self.estimate("bench", u))
                self.skipped.append("bench of %s" % u.label)
                self.log("bench %-28s skipped: %s" % (u.label, u.bench_why))
                continue
            t = time.monotonic()
            self.bench_one(u)
            self.walls["bench"] = self.walls.get("bench", 0) + time.monotonic() - t

    def run(self):
        self.plan()
        self.log("backend %s, %d operator(s) in %d unit(s), %d run(s) at a time, max_points %d, "
                 "workdir %s%s" % (self.backend, len({u.name for u in self.units}),
                                   len(self.units), self.set["jobs"], self.set["max_points"],
                                   self.work, ", deadline %.0f s" % self.a.deadline
                                   if self.a.deadline else ""))
        # rounds: tune what fits, then bench it on a quiet device; time left
        # over (estimates are conservative) goes to the operators that waited
        rounds = 0
        while not self.stopping:
            t = time.monotonic()
            started = self.tune_all()
            self.walls["tune"] = self.walls.get("tune", 0) + time.monotonic() - t
            self.bench_all()
            rounds += 1
            if not started or not any(u.state == "planned" for u in self.units):
                break
        self.walls["rounds"] = rounds
        for u in self.units:
            if u.state in ("planned", "running"):
                u.state = "skipped"
                left = self.left()
                u.why = "stopped" if self.stopping else \
                    "deadline (%.0f s left, about %.0f s needed)" % (
                        max(0, left or 0), self.estimate("run", u) + self.estimate("bench", u))
                self.skipped.append("run and bench of %s" % u.label)
        self.walls["all"] = time.monotonic() - self.t0
        return self.report()

    # ------------------------------------------------------------ rows

    def rows(self):
        out = []
        for u in self.units:
            ev, source = None, None
            if u.bench_state == "benched":
                ev, source = u.bench_evidence, "bench"
            elif u.state == "tuned" and u.run_evidence:
                ev, source = u.run_evidence, "run"
            tuning = (u.kernel_json or {}).get("tuning") or {}
            tmpl = (u.kernel_json or {}).get("template") or {}
            for label, dims in u.sizes:
                r = {"operator": u.name, "family": u.spec["family"], "chain": u.spec["chain"],
                     "size": label, "dims": list(dims),
                     "size_text": operators.size_text(u.name, dims),
                     "largest": (label, dims) == max(u_sizes_all(self.units, u.name),
                                                     key=lambda s: math.prod(s[1])),
                     "source": source, "tuning_s": tuning.get("seconds"),
                     "points": tuning.get("points_tried"), "space": tmpl.get("space_size"),
                     "point": tmpl.get("point_name"), "state": u.state, "why": u.why,
                     "bench_state": u.bench_state, "bench_why": u.bench_why}
                c = find_config(ev, u.name, dims)
                t = (c or {}).get("timing") or {}
                med = lambda k: (t.get(k) or {}).get("median_ms")  # noqa: E731
                r.update({"eager_ms": med("eager"), "compile_ms": med("compile"),
                          "kernel_ms": med("kernel"), "vs_eager": t.get("speedup_eager"),
                          "vs_compile": t.get("speedup_compile"),
                          "compile_reason": t.get("compile_reason"),
                          "gbps": t.get("gbps"), "tflops": t.get("tflops"),
                          "bw_share": t.get("bw_share"), "flops_share": t.get("flops_share"),
                          "copy_gbps": (t.get("peaks") or {}).get("copy_gbps"),
                          "matmul_tflops": (t.get("peaks") or {}).get("matmul_tflops"),
                          "checks": (c or {}).get("checks")})
                out.append(r)
        # table order: operators by priority, each smallest size first
        out.sort(key=lambda r: (operators.PRIORITY.index(r["operator"]), math.prod(r["dims"])))
        return out

    # ------------------------------------------------------------ report

    def report(self):
        rows = self.rows()
        out = io.StringIO()
        p = lambda s="": print(s, file=out)  # noqa: E731
        env = {}
        for u in self.units:
            env = ((u.bench_evidence or u.run_evidence or {}).get("environment")) or {}
            if env:
                break
        copy = next((r["copy_gbps"] for r in rows if r["source"] == "bench" and r["copy_gbps"]),
                    None)
        # the fp32 matrix rate the matmul shares are of (TF32 off): the
        # evidence keeps the bf16 figure, the share gives the fp32 one
        mm = next((r["tflops"] / r["flops_share"] for r in rows if r["source"] == "bench"
                   and r["family"] == "matmul" and r["tflops"] and r["flops_share"]), None)
        p("bench-templates: backend %s (%s), torch %s, kernelbot %s; %.0f s in all "
          "(tuning %.0f s, %d at a time; benches %.0f s, one at a time)" % (
              self.backend, env.get("device") or "?", env.get("torch") or "?",
              env.get("kernelbot") or "?", self.walls.get("all", 0), self.walls.get("tune", 0),
              self.set["jobs"], self.walls.get("bench", 0)))
        p("tuning: max_points %d, exhaustive_limit %d, refine_rounds %d, 2 seeds per config; "
          "benches: 1 seed, warmup %d, min %d ms, max %d reps; shares are of the measured copy "
          "bandwidth (%s) and fp32 matrix rate, TF32 off (%s)" % (
              self.set["max_points"], self.set["exhaustive_limit"], self.set["refine_rounds"],
              self.set["bench"]["warmup"], self.set["bench"]["min_time_ms"],
              self.set["bench"]["max_reps"], rate(copy, "GB/s"), rate(mm, "TFLOP/s")))
        if os.environ.get("KB_COMPILE_MODE"):
            p("torch.compile mode: %s (KB_COMPILE_MODE; else max-autotune-no-cudagraphs)"
              % os.environ["KB_COMPILE_MODE"])
        if self.backend == "cpu":
            p("(cpu backend: small sizes; the targets are set for the cuda backend on the H200)")
        p()
        marked = False
        for fam in operators.FAMILIES:
            frows = [r for r in rows if r["family"] == fam]
            if not frows:
                continue
            mem = fam != "matmul"
            p("== %s ==" % {"pointwise": "fused pointwise chains",
                            "rowwise": "row-wise reductions",
                            "matmul": "linear + epilogue"}[fam])
            trs = []
            for r in frows:
                mark = "" if r["source"] in ("bench", None) else "*"
                marked |= bool(mark)
                if mem:
                    ach = rate(r["gbps"], "GB/s")
                    share = pct(r["bw_share"]) + (" copy" if r["bw_share"] is not None else "")
                else:
                    ach = rate(r["tflops"], "TFLOP/s")
                    share = pct(r["flops_share"]) + (" fp32" if r["flops_share"] is not None else "")
                pts = "-" if r["points"] is None else (
                    "%d/%s" % (r["points"], r["space"] if r["space"] is not None else "?"))
                if r["kernel_ms"] is None:
                    status = status_text(r)
                    trs.append([r["operator"] + mark, "%s %s" % (r["size"], r["size_text"]),
                                ms(r["eager_ms"]), ms(r["compile_ms"]), "-", "-", "-", "-", "-",
                                fmt(r["tuning_s"], 1), pts, status])
                    continue
                trs.append([r["operator"] + mark, "%s %s" % (r["size"], r["size_text"]),
                            ms(r["eager_ms"]), ms(r["compile_ms"]), ms(r["kernel_ms"]),
                            fmt(r["vs_eager"], 2, "x"), fmt(r["vs_compile"], 2, "x"), ach, share,
                            fmt(r["tuning_s"], 1), pts, r["point"] or ""])
            p(table(trs, ["operator", "size", "eager ms", "compile ms", "kernel ms", "vs eager",
                          "vs compile", "achieved", "share", "tuning s", "points",
                          "best point / status"]))
            p()
        if marked:
            p("* not benched: figures from the tuning run's final check (eager only, timed while "
              "other runs shared the device); not counted for the targets")
        reasons = sorted({r["compile_reason"] for r in rows if r["compile_ms"] is None
                          and r["source"] == "bench" and r["kernel_ms"] is not None
                          and r["compile_reason"]})
        if reasons:
            p("no torch.compile figure: %s" % "; ".join(reasons))
        if self.a.split_sizes:
            p("tuning: one run per operator and size (--split-sizes)")
        else:
            p("tuning: one run per operator over all its sizes (fitness: geometric-mean speedup "
              "over eager), so tuning s and points are per operator")
        p()
        targets = self.targets(rows)
        p("== targets ==")
        for t in targets:
            p("target %s: %s -> %s" % (t["name"], t["value"], t["status"]))
        problems = [u for u in self.units if u.state in ("no-kernel", "failed")
                    or u.bench_state in ("rejected", "failed")]
        for u in problems:
            if u.state in ("no-kernel", "failed"):
                p("FAILED run of %s: %s" % (u.label, u.why))
            else:
                p("FAILED bench of %s (%s): %s" % (u.label, u.bench_state, u.bench_why))
        for u in self.units:
            if u.state == "tuned" and u.why:
                p("note: %s: %s" % (u.label, u.why))
        if self.skipped:
            p("NOT RUN (deadline %s s): %s" % (fmt(self.a.deadline, 0), "; ".join(self.skipped)))
        if self.stopping:
            p("STOPPED by a signal: the figures above are what had finished")
        text = out.getvalue()
        data = {"backend": self.backend, "environment": env, "settings": self.set,
                "deadline": self.a.deadline, "walls": self.walls, "rows": rows,
                "targets": targets, "skipped": self.skipped,
                "units": [{"operator": u.name, "sizes": [[lbl, list(d)] for lbl, d in u.sizes],
                           "folder": u.folder, "state": u.state, "why": u.why,
                           "bench_state": u.bench_state, "bench_why": u.bench_why,
                           "run": u.run.as_json() if u.run else None,
                           "bench": u.bench.as_json() if u.bench else None,
                           "kernel_json": u.kernel_json} for u in self.units]}
        ok = not problems and not self.stopping
        return text, data, ok

    def targets(self, rows):
        bench = [r for r in rows if r["source"] == "bench" and r["kernel_ms"] is not None]
        out = []
        # 1. memory-bound kernels at the largest size
        big = [r for r in bench if r["family"] != "matmul" and r["largest"]
               and r["bw_share"] is not None]
        missing = sorted({r["operator"] for r in rows if r["family"] != "matmul"}
                         - {r["operator"] for r in big})
        if big:
            low = [r for r in big if r["bw_share"] < BW_TARGET]
            value = ", ".join("%s %s" % (r["operator"], pct(r["bw_share"])) for r in big)
            status = "met" if not low else "missed (%d of %d below)" % (len(low), len(big))
        else:
            value, status = "no figures", "not measured"
        if missing:
            value += "; not measured: " + ", ".join(missing)
        out.append({"name": "memory-bound kernels at the largest size >= %d%% of copy bandwidth"
                    % (100 * BW_TARGET), "value": value, "status": status,
                    "rows": len(big)})
        # 2. fused pointwise chains of >= 3 ops
        chains = [r for r in bench if r["family"] == "pointwise" and (r["chain"] or 0) >= CHAIN_MIN_OPS]
        for key, goal, what in (("vs_compile", CHAIN_VS_COMPILE, "torch.compile"),
                                ("vs_eager", CHAIN_VS_EAGER, "eager")):
            vals = [r[key] for r in chains if r[key] is not None]
            g = geomean(vals)
            if g is None:
                status = "not measured"
                value = "no figures" + (" (%s)" % chains[0]["compile_reason"]
                                        if chains and key == "vs_compile"
                                        and chains[0]["compile_reason"] else "")
            else:
                status = "met" if g >= goal else "missed"
                value = "geomean %.2fx over %d row(s) (%s)" % (g, len(vals), ", ".join(
                    "%s %s %.2fx" % (r["operator"], r["size"], r[key]) for r in chains
                    if r[key] is not None))
            out.append({"name": "fused pointwise chains (>= %d ops) vs %s >= %.1fx"
                        % (CHAIN_MIN_OPS, what, goal), "value": value, "status": status,
                        "geomean": g})
        # 3. linear + epilogue at or above eager
        lin = [r for r in bench if r["family"] == "matmul" and r["vs_eager"] is not None]
        g = geomean([r["vs_eager"] for r in lin])
        if g is None:
            value, status = "no figures", "not measured"
        else:
            worst = min(lin, key=lambda r: r["vs_eager"])
            status = "met" if g >= LINEAR_VS_EAGER else "missed"
            value = "geomean %.2fx over %d row(s), worst %.2fx (%s %s)" % (
                g, len(lin), worst["vs_eager"], worst["operator"], worst["size"])
        out.append({"name": "linear + epilogue vs eager >= %.1fx" % LINEAR_VS_EAGER,
                    "value": value, "status": status, "geomean": g})
        return out


def u_sizes_all(units, name):
    """Every (label, dims) of an operator over all its units (--split-sizes
    spreads them over several)."""
    out = []
    for u in units:
        if u.name == name:
            out.extend(u.sizes)
    return out


def find_config(ev, name, dims):
    """The evidence config whose size parameters are dims, or None."""
    want = operators.size_params(name, dims)
    for c in (ev or {}).get("configs") or []:
        params = c.get("params") or {}
        inp = params.get("input") if isinstance(params.get("input"), dict) else params
        if all(inp.get(k) == v for k, v in want.items()):
            return c
    return None


def status_text(r):
    what = {"skipped": "not run", "no-kernel": "no kernel", "failed": "run failed"}
    if r["state"] != "tuned":
        return "%s: %s" % (what.get(r["state"], r["state"]), r["why"] or "")
    if r["bench_state"] in ("rejected", "failed", "skipped"):
        return "%s: %s" % ({"skipped": "not benched"}.get(r["bench_state"], "bench " + r["bench_state"]),
                           r["bench_why"] or "")
    if r["checks"] and any(v not in ("pass", "skip") for v in r["checks"].values()):
        return "checks: %s" % ", ".join("%s %s" % kv for kv in r["checks"].items()
                                        if kv[1] not in ("pass", "skip"))
    return "no timing"


def prepare_workdir(path):
    marker = os.path.join(path, MARKER)
    if os.path.isdir(path) and os.listdir(path):
        if not os.path.exists(marker):
            print("bench-templates: '%s' is not empty and not an earlier bench-templates' workdir"
                  % path, file=sys.stderr)
            return False
        shutil.rmtree(path)
    os.makedirs(path, exist_ok=True)
    with open(marker, "w") as f:
        f.write("bench-templates workdir: emptied by the next run\n")
    return True


def write_out(outdir, work, text, data):
    os.makedirs(outdir, exist_ok=True)
    with open(os.path.join(outdir, "bench-templates-report.txt"), "w") as f:
        f.write(text)
    with open(os.path.join(outdir, "bench-templates.json"), "w") as f:
        json.dump(data, f, indent=1, default=str)
        f.write("\n")
    ops = os.path.join(work, "operators")
    if os.path.isdir(ops):
        def skip_builds(ti):
            base = os.path.basename(ti.name)
            return None if base in (".kb_build", "__pycache__", "include") else ti
        with tarfile.open(os.path.join(outdir, "bench-templates-evidence.tar.gz"), "w:gz") as tf:
            tf.add(ops, arcname="bench-templates", filter=skip_builds)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", required=True, help="the kernelbot binary")
    ap.add_argument("--backend", choices=("cuda", "cpu"), required=True)
    ap.add_argument("--python", default=None, help="[harness] python")
    ap.add_argument("--workdir", required=True,
                    help="operators, outputs, logs and state (emptied first)")
    ap.add_argument("--out", default=None,
                    help="write the report, the raw JSON and a tar.gz of the evidence here")
    ap.add_argument("--ops", default=None,
                    help="comma-separated subset of %s" % ",".join(operators.PRIORITY))
    ap.add_argument("--sizes", default=None,
                    help="JSON file {operator: {label: [dims...]}} replacing the size table "
                         "of the operators it names")
    ap.add_argument("--split-sizes", action="store_true",
                    help="tune and bench every size as an operator of its own")
    ap.add_argument("--deadline", type=float, default=None,
                    help="seconds: start nothing that would not fit, kill what runs past")
    ap.add_argument("--jobs", type=int, default=None,
                    help="kernelbot runs at once (default 4 on cuda, 1 on cpu)")
    ap.add_argument("--max-points", type=int, default=None,
                    help="[templates] max_points (default 12 on cuda, 3 on cpu)")
    ap.add_argument("--exhaustive-limit", type=int, default=None)
    ap.add_argument("--refine-rounds", type=int, default=None)
    ap.add_argument("--state-dir", default=None,
                    help="keep the tuning cache, peaks and torch.compile cache here, across runs "
                         "(default: inside the workdir, so nothing leaks between runs)")
    ap.add_argument("--call-timeout", type=float, default=600.0,
                    help="most seconds of one kernelbot call")
    ap.add_argument("--eval-timeout", type=int, default=300, help="[harness] timeout_s")
    a = ap.parse_args(argv)
    if not os.path.exists(a.bin):
        print("bench-templates: kernelbot binary '%s' not built" % a.bin, file=sys.stderr)
        return 2
    a.bin = os.path.abspath(a.bin)
    a.workdir = os.path.abspath(a.workdir)
    if a.state_dir:
        a.state_dir = os.path.abspath(a.state_dir)
    if a.deadline is not None and a.deadline <= 0:
        a.deadline = None
    if not prepare_workdir(a.workdir):
        return 2
    b = Bench(a)
    signal.signal(signal.SIGTERM, b.stop)
    signal.signal(signal.SIGINT, b.stop)
    try:
        text, data, ok = b.run()
    except SystemExit as e:
        print(e, file=sys.stderr)
        return 2
    print()
    print(text, end="")
    if a.out:
        write_out(os.path.abspath(a.out), a.workdir, text, data)
        print("report, raw JSON and evidence in %s" % os.path.abspath(a.out))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
