"""bench/search (make bench-search): the overhead arithmetic on a made-up
run, and the whole benchmark end to end on the CPU backend with a tight
deadline (the real binary, the LLM simulator, real builds and harness).
The robust-kbench-style baseline builds a torch extension per candidate
(about a minute here), so the end-to-end run skips it: the suite keeps one
extension build (test_harness_ext.py)."""
import json
import os
import sqlite3
import subprocess
import sys
import types

import pytest

TOP = os.environ.get("KB_TOP") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("KB_BIN") or os.path.join(TOP, "build", "kernelbot")
BENCH = os.path.join(TOP, "bench", "search", "bench_search.py")
sys.path.insert(0, os.path.join(TOP, "bench", "search"))

import bench_search as B  # noqa: E402
import machine_load  # noqa: E402  (beside this file)


def _fake_run(work, final_cached=False):
    """A state DB, kernel.json and evidence.json as `kernelbot run` leaves them."""
    os.makedirs(os.path.join(work, "state"))
    os.makedirs(os.path.join(work, "out"))
    con = sqlite3.connect(os.path.join(work, "state", "kernelbot.db"))
    con.executescript(
        "CREATE TABLE searches (id INTEGER PRIMARY KEY, wall_s REAL);"
        "CREATE TABLE candidates (id INTEGER PRIMARY KEY, search_id INTEGER, proposer TEXT,"
        " verdict TEXT, evidence TEXT);"
        "CREATE TABLE llm_calls (id INTEGER PRIMARY KEY, search_id INTEGER, status TEXT,"
        " latency_ms INTEGER, purpose TEXT);")
    con.execute("INSERT INTO searches VALUES (1, 30.0)")
    st = lambda b, h: json.dumps({"stages": {"static_s": 0.01, "build_s": b, "harness_s": h}})
    rows = [(1, 1, "template", "verified", st(0.5, 20.0)),   # judged before the search
            (2, 1, "translate", "verified", st(1.0, 8.0)),
            (3, 1, "translate", "rejected", st(1.0, 2.0)),
            (4, 1, "mutate", "static", None),
            (5, 1, "mutate", "filtered", None),
            (6, 1, "mutate", "build", st(2.0, 0.0)),
            (7, 2, "mutate", "verified", st(9.0, 9.0))]      # another search
    con.executemany("INSERT INTO candidates VALUES (?, ?, ?, ?, ?)", rows)
    con.executemany("INSERT INTO llm_calls (search_id, status, latency_ms, purpose) "
                    "VALUES (?, ?, ?, ?)",
                    [(1, "ok", 500, "translate")] * 7 + [(1, "server_error", 1000, "mutate"),
                                                         (2, "ok", 99999, "mutate")])
    con.commit()
    con.close()
    with open(os.path.join(work, "out", "kernel.json"), "w") as f:
        json.dump({"search": {"search_id": 1, "wall_s": 30.0, "candidates": 5},
                   "templates": {"seconds": 12.5}}, f)
    with open(os.path.join(work, "out", "evidence.json"), "w") as f:
        json.dump({"stages": {"static_s": 0.0, "build_s": 0.5, "harness_s": 4.5}}, f)
    with open(os.path.join(work, "run.err"), "w") as f:
        f.write("[final check] #2 translate%s: 2.00x\n" % (" (cached)" if final_cached else ""))


@pytest.mark.parametrize("cached", [False, True])
def test_overhead_arithmetic(tmp_path, cached):
    work = str(tmp_path)
    _fake_run(work, cached)
    b = B.Bench.__new__(B.Bench)
    b.work = work
    s = {}
    b.collect(os.path.join(work, "out"), s)
    m = s["measure"]
    assert m["candidates"] == 5 and m["ran_in_harness"] == 2 and m["built"] == 3
    assert m["verdicts"] == {"verified": 1, "rejected": 1, "static": 1, "filtered": 1, "build": 1}
    assert m["build_s"] == 4.0 and m["harness_s"] == 10.0
    assert m["llm_calls"] == 8 and m["llm_failed"] == 1 and m["llm_latency_s"] == 4.5
    final = 0.0 if cached else 5.0
    assert m["final_check_s"] == final
    assert m["overhead_s"] == pytest.approx(30.0 - 4.0 - 10.0 - final - 4.5)
    assert m["overhead_per_candidate_ms"] == pytest.approx(1000 * m["overhead_s"] / 5, abs=0.1)
    assert s["templates_s"] == 12.5


