"""make bench-eval: what one candidate costs to judge, and whether the
judging holds. A benchmark, not a test: it prints tables and exits 0 unless
it could not run at all (exit 2) or a check line says "no" (exit 1).

For the backend in use (cuda with a GPU, else cpu and the .cpp kernels):
 1. seconds per candidate (build, load, correctness, timing, total as the
    bot saw it) for the correct kernel of each operator, native ABI and
    torch extension side by side, every candidate at >= 8 configs x 5 seeds
    and timed. Native candidates of one operator go to one multi-kernel
    `kernelbot verify` call (one harness worker), as the search sends them:
    VARIANTS copies of the kernel that differ by a comment, so each is
    built; the first pays the worker's start. Torch extensions are built
    by the harness (torch's loader), each in a call of its own, all started
    at once in the background;
 2. the spread of repeated timings: one kernel timed REPEATS times in one
    worker, each geomean speedup and the per-config median spread;
 3. every kernel that must be rejected, with its reasons (or the evidence
    of an earlier run: --reject-evidence DIR, e.g. test-gpu's);
 4. final check lines: all rejected for their reason, no correct kernel
    rejected, median seconds per native candidate against the 5 s target.
Raw evidence and call logs: --out DIR gets one tar.gz of them (plus the
report), else they stay in --workdir.
"""
import argparse
import concurrent.futures
import io
import json
import os
import shutil
import statistics
import sys
import tarfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kbdrive  # noqa: E402

TARGET_S = 5.0
SPREAD_TARGET = 0.02
BENCH_OPS = ["relu", "softmax", "linear_gelu", "scale_shift", "log", "two_outputs"]


def fmt(x, nd=2):
    return "-" if x is None else "%.*f" % (nd, x)


def pct(x):
    return "-" if x is None else "%.2f%%" % (100 * x)


def table(rows, header):
    rows = [[str(c) for c in r] for r in rows]
    w = [max(len(header[i]), *(len(r[i]) for r in rows)) if rows else len(header[i])
         for i in range(len(header))]
    out = ["  ".join(h.ljust(w[i]) for i, h in enumerate(header)).rstrip(),
           "  ".join("-" * w[i] for i in range(len(header)))]
    for r in rows:
        out.append("  ".join(c.ljust(w[i]) for i, c in enumerate(r)).rstrip())
    return "\n".join(out)


def make_variants(src, dest_dir, name, n):
    """n copies of src that differ only by a leading comment (distinct
    content hashes: each is built, none comes from the build cache)."""
    os.makedirs(dest_dir, exist_ok=True)
    with open(src) as f:
        text = f.read()
    ext = os.path.splitext(src)[1]
    paths = []
    for i in range(1, n + 1):
        p = os.path.join(dest_dir, "%s_v%d%s" % (name, i, ext))
        with open(p, "w") as f:
            f.write("// bench-eval copy %d of %s (%.6f)\n%s" % (
                i, os.path.basename(src), time.time(), text))
        paths.append(p)
    return paths


