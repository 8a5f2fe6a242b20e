"""make bench-search: what the LLM search costs per candidate besides the
model, the builds and the GPU, and how many candidates it judges per
GPU-hour against a robust-kbench-style pipeline. A benchmark, not a test:
it prints tables and exits 0, 1 when a check line says "no", 2 when it
could not run at all.

Both pipelines get kernels from the LLM simulator's corpus
(tests/sim/llm_corpus: right, wrong, non-compiling and malformed replies
for the operator, re-proposals varied so each is a new kernel):

 1. robust-kbench style (bench/search/rkb_baseline.py): per candidate a
    fresh python process builds the kernel as a torch extension (a
    generated PYBIND11 shim calling kb_forward), checks it on fresh inputs
    and times it with CUDA events in that process. It runs first, for a
    share of the deadline (its first candidate may take longer);
 2. `kernelbot run OPERATOR` with [llm] models = sim (the simulator
    answers at once): templates, then the search until the rest of the
    deadline (--time-budget), then the final check. Per candidate the bot
    records its static, build and harness seconds (evidence "stages"), and
    every model call its latency, so

        bot overhead = search wall - builds - harness calls - final check
                       - model latency

    is what the bot itself spends: prompts, extraction, the LLM verifiers'
    bookkeeping, the archive, SQLite, process management.

Backend: cuda (GPU figures) or cpu (a small run for the tests). The whole
run fits in --deadline seconds (default 220).
"""
import argparse
import json
import os
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import time

TOP = os.environ.get("KB_TOP") or os.path.abspath(
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(TOP, "tests", "sim"))

import llm_sim_corpus as C  # noqa: E402
from llm_sim import LLMSim  # noqa: E402

KEY = "sk-bench-search"

# [section] key = value lines per backend: the GPU run keeps the harness's
# judging (5 seeds, timing) with bench-eval's 8 configs; the CPU run is tiny.
# Eager is the only timing baseline: torch.compile's autotuning in the final
# check would take a minute of the deadline and measures nothing here.
PROFILES = {
    "cuda": {
        "harness": {"max_configs": "8"},
        "bench": {"baselines": "eager"},
        "templates": {"max_points": "8", "exhaustive_limit": "8", "refine_rounds": "1"},
        "search": {"islands": "2", "generations": "1000", "per_generation": "4",
                   "initial": "4", "repair_rounds": "1", "meta_interval": "2",
                   "llm_verifiers": "on", "verifier_audit": "0.25", "tune_templates": "on"},
    },
    "cpu": {
        "harness": {"seeds": "2", "max_configs": "2"},
        "bench": {"warmup": "1", "min_time_ms": "5", "max_reps": "20", "baselines": "eager"},
        "templates": {"max_points": "2", "exhaustive_limit": "1", "refine_rounds": "0"},
        "search": {"islands": "1", "generations": "1000", "per_generation": "3",
                   "initial": "3", "repair_rounds": "1", "meta_interval": "2",
                   "llm_verifiers": "on", "verifier_audit": "0.25", "tune_templates": "on"},
    },
}
FINAL_MARGIN_S = {"cuda": 30.0, "cpu": 25.0}


def fmt(x, nd=2):
    return "-" if x is None else "%.*f" % (nd, x)


def table(rows, header):
    rows = [[str(c) for c in r] for r in rows]
    w = [max([len(header[i])] + [len(r[i]) for r in rows]) for i in range(len(header))]
    out = ["  ".join(h.ljust(w[i]) for i, h in enumerate(header)).rstrip(),
           "  ".join("-" * w[i] for i in range(len(header)))]
    for r in rows:
        out.append("  ".join(c.ljust(w[i]) for i, c in enumerate(r)).rstrip())
    return "\n".join(out)


def num(o, *keys):
    for k in keys:
        if not isinstance(o, dict):
            return None
        o = o.get(k)
    return o if isinstance(o, (int, float)) and not isinstance(o, bool) else None


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def run_group(cmd, timeout, log_path, env=None, cwd=None):
    """Run cmd in its own session; kill the group at timeout. (rc, wall, timed_out, stdout)."""
    t = time.time()
    with open(log_path, "w") as log:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, env=env, cwd=cwd,
                             start_new_session=True, universal_newlines=True)
        try:
            out, _ = p.communicate(timeout=max(1.0, timeout))
            return p.returncode, time.time() - t, False, out
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGTERM)
            try:
                out, _ = p.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                out, _ = p.communicate()
            return p.returncode, time.time() - t, True, out


