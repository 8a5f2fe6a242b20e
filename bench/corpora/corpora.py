"""make bench-corpora: external kernel corpora through the verifier, each
kernel's verdict beside what its source published.

Corpora (each a checkout given on the command line; none is vendored):
- robust-kbench (SakanaAI/robust-kbench): the kernels of highlighted/, each
  "correct" in highlighted/results.csv with a speedup, on their own task
  folders (tasks/<task>), forward and backward;
- KernelBench's adversarial kernels (ScalingIntelligence/KernelBench,
  src/kernelbench/unit_tests/test_kernels/*.py) in their original form, on
  the problem its test uses (level1/1_Square_matrix_multiplication_.py);
- published LLM-written KernelBench solutions: the KernelBench leaderboard
  (anneouyang/KernelBenchLeaderboard, docs/assets/data.json and
  solutions/): per level (1 and 2), the --pick problems whose best
  solution claims the highest speedup over torch, that solution each.

Every kernel is verified in the bot's strict mode; one that is rejected
there, or that published a speedup, is also evaluated (and timed, with
`kernelbot bench`) in KernelBench's mode (--stream-mode kernelbench), the
semantics its claim was measured under. The report (OUT/bench-corpora-
report.txt) has one row per kernel: claim, strict verdict and its first
reason, KernelBench-mode verdict and geomean speedup, agreement.
"""
import argparse
import concurrent.futures
import csv
import io
import json
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(TOP, "bench", "eval"))

import kbdrive  # noqa: E402

ARGS = ["--seeds", "2", "--max-configs", "3", "--timeout", "900"]


class Item:
    def __init__(self, source, name, op, kernel, pass_="forward", claim=None):
        self.source, self.name, self.op, self.kernel = source, name, op, kernel
        self.pass_, self.claim = pass_, claim or {}
        self.strict = self.kb = None


def _git_show(repo, path):
    """A file of a checkout: the work tree, else the git object (a bare mirror)."""
    p = os.path.join(repo, path)
    if os.path.isfile(p):
        with open(p, encoding="utf-8", errors="replace") as f:
            return f.read()
    return subprocess.run(["git", "-C", repo, "show", "HEAD:" + path], capture_output=True,
                          text=True, check=True).stdout


def _git_ls(repo, prefix):
    base = os.path.join(repo, prefix)
    if os.path.isdir(base):
        return sorted(os.path.relpath(os.path.join(d, f), repo)
                      for d, _, fs in os.walk(base) for f in fs)
    out = subprocess.run(["git", "-C", repo, "ls-tree", "-r", "--name-only", "HEAD", prefix],
                         capture_output=True, text=True, check=True).stdout
    return out.split()


def _materialize(repo, path, dest):
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    with open(dest, "w", encoding="utf-8") as f:
        f.write(_git_show(repo, path))
    return dest


def robust_kbench(repo, work):
    rows = list(csv.DictReader(io.StringIO(_git_show(repo, "highlighted/results.csv"))))
    items = []
    for r in rows:
        task, fwd = r["task_name"], r["forward"] == "True"
        pass_ = "forward" if fwd else "backward"
        kpath = "highlighted/%s/%s/kernel.cu" % (task, pass_)
        tdir = os.path.join(work, "rk", "tasks", task)
        for f in _git_ls(repo, "tasks/%s" % task):
            _materialize(repo, f, os.path.join(tdir, os.path.basename(f)))
        k = _materialize(repo, kpath, os.path.join(work, "rk", "kernels", task, pass_, "kernel.cu"))
        items.append(Item("robust-kbench", "%s/%s" % (task, pass_), tdir, k, pass_, {
            "correct": r["Correct"] == "True", "speedup": float(r["Speedup"] or 0) or None,
            "speedup_compile": float(r["Speedup Compile"] or 0) or None}))
    return items


def kernelbench_adversarial(repo, work):
    op = _materialize(repo, "KernelBench/level1/1_Square_matrix_multiplication_.py",
                      os.path.join(work, "kb", "level1", "1_Square_matrix_multiplication_.py"))
    items = []
    for f in _git_ls(repo, "src/kernelbench/unit_tests/test_kernels"):
        if f.endswith(".py"):
            k = _materialize(repo, f, os.path.join(work, "kb", "adversarial", os.path.basename(f)))
            items.append(Item("kernelbench-adversarial", os.path.basename(f)[:-3], op, k,
                              claim={"correct": False, "speedup": None,
                                     "note": "adversarial: must not pass"}))
    return items


