"""make bench-eval: what one candidate costs to judge, and whether the
judging holds. A benchmark, not a test: it prints tables and exits 0 unless
it could not run at all (exit 2) or a check line says "no" (exit 1).

For the backend in use (cuda with a GPU, else cpu and the .cpp kernels),
sections in the order they run:
 2. the spread of repeated timings: one kernel timed REPEATS times in one
    worker, first and on a quiet device: per config the kernel medians,
    their spread and the timing method (timing.py: CUDA-graph batches for
    short calls, per-call events otherwise), and the spread of the
    geometric means against the 2% target. Twice: at kb_relu's own sizes
    (calls of ~4 us, where the launch path is most of the time) and at
    bandwidth-bound sizes (kb_relu.py with LARGE_SIZES, 64 MB per tensor);
    the target is judged on the configs whose kernel median is at least
    SPREAD_MIN_MS (the kernel's own time), and the launch-bound figure is
    printed beside it;
 3. every kernel that must be rejected, with its reasons (or the evidence
    of an earlier run: --reject-evidence DIR, e.g. test-gpu's); one
    multi-kernel call (one worker) per operator, untimed: a rejected
    kernel stops at its first failing trial;
 1. seconds per candidate (build, load, correctness, timing, total as the
    bot saw it) for the correct kernel of each operator, native ABI and
    torch extension side by side, every candidate at >= 8 configs x 5 seeds
    and timed. Native candidates of one operator go to one multi-kernel
    `kernelbot verify` call (one harness worker), as the search sends them:
    VARIANTS copies of the kernel that differ by a comment, so each is
    built; the first pays the worker's start and is reported apart from
    the warm ones. Torch extensions are built by the harness (torch's
    loader), each in a call of its own, all started at once in the
    background when the run begins;
 1b. ("fresh") `kernelbot verify --fresh`, a harness process per
    candidate: VARIANTS copies of ok_relu, timed, with a state of their
    own (the first measures the baselines, a later one may take them from
    the bot's baseline cache), and the FRESH_REJECTS kernels, untimed as in
    section 3; run only while their expected cost fits the --deadline;
 5. the sandbox's cost: the same correct native kernel evaluated with
    [sandbox] on and off, timed without the cache flush (its cpu size
    depends on /sys, which the sandbox hides), the two alternating call by
    call (ROUNDS pairs,
    VARIANTS candidates a call, --fresh and worker), so drift hits both;
    the median per-candidate total (static + build + harness) of each and
    their ratio against the 10% target;
 4. final check lines: all rejected for their reason, no correct kernel
    rejected; the median seconds per native candidate, correct / warm
    (section 1's candidates after the first of a worker) and rejected /
    warm (section 3's, likewise) against WARM_TARGET_S, correct / fresh and
    rejected / fresh (section 1b) against FRESH_TARGET_S, each "met" or
    "missed", with how often the timed ones took their baselines from the
    baseline cache (evidence: configs' timing.baseline_source); the timing
    spread against 2%, the sandbox's added share against 10%.
--sections LIST runs only those of spread,rejections,natives,fresh,torch-ext,
sandbox (a quiet-device spread rerun: --sections spread); the checks of a
section left out say "not run".
--deadline S budgets the run: torch extensions for fewer operators when S
is short, a native operator or a fresh call only while its expected cost
still fits, and calls still running at S are stopped (kernelbot is sent
SIGTERM, which ends its evaluation and the harness's process tree); the
report says what was cut. Raw evidence and call logs: --out DIR gets one
tar.gz of them (plus the report), else they stay in --workdir.
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

WARM_TARGET_S = 3.0         # median s per native candidate after the first of a worker
FRESH_TARGET_S = 10.0       # ... in a process of its own (verify --fresh)
SPREAD_TARGET = 0.02
SPREAD_MIN_MS = 0.02         # configs at least this long judge the spread target
SECTIONS = ("spread", "rejections", "natives", "fresh", "torch-ext", "sandbox")
SANDBOX_TARGET = 0.10        # the sandbox adds at most this to a native candidate's median
# the spread's bandwidth-bound operator: kb_relu.py with these sizes
# (64 MB per tensor), written into the workdir
LARGE_SIZES = {"batch_size": 1024, "dim": 16384}
EXT_FULL_DEADLINE_S = 300.0  # a shorter --deadline builds fewer torch extensions:
EXT_S_PER_OP = 50.0          # one operator per this many seconds of it
NATIVE_GUESS_S = {"cuda": 25.0, "cpu": 15.0}  # one native operator's call, before one ran
FRESH_GUESS_S = {"cuda": 12.0, "cpu": 8.0}    # one --fresh candidate, before one ran
# rejected in the trials, against kb_relu, on both backends: section 1b's
# rejected / fresh figure (no hang, no static rejection)
FRESH_REJECTS = ("hack_unwritten", "hack_out_of_bounds", "hack_cached")
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


def baseline_cache_use(evs):
    """How the timed configs of evs got their baselines (PROTOCOL.md
    "Baseline cache", timing.baseline_source): "cache hit in H of T timed
    configs (C of N candidates)", or "not timed"."""
    hits = timed = cands = 0
    for ev in evs:
        srcs = [(c.get("timing") or {}).get("baseline_source")
                for c in (ev or {}).get("configs") or [] if c.get("timing")]
        timed += len(srcs)
        hits += srcs.count("cache")
        cands += "cache" in srcs
    if not timed:
        return "not timed"
    return "cache hit in %d of %d timed configs (%d of %d candidates)" % (
        hits, timed, cands, len(evs))