class Bench:
    def __init__(self, a):
        self.a = a
        self.t0 = time.time()
        self.deadline = self.t0 + a.deadline
        self.backend = a.backend
        self.key = a.operator + ("_cuda" if a.backend == "cuda" else "")
        ops = C.load_corpus(C.DEFAULT_CORPUS)
        if self.key not in ops:
            raise SystemExit("bench-search: no %s corpus for '%s' in tests/sim/llm_corpus"
                             % (a.backend, a.operator))
        self.op = ops[self.key]
        self.op_path = os.path.join(TOP, self.op.operator)
        self.work = a.workdir
        if os.path.exists(self.work):
            shutil.rmtree(self.work)
        os.makedirs(self.work)
        self.res = {"backend": a.backend, "operator": self.op.operator, "deadline_s": a.deadline,
                    "seed": a.seed}
        self.sim = None

    def left(self):
        return self.deadline - time.time()

    # --- the robust-kbench-style baseline ---

    def baseline_candidates(self):
        """The corpus kernels in the order the simulator proposes them
        (seeded), re-proposals varied, as the search sees them; only those
        that define kb_forward (the rest cost the search nothing, and would
        cost the baseline a build)."""
        brain = C.Brain(C.DEFAULT_CORPUS, self.a.seed, self.backend, vary=True)
        op = brain.ops[self.key]
        k = 0
        while True:
            e, epoch = brain.draw(op)
            if e.code and "kb_forward" in e.code:
                code = e.code if epoch == 0 else "%s\n%s" % (e.code, C.variant_line(epoch))
                k += 1
                yield k, e, code

    def run_baseline(self):
        a = self.a
        out = {"candidates": [], "completed": 0, "wall_s": 0.0, "skipped": a.baseline_candidates == 0}
        self.res["baseline"] = out
        if a.baseline_candidates == 0:
            return
        slice_end = self.t0 + a.baseline_share * a.deadline
        first_end = self.t0 + a.baseline_first_share * a.deadline
        bdir = os.path.join(self.work, "baseline")
        os.makedirs(bdir)
        env = dict(os.environ, TORCH_EXTENSIONS_DIR=os.path.join(bdir, "torch-extensions"),
                   PYTHONDONTWRITEBYTECODE="1")
        ext = ".cu" if self.backend == "cuda" else ".cpp"
        print("baseline: robust-kbench style, one fresh process and torch-extension build "
              "per candidate (until %.0f s)" % (slice_end - self.t0), flush=True)
        for k, e, code in self.baseline_candidates():
            if a.baseline_candidates > 0 and k > a.baseline_candidates:
                break
            now = time.time()
            walls = [c["wall_s"] for c in out["candidates"] if c.get("finished")]
            if walls and now + statistics.median(walls) > slice_end:
                break
            end = first_end if not walls else slice_end
            if end - now < 5:
                break
            src = os.path.join(bdir, "cand%d%s" % (k, ext))
            with open(src, "w") as f:
                f.write(code + "\n")
            name = "kbrkb_%d_%d_%s" % (os.getpid(), k, e.name)
            cmd = [a.python, os.path.join(HERE, "rkb_baseline.py"), "--operator", self.op_path,
                   "--source", src, "--backend", self.backend, "--name", name,
                   "--build-dir", os.path.join(bdir, "build%d" % k),
                   "--include", os.path.join(TOP, "verifier", "include")]
            for inc in a.include:
                cmd += ["--include", inc]
            rc, wall, timed_out, stdout = run_group(cmd, end - now,
                                                    os.path.join(bdir, "cand%d.log" % k), env)
            rec = {"k": k, "entry": e.name, "kind": e.kind, "wall_s": round(wall, 3),
                   "rc": rc, "timed_out": timed_out, "finished": not timed_out}
            last = [ln for ln in (stdout or "").splitlines() if ln.startswith("{")]
            if last:
                try:
                    rec.update(json.loads(last[-1]))
                except ValueError:
                    pass
            if not timed_out and rc != 0 and "built" not in rec:
                rec["error"] = "process died (exit %s)" % rc
            out["candidates"].append(rec)
            print("  #%d %-20s %-9s %6.1f s  %s" % (
                k, e.name, e.kind, wall,
                "killed at the deadline" if timed_out else
                "built, %s" % ("correct" if rec.get("correct") else
                               "wrong: %s" % (rec.get("error") or "?")[:60])
                if rec.get("built") else "not built" if "built" in rec else
                rec.get("error", "?")), flush=True)
            if timed_out:
                break
        done = [c for c in out["candidates"] if c["finished"]]
        out["completed"] = len(done)
        out["wall_s"] = round(sum(c["wall_s"] for c in done), 3)
        for key in ("import_s", "build_s", "correct_s", "timing_s"):
            vals = [c[key] for c in done if isinstance(c.get(key), (int, float))]
            out["median_" + key] = round(statistics.median(vals), 3) if vals else None

    # --- the search ---

    def write_config(self, port, overrides=None):
        """The run's config; overrides: {section: {key: value}} over the profile's."""
        prof = PROFILES[self.backend]
        sec = {
            "core": {"state_dir": os.path.join(self.work, "state")},
            "harness": dict({"backend": self.backend, "python": self.a.python},
                            **prof.get("harness", {})),
            "bench": dict(prof.get("bench", {})),
            "templates": dict(prof.get("templates", {})),
            "llm": {"models": "sim", "timeout_s": "30", "max_retries": "2"},
            "llm.sim": {"provider": "openai", "base_url": "http://127.0.0.1:%d/v1" % port,
                        "model": "sim", "api_key": KEY, "max_tokens": "8192"},
            "search": dict({"seed": str(self.a.seed)}, **prof["search"]),
        }
        for name, kv in (overrides or {}).items():
            sec[name] = dict(sec.get(name) or {}, **kv)
        path = os.path.join(self.work, "bench-search.ini")
        with open(path, "w") as f:
            for name, kv in sec.items():
                if not kv:
                    continue
                f.write("[%s]\n" % name)
                for k, v in kv.items():
                    f.write("%s = %s\n" % (k, v))
        self.res["config"] = sec
        return path

    def run_search(self):
        a = self.a
        self.sim = LLMSim.spawn(os.path.join(self.work, "sim.port"),
                                ["--api-key", KEY, "--seed", str(a.seed), "--backend",
                                 self.backend, "--vary", "--log",
                                 os.path.join(self.work, "llm.log")])
        cfg = self.write_config(self.sim.port)
        budget = int(max(15.0, self.left() - FINAL_MARGIN_S[self.backend]))
        out_dir = os.path.join(self.work, "out")
        cmd = [a.bin, "run", self.op_path, "-c", cfg, "--backend", self.backend,
               "--out", out_dir, "--time-budget", str(budget)]
        print("search: kernelbot run %s --time-budget %d (LLM simulator on port %d)"
              % (self.op.operator, budget, self.sim.port), flush=True)
        rc, wall, timed_out, stdout = run_group(
            cmd, max(budget + 10.0, self.left() + 15.0), os.path.join(self.work, "run.err"),
            cwd=TOP)
        with open(os.path.join(self.work, "run.out"), "w") as f:
            f.write(stdout or "")
        s = {"rc": rc, "run_wall_s": round(wall, 3), "timed_out": timed_out,
             "time_budget_s": budget}
        self.res["search"] = s
        try:
            s["sim"] = self.sim.stats()
        except OSError:
            s["sim"] = None
        self.collect(out_dir, s)

    def collect(self, out_dir, s):
        kj = read_json(os.path.join(out_dir, "kernel.json")) or {}
        summary = kj.get("search") or read_json(os.path.join(out_dir, "search.json")) or {}
        final = read_json(os.path.join(out_dir, "evidence.json"))
        s["summary"] = {k: summary.get(k) for k in ("search_id", "candidates", "verified",
                                                      "verdicts", "generations", "wall_s",
                                                      "llm", "verifiers", "cut_short",
                                                      "best_speedup", "filled_cells")}
        s["templates_s"] = num(kj, "templates", "seconds")
        db = os.path.join(self.work, "state", "kernelbot.db")
        rows, calls = [], []
        sid = summary.get("search_id")
        if os.path.exists(db):
            con = sqlite3.connect(db)
            try:
                if sid is None:
                    r = con.execute("SELECT max(id) FROM searches").fetchone()
                    sid = r[0] if r else None
                if sid is not None:
                    if summary.get("wall_s") is None:
                        r = con.execute("SELECT wall_s FROM searches WHERE id = ?",
                                        (sid,)).fetchone()
                        summary["wall_s"] = r[0] if r else None
                    rows = con.execute("SELECT id, proposer, verdict, evidence FROM candidates "
                                       "WHERE search_id = ? ORDER BY id", (sid,)).fetchall()
                    calls = con.execute("SELECT status, latency_ms, purpose FROM llm_calls "
                                        "WHERE search_id = ?", (sid,)).fetchall()
            except sqlite3.Error as e:
                s["db_error"] = str(e)
            finally:
                con.close()
        cands = []
        for cid, proposer, verdict, ev in rows:
            if proposer == "template":
                continue  # the templates' seed: judged before the search began
            st = {}
            try:
                st = (json.loads(ev) or {}).get("stages") or {} if ev else {}
            except ValueError:
                pass
            cands.append({"id": cid, "proposer": proposer, "verdict": verdict,
                          "static_s": st.get("static_s") or 0.0,
                          "build_s": st.get("build_s") or 0.0,
                          "harness_s": st.get("harness_s") or 0.0})
        err = ""
        try:
            with open(os.path.join(self.work, "run.err")) as f:
                err = f.read()
        except OSError:
            pass
        final_cached = "(cached)" in "".join(ln for ln in err.splitlines() if "final check" in ln)
        fst = (final or {}).get("stages") or {}
        final_s = 0.0 if final_cached or not final else \
            sum(fst.get(k) or 0.0 for k in ("static_s", "build_s", "harness_s"))
        wall = summary.get("wall_s")
        # tune points (the constants of a templatized kernel, run in the model's
        # waits) are counted apart: they are not the models' candidates
        tuned = [c for c in cands if c["proposer"] == "tune"]
        cands_all, cands = cands, [c for c in cands if c["proposer"] != "tune"]
        o = {
            "search_wall_s": wall,
            "candidates": len(cands),
            "ran_in_harness": sum(1 for c in cands if c["harness_s"] > 0),
            "tune_points": sum(1 for c in tuned if c["harness_s"] > 0),
            "tune_harness_s": round(sum(c["harness_s"] for c in tuned), 3),
            "built": sum(1 for c in cands if c["build_s"] > 0),
            "verdicts": {},
            "static_s": round(sum(c["static_s"] for c in cands_all), 3),
            "build_s": round(sum(c["build_s"] for c in cands_all), 3),
            "harness_s": round(sum(c["harness_s"] for c in cands_all), 3),
            "final_check_s": round(final_s, 3),
            "final_cached": final_cached,
            "llm_calls": len(calls),
            "llm_failed": sum(1 for c in calls if c[0] != "ok"),
            "llm_latency_s": round(sum((c[1] or 0) for c in calls) / 1000.0, 3),
        }
        for c in cands:
            o["verdicts"][c["verdict"]] = o["verdicts"].get(c["verdict"], 0) + 1
        if isinstance(wall, (int, float)):
            ov = wall - o["build_s"] - o["harness_s"] - o["final_check_s"] - o["llm_latency_s"]
            o["overhead_s"] = round(ov, 3)
            o["overhead_per_candidate_ms"] = round(1000 * ov / len(cands), 1) if cands else None
            o["overhead_per_call_ms"] = round(1000 * ov / len(calls), 1) if calls else None
        s["measure"] = o

    # --- report ---

    def report(self):
        res, be = self.res, self.backend
        unit = "GPU-hour" if be == "cuda" else "CPU-hour"
        lines = ["bench-search: backend %s, operator %s, deadline %d s, seed %d; %.0f s in all"
                 % (be, res["operator"], self.a.deadline, self.a.seed, res["elapsed_s"])]
        s = res.get("search") or {}
        m = s.get("measure") or {}
        summ = s.get("summary") or {}
        lines += ["", "1. The bot's own overhead per candidate (search wall minus builds, harness "
                  "calls, final check and model latency; the simulator answers at once)"]
        lines.append(table([[fmt(m.get("search_wall_s")), m.get("candidates", "-"),
                             m.get("ran_in_harness", "-"), m.get("llm_calls", "-"),
                             fmt(m.get("llm_latency_s")), fmt(m.get("build_s")),
                             fmt(m.get("harness_s")),
                             fmt(m.get("final_check_s")) + (" (cached)" if m.get("final_cached")
                                                             else ""),
                             fmt(m.get("overhead_s")), fmt(m.get("overhead_per_candidate_ms"), 1),
                             fmt(m.get("overhead_per_call_ms"), 1)]],
                           ["search s", "candidates", "in harness", "model calls", "model s",
                            "build s", "harness s", "final s", "overhead s", "ms/candidate",
                            "ms/call"]))
        lines.append("verdicts: %s; static checks %s s (part of the overhead); templates before "
                     "the search %s s; `kernelbot run` %s s in all (exit %s%s)"
                     % (", ".join("%s %d" % kv for kv in sorted((m.get("verdicts") or {}).items()))
                        or "-", fmt(m.get("static_s")), fmt(s.get("templates_s")),
                        fmt(s.get("run_wall_s")), s.get("rc"),
                        ", killed at the deadline" if s.get("timed_out") else ""))
        if summ.get("cut_short"):
            lines.append("search cut short: %s; best %sx" % (summ["cut_short"],
                                                            fmt(summ.get("best_speedup"))))
        b = res.get("baseline") or {}
        rows = []
        n, w = m.get("ran_in_harness"), m.get("search_wall_s")
        if n and w:
            rows.append(["kernelbot search: native ABI, parallel builds, one harness worker",
                         m.get("candidates"), n, fmt(w, 1), fmt(w / n), fmt(3600.0 * n / w, 0)])
        if b.get("completed"):
            bw = b["wall_s"]
            rows.append(["robust-kbench style: fresh process + torch extension per candidate",
                         b["completed"], b["completed"], fmt(bw, 1), fmt(bw / b["completed"]),
                         fmt(3600.0 * b["completed"] / bw, 0)])
        elif b.get("candidates"):
            c = b["candidates"][0]
            rows.append(["robust-kbench style: fresh process + torch extension per candidate",
                         0, 0, fmt(c["wall_s"], 1), "> %s" % fmt(c["wall_s"]),
                         "< %s" % fmt(3600.0 / c["wall_s"], 0)])
        lines += ["", "2. Candidates per %s (wall time of each pipeline; 'judged' counts the "
                  "search's static and LLM-verifier rejections too)" % unit]
        lines.append(table(rows, ["pipeline", "judged", "run", "wall s", "s per candidate",
                                  "per " + unit]) if rows else "(no figures)")
        if b.get("skipped"):
            lines.append("baseline skipped (--baseline-candidates 0)")
        elif b.get("completed"):
            lines.append("baseline per candidate (median): python + torch start %s s, "
                         "extension build %s s, correctness %s s, timing %s s"
                         % (fmt(b.get("median_import_s")), fmt(b.get("median_build_s")),
                            fmt(b.get("median_correct_s")), fmt(b.get("median_timing_s"))))
        checks = [("the search judged at least one candidate", bool(m.get("candidates"))),
                  ("the overhead was measured", m.get("overhead_s") is not None),
                  ("finished within the deadline (+10%%): %.0f s of %d"
                   % (res["elapsed_s"], self.a.deadline),
                   res["elapsed_s"] <= 1.1 * self.a.deadline)]
        if not b.get("skipped"):
            checks.append(("the baseline finished at least one candidate",
                           bool(b.get("completed"))))
        if rows and len(rows) == 2 and b.get("completed") and n:
            res["speedup_per_candidate"] = round((b["wall_s"] / b["completed"]) / (w / n), 2)
            lines.append("kernelbot judges a candidate %.1fx faster than the robust-kbench-style "
                         "pipeline" % res["speedup_per_candidate"])
        lines += ["", "checks:"] + ["  %s: %s" % (t, "yes" if ok else "no") for t, ok in checks]
        res["checks"] = {t: ok for t, ok in checks}
        return "\n".join(lines) + "\n", all(ok for _, ok in checks)

    def run(self):
        try:
            self.run_baseline()
            self.run_search()
        finally:
            if self.sim:
                self.sim.stop()
        self.res["elapsed_s"] = round(time.time() - self.t0, 1)
        text, ok = self.report()
        self.save(text, [(n, n) for n in ("run.out", "run.err", "llm.log")])
        return 0 if ok else 1

    def save(self, text, logs):
        """Print the report; report.txt and results.json into the workdir,
        copied to --out with logs (pairs: path in the workdir, name there)."""
        print()
        print(text, end="")
        with open(os.path.join(self.work, "report.txt"), "w") as f:
            f.write(text)
        with open(os.path.join(self.work, "results.json"), "w") as f:
            json.dump(self.res, f, indent=1, sort_keys=True)
        if not self.a.out:
            return
        os.makedirs(self.a.out, exist_ok=True)
        for rel, name in [("report.txt", "report.txt"), ("results.json", "results.json")] + logs:
            p = os.path.join(self.work, rel)
            if os.path.exists(p):
                shutil.copy(p, os.path.join(self.a.out, "bench-search-" + name))