def leaderboard(repo, kb_repo, work, pick):
    data = json.loads(_git_show(repo, "docs/assets/data.json"))
    levels = {}
    for key, sols in data.items():
        m = re.match(r"Level (\d+): (.+)$", key)
        if not m or not sols:
            continue
        levels.setdefault(int(m.group(1)), []).append((m.group(2), sols))
    items = []
    for level in (1, 2):
        # the highest claims first: the ones a user would take, and the ones
        # a broken harness would have inflated
        best_of = [(prob, max(sols, key=lambda s: s.get("torch_speedup") or 0))
                   for prob, sols in levels.get(level, [])]
        best_of.sort(key=lambda pb: -(pb[1].get("torch_speedup") or 0))
        taken = 0
        for prob, best in best_of:
            if taken == pick:
                break
            try:  # a problem renamed in KernelBench since the leaderboard: skipped
                op = _materialize(kb_repo, "KernelBench/level%d/%s.py" % (level, prob),
                                  os.path.join(work, "lb", "level%d" % level, prob + ".py"))
            except (subprocess.CalledProcessError, OSError):
                print("leaderboard: no KernelBench file for level %d %s; skipped" % (level, prob))
                continue
            taken += 1
            k = _materialize(repo, "docs/assets/solutions/%s.py" % best["file"],
                             os.path.join(work, "lb", "solutions", "l%d_%s_%s.py"
                                          % (level, prob.split("_", 1)[0], best["file"][:8])))
            items.append(Item("leaderboard", "L%d %s (%s)" % (level, prob, best["display_name"]),
                              op, k, claim={"correct": True,
                                            "speedup": best.get("torch_speedup")}))
    return items


def _run_one(binary, config, item, mode, outdir, timing):
    d = os.path.join(outdir, re.sub(r"[^A-Za-z0-9_.-]+", "_", "%s-%s-%s" % (
        item.source, item.name, mode)))
    os.makedirs(d, exist_ok=True)
    cfg = kbdrive._config_with_state(config, os.path.join(d, "state"),
                                     os.path.join(d, "config.ini"))
    args = ARGS + ["--pass", item.pass_, "--stream-mode", mode]
    kb = kbdrive.Kernelbot(binary, cfg)
    if timing:
        run = kb.bench(item.op, item.kernel, os.path.join(d, "ev.json"), args, 1500)
    else:
        run = kb.verify(item.op, [item.kernel], d, args + ["--no-timing"], 1500)
    ev = next(iter(run.evidence.values()), None)
    return {"rc": run.rc, "wall_s": round(run.wall_s, 1), "ev": ev,
            "log": run.log()[-1500:] if ev is None else ""}


def _summary(res):
    if res is None:
        return "-", "", None
    ev = res["ev"]
    if ev is None:
        return "no evidence (rc %s)" % res["rc"], res["log"].strip().splitlines()[-1:] or "", None
    reasons = ev.get("reasons") or []
    first = "%s: %s" % (reasons[0]["check"], reasons[0]["message"][:160]) if reasons else ""
    sp = (ev.get("summary") or {}).get("geomean_speedup_eager")
    return ev.get("verdict"), first, sp


def _agrees(item):
    claim_ok = bool(item.claim.get("correct"))
    v, _, _ = _summary(item.kb if item.kb is not None else item.strict)
    return (v == "verified") == claim_ok


def report(items, path):
    lines = ["# bench-corpora: external kernels, kernelbot's verdict beside the published claim",
             "# strict: the bot's mode; kernelbench: --stream-mode kernelbench (KernelBench's own",
             "# semantics, the claims' own), timed with `kernelbot bench` when a speedup was claimed",
             ""]
    fmt = "%-24s %-58s %-9s %-8s | %-9s %-9s %-8s | %s"
    lines.append(fmt % ("source", "kernel", "claim", "claim x", "strict", "kb-mode", "kb x",
                        "agrees / first reason (strict, else kb-mode)"))
    agree = 0
    for it in items:
        sv, sfirst, _ = _summary(it.strict)
        kv, kfirst, ksp = _summary(it.kb)
        ok = _agrees(it)
        agree += ok
        claim_x = it.claim.get("speedup")
        lines.append(fmt % (it.source, it.name[:58],
                            "correct" if it.claim.get("correct") else "wrong",
                            "%.2f" % claim_x if claim_x else "-", sv, kv,
                            "%.2f" % ksp if ksp else "-",
                            ("yes" if ok else "NO") + " " + (sfirst or kfirst)))
    lines += ["", "%d kernels, %d agree with the published verdict (kernelbench mode where run)"
              % (len(items), agree)]
    text = "\n".join(lines) + "\n"
    with open(path, "w") as f:
        f.write(text)
    return text


