"""bench-search --latency-ms: the LLM search with model calls in flight
(issue 16) against the serial search, with the LLM simulator answering
after a fixed latency per call.

For each latency, `kernelbot run` once per --in-flight count ([search]
calls_in_flight, and [llm.sim] max_in_flight with it, since one model's
default of 4 would bound it), one run after the other: same seed, operator,
settings and time budget, a fresh state directory and simulator each.
Per run: candidates the harness judged per hour of search, the harness's
busy share (on cuda the GPU's), the model calls and the most in flight at
once (the simulator's count), the archive's quality, and the bot's own
overhead: the time kernelbot's search thread was neither waiting for a
model call nor for a build or the harness, sampled from /proc (with calls
overlapping, summed model latencies say nothing about the thread's time).
"""
import json
import os
import platform
import signal
import sqlite3
import subprocess
import threading
import time

import bench_search as B
from llm_sim import LLMSim

# Syscalls a blocked thread waits in for something else (a model call on a
# pool thread, a compiler, the harness worker, a timer): time blocked in
# them is not the bot's own. Any other syscall (fsync, write, ...) is.
WAIT_SYSCALLS = {
    "x86_64": {0, 7, 23, 34, 35, 43, 45, 47, 61, 128, 130, 202, 230, 232, 247, 270, 271, 281,
               441, 449},
    "aarch64": {22, 63, 72, 73, 95, 101, 115, 133, 137, 98, 202, 207, 212, 260, 441, 449},
}
SAMPLE_PERIOD_S = 0.02
# How every run's search differs from the backend's profile (bench_search
# PROFILES): a generation asks 8 proposals (the GPU profile's shape), so
# that 8 calls can be in flight at all.
SHAPE = {"islands": "2", "per_generation": "4", "initial": "4"}
# Quality at equal candidate counts: the in-flight run's best speedup may
# be this share below the serial run's (timing noise), its filled cells one
# fewer.
QUALITY_SPEEDUP_SHARE = 0.9
TARGETS = {"ratio": 6.0, "busy": 0.5, "overhead_ms": 200.0, "latency_ms": 20000}


def parse_list(text, what, lo, hi):
    """'2000' or '20000,2000' -> [ints]; a clear error naming what was wrong."""
    out = []
    for part in str(text).split(","):
        part = part.strip()
        try:
            v = int(part)
        except ValueError:
            raise ValueError("%s: '%s' is not a whole number (give e.g. %s)"
                             % (what, part, "20000,2000" if lo == 0 else "1,8"))
        if not lo <= v <= hi:
            raise ValueError("%s: %d is out of range %d..%d" % (what, v, lo, hi))
        if v not in out:
            out.append(v)
    return out


def run_seconds(deadline, runs, given):
    """Seconds per run: given, else the deadline shared out (10 s each for
    the simulator and the collection). ValueError when they cannot fit."""
    per = given if given else (deadline - 10.0 * runs) / runs
    if per < 45:
        raise ValueError("%d runs cannot fit: %.0f s each, at least 45 needed "
                         "(raise --deadline or --run-seconds)" % (runs, per))
    if (per + 10.0) * runs > deadline * 1.001:
        raise ValueError("%d runs of %.0f s do not fit the --deadline of %.0f s"
                         % (runs, per, deadline))
    return per


class ThreadSampler:
    """Samples one thread every period: working (running, or in a syscall
    that is not a wait) or blocked, and its CPU ticks. proc is /proc
    (tests give a directory of their own)."""

    def __init__(self, pid, tid=None, proc="/proc", period=SAMPLE_PERIOD_S):
        self.dir = os.path.join(proc, str(pid), "task", str(tid or pid))
        self.period = period
        self.waits = WAIT_SYSCALLS.get(platform.machine())
        self.samples = []       # (monotonic t, working, cpu ticks)
        self.syscalls_read = False
        self.stop_ev = threading.Event()
        self.thread = None

    def sample(self):
        """One (working, cpu ticks), or None when the thread is gone."""
        try:
            with open(os.path.join(self.dir, "stat")) as f:
                st = f.read()
        except OSError:
            return None
        fields = st[st.rindex(")") + 2:].split()
        state, ticks = fields[0], int(fields[11]) + int(fields[12])
        if state == "R":
            return True, ticks
        sc = None
        if self.waits is not None:
            try:
                with open(os.path.join(self.dir, "syscall")) as f:
                    sc = f.read().split()
            except OSError:
                sc = None
        if not sc:
            return state == "D", ticks  # no syscall to tell: asleep counts as waiting
        self.syscalls_read = True
        if sc[0] == "running":
            return True, ticks
        return int(sc[0]) not in self.waits, ticks

    def _loop(self):
        while not self.stop_ev.is_set():
            t = time.monotonic()
            s = self.sample()
            if s is None:
                return
            self.samples.append((t, s[0], s[1]))
            self.stop_ev.wait(self.period)

    def start(self):
        self.thread = threading.Thread(target=self._loop, name="sampler", daemon=True)
        self.thread.start()
        return self

    def stop(self):
        self.stop_ev.set()
        if self.thread:
            self.thread.join(5)

    def window(self, t0, t1):
        """Over [t0, t1]: samples, share working, working seconds, CPU seconds."""
        w = [s for s in self.samples if t0 <= s[0] <= t1]
        if len(w) < 2:
            return None
        share = sum(1 for s in w if s[1]) / float(len(w))
        return {"samples": len(w), "working_share": round(share, 4),
                "working_s": round(share * (t1 - t0), 3),
                "cpu_s": round((w[-1][2] - w[0][2]) / float(os.sysconf("SC_CLK_TCK")), 3),
                "method": "state and syscall" if self.syscalls_read else "state only"}