def median_line(what, totals, target, note):
    """One check line: the median of totals against target, met or missed."""
    med = statistics.median(totals) if totals else None
    return "median seconds per native candidate, %s: %s s over %d vs target %.0f s: %s; %s" % (
        what, fmt(med), len(totals), target,
        "met" if med is not None and med <= target else "missed", note)


def parse_sections(text):
    """--sections: the sections to run, in SECTIONS' order (all when empty).
    Raises ValueError naming an unknown one."""
    names = [x.strip() for x in (text or "").split(",") if x.strip()]
    bad = [x for x in names if x not in SECTIONS]
    if bad:
        raise ValueError("unknown section(s) %s (known: %s)" % (", ".join(bad), ", ".join(SECTIONS)))
    return [x for x in SECTIONS if not names or x in names]


def scaled_operator(src, dest, sizes):
    """Copy the KernelBench file src to dest with its module-level size
    constants set to sizes ({name: int}); ValueError when one is missing."""
    with open(src) as f:
        lines = f.read().split("\n")
    seen = set()
    for i, line in enumerate(lines):
        name = line.split("=")[0].strip()
        if name in sizes and not line.startswith((" ", "\t")) and "=" in line:
            lines[i] = "%s = %d" % (name, sizes[name])
            seen.add(name)
    missing = sorted(set(sizes) - seen)
    if missing:
        raise ValueError("'%s' has no module-level %s" % (src, ", ".join(missing)))
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    with open(dest, "w") as f:
        f.write("\n".join(lines))
    return dest


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
        self.spread_large_evs = []
        self.sandbox_totals = {}   # (sandbox on?, fresh?) -> [candidate totals]
        self.sections = parse_sections(getattr(a, "sections", None))
        self.rejects = {}       # stem -> (ev, source)
        self.fresh_ok = []      # section 1b: evidence of verify --fresh, correct
        self.fresh_rejects = {}  # ... and rejected: stem -> ev
        self.walls = {}
        self.starts = {}        # section -> seconds after the start
        self.skipped = []       # what should have run and did not: a failed run
        self.shrunk = []        # what the deadline's budget left out, on purpose
        self.unfinished = False

    def _config(self, name, sandbox=True, l2_flush=True):
        d = os.path.join(self.work, "cfg-" + name)
        return kbdrive.write_config(
            os.path.join(d, "config.ini"), os.path.join(d, "state"),
            python=self.a.python, seeds=self.a.seeds, max_configs=self.a.configs,
            timeout_s=self.a.timeout, baselines=self.a.baselines,
            min_time_ms=self.a.min_time_ms, max_reps=self.a.max_reps, sandbox=sandbox,
            l2_flush=l2_flush)

    def log(self, msg):
        print("[bench-eval %6.1fs] %s" % (time.monotonic() - self.t0, msg), flush=True)

    def section(self, name, fn):
        self.starts[name] = time.monotonic() - self.t0
        t = time.monotonic()
        fn()
        self.walls[name] = time.monotonic() - t

    # ------------------------------------------------------------ budget

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

    def ext_budget(self, ops):
        """The torch-extension operators this deadline affords: each build
        takes about a minute of every core it gets and slows everything
        else, so a short deadline builds fewer (and says so)."""
        d = self.a.deadline
        if not d or d >= EXT_FULL_DEADLINE_S or len(ops) <= 1:
            return ops
        keep = max(1, int(d // EXT_S_PER_OP))
        if keep < len(ops):
            self.shrunk.append("torch-ext for %d of %d operators (%s) under the %.0f s "
                               "deadline" % (keep, len(ops), ", ".join(ops[:keep]), d))
            return ops[:keep]
        return ops

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
        run = self.kb.verify(kbdrive.operator_path("kb_relu.py"), copies,
                             os.path.join(self.evdir, "spread"), ["--seeds", "1"],
                             timeout=900)
        self.spread_evs = [run.evidence.get(kbdrive.stem(p)) for p in copies]
        self.log("spread: %d timed evaluations of ok_relu" % len(copies))
        copies = make_variants(oks["relu"], os.path.join(self.work, "spread-large"),
                               "ok_relu_l", self.a.repeats)
        large = scaled_operator(kbdrive.operator_path("kb_relu.py"),
                                os.path.join(self.work, "spread-large", "kb_relu_large.py"),
                                LARGE_SIZES)
        run = self.kb.verify(large, copies, os.path.join(self.evdir, "spread-large"),
                             ["--seeds", "1"], timeout=900)
        self.spread_large_evs = [run.evidence.get(kbdrive.stem(p)) for p in copies]
        self.log("spread: %d timed evaluations of ok_relu at large sizes" % len(copies))

    def natives(self):
        oks = kbdrive.ok_kernels(self.backend)
        seen = []   # wall seconds of each operator's call so far
        for op in self.ops:
            if op not in oks:
                continue
            need = statistics.median(seen) if seen else NATIVE_GUESS_S[self.backend]
            left = self.left()
            if left is not None and left < need:
                self.shrunk.append("native %s (a call takes about %.0f s, %.0f s were left)"
                                   % (op, need, max(0.0, left)))
                self.log("native %s left out: about %.0f s needed, %.0f s left" % (
                    op, need, max(0.0, left)))
                continue
            vs = make_variants(oks[op], os.path.join(self.work, "variants", op),
                               "ok_" + op, self.a.variants)
            t = time.monotonic()
            run = self.kb.verify(kbdrive.operator_path(kbdrive.OK_OPERATORS[op]), vs,
                                 os.path.join(self.evdir, "native-" + op), timeout=900)
            self.walls["native-" + op] = time.monotonic() - t
            seen.append(self.walls["native-" + op])
            self.rows_native[op] = [run.evidence.get(kbdrive.stem(p)) for p in vs]
            self.log("native %-12s %s (%.0f s for %d)" % (
                op, ", ".join(kbdrive.verdict(e) for e in self.rows_native[op]),
                self.walls["native-" + op], len(vs)))

    def fresh(self):
        """1b: `kernelbot verify --fresh` (a harness process per candidate),
        VARIANTS copies of ok_relu timed, then FRESH_REJECTS untimed as in
        section 3, each call only while its expected cost fits the deadline.
        A state of its own: the first copy measures the baselines, a later
        one may take them from the baseline cache (the report says)."""
        kb = kbdrive.Kernelbot(self.a.bin, self._config("fresh"))
        rejects = {kbdrive.stem(p): (p, op) for p, op in kbdrive.reject_kernels(self.backend)}
        picked = [rejects[n] for n in FRESH_REJECTS if n in rejects]
        per = FRESH_GUESS_S[self.backend]   # seconds per candidate, until measured
        for what, n in (("correct", self.a.variants), ("rejected", len(picked))):
            if not n:
                continue
            left = self.left()
            if left is not None and left < per * n:
                self.shrunk.append("fresh %s (%d candidates of about %.0f s, %.0f s were left)"
                                   % (what, n, per, max(0.0, left)))
                self.log("fresh %s left out: about %.0f s needed" % (what, per * n))
                continue
            t = time.monotonic()
            if what == "correct":
                vs = make_variants(kbdrive.ok_kernels(self.backend)["relu"],
                                   os.path.join(self.work, "fresh"), "ok_relu_f", n)
                run = kb.verify(kbdrive.operator_path("kb_relu.py"), vs,
                                os.path.join(self.evdir, "fresh-ok"), ["--fresh"], timeout=900)
                self.fresh_ok = [run.evidence.get(kbdrive.stem(p)) for p in vs]
                got = self.fresh_ok
            else:
                run = kb.verify(picked[0][1], [p for p, _ in picked],
                                os.path.join(self.evdir, "fresh-reject"),
                                ["--fresh", "--no-timing", "--timeout", "180"], timeout=900)
                self.fresh_rejects = {kbdrive.stem(p): run.evidence.get(kbdrive.stem(p))
                                      for p, _ in picked}
                got = list(self.fresh_rejects.values())
            per = max(per, (time.monotonic() - t) / max(1, n))
            self.log("fresh %s: %s (%.0f s for %d)" % (what, ", ".join(
                kbdrive.verdict(e) for e in got), time.monotonic() - t, n))

    def rounds(self):
        return getattr(self.a, "sandbox_rounds", 3)

    def sandbox(self):
        """The same kernel with the sandbox on and off, alternating call by
        call; each call has a state dir of its own, so every build is real."""
        oks = kbdrive.ok_kernels(self.backend)
        op = kbdrive.operator_path("kb_relu.py")
        for r in range(self.rounds()):
            order = (True, False) if r % 2 == 0 else (False, True)
            for on in order:
                for fresh in (False, True):
                    if self.late("sandbox round %d" % (r + 1)):
                        return
                    tag = "sb-%s-%s-%d" % ("on" if on else "off", "fresh" if fresh else "worker", r)
                    vs = make_variants(oks["relu"], os.path.join(self.work, tag),
                                       "ok_relu_" + tag.replace("-", "_"), self.a.variants)
                    # no cache flush: on the cpu its size depends on /sys,
                    # which the sandbox hides; what is compared is the rest
                    kb = kbdrive.Kernelbot(self.a.bin, self._config(tag, sandbox=on,
                                                                    l2_flush=False))
                    run = kb.verify(op, vs, os.path.join(self.evdir, tag),
                                    ["--fresh"] if fresh else [], timeout=900)
                    for i, p in enumerate(vs):
                        ev = run.evidence.get(kbdrive.stem(p))
                        st = kbdrive.stages(ev)
                        if kbdrive.verdict(ev) == "verified" and st["candidate"] is not None:
                            self.sandbox_totals.setdefault((on, fresh), []).append(st["candidate"])
                            # the first of a call pays the starts: apart too
                            self.sandbox_totals.setdefault((on, fresh, i == 0), []).append(
                                st["candidate"])
            self.log("sandbox: round %d of %d" % (r + 1, self.rounds()))

    def rejections(self):
        pending = kbdrive.reject_kernels(self.backend)
        for p, _ in pending:
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
            if all(kbdrive.stem(p) in found for p, _ in pending):
                for p, _ in pending:
                    self.rejects[kbdrive.stem(p)] = (found[kbdrive.stem(p)], "earlier run")
                self.log("rejections: evidence of %d kernels read from %s" % (
                    len(pending), self.a.reject_evidence))
                return
        if self.late("rejections"):
            return
        # one multi-kernel call (one worker) per operator, and the hang on
        # its own so that its timeout runs beside them, not after them
        groups = {}
        hang = []
        for p, op in pending:
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
        with concurrent.futures.ThreadPoolExecutor(len(calls)) as ex:
            for ks, run in ex.map(one, calls):
                for k in ks:
                    self.rejects[kbdrive.stem(k)] = (run.evidence.get(kbdrive.stem(k)), "this run")
        self.log("rejections: %d kernels" % len(pending))

    def wait_ext(self, futs):
        """Collect the torch extensions, stopping those still running at the
        deadline (their kernelbot kills the harness's whole process tree)."""
        pending = dict(futs)
        for op, f in futs.items():
            left = self.left()
            try:
                self.rows_ext[op] = f.result(timeout=None if left is None else max(1, left))[1]
                pending.pop(op)
            except concurrent.futures.TimeoutError:
                break
        if pending:
            n = kbdrive.stop_all()
            self.log("deadline: stopped %d call(s) still running: torch-ext %s" % (
                n, ", ".join(pending)))
            for op, f in pending.items():
                try:
                    f.result(timeout=kbdrive.STOP_GRACE_S + 60)
                except concurrent.futures.TimeoutError:
                    self.unfinished = True   # main() will not wait for it
                self.skipped.append("torch-ext %s (not finished by the deadline; stopped)" % op)

    def run(self):
        self.t0 = time.monotonic()
        self.env = dict(os.environ)
        self.env.setdefault("MAX_JOBS", str(self.a.max_jobs))
        self.ops = [op for op in (self.a.ops.split(",") if self.a.ops else BENCH_OPS)
                    if op in kbdrive.ok_kernels(self.backend)]
        exts = kbdrive.ext_kernels(self.backend)
        ext_ops = self.ext_budget([op for op in self.ops if op in exts]) \
            if "torch-ext" in self.sections else []
        self.log("backend %s, %d operators (%d with a torch extension), workdir %s" % (
            self.backend, len(self.ops), len(ext_ops), self.work))
        # torch extensions build for about a minute each: start them first,
        # in the background (CPU only until their build ends); the spread is
        # measured meanwhile on a device nothing else uses yet
        pool = concurrent.futures.ThreadPoolExecutor(max(1, self.a.jobs))
        self.starts["torch-ext"] = 0.0
        t_ext = time.monotonic()
        ext_futs = {op: pool.submit(self.ext_one, op, exts[op]) for op in ext_ops}
        for name, fn in (("spread", self.spread),
                         # before the native operators, so that the deadline
                         # cuts natives (which it says), never the rejections
                         ("rejections", self.rejections), ("natives", self.natives),
                         ("fresh", self.fresh), ("sandbox", self.sandbox)):
            if name in self.sections:
                self.section(name, fn)
        self.wait_ext(ext_futs)
        self.walls["torch-ext"] = time.monotonic() - t_ext
        pool.shutdown(wait=not self.unfinished)
        self.walls["all"] = time.monotonic() - self.t0
        return self.report()

    # ------------------------------------------------------------ report

    def report(self):
        out = io.StringIO()
        p = lambda s="": print(s, file=out)  # noqa: E731
        first = next((e for evs in list(self.rows_native.values()) + [self.spread_evs]
                      for e in evs if e), None)
        env = (first or {}).get("environment") or {}
        p("bench-eval: backend %s (%s), torch %s, kernelbot %s; %d configs x %d seeds "
          "requested per candidate; timing vs %s, min %d ms / max %d reps per "
          "measurement; %.0f s in all%s" % (
              self.backend, env.get("device") or "?", env.get("torch") or "?",
              env.get("kernelbot") or "?", self.a.configs, self.a.seeds, self.a.baselines,
              self.a.min_time_ms, self.a.max_reps, self.walls["all"],
              " (deadline %.0f s)" % self.a.deadline if self.a.deadline else ""))
        p("sections, seconds from the start + wall: " + ", ".join(
            "%s %.0f+%.0f" % (k, self.starts[k], self.walls[k])
            for k in ("spread", "rejections", "natives", "fresh", "torch-ext", "sandbox")
            if k in self.starts and k in self.walls) +
          " (torch-ext in the background from the start)")
        if self.shrunk:
            p("left out by the deadline's budget: " + "; ".join(self.shrunk))
        p()
        native = self.report_candidates(p)
        p()
        native.update(self.report_fresh(p))
        # a correct copy rejected under --fresh fails the checks like section 1's
        native["correct_bad"] += native.pop("fresh_bad")
        p()
        spread = self.report_spread(p)
        p()
        rejected = self.report_rejections(p)
        p()
        sandbox = self.report_sandbox(p)
        p()
        ok = self.report_checks(p, native, spread, rejected, sandbox)
        return out.getvalue(), ok

    def report_candidates(self, p):
        p("1. Seconds per candidate: native ABI and torch extension (timed; "
          "'total' = static + build + harness call as the bot saw it; 'worker': "
          "fresh = first candidate of a new harness worker, which pays python, "
          "torch and CUDA start, warm = a later one)")
        rows, warm, cold, starts, correct_bad, warm_evs = [], [], [], [], [], []
        for op in self.ops:
            opname = os.path.splitext(kbdrive.OK_OPERATORS[op])[0]
            evs = self.rows_native.get(op) or []
            for i, ev in enumerate(evs):
                st = kbdrive.stages(ev)
                seq = ((ev or {}).get("environment") or {}).get("worker_seq")
                fresh = seq == 1
                n, s = kbdrive.configs_seeds(ev)
                rows.append([opname, "native #%d" % (i + 1), "fresh" if fresh else "warm",
                             fmt(st["build"]), fmt(st["load"]), fmt(st["correctness"]),
                             fmt(st["timing"]), fmt(st["candidate"]), "%s x %s" % (n, s),
                             kbdrive.verdict(ev)])
                if st["candidate"] is not None:
                    (cold if fresh else warm).append(st["candidate"])
                    if not fresh:
                        warm_evs.append(ev)
                    if fresh and st["harness"] is not None and st["total"] is not None:
                        starts.append(st["harness"] - st["total"])
                if kbdrive.verdict(ev) != "verified":
                    correct_bad.append(("ok_%s native #%d" % (op, i + 1), ev))
            if op in self.rows_ext:
                ev = self.rows_ext[op]
                st = kbdrive.stages(ev)
                n, s = kbdrive.configs_seeds(ev)
                # the harness builds an extension: its build is in load
                rows.append([opname, "torch-ext", "fresh", fmt(st["build"]), fmt(st["load"]),
                             fmt(st["correctness"]), fmt(st["timing"]), fmt(st["candidate"]),
                             "%s x %s" % (n, s), kbdrive.verdict(ev)])
                if kbdrive.verdict(ev) != "verified":
                    correct_bad.append(("ext %s" % op, ev))
        p(table(rows, ["operator", "path", "worker", "build s", "load s", "correct s",
                       "timing s", "total s", "configs x seeds", "verdict"]))
        p("(native: %d candidates per operator in one call, one worker; 'build s' is a "
          "candidate's share of their parallel build. torch-ext: torch's loader builds "
          "it inside the harness, so its build is in 'load s'; each in a call of its own, "
          "%d at a time, MAX_JOBS=%s)" % (self.a.variants, self.a.jobs,
                                          self.env.get("MAX_JOBS")))
        p("native, warm worker: median %s s over %d (max %s s); first in a fresh worker: "
          "median %s s over %d, of which the worker's start (harness call minus the "
          "harness's own total) %s s" % (
              fmt(statistics.median(warm)) if warm else "-", len(warm),
              fmt(max(warm)) if warm else "-",
              fmt(statistics.median(cold)) if cold else "-", len(cold),
              fmt(statistics.median(starts)) if starts else "-"))
        return {"warm": warm, "cold": cold, "starts": starts, "correct_bad": correct_bad,
                "warm_evs": warm_evs}

    def report_fresh(self, p):
        """1b: the verify --fresh candidates; their totals for the checks."""
        if "fresh" not in self.sections:
            p("1b. kernelbot verify --fresh: not run (--sections)")
            return {"fresh_ok": [], "fresh_ok_evs": [], "fresh_rej": [], "fresh_bad": [],
                    "fresh_hacks": []}
        p("1b. kernelbot verify --fresh (a harness process per candidate, a state of its own): "
          "ok_relu copies timed, rejected kernels untimed as in section 3")
        rows, ok, ok_evs, rej, bad, hacks = [], [], [], [], [], []
        kinds = [("correct", str(i + 1), e) for i, e in enumerate(self.fresh_ok)]
        kinds += [("rejected", k, e) for k, e in sorted(self.fresh_rejects.items())]
        for kind, name, ev in kinds:
            st = kbdrive.stages(ev)
            n, s = kbdrive.configs_seeds(ev)
            label = "ok_relu #%s" % name if kind == "correct" else name
            rows.append([label, kind, fmt(st["build"]), fmt(st["harness"]), fmt(st["candidate"]),
                         "%s x %s" % (n, s), kbdrive.verdict(ev),
                         ", ".join(sorted(kbdrive.checks(ev))) or "-"])
            if kind == "correct" and kbdrive.verdict(ev) != "verified":
                bad.append(("ok_relu --fresh #%s" % name, ev))
            if kind == "rejected" and not kbdrive.rejection_ok(name, ev)[0]:
                hacks.append(name)
            if st["candidate"] is None:
                continue
            if kind == "correct" and kbdrive.verdict(ev) == "verified":
                ok.append(st["candidate"])
                ok_evs.append(ev)
            elif kind == "rejected" and kbdrive.verdict(ev) == "rejected":
                rej.append(st["candidate"])
        p(table(rows, ["kernel", "kind", "build s", "harness s", "total s", "configs x seeds",
                       "verdict", "checks"]))
        if any(kbdrive.verdict(e) != "verified" for e in self.fresh_ok):
            p("(a correct copy not verified is left out of the correct / fresh figure)")
        return {"fresh_ok": ok, "fresh_ok_evs": ok_evs, "fresh_rej": rej, "fresh_bad": bad,
                "fresh_hacks": hacks}

    def rejected_warm(self):
        """Section 3's rejected candidates after the first of their call
        (worker_seq > 1): totals of those that reached the harness."""
        out = []
        for name in sorted(self.rejects):
            ev = self.rejects[name][0]
            seq = ((ev or {}).get("environment") or {}).get("worker_seq")
            st = kbdrive.stages(ev)
            if (kbdrive.verdict(ev) == "rejected" and isinstance(seq, int) and seq > 1
                    and st["candidate"] is not None):
                out.append(st["candidate"])
        return out

    def report_spread(self, p):
        if "spread" not in self.sections:
            p("2. Repeated timing: not run (--sections)")
            return {"kernel_spread": None, "speedup_spread": None, "per": {}, "ran": False}
        small = self.report_spread_set(p, self.spread_evs, "at kb_relu's own sizes")
        p()
        large = self.report_spread_set(p, self.spread_large_evs,
                                       "at bandwidth-bound sizes (64 MB per tensor)")
        # the target: configs whose kernel takes long enough to be the
        # kernel's own time, from both sets
        judged = {}
        for label, res in (("small", small), ("large", large)):
            for n, sp in res["per"].items():
                if res["long"].get(n):
                    judged["%s/%s" % (label, n)] = sp
        gk = None
        if judged:
            vals = [v for v in judged.values() if v is not None]
            gk = max(vals) if vals else None
        p()
        p("configs judged for the 2%% target (kernel median >= %.3f ms in every run): %d; "
          "largest spread %s%s" % (SPREAD_MIN_MS, len(judged), pct(gk),
                                   " (%s)" % max(judged, key=lambda k: judged[k] or 0)
                                   if judged else ""))
        return {"kernel_spread": gk, "speedup_spread": large["speedup_spread"],
                "per": judged, "small": small, "ran": True}

    def report_spread_set(self, p, evs, what):
        p("2. Repeated timing %s: ok_relu timed %d times in one worker (seeds 1), before "
          "anything else used the device" % (what, len(evs)))
        g = [kbdrive.geomean_speedup(ev) for ev in evs]
        meds = [kbdrive.kernel_medians(ev) for ev in evs]
        tims = [kbdrive.config_timings(ev) for ev in evs]
        gk = [kbdrive.geomean_of(m.values()) if m else None for m in meds]
        rows = []
        for i, (ev, gm, gkm, m) in enumerate(zip(evs, g, gk, meds)):
            rows.append([i + 1, kbdrive.verdict(ev), fmt(gm, 4) + ("x" if gm else ""),
                         fmt(gkm, 5), len(m)])
        p(table(rows, ["run", "verdict", "geomean speedup vs eager",
                       "geomean kernel median ms", "timed configs"]))
        names = sorted(set.intersection(*(set(m) for m in meds))) if meds and all(meds) else []
        res = {"kernel_spread": None, "speedup_spread": None, "per": {}, "long": {}}
        if not names:
            p("no timings to compare")
            return res
        per = {n: kbdrive.spread([m[n] for m in meds]) for n in names}
        gks = kbdrive.spread(gk)
        gs = kbdrive.spread(g)
        res.update(kernel_spread=gks, speedup_spread=gs, per=per,
                   long={n: all(m[n] >= SPREAD_MIN_MS for m in meds) for n in names})
        verdict = lambda x: "met" if x is not None and x <= SPREAD_TARGET else "missed"  # noqa: E731
        p("geomean kernel median spread (max/min - 1): %s, target 2%%: %s" % (pct(gks), verdict(gks)))
        p("geomean speedup spread: %s, target 2%%: %s" % (pct(gs), verdict(gs)))
        worst = max(per, key=lambda k: per[k])
        within = sum(1 for n in names if per[n] is not None and per[n] <= SPREAD_TARGET)
        p("per-config kernel median spread: median %s, max %s (%s); %d of %d configs "
          "within 2%%" % (pct(statistics.median(per.values())), pct(per[worst]), worst,
                          within, len(names)))
        methods = {}
        for t in tims:
            for n in names:
                m = (t.get(n) or {}).get("method") or "?"
                methods.setdefault(m, set()).add(n)
        p("timing methods: " + ", ".join("%s for %d config(s)" % (m, len(v))
                                         for m, v in sorted(methods.items())))
        reasons = sorted({(t.get(n) or {}).get("method_reason") or "" for t in tims for n in names
                          if (t.get(n) or {}).get("method") == "events"} - {""})
        for r in reasons[:4]:
            p("  events because: %s" % r)
        rows = []
        for n in names:
            ms = [(t.get(n) or {}).get("method") or "?" for t in tims]
            cis = [((t.get(n) or {}).get("kernel") or {}).get("ci_rel") for t in tims]
            cis = [c for c in cis if c is not None]
            batch = [((t.get(n) or {}).get("kernel") or {}).get("batch") for t in tims]
            rows.append([n] + [fmt(m[n], 5) for m in meds] + [
                pct(per[n]), "/".join(sorted(set(ms))),
                "/".join(str(b) for b in sorted({b for b in batch if b})) or "-",
                pct(max(cis)) if cis else "-"])
        p(table(rows, ["config"] + ["run %d ms" % (i + 1) for i in range(len(meds))] +
                ["spread", "method", "batch", "max ci"]))
        p("('max ci': the largest half-width of a run's 95% confidence interval of the "
          "kernel median, relative)")
        return res

    def report_rejections(self, p):
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
        return all_rejected

    def report_sandbox(self, p):
        """5.: the median candidate with the sandbox on against off."""
        if "sandbox" not in self.sections:
            p("5. The sandbox's cost: not run (--sections)")
            return None
        p("5. The sandbox's cost: per-candidate total (static + build + harness, seconds) "
          "of ok_relu on kb_relu, timed without the cache flush, [sandbox] on and off "
          "alternating call by call, "
          "%d rounds x %d candidates" % (self.rounds(), self.a.variants))
        rows, worst = [], None
        for fresh in (False, True):
            on = self.sandbox_totals.get((True, fresh)) or []
            off = self.sandbox_totals.get((False, fresh)) or []
            if not on or not off:
                rows.append(["fresh process" if fresh else "worker", "-", "-", "-"])
                continue
            mon, moff = statistics.median(on), statistics.median(off)
            added = mon / moff - 1.0
            worst = added if worst is None else max(worst, added)
            rows.append(["fresh process" if fresh else "worker",
                         "%s (%d)" % (fmt(mon, 3), len(on)), "%s (%d)" % (fmt(moff, 3), len(off)),
                         pct(added)])
        for fresh in (False, True):
            for first in (True, False):
                on = self.sandbox_totals.get((True, fresh, first)) or []
                off = self.sandbox_totals.get((False, fresh, first)) or []
                if on and off:
                    mon, moff = statistics.median(on), statistics.median(off)
                    rows.append(["  %s, %s of a call" % ("fresh" if fresh else "worker",
                                                         "first" if first else "later"),
                                 "%s (%d)" % (fmt(mon, 3), len(on)),
                                 "%s (%d)" % (fmt(moff, 3), len(off)), pct(mon / moff - 1.0)])
        p(table(rows, ["evaluation", "sandbox on: median s (n)", "off: median s (n)",
                       "added"]))
        return worst

    def report_speed(self, p, native):
        """The four speed figures of issue 15: correct and rejected, warm
        and fresh, each against its target."""
        p("seconds per native candidate at %d configs x %d seeds requested (rejected ones "
          "stop at their first failing trial); warm = after the first candidate of one "
          "worker, fresh = kernelbot verify --fresh, a process per candidate:" % (
              self.a.configs, self.a.seeds))
        ran = {k: k in self.sections for k in ("natives", "rejections", "fresh")}
        for what, sec, totals, target, note in (
                ("correct / warm", "natives", native["warm"], WARM_TARGET_S,
                 "baselines: " + baseline_cache_use(native["warm_evs"])),
                ("correct / fresh", "fresh", native["fresh_ok"], FRESH_TARGET_S,
                 "baselines: " + baseline_cache_use(native["fresh_ok_evs"])),
                ("rejected / warm", "rejections", self.rejected_warm(), WARM_TARGET_S,
                 "section 3, untimed"),
                ("rejected / fresh", "fresh", native["fresh_rej"], FRESH_TARGET_S,
                 "section 1b, untimed")):
            if not ran[sec]:
                p("median seconds per native candidate, %s: not run (--sections)" % what)
            else:
                p(median_line(what, totals, target, note))

    def report_checks(self, p, native, spread, all_rejected, sandbox_added=None):
        p("4. Checks")
        n_rej = len(self.rejects)
        fresh_note = ("; NOT under --fresh: " + ", ".join(native["fresh_hacks"])
                      if native["fresh_hacks"] else "")
        if "rejections" in self.sections:
            all_rejected = all_rejected and not native["fresh_hacks"]
            p("every hack rejected for its reason: %s (%d/%d)%s" % (
                "yes" if all_rejected and n_rej else "NO",
                sum(1 for k in self.rejects if kbdrive.rejection_ok(k, self.rejects[k][0])[0]),
                n_rej, fresh_note))
        else:
            p("every hack rejected for its reason: not run (--sections)" + fresh_note)
        correct_bad = native["correct_bad"]
        n_correct = (sum(len(v) for v in self.rows_native.values()) + len(self.rows_ext) +
                     len(self.fresh_ok))
        if not {"natives", "torch-ext", "fresh"} & set(self.sections):
            p("no correct kernel rejected: not run (--sections)")
        else:
            p("no correct kernel rejected: %s (%d correct candidates%s)" % (
              "yes" if not correct_bad and n_correct else "NO", n_correct,
            "; rejected: " + "; ".join("%s: %s %s" % (k, kbdrive.verdict(e), sorted(kbdrive.checks(e)))
                                       for k, e in correct_bad) if correct_bad else ""))
        self.report_speed(p, native)
        if not spread.get("ran"):
            p("repeated timing: not run (--sections)")
        else:
            gks, small = spread["kernel_spread"], spread["small"]
            p("repeated timing, kernel medians of the configs >= %.3f ms: largest spread %s "
              "over %d configs vs target 2%%: %s; launch-bound (kb_relu's own sizes): "
              "geomean spread %s, per config max %s" % (
                  SPREAD_MIN_MS, pct(gks), len(spread["per"]),
                  "met" if gks is not None and gks <= SPREAD_TARGET else "missed",
                  pct(small["kernel_spread"]),
                  pct(max(small["per"].values())) if small["per"] else "-"))
        if "sandbox" in self.sections:
            p("the sandbox adds to a native candidate's median total: %s (worst of worker "
              "and fresh) vs target %.0f%%: %s" % (
                  pct(sandbox_added), SANDBOX_TARGET * 100,
                  "met" if sandbox_added is not None and sandbox_added <= SANDBOX_TARGET
                  else "missed"))
        if self.shrunk:
            p("left out by the budget (deadline %s s): %s" % (self.a.deadline, "; ".join(self.shrunk)))
        if self.skipped:
            p("NOT RUN (deadline %s s): %s" % (self.a.deadline, "; ".join(self.skipped)))
        if "rejections" not in self.sections:
            all_rejected, n_rej = not native["fresh_hacks"], 1   # not asked for: not a failure
        if not {"natives", "torch-ext", "fresh"} & set(self.sections):
            n_correct = 1
        ok = all_rejected and n_rej and not correct_bad and n_correct and not self.skipped
        return bool(ok)


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
    ap.add_argument("--sandbox-rounds", type=int, default=3,
                    help="pairs of sandbox on/off calls in section 5")
    ap.add_argument("--sections", default=None,
                    help="comma-separated subset of %s (default all)" % ",".join(SECTIONS))
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
    try:
        parse_sections(a.sections)
    except ValueError as e:
        print("bench-eval: --sections: %s" % e, file=sys.stderr)
        return 2
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
