#!/usr/bin/env python3
"""How full the model-call slots were: from the LLM simulator's request log
(bench-search-<ms>ms-<n>-llm.log, or gzipped, one JSON object a request with its
arrival "time"), the calls begun in each window of the latency's length
and their mean against the slots (calls in flight allowed). At a fixed
latency a window's count is the calls in flight in it, so a window below
the slots is time the model could have worked and did not.

    call_slots.py LOG --latency-ms 20000 --slots 8
"""
import argparse
import gzip
import json
import sys


def windows(times, window_s):
    """Calls begun in each window_s-long window from the first request on."""
    if not times:
        return []
    t0 = min(times)
    n = int((max(times) - t0) // window_s) + 1
    out = [0] * n
    for t in times:
        out[int((t - t0) // window_s)] += 1
    return out


def read_times(path):
    times = []
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        for ln, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except ValueError as e:
                raise SystemExit("%s:%d: not a JSON object: %s" % (path, ln, e))
            if not isinstance(rec, dict) or not isinstance(rec.get("time"), (int, float)):
                raise SystemExit("%s:%d: a request without a numeric \"time\"" % (path, ln))
            times.append(float(rec["time"]))
    return times


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("log")
    ap.add_argument("--latency-ms", type=float, required=True)
    ap.add_argument("--slots", type=int, required=True)
    a = ap.parse_args(argv)
    if a.latency_ms <= 0 or a.slots < 1:
        raise SystemExit("--latency-ms must be > 0 and --slots >= 1")
    w = windows(read_times(a.log), a.latency_ms / 1000.0)
    if not w:
        raise SystemExit("%s: no requests" % a.log)
    mean = sum(w) / len(w)
    print("calls begun per %g-s window: %s" % (a.latency_ms / 1000.0, " ".join(str(x) for x in w)))
    print("mean %.2f of %d slots (%.0f%%), %d calls" % (mean, a.slots, 100.0 * mean / a.slots, sum(w)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