def run_sampled(cmd, timeout, work, cwd):
    """kernelbot with its stdout in run.out, its stderr lines stamped with
    the seconds since start in run.err, its main thread sampled. Returns
    (rc, wall, timed_out, sampler, t0 monotonic, monotonic t of '[search]')."""
    t0 = time.monotonic()
    marks = {}
    with open(os.path.join(work, "run.out"), "w") as out:
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.PIPE, cwd=cwd,
                             start_new_session=True, universal_newlines=True)
        sampler = ThreadSampler(p.pid).start()

        def read_err():
            with open(os.path.join(work, "run.err"), "w") as log:
                for ln in p.stderr:
                    t = time.monotonic()
                    if ln.startswith("[search]") and "search" not in marks:
                        marks["search"] = t
                    log.write("+%.3f %s" % (t - t0, ln))
        reader = threading.Thread(target=read_err, name="stderr", daemon=True)
        reader.start()
        timed_out = False
        try:
            p.wait(timeout=max(1.0, timeout))
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(p.pid, signal.SIGTERM)
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        sampler.stop()
        reader.join(10)
    return p.returncode, time.monotonic() - t0, timed_out, sampler, t0, marks.get("search")


def quality(db, search_id, n):
    """Best speedup and filled archive cells of the first n candidates the
    harness judged (in the order the search took them). The templates'
    seed is left out: each run times it anew, and its noise would be the
    difference."""
    con = sqlite3.connect(db)
    try:
        rows = con.execute("SELECT verdict, speedup, cell, evidence, source_hash FROM candidates "
                           "WHERE search_id = ? AND proposer NOT IN ('template', 'tune') ORDER BY id",
                           (search_id,)).fetchall()
    finally:
        con.close()
    best, cells, judged, timed = None, set(), 0, {}
    for verdict, speedup, cell, ev, source_hash in rows:
        if judged == n:
            break
        try:
            st = (json.loads(ev) or {}).get("stages") or {} if ev else {}
        except ValueError:
            st = {}
        if not st.get("harness_s"):
            continue
        judged += 1
        if verdict == "verified" and isinstance(speedup, float) and speedup == speedup:
            best = speedup if best is None else max(best, speedup)
            timed[source_hash] = speedup
            if cell is not None:
                cells.add(cell)
    return {"n": judged, "best": best, "cells": len(cells), "timed": timed}


def common_best(qa, qb):
    """(kernels of qb's verified ones that qa verified too, qb's best with
    those timed as in qa). Two runs on one machine time the same kernel
    differently, the more so with 8 calls' work beside it; the search's
    quality is which kernels it found."""
    ta, tb = qa.get("timed") or {}, qb.get("timed") or {}
    if not tb:
        return 0, qb.get("best")
    same = [h for h in tb if h in ta]
    best = max([ta.get(h, tb[h]) for h in tb], default=None)
    return len(same), best