class Eval:
    def __init__(self, a):
        self.a = a
        self.backend = a.backend
        self.ext = kbdrive.SOURCE_EXT[self.backend]
        self.work = a.workdir
        self.evdir = os.path.join(self.work, "evidence")
        os.makedirs(self.evdir, exist_ok=True)
        self.config = self._config("main")
        self.kb = kbdrive.Kernelbot(a.bin, self.config)
        self.rows_native = {}   # op -> [ev, ...] in worker order
        self.rows_ext = {}      # op -> ev
        self.spread_evs = []
        self.rejects = {}       # stem -> (ev, source)
        self.walls = {}
        self.skipped = []
        self.unfinished = False

    def _config(self, name):
        d = os.path.join(self.work, "cfg-" + name)
        return kbdrive.write_config(
            os.path.join(d, "config.ini"), os.path.join(d, "state"),
            python=self.a.python, seeds=self.a.seeds, max_configs=self.a.configs,
            timeout_s=self.a.timeout, baselines=self.a.baselines,
            min_time_ms=self.a.min_time_ms, max_reps=self.a.max_reps)

    def log(self, msg):
        print("[bench-eval %6.1fs] %s" % (time.monotonic() - self.t0, msg), flush=True)

    # ------------------------------------------------------------ phases

    def ext_one(self, op, path):
        kb = kbdrive.Kernelbot(self.a.bin, self._config("ext-" + op), env=self.env)
        t = time.monotonic()
        run = kb.verify(kbdrive.operator_path(kbdrive.OK_OPERATORS[op]), [path],
                        os.path.join(self.evdir, "ext-" + op),
                        ["--timeout", str(self.a.ext_timeout)], timeout=self.a.ext_timeout + 120)
        self.log("torch-ext %-12s %s (%.0f s)" % (op, kbdrive.verdict(
            run.evidence.get(kbdrive.stem(path))), time.monotonic() - t))
        return op, run.evidence.get(kbdrive.stem(path)), run

    def spread(self):
        oks = kbdrive.ok_kernels(self.backend)
        copies = make_variants(oks["relu"], os.path.join(self.work, "spread"),
                               "ok_relu_t", self.a.repeats)
        t = time.monotonic()
        run = self.kb.verify(kbdrive.operator_path("kb_relu.py"), copies,
                             os.path.join(self.evdir, "spread"), ["--seeds", "1"],
                             timeout=900)
        self.walls["spread"] = time.monotonic() - t
        self.spread_evs = [run.evidence.get(kbdrive.stem(p)) for p in copies]
        self.log("spread: %d timed evaluations of ok_relu (%.0f s)" % (
            len(copies), self.walls["spread"]))

    def left(self):
        """Seconds left before --deadline (None: no deadline)."""
        if not self.a.deadline:
            return None
        return self.a.deadline - (time.monotonic() - self.t0)

    def late(self, what):
        if self.left() is not None and self.left() <= 0:
            self.skipped.append(what)
            self.log("deadline passed: %s skipped" % what)
            return True
        return False

    def natives(self):
        oks = kbdrive.ok_kernels(self.backend)
        for op in self.ops:
            if op not in oks or self.late("native " + op):
                continue
            vs = make_variants(oks[op], os.path.join(self.work, "variants", op),
                               "ok_" + op, self.a.variants)
            t = time.monotonic()
            run = self.kb.verify(kbdrive.operator_path(kbdrive.OK_OPERATORS[op]), vs,
                                 os.path.join(self.evdir, "native-" + op), timeout=900)
            self.walls["native-" + op] = time.monotonic() - t
            self.rows_native[op] = [run.evidence.get(kbdrive.stem(p)) for p in vs]
            self.log("native %-12s %s (%.0f s for %d)" % (
                op, ", ".join(kbdrive.verdict(e) for e in self.rows_native[op]),
                self.walls["native-" + op], len(vs)))

    def rejections(self):
        todo = kbdrive.reject_kernels(self.backend)
        for p, _ in todo:
            self.rejects[kbdrive.stem(p)] = (None, "not run")
        if self.a.reject_evidence and os.path.isdir(self.a.reject_evidence):
            found = {}
            for root, _, files in os.walk(self.a.reject_evidence):
                for f in files:
                    if f.endswith(".json"):
                        try:
                            with open(os.path.join(root, f)) as fp:
                                ev = json.load(fp)
                        except (OSError, ValueError):
                            continue
                        k = kbdrive.evidence_kernel(ev) if isinstance(ev, dict) else None
                        if k:
                            found[k] = ev
            if all(kbdrive.stem(p) in found for p, _ in todo):
                for p, _ in todo:
                    self.rejects[kbdrive.stem(p)] = (found[kbdrive.stem(p)], "earlier run")
                self.log("rejections: evidence of %d kernels read from %s" % (
                    len(todo), self.a.reject_evidence))
                return
        if self.late("rejections"):
            return
        groups = {}
        hang = []
        for p, op in todo:
            if kbdrive.stem(p) == "hack_hang":
                hang.append((p, op))
            else:
                groups.setdefault(op, []).append(p)
        calls = [(op, ks, ["--no-timing", "--timeout", "180"], "reject-" + kbdrive.stem(op))
                 for op, ks in sorted(groups.items())]
        calls += [(op, [p], ["--no-timing", "--seeds", "1", "--timeout",
                             str(self.a.hang_timeout)], "reject-hang") for p, op in hang]

        def one(c):
            op, ks, args, name = c
            run = self.kb.verify(op, ks, os.path.join(self.evdir, name), args, timeout=900)
            return ks, run
        t = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(len(calls)) as ex:
            for ks, run in ex.map(one, calls):
                for k in ks:
                    self.rejects[kbdrive.stem(k)] = (run.evidence.get(kbdrive.stem(k)), "this run")
        self.walls["rejections"] = time.monotonic() - t
        self.log("rejections: %d kernels (%.0f s)" % (len(todo), self.walls["rejections"]))

    def run(self):
        self.t0 = time.monotonic()
        self.env = dict(os.environ)
        self.env.setdefault("MAX_JOBS", str(self.a.max_jobs))
        self.ops = [op for op in (self.a.ops.split(",") if self.a.ops else BENCH_OPS)
                    if op in kbdrive.ok_kernels(self.backend)]
        exts = kbdrive.ext_kernels(self.backend)
        self.log("backend %s, %d operators, workdir %s" % (self.backend, len(self.ops), self.work))
        # torch extensions build for about a minute each: start them first,
        # in the background, while the native candidates use the device
        pool = concurrent.futures.ThreadPoolExecutor(max(1, self.a.jobs))
        ext_futs = {op: pool.submit(self.ext_one, op, exts[op]) for op in self.ops if op in exts}
        self.spread()
        self.natives()
        for op, f in ext_futs.items():
            left = self.left()
            try:
                self.rows_ext[op] = f.result(timeout=None if left is None else max(1, left))[1]
            except concurrent.futures.TimeoutError:
                self.skipped.append("torch-ext %s (not finished)" % op)
                self.unfinished = True
        pool.shutdown(wait=not self.unfinished)
        self.rejections()
        self.walls["all"] = time.monotonic() - self.t0
        return self.report()

    # ------------------------------------------------------------ report

    def report(self):
        out = io.StringIO()
        p = lambda s="": print(s, file=out)  # noqa: E731
        first = next((e for evs in self.rows_native.values() for e in evs if e), None)
        env = (first or {}).get("environment") or {}
        p("bench-eval: backend %s (%s), torch %s, kernelbot %s; %d configs x %d seeds "
          "requested per candidate; timing vs %s, min %d ms / max %d reps per "
          "measurement; %.0f s in all" % (
              self.backend, env.get("device") or "?", env.get("torch") or "?",
              env.get("kernelbot") or "?", self.a.configs, self.a.seeds, self.a.baselines,
              self.a.min_time_ms, self.a.max_reps, self.walls["all"]))
        p()
        p("1. Seconds per candidate: native ABI and torch extension (timed; "
          "'total' = static + build + harness call as the bot saw it)")
        rows, all_native, warm, cold = [], [], [], []
        correct_bad = []
        for op in self.ops:
            opname = os.path.splitext(kbdrive.OK_OPERATORS[op])[0]
            evs = self.rows_native.get(op) or []
            for i, ev in enumerate(evs):
                st = kbdrive.stages(ev)
                seq = ((ev or {}).get("environment") or {}).get("worker_seq")
                label = "native #%d%s" % (i + 1, " (worker start)" if seq == 1 else "")
                n, s = kbdrive.configs_seeds(ev)
                rows.append([opname, label, fmt(st["build"]), fmt(st["load"]),
                             fmt(st["correctness"]), fmt(st["timing"]), fmt(st["candidate"]),
                             "%s x %s" % (n, s), kbdrive.verdict(ev)])
                if st["candidate"] is not None:
                    all_native.append(st["candidate"])
                    (cold if seq == 1 else warm).append(st["candidate"])
                if kbdrive.verdict(ev) != "verified":
                    correct_bad.append(("ok_%s native #%d" % (op, i + 1), ev))
            if op in self.rows_ext:
                ev = self.rows_ext[op]
                st = kbdrive.stages(ev)
                n, s = kbdrive.configs_seeds(ev)
                # the harness builds an extension: its build is in load
                rows.append([opname, "torch-ext", fmt(st["build"]), fmt(st["load"]),
                             fmt(st["correctness"]), fmt(st["timing"]), fmt(st["candidate"]),
                             "%s x %s" % (n, s), kbdrive.verdict(ev)])
                if kbdrive.verdict(ev) != "verified":
                    correct_bad.append(("ext %s" % op, ev))
        p(table(rows, ["operator", "path", "build s", "load s", "correct s", "timing s",
                       "total s", "configs x seeds", "verdict"]))
        p("(native: %d candidates per operator in one call, one worker; 'build s' is a "
          "candidate's share of their parallel build. torch-ext: torch's loader builds "
          "it inside the harness, so its build is in 'load s'; each in a call of its own, "
          "%d at a time, MAX_JOBS=%s)" % (self.a.variants, self.a.jobs,
                                          self.env.get("MAX_JOBS")))
        p()

        p("2. Repeated timing: ok_relu timed %d times in one worker (seeds 1)" % len(self.spread_evs))
        g = [kbdrive.geomean_speedup(ev) for ev in self.spread_evs]
        meds = [kbdrive.kernel_medians(ev) for ev in self.spread_evs]
        rows = []
        for i, (ev, gm, m) in enumerate(zip(self.spread_evs, g, meds)):
            rows.append([i + 1, kbdrive.verdict(ev), fmt(gm, 4) + ("x" if gm else ""),
                         len(m), fmt(sum(m.values()), 4) if m else "-"])
        p(table(rows, ["run", "verdict", "geomean speedup vs eager", "timed configs",
                       "sum of kernel medians ms"]))
        names = sorted(set.intersection(*(set(m) for m in meds))) if meds and all(meds) else []
        per = {n: kbdrive.spread([m[n] for m in meds]) for n in names}
        gs = kbdrive.spread(g)
        if per:
            worst = max(per, key=lambda k: per[k])
            p("geomean speedup spread (max/min - 1): %s; per-config kernel median spread: "
              "median %s, max %s (%s); target 2%%: %s" % (
                  pct(gs), pct(statistics.median(per.values())), pct(per[worst]), worst,
                  "met" if per[worst] <= SPREAD_TARGET and (gs or 0) <= SPREAD_TARGET
                  else "missed"))
            big = [n for n in names if min(m[n] for m in meds) >= 0.01]
            if big and len(big) < len(names):
                w = max(big, key=lambda k: per[k])
                p("configs whose kernel runs >= 10 us (event resolution ~0.5 us matters "
                  "below): max spread %s (%s)" % (pct(per[w]), w))
            p(table([[n] + [fmt(m[n], 4) for m in meds] + [pct(per[n])] for n in names],
                    ["config"] + ["run %d ms" % (i + 1) for i in range(len(meds))] + ["spread"]))
        else:
            p("no timings to compare")
        p()

        p("3. Kernels that must be rejected")
        rows, all_rejected = [], True
        for name in sorted(self.rejects):
            ev, src = self.rejects[name]
            ok, why = kbdrive.rejection_ok(name, ev)
            all_rejected &= ok
            st = kbdrive.stages(ev)
            rows.append([name, kbdrive.verdict(ev), ", ".join(sorted(kbdrive.checks(ev))) or "-",
                         ", ".join(sorted(kbdrive.EXPECTED_REJECTIONS.get(name, ()))) or "-",
                         fmt(st["candidate"]), "yes" if ok else "NO", src])
        p(table(rows, ["kernel", "verdict", "checks", "expected (one of)", "total s",
                       "right reason", "evidence"]))
        p()

        p("4. Checks")
        n_rej = len(self.rejects)
        p("every hack rejected for its reason: %s (%d/%d)" % (
            "yes" if all_rejected and n_rej else "NO",
            sum(1 for k in self.rejects if kbdrive.rejection_ok(k, self.rejects[k][0])[0]), n_rej))
        n_correct = sum(len(v) for v in self.rows_native.values()) + len(self.rows_ext)
        p("no correct kernel rejected: %s (%d correct candidates%s)" % (
            "yes" if not correct_bad and n_correct else "NO", n_correct,
            "; rejected: " + "; ".join("%s: %s %s" % (k, kbdrive.verdict(e), sorted(kbdrive.checks(e)))
                                       for k, e in correct_bad) if correct_bad else ""))
        med = statistics.median(all_native) if all_native else None
        p("median seconds per native candidate: %s s over %d (warm worker: %s s, "
          "first in a worker: %s s) vs target %.0f s: %s" % (
              fmt(med), len(all_native),
              fmt(statistics.median(warm)) if warm else "-",
              fmt(statistics.median(cold)) if cold else "-", TARGET_S,
              "met" if med is not None and med <= TARGET_S else "missed"))
        if self.skipped:
            p("NOT RUN (deadline %s s): %s" % (self.a.deadline, "; ".join(self.skipped)))
        text = out.getvalue()
        ok = all_rejected and n_rej and not correct_bad and n_correct and not self.skipped
        return text, bool(ok)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--backend", choices=("cuda", "cpu"), required=True)
    ap.add_argument("--python", default=None, help="[harness] python")
    ap.add_argument("--workdir", required=True, help="evidence and state (emptied first)")
    ap.add_argument("--out", default=None, help="put one tar.gz of the evidence and the report here")
    ap.add_argument("--configs", type=int, default=8)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--ops", default=None, help="comma-separated subset of %s" % ",".join(BENCH_OPS))
    ap.add_argument("--variants", type=int, default=2,
                    help="native candidates per operator, one worker")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--baselines", default="eager")
    ap.add_argument("--jobs", type=int, default=None, help="torch extensions built at once")
    ap.add_argument("--max-jobs", type=int, default=2, help="MAX_JOBS for torch's loader")
    ap.add_argument("--min-time-ms", type=int, default=100)
    ap.add_argument("--max-reps", type=int, default=None, help="default 1000 (cuda), 100 (cpu)")
    ap.add_argument("--timeout", type=int, default=300)
    ap.add_argument("--ext-timeout", type=int, default=600)
    ap.add_argument("--hang-timeout", type=int, default=None)
    ap.add_argument("--deadline", type=float, default=None,
                    help="seconds: start nothing new after this, report what is done")
    ap.add_argument("--reject-evidence", default=os.environ.get("KB_REJECT_EVIDENCE"),
                    help="reuse the evidence of kernels that must be rejected from this dir")
    a = ap.parse_args()
    if not os.path.exists(a.bin):
        print("bench-eval: kernelbot binary '%s' not built" % a.bin, file=sys.stderr)
        return 2
    ncpu = os.cpu_count() or 2
    if a.jobs is None:
        a.jobs = 8 if a.backend == "cuda" else max(1, ncpu // 2)
    if a.max_reps is None:
        a.max_reps = 1000 if a.backend == "cuda" else 100
    if a.hang_timeout is None:
        a.hang_timeout = 20 if a.backend == "cuda" else 10
    a.bin = os.path.abspath(a.bin)
    a.workdir = os.path.abspath(a.workdir)
    marker = os.path.join(a.workdir, ".bench-eval")
    if os.path.isdir(a.workdir) and os.listdir(a.workdir):
        if not os.path.exists(marker):
            print("bench-eval: '%s' is not empty and not an earlier bench-eval's workdir"
                  % a.workdir, file=sys.stderr)
            return 2
        shutil.rmtree(a.workdir)
    os.makedirs(a.workdir, exist_ok=True)
    open(marker, "w").close()
    ev = Eval(a)
    text, ok = ev.run()
    with open(os.path.join(a.workdir, "report.txt"), "w") as f:
        f.write(text)
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        tar = os.path.join(a.out, "bench-eval-evidence.tar.gz")
        with tarfile.open(tar, "w:gz") as t:
            t.add(a.workdir, arcname="bench-eval",
                  filter=lambda ti: None if "/state" in ti.name or "/build-cache" in ti.name
                  else ti)
        shutil.copy(os.path.join(a.workdir, "report.txt"), os.path.join(a.out, "bench-eval-report.txt"))
        text += "\nraw evidence: %s\n" % tar
    else:
        text += "\nraw evidence: %s\n" % os.path.join(a.workdir, "evidence")
    print()
    print(text, end="")
    if ev.unfinished:   # calls still running in threads: do not wait for them
        sys.stdout.flush()
        os._exit(0 if ok else 1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