def test_report_tables_and_checks(tmp_path):
    a = types.SimpleNamespace(deadline=100, seed=1)
    b = B.Bench.__new__(B.Bench)
    b.a, b.backend = a, "cuda"
    b.res = {"operator": "tests/operators/kb_relu.py", "elapsed_s": 95.0,
             "search": {"measure": {"search_wall_s": 60.0, "candidates": 30, "ran_in_harness": 20,
                                    "llm_calls": 90, "llm_latency_s": 0.2, "build_s": 10.0,
                                    "harness_s": 40.0, "final_check_s": 5.0, "overhead_s": 4.8,
                                    "overhead_per_candidate_ms": 160.0,
                                    "overhead_per_call_ms": 53.3, "verdicts": {"verified": 9}},
                        "rc": 0},
             "baseline": {"completed": 1, "wall_s": 66.0, "candidates": [{"wall_s": 66.0}]}}
    text, ok = b.report()
    assert ok
    assert "Candidates per GPU-hour" in text and "robust-kbench style" in text
    assert "1200" in text   # 20 candidates in 60 s
    assert "55" in text     # 1 in 66 s
    assert b.res["speedup_per_candidate"] == 22.0
    b.res["elapsed_s"] = 130.0
    b.res["baseline"] = {"completed": 0, "candidates": [{"wall_s": 80.0}], "wall_s": 0}
    text, ok = b.report()
    assert not ok and "> 80.00" in text
    assert "finished within the deadline (+10%): 130 s of 100: no" in text


def test_baseline_candidates_follow_the_simulator():
    b = B.Bench.__new__(B.Bench)
    b.a = types.SimpleNamespace(seed=3)
    b.backend, b.key = "cpu", "kb_relu"
    gen = b.baseline_candidates()
    got = [next(gen) for _ in range(40)]
    assert [k for k, _, _ in got] == list(range(1, 41))
    assert all("kb_forward" in code for _, _, code in got)
    first = {}
    for _, e, code in got:
        if e.name in first:
            assert code != first[e.name] and "kb_sim_variant_" in code  # a new kernel
        else:
            first[e.name] = code


@pytest.mark.skipif(not os.access(BIN, os.X_OK), reason="kernelbot binary not built")
def test_bench_search_end_to_end_on_cpu(tmp_path):
    """The bench fills a 60 s deadline. How much fits and how long things
    take depend on the CPU the run got: timing is judged as shares of what
    was measured side by side (the run past its budget against its final
    check, the bot's overhead against the search's wall time), and only on
    a machine no other job loaded meanwhile (machine_load); the rest always."""
    work, out = str(tmp_path / "work"), str(tmp_path / "out")
    py = os.environ.get("KERNELBOT_PYTHON") or "/usr/bin/python3"
    inc = os.path.join(os.path.dirname(BIN), "include")
    load = machine_load.Contention()
    p = subprocess.run([sys.executable, BENCH, "--bin", BIN, "--backend", "cpu", "--python", py,
                        "--workdir", work, "--out", out, "--deadline", "60",
                        "--baseline-candidates", "0", "--include", inc],
                       capture_output=True, text=True, timeout=600, cwd=TOP)
    # 1: a check line said no (judged below); anything else: it could not run
    assert p.returncode in (0, 1), p.stdout[-3000:] + p.stderr[-3000:]
    with open(os.path.join(out, "bench-search-results.json")) as f:
        res = json.load(f)
    # `kernelbot run` succeeded, or the bench killed it at the deadline: a timing matter
    assert res["search"]["rc"] == 0 or res["search"]["timed_out"], res["search"]
    load.judge(not res["search"]["timed_out"], "`kernelbot run` killed at the deadline")
    m = res["search"]["measure"]
    if m["candidates"]:
        assert m["search_wall_s"] >= m["harness_s"]
    assert res["search"]["sim"]["requests"] == m["llm_calls"]
    text = open(os.path.join(out, "bench-search-report.txt")).read()
    assert "The bot's own overhead per candidate" in text and "per CPU-hour" in text
    assert "baseline skipped" in text
    assert res["checks"] and "checks:" in text
    assert (p.returncode == 0) == all(res["checks"].values()), (p.returncode, res["checks"])

    # Timing is judged as shares of what this machine measured, never as
    # seconds it must manage (issue 14: a loaded 2-core machine failed here).
    # The search stops at the budget and its final check runs past it: the
    # rest of the run keeps to the deadline whatever the machine's speed.
    past = res["elapsed_s"] - (m["final_check_s"] or 0.0)
    load.judge(past <= 1.1 * 60, "%.0f s of 60 (+10%%) before the final check (%.0f s in all)"
               % (past, res["elapsed_s"]))
    tmpl = res["search"].get("templates_s") or 0.0
    if not m["candidates"] and tmpl >= 0.75 * 60:
        pytest.skip("the templates took %.0f s of the 60 s deadline on this machine: no time "
                    "was left for the search to judge a candidate" % tmpl)
    load.judge(m["candidates"] >= 1 and m["ran_in_harness"] >= 1 and m["llm_calls"] >= 1,
               "judged %s candidates, %s in the harness, %s model calls"
               % (m["candidates"], m["ran_in_harness"], m["llm_calls"]))
    assert m["overhead_s"] is not None and m["overhead_per_candidate_ms"] is not None, m
    # the bot's own work (all but builds, harness calls and model latency) is
    # a small share of the search's wall time on any machine
    share = m["overhead_s"] / m["search_wall_s"]
    load.judge(-0.1 < share <= 0.25, "overhead %.2f s of a %.1f s search (%.0f%%), %s ms per candidate"
               % (m["overhead_s"], m["search_wall_s"], 100 * share, m["overhead_per_candidate_ms"]))