class ConcurrencyBench(B.Bench):
    """One `kernelbot run` per (latency, calls in flight), then the report."""

    def __init__(self, a, latencies, in_flight, per_run_s):
        B.Bench.__init__(self, a)
        self.top_work = self.work
        self.latencies, self.in_flight, self.per_run_s = latencies, in_flight, per_run_s
        self.res.update({"mode": "concurrency", "latencies_ms": latencies,
                         "in_flight": in_flight, "run_seconds": per_run_s, "runs": []})

    def run_one(self, latency_ms, n):
        a = self.a
        self.work = os.path.join(self.top_work, "lat%d-n%d" % (latency_ms, n))
        os.makedirs(self.work)
        sim = LLMSim.spawn(os.path.join(self.work, "sim.port"),
                           ["--api-key", B.KEY, "--seed", str(a.seed), "--backend", self.backend,
                            "--vary", "--latency-ms", str(latency_ms),
                            "--log", os.path.join(self.work, "llm.log")])
        try:
            cfg = self.write_config(sim.port, {
                "search": dict(SHAPE, calls_in_flight=str(n)),
                "llm": {"timeout_s": str(max(30, 3 * latency_ms // 1000))},
                "llm.sim": {"max_in_flight": str(n)}})
            budget = int(self.per_run_s - B.FINAL_MARGIN_S[self.backend])
            out_dir = os.path.join(self.work, "out")
            cmd = [a.bin, "run", self.op_path, "-c", cfg, "--backend", self.backend,
                   "--out", out_dir, "--time-budget", str(budget)]
            print("latency %d ms, %d call%s in flight: kernelbot run --time-budget %d"
                  % (latency_ms, n, "" if n == 1 else "s", budget), flush=True)
            rc, wall, timed_out, sampler, t0, t_search = run_sampled(
                cmd, self.per_run_s + 15.0, self.work, B.TOP)
            s = {"latency_ms": latency_ms, "in_flight": n, "time_budget_s": budget, "rc": rc,
                 "run_wall_s": round(wall, 3), "timed_out": timed_out}
            try:
                s["sim"] = sim.stats()
            except OSError:
                s["sim"] = None
        finally:
            sim.stop()
        self.collect(out_dir, s)
        self.measure_run(s, sampler, t_search)
        return s

    def measure_run(self, s, sampler, t_search):
        """The concurrency figures of one run (collect's measure beside)."""
        m, summ = s["measure"], s["summary"]
        wall = m.get("search_wall_s")
        window = wall - m["final_check_s"] if isinstance(wall, (int, float)) else None
        took = m["candidates"] - m["verdicts"].get("pending", 0)
        sim = s.get("sim") or {}
        # the simulator's count: the store also has the calls a cut-short
        # search never sent (status timeout, 0 ms)
        c = {"search_s": window, "candidates": took, "judged": m["ran_in_harness"],
             "tune_points": m.get("tune_points", 0),
             "model_calls": sim.get("requests", m["llm_calls"]),
             "peak_in_flight": sim.get("peak_in_flight"),
             "best": summ.get("best_speedup"), "cells": summ.get("filled_cells")}
        if window and window > 0:
            c["judged_per_hour"] = round(3600.0 * m["ran_in_harness"] / window, 1)
            c["harness_busy"] = round(m["harness_s"] / window, 4)
            c["build_share"] = round(m["build_s"] / window, 4)
        th = sampler.window(t_search, t_search + window) if t_search and window else None
        c["thread"] = th
        if th and took:
            c["overhead_s"] = th["working_s"]
            c["overhead_per_candidate_ms"] = round(1000.0 * th["working_s"] / took, 1)
            c["cpu_per_candidate_ms"] = round(1000.0 * th["cpu_s"] / took, 1)
            # the rest of the thread's blocked time, past builds and harness calls
            c["model_wait_share"] = round(max(0.0, 1.0 - th["working_share"] -
                                              (m["build_s"] + m["harness_s"]) / window), 4)
        db = os.path.join(self.work, "state", "kernelbot.db")
        c["db"], c["search_id"] = db, summ.get("search_id")
        s["concurrency"] = c

    def equal_counts(self):
        """Per latency: quality after as many judged candidates as the run
        that judged fewest."""
        out = {}
        for lat in self.latencies:
            runs = [r for r in self.res["runs"] if r["latency_ms"] == lat]
            ok = [r for r in runs if r["concurrency"].get("search_id") is not None and
                  os.path.exists(r["concurrency"]["db"])]
            if len(ok) != len(runs) or not runs:
                continue
            n = min(r["concurrency"]["judged"] for r in runs)
            for r in runs:
                r["concurrency"]["at_equal"] = quality(r["concurrency"]["db"],
                                                       r["concurrency"]["search_id"], n)
            out[lat] = n
        return out

    def run(self):
        for lat in self.latencies:
            for n in self.in_flight:
                self.res["runs"].append(self.run_one(lat, n))
        self.work = self.top_work
        self.equal_counts()
        self.res["elapsed_s"] = round(time.time() - self.t0, 1)
        text, ok = report(self.res, self.backend, self.a)
        logs = []
        for r in self.res["runs"]:
            d = "lat%d-n%d" % (r["latency_ms"], r["in_flight"])
            logs += [(os.path.join(d, n), "%dms-%d-%s" % (r["latency_ms"], r["in_flight"], n))
                     for n in ("run.out", "run.err", "llm.log")]
        self.save(text, logs)
        return 0 if ok else 1


def pct(x):
    return "-" if x is None else "%.0f%%" % (100 * x)


def _runs_table(runs, be):
    rows = []
    for r in runs:
        c = r["concurrency"]
        th = c.get("thread") or {}
        rows.append([r["latency_ms"], r["in_flight"], B.fmt(c.get("search_s"), 1),
                     c["candidates"], c["judged"], B.fmt(c.get("judged_per_hour"), 0),
                     c.get("tune_points", 0),
                     pct(c.get("harness_busy")), pct(c.get("model_wait_share")),
                     c["model_calls"], c.get("peak_in_flight", "-"),
                     B.fmt(c.get("best")), c.get("cells", "-"),
                     B.fmt(c.get("overhead_s")), B.fmt(c.get("overhead_per_candidate_ms"), 1),
                     B.fmt(c.get("cpu_per_candidate_ms"), 1), th.get("samples", "-")])
    return B.table(rows, ["latency ms", "in flight", "search s", "candidates", "judged",
                          "judged/hour", "tuned", "GPU busy" if be == "cuda" else "harness busy",
                          "model wait", "model calls", "peak", "best", "cells", "overhead s",
                          "ms/candidate", "CPU ms/cand", "samples"])


def _ratios(res):
    """Per latency and in-flight count past the first: (lat, n, base, run, ratio)."""
    out = []
    for lat in res["latencies_ms"]:
        runs = [r for r in res["runs"] if r["latency_ms"] == lat]
        base = next((r for r in runs if r["in_flight"] == 1), runs[0] if runs else None)
        for r in runs:
            if r is base:
                continue
            a = (base["concurrency"].get("judged_per_hour") or 0)
            b = r["concurrency"].get("judged_per_hour")
            out.append((lat, r["in_flight"], base, r, b / a if a and b is not None else None))
    return out


def _quality_met(base, r):
    """Whether r's archive after N judged candidates is as good as base's (None: no figures)."""
    qa, qb = base["concurrency"].get("at_equal"), r["concurrency"].get("at_equal")
    if not qa or not qb:
        return None, qa, qb
    if qa["best"] is None:  # the serial run verified none: anything is as good
        return qb["cells"] >= qa["cells"] - 1, qa, qb
    # the best judged by one timing: the serial run's for the kernels both found
    best = common_best(qa, qb)[1]
    return (best is not None and best >= QUALITY_SPEEDUP_SHARE * qa["best"] and
            qb["cells"] >= qa["cells"] - 1), qa, qb


def mark(ok):
    return "-" if ok is None else "met" if ok else "missed"


def _target_lines(res, busy):
    """The ratios against the first in-flight count, the targets marked at their latency."""
    lines = []
    for lat, n, base, r, ratio in _ratios(res):
        c = r["concurrency"]
        tgt = lat == TARGETS["latency_ms"]
        hb, ov = c.get("harness_busy"), c.get("overhead_per_candidate_ms")
        q_ok, qa, qb = _quality_met(base, r)

        def judged(ok):
            return ": %s" % mark(ok) if tgt else ""
        lines.append("  %d ms, %d vs %d in flight: %s candidates judged per hour%s"
                     % (lat, n, base["in_flight"], "-" if ratio is None else "%.2fx" % ratio,
                        judged(None if ratio is None else ratio >= TARGETS["ratio"])))
        lines.append("    %s %s%s; overhead %s ms per candidate%s"
                     % (busy, pct(hb), judged(None if hb is None else hb >= TARGETS["busy"]),
                        B.fmt(ov, 1),
                        judged(None if ov is None else ov < TARGETS["overhead_ms"])))
        if qa and qb:
            same, cbest = common_best(qa, qb)
            lines.append("    after %d judged candidates each: best %sx vs %sx as timed in each run, "
                         "%sx vs %sx with the kernels both verified timed as in the %d-in-flight run "
                         "(%d of its %d verified), %d vs %d cells filled%s"
                         % (qa["n"], B.fmt(qb["best"]), B.fmt(qa["best"]), B.fmt(cbest), B.fmt(qa["best"]),
                            base["in_flight"], same, len(qb.get("timed") or {}), qb["cells"], qa["cells"],
                            judged(q_ok)))
    if TARGETS["latency_ms"] not in res["latencies_ms"]:
        lines.append("  (not run at %d ms latency: the targets are judged there only)"
                     % TARGETS["latency_ms"])
    return lines


def _checks(res, a):
    checks = []
    for r in res["runs"]:
        c = r["concurrency"]
        tag = "%d ms, %d in flight" % (r["latency_ms"], r["in_flight"])
        checks.append(("%s: `kernelbot run` finished (exit %s%s)"
                       % (tag, r["rc"], ", killed" if r["timed_out"] else ""),
                       r["rc"] == 0 and not r["timed_out"]))
        checks.append(("%s: the harness judged a candidate" % tag, bool(c["judged"])))
        checks.append(("%s: the overhead was sampled" % tag, c.get("overhead_s") is not None))
        peak = c.get("peak_in_flight")
        checks.append(("%s: at most %d model calls in flight (the simulator saw %s)"
                       % (tag, r["in_flight"], peak),
                       isinstance(peak, int) and 1 <= peak <= r["in_flight"]))
    checks.append(("finished within the deadline (+10%%): %.0f s of %.0f"
                   % (res["elapsed_s"], a.deadline), res["elapsed_s"] <= 1.1 * a.deadline))
    return checks


def report(res, be, a):
    """The report's text and whether every check said yes."""
    busy = "GPU busy" if be == "cuda" else "harness busy"
    runs = res["runs"]
    lines = ["bench-search --latency-ms: backend %s, operator %s, seed %d; %d runs of %.0f s "
             "(time budget %s s each); %.0f s in all"
             % (be, res["operator"], a.seed, len(runs), res["run_seconds"],
                runs[0]["time_budget_s"] if runs else "-", res["elapsed_s"]),
             "search: %s islands x %s proposals a generation, LLM verifiers on; 'in flight' is "
             "[search] calls_in_flight and [llm.sim] max_in_flight"
             % (SHAPE["islands"], SHAPE["per_generation"]), "", _runs_table(runs, be), "",
             "candidates judged per hour against the first in-flight count; the issue-16 "
             "targets (at %d ms: >= %.0fx, %s >= %.0f%%, overhead < %.0f ms per candidate, the "
             "same quality at equal candidate counts) marked at that latency:"
             % (TARGETS["latency_ms"], TARGETS["ratio"], busy, 100 * TARGETS["busy"],
                TARGETS["overhead_ms"])]
    lines += _target_lines(res, busy)
    lines += ["", "definitions:",
              "  search s: the search's wall time up to its final check (kernel.json "
              "search.wall_s minus the final check's stages)",
              "  judged: candidates the harness ran (harness_s > 0); candidates: all the search "
              "took, static and LLM-verifier rejections included; neither counts tune points",
              "  tuned: tune points the harness ran: constants of the archive's best LLM kernel, "
              "templatized, evaluated while the search waited on its models (never archived)",
              "  %s: the candidates' and tune points' harness call seconds (worker start-up "
              "included) over search s; on cuda that is the GPU's busy share%s"
              % (busy, "" if be == "cuda" else " (this run: the CPU backend)"),
              "  model calls: the requests the simulator answered; peak: the most it had at "
              "once",
              "  model wait: the share of search s the search thread was blocked beyond its "
              "builds and harness calls: waiting for model replies",
              "  overhead: search s during which kernelbot's search thread (its main thread) was "
              "neither waiting for a model call nor for a build or the harness, sampled every "
              "%d ms from /proc/PID/task/PID/{stat,syscall} (running, or in a syscall that is "
              "not a wait); per candidate the search took. Model calls overlap, so their "
              "latencies are not subtracted as a sum; the pool threads' HTTP and storing run "
              "beside the search thread and are not in it. CPU ms/cand: that thread's CPU "
              "time" % int(1000 * SAMPLE_PERIOD_S),
              "  quality at equal counts: best speedup and archive cells filled by the first N "
              "candidates each run judged, N = the fewer (the templates' seed left out: each "
              "run times it anew); best and cells in the table: the whole search's; met "
              "when the best is >= %.0f%% of the serial run's and the cells >= its - 1, the "
              "best judged by one timing (a kernel both runs verified counts with the serial "
              "run's speedup: the same kernel timed beside 8 calls' work on a shared machine "
              "is another figure, not another search)"
              % (100 * QUALITY_SPEEDUP_SHARE)]
    checks = _checks(res, a)
    lines += ["", "checks:"] + ["  %s: %s" % (t, "yes" if ok else "no") for t, ok in checks]
    res["checks"] = {t: ok for t, ok in checks}
    return "\n".join(lines) + "\n", all(ok for _, ok in checks)
