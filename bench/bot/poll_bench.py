#!/usr/bin/env python3
"""Polling cost of the daemon: N idle repositories against the GitHub
simulator (tests/sim/github_sim.py), the daemon polling every second for a
few cycles. Prints, per cycle, the API requests the daemon sent, how many
were answered 304 (no quota spent) and the quota used, checked against the
simulator's own request log; then the daemon's memory (VmRSS, VmHWM from
/proc). Target: one conditional request per repository per cycle, all 304
after the first.

Every tenth repository (--labelled) is idle but watched: a pull request
carries the bot's label (added by a reader, so no job runs) and human
comments. The first cycle reads what a label needs (who added it, their
permission) and the comments (slash commands); after that such a
repository costs the same one 304 as the rest: comments are only read
again when the labelled list changes or a job runs.

    python3 bench/bot/poll_bench.py [--kernelbot build/kernelbot] [--repos 100] [--cycles 6]

Not a test: it prints figures. Needs no torch.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(TOP, "tests", "sim"))

from github_sim import GitHubSim  # noqa: E402

TOKEN = "ghp_pollbench0token"


def proc_mem(pid):
    """(VmRSS, VmHWM) in KiB, None when the process is gone."""
    try:
        with open("/proc/%d/status" % pid) as f:
            vals = {}
            for line in f:
                k, _, v = line.partition(":")
                if k in ("VmRSS", "VmHWM"):
                    vals[k] = int(v.split()[0])
            return vals.get("VmRSS"), vals.get("VmHWM")
    except OSError:
        return None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kernelbot", default=os.path.join(TOP, "build", "kernelbot"))
    ap.add_argument("--repos", type=int, default=100)
    ap.add_argument("--cycles", type=int, default=6)
    ap.add_argument("--labelled", type=int, default=10,
                    help="of the repositories, how many have a labelled pull request")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir")
    a = ap.parse_args(argv)
    if not os.access(a.kernelbot, os.X_OK):
        sys.exit("poll_bench: no kernelbot binary at %s (make first)" % a.kernelbot)

    tmp = tempfile.mkdtemp(prefix="kb-poll-bench-")
    sim = GitHubSim(tokens=(TOKEN + ":kernelbot",)).start()
    try:
        names = ["bench/repo-%03d" % i for i in range(a.repos)]
        step = max(1, a.repos // a.labelled) if a.labelled > 0 else 0
        labelled = set(names[::step][:a.labelled]) if step else set()
        for i, name in enumerate(names):
            sim.add_repo(name, collaborators={"alice": "write", "mallory": "read"})
            # idle, not empty: issues and a pull request
            sim.add_issues(name, title="issue", count=3)
            n = sim.add_pull(name, head={"ref": "f%d" % i, "sha": "%040x" % (i + 1)},
                             base={"ref": "main"}, files=["README.md"],
                             labels=["bug", "optimize-kernel"] if name in labelled else ["bug"],
                             labeled_by="mallory" if name in labelled else "alice")
            if name in labelled:
                sim.comment(name, n, "alice", "looks good")
                sim.comment(name, n, "mallory", "+1")
        with open(os.path.join(tmp, "repos.txt"), "w") as f:
            f.write("# the benchmark's repositories\n" + "\n".join(names) + "\n")
        cfg = os.path.join(tmp, "bench.ini")
        with open(cfg, "w") as f:
            f.write("[core]\nstate_dir = %s\nlog_level = debug\n" % os.path.join(tmp, "state"))
            f.write("[github]\napi_url = %s\ntoken = %s\n" % (sim.url, TOKEN))
            f.write("[bot]\nforge = github\nrepositories_file = %s\npoll_interval_s = 1\n"
                    % os.path.join(tmp, "repos.txt"))
        sim.clear_requests()
        log_path = os.path.join(tmp, "daemon.log")
        with open(log_path, "w") as log:
            p = subprocess.Popen([a.kernelbot, "daemon", "-c", cfg, "--cycles", str(a.cycles)],
                                 stdout=log, stderr=subprocess.STDOUT)
        rss_max = hwm = 0
        t0 = time.time()
        while p.poll() is None:
            m = proc_mem(p.pid)
            if m and m[0]:
                rss_max = max(rss_max, m[0])
                hwm = max(hwm, m[1] or 0)
            time.sleep(0.05)
            if time.time() - t0 > 120:
                p.kill()
                sys.exit("poll_bench: the daemon did not finish in 120 s (see %s)" % log_path)
        if p.returncode:
            sys.exit("poll_bench: the daemon failed (exit %d, see %s)" % (p.returncode, log_path))
        wall = time.time() - t0

        with open(log_path) as f:
            log_text = f.read()
        cycles = [tuple(int(x) for x in m.groups()) for m in re.finditer(
            r"poll cycle (\d+): (\d+) repositories, (\d+) requests, (\d+) not modified", log_text)]
        reqs = sim.requests()
        sim_total = len(reqs)
        sim_304 = sum(1 for r in reqs if r["status"] == 304)
        sim_bad = [r for r in reqs if r["status"] not in (200, 304)]
        mutating = [r for r in reqs if r["method"] != "GET"]

        print("kernelbot daemon polling %d idle repositories, %d with a labelled pull request"
              " (github simulator, loopback)" % (a.repos, len(labelled)))
        print()
        print("| cycle | repositories | requests | 304 (free) | quota used | requests per repository |")
        print("| --: | --: | --: | --: | --: | --: |")
        for n, r, q, nm in cycles:
            print("| %d | %d | %d | %d | %d | %.2f |" % (n, r, q, nm, q - nm, q / r if r else 0))
        print()
        print("simulator log: %d requests, %d answered 304, %d mutating, %d errors"
              % (sim_total, sim_304, len(mutating), len(sim_bad)))
        print("daemon memory: VmRSS peak %.1f MiB, VmHWM %.1f MiB; %d cycles in %.1f s"
              % (rss_max / 1024, hwm / 1024, len(cycles), wall))
        # the first cycle: one list each, plus what a labelled pull request
        # needs once (its head, who labelled it and may they, the comments)
        first = reqs[:cycles[0][2]] if cycles else []
        extra = [r for r in first if not re.fullmatch(r"/repos/[^/]+/[^/]+/issues", r["path"])]
        kinds = {}
        for r in extra:
            k = re.sub(r"^/repos/[^/]+/[^/]+", "", r["path"])
            k = re.sub(r"/\d+", "/N", k) or "/"
            kinds[k] = kinds.get(k, 0) + 1
        print("first cycle: %d list requests, %d more for %d labelled pull requests: %s"
              % (len(first) - len(extra), len(extra), len(labelled),
                 ", ".join("%s %d" % kv for kv in sorted(kinds.items())) or "none"))
        ok = (len(cycles) == a.cycles and cycles[0][2] >= a.repos and
              all(q == r for _, r, q, _ in cycles[1:]) and
              all(nm == r for _, r, _, nm in cycles[1:]) and
              sum(q for _, _, q, _ in cycles) == sim_total and not mutating and not sim_bad)
        print("target (one conditional request per repository, all 304 after the first cycle): %s"
              % ("met" if ok else "MISSED"))
        return 0 if ok else 1
    finally:
        sim.stop()
        if a.keep:
            print("kept %s" % tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