def _run_all(ex, a, cfg, items, runs, t0):
    """Strict runs first; a kernelbench-mode run for each one rejected or
    with a claimed speedup, while 60% of the deadline is left. --modes
    kernelbench: every kernel in that mode only (a second run that
    completes a first one the deadline cut); --modes strict: no second."""
    left = lambda: max(1.0, a.deadline - (time.monotonic() - t0))
    modes = a.modes.split(",")
    kbf = {}
    if "strict" not in modes:
        for it in items:
            kbf[ex.submit(_run_one, a.bin, cfg, it, "kernelbench", runs,
                          bool(it.claim.get("speedup")))] = it
        for f in concurrent.futures.as_completed(kbf, timeout=left()):
            kbf[f].kb = f.result()
        return
    strict = {ex.submit(_run_one, a.bin, cfg, it, "strict", runs, False): it for it in items}
    for f in concurrent.futures.as_completed(strict, timeout=left()):
        it = strict[f]
        it.strict = f.result()
        v, _, _ = _summary(it.strict)
        if "kernelbench" in modes and (v != "verified" or it.claim.get("speedup")) and \
                time.monotonic() - t0 < a.deadline * 0.6:
            kbf[ex.submit(_run_one, a.bin, cfg, it, "kernelbench", runs,
                          bool(it.claim.get("speedup")))] = it
    for f in concurrent.futures.as_completed(kbf, timeout=left()):
        kbf[f].kb = f.result()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--python", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--robust-kbench")
    ap.add_argument("--kernelbench")
    ap.add_argument("--leaderboard")
    ap.add_argument("--pick", type=int, default=6, help="leaderboard problems per level")
    ap.add_argument("--jobs", type=int, default=6)
    ap.add_argument("--deadline", type=float, default=560, help="seconds for the whole run")
    ap.add_argument("--modes", default="strict,kernelbench",
                    choices=("strict,kernelbench", "strict", "kernelbench"),
                    help="kernelbench alone: every kernel in that mode, none strict")
    a = ap.parse_args()
    t0 = time.monotonic()
    os.makedirs(a.workdir, exist_ok=True)
    os.makedirs(a.out, exist_ok=True)
    cfg = kbdrive.write_config(os.path.join(a.workdir, "config.ini"),
                               os.path.join(a.workdir, "state"), python=a.python,
                               baselines="eager")
    items = []
    if a.robust_kbench:
        items += robust_kbench(a.robust_kbench, a.workdir)
    if a.kernelbench:
        items += kernelbench_adversarial(a.kernelbench, a.workdir)
    if a.leaderboard and a.kernelbench:
        items += leaderboard(a.leaderboard, a.kernelbench, a.workdir, a.pick)
    if not items:
        ap.error("no corpus given (--robust-kbench, --kernelbench, --leaderboard)")
    runs = os.path.join(a.workdir, "runs")
    ex = concurrent.futures.ThreadPoolExecutor(a.jobs)
    try:
        _run_all(ex, a, cfg, items, runs, t0)
    except concurrent.futures.TimeoutError:
        # the deadline: stop what still runs, report what finished
        kbdrive.stop_all()
        print("bench-corpora: deadline %.0f s reached; unfinished kernels are '-'" % a.deadline)
    ex.shutdown(wait=True, cancel_futures=True)
    text = report(items, os.path.join(a.out, "bench-corpora-report.txt"))
    with open(os.path.join(a.out, "bench-corpora.json"), "w") as f:
        json.dump([{"source": it.source, "name": it.name, "claim": it.claim,
                    "strict": it.strict and dict(it.strict, ev=None, verdict=_summary(it.strict)),
                    "kernelbench": it.kb and dict(it.kb, ev=None, verdict=_summary(it.kb))}
                   for it in items], f, indent=1, default=str)
    subprocess.run(["tar", "czf", os.path.join(a.out, "bench-corpora-evidence.tar.gz"),
                    "--exclude=state", "-C", runs, "."], check=False)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