def main(argv=None):
    ap = argparse.ArgumentParser(description="LLM search overhead and candidates per GPU-hour "
                                 "against a robust-kbench-style pipeline")
    ap.add_argument("--bin", required=True, help="the kernelbot binary")
    ap.add_argument("--backend", choices=("cuda", "cpu"), required=True)
    ap.add_argument("--python", default=sys.executable, help="python3 with torch")
    ap.add_argument("--workdir", required=True, help="scratch directory (emptied first)")
    ap.add_argument("--out", help="copy report.txt, results.json and the logs here")
    ap.add_argument("--operator", default="kb_relu", help="corpus operator: kb_relu, kb_softmax")
    ap.add_argument("--deadline", type=float, default=None,
                    help="seconds for the whole run (default 220; with --latency-ms: the runs' "
                         "seconds and 10 s each)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--baseline-candidates", type=int, default=-1,
                    help="most baseline candidates (-1: as many as its share of the deadline "
                         "allows; 0: skip the baseline)")
    ap.add_argument("--baseline-share", type=float, default=0.4,
                    help="share of the deadline the baseline may start candidates in")
    ap.add_argument("--baseline-first-share", type=float, default=0.55,
                    help="share of the deadline its first candidate may run to")
    ap.add_argument("--include", action="append", default=[],
                    help="extra include directory for the baseline's builds (dlpack)")
    ap.add_argument("--latency-ms", metavar="LIST",
                    help="instead of the above: the search with model calls in flight against "
                         "the serial one, the simulator answering after each latency "
                         "(e.g. 20000,2000; bench/search/concurrency.py)")
    ap.add_argument("--in-flight", metavar="LIST", default="1,8",
                    help="with --latency-ms: [search] calls_in_flight of the runs side by side "
                         "(default 1,8; 1 is the serial search)")
    ap.add_argument("--run-seconds", type=float,
                    help="with --latency-ms: seconds of each run (default: the deadline shared out)")
    a = ap.parse_args(argv)
    if not os.access(a.bin, os.X_OK):
        print("bench-search: no kernelbot binary at '%s'" % a.bin, file=sys.stderr)
        return 2
    if a.latency_ms is not None:
        import concurrency
        try:
            lats = concurrency.parse_list(a.latency_ms, "--latency-ms", 0, 600000)
            flights = concurrency.parse_list(a.in_flight, "--in-flight", 1, 256)
            runs = len(lats) * len(flights)
            if a.deadline is None:
                a.deadline = runs * ((a.run_seconds or 100.0) + 10.0)
            per = concurrency.run_seconds(a.deadline, runs, a.run_seconds)
        except ValueError as e:
            print("bench-search: %s" % e, file=sys.stderr)
            return 2
        return concurrency.ConcurrencyBench(a, lats, flights, per).run()
    if a.deadline is None:
        a.deadline = 220.0
    if a.deadline < 30:
        print("bench-search: --deadline must be at least 30 s", file=sys.stderr)
        return 2
    return Bench(a).run()


if __name__ == "__main__":
    sys.exit(main())
