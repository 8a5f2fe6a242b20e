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
    # every call the bot recorded reached the simulator: answered, or given up
    # by the bot (its deadline, the budget's stop) while the model was "thinking"
    sim = res["search"]["sim"]
    assert sim["requests"] + sim.get("abandoned", 0) == m["llm_calls"], (sim, m)
    assert sim.get("abandoned", 0) <= m["llm_failed"], (sim, m)
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


# --- --latency-ms: model calls in flight against the serial search (issue 16) ---

import concurrency as CC  # noqa: E402  (bench/search, beside bench_search)


def test_concurrency_options():
    assert CC.parse_list("20000, 2000,20000", "--latency-ms", 0, 600000) == [20000, 2000]
    assert CC.parse_list("1,8", "--in-flight", 1, 256) == [1, 8]
    with pytest.raises(ValueError, match="'2s' is not a whole number"):
        CC.parse_list("2s", "--latency-ms", 0, 600000)
    with pytest.raises(ValueError, match="--in-flight: 0 is out of range 1..256"):
        CC.parse_list("0,8", "--in-flight", 1, 256)
    assert CC.run_seconds(220, 2, None) == 100
    assert CC.run_seconds(1300, 2, 600) == 600
    with pytest.raises(ValueError, match="do not fit"):
        CC.run_seconds(600, 2, 600)
    with pytest.raises(ValueError, match="at least 45"):
        CC.run_seconds(100, 4, None)
    # the command line says what was wrong, exit 2
    p = subprocess.run([sys.executable, BENCH, "--bin", sys.executable, "--backend", "cpu",
                        "--workdir", "/nonexistent/never", "--latency-ms", "2000",
                        "--in-flight", "1,x"], capture_output=True, text=True, cwd=TOP)
    assert p.returncode == 2 and "--in-flight: 'x' is not a whole number" in p.stderr


def _task(proc, state, syscall=None, ticks=(7, 3)):
    d = proc / "42" / "task" / "42"
    d.mkdir(parents=True, exist_ok=True)
    # pid (comm with ') ' inside) state ppid ... utime stime at fields 14 and 15
    rest = [state] + ["0"] * 10 + [str(ticks[0]), str(ticks[1])] + ["0"] * 30
    (d / "stat").write_text("42 (kernel) bot) " + " ".join(rest) + "\n")
    if syscall is None:
        if (d / "syscall").exists():
            (d / "syscall").unlink()
    else:
        (d / "syscall").write_text(syscall + "\n")


def test_thread_sampler_classifies_the_search_thread(tmp_path):
    s = CC.ThreadSampler(42, proc=str(tmp_path))
    s.waits = CC.WAIT_SYSCALLS["x86_64"]  # whatever this machine is
    cases = [("R", None, True),                       # running: the bot's own work
             ("S", "202 0x1 0x2", False),             # futex: waiting for a model call
             ("S", "7 0x1 0x2", False),               # poll: a build or the harness
             ("S", "61 0x1", False),                  # wait4: a child
             ("D", "74 0x3", True),                   # fsync: the bot's own I/O
             ("S", "running", True),                  # woke between the two reads
             ("S", None, False), ("D", None, True)]   # no syscall file: by state
    for state, sc, working in cases:
        _task(tmp_path, state, sc)
        assert s.sample() == (working, 10), (state, sc)
    s.samples = [(10.0, True, 100), (10.5, False, 100), (11.0, False, 103), (11.5, True, 104),
                 (20.0, True, 500)]
    w = s.window(10.0, 12.0)
    assert w["samples"] == 4 and w["working_share"] == 0.5 and w["working_s"] == 1.0
    assert w["cpu_s"] == pytest.approx(4 / os.sysconf("SC_CLK_TCK"))
    assert s.window(30.0, 40.0) is None
    assert CC.ThreadSampler(43, proc=str(tmp_path)).sample() is None  # gone


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="no /proc")
def test_thread_sampler_on_real_threads():
    """A sleeping process is blocked, a spinning one working: shares of the
    samples taken, whatever the machine's speed."""
    shares = {}
    for name, code in (("sleep", "import time; time.sleep(1.5)"),
                       ("spin", "import time\nt = time.time()\nwhile time.time() - t < 1.5: pass")):
        p = subprocess.Popen([sys.executable, "-c", code])
        s = CC.ThreadSampler(p.pid, period=0.01).start()
        p.wait()
        s.stop()
        t = [x[0] for x in s.samples]
        assert len(t) >= 10, name
        shares[name] = s.window(t[len(t) // 5], t[-1])["working_share"]
    assert shares["sleep"] <= 0.2 and shares["spin"] >= 0.8, shares


def _quality_db(path):
    con = sqlite3.connect(path)
    con.executescript("CREATE TABLE candidates (id INTEGER PRIMARY KEY, search_id INTEGER,"
                      " proposer TEXT, verdict TEXT, speedup REAL, cell INTEGER, evidence TEXT,"
                      " source_hash TEXT);")
    ran = json.dumps({"stages": {"build_s": 1.0, "harness_s": 2.0}})
    static = json.dumps({"stages": {"static_s": 0.01, "build_s": 0.0, "harness_s": 0.0}})
    con.executemany("INSERT INTO candidates VALUES (?, ?, ?, ?, ?, ?, ?, ?)", [
        (1, 1, "template", "verified", 5.0, 9, ran, "h1"),   # re-timed each run: left out
        (2, 1, "translate", "verified", 1.2, 3, ran, "h2"),
        (3, 1, "translate", "static", None, None, static, "h3"),
        (4, 1, "mutate", "filtered", None, None, None, "h4"),
        (5, 1, "mutate", "rejected", None, 4, ran, "h5"),
        (6, 1, "mutate", "verified", 1.5, 3, ran, "h6"),
        (7, 1, "mutate", "verified", 2.5, 6, ran, "h7"),
        (8, 2, "mutate", "verified", 9.0, 1, ran, "h8")])    # another search
    con.commit()
    con.close()


def test_quality_at_equal_candidate_counts(tmp_path):
    db = str(tmp_path / "k.db")
    _quality_db(db)
    assert CC.quality(db, 1, 1) == {"n": 1, "best": 1.2, "cells": 1, "timed": {"h2": 1.2}}
    assert CC.quality(db, 1, 3) == {"n": 3, "best": 1.5, "cells": 1, "timed": {"h2": 1.2, "h6": 1.5}}
    assert CC.quality(db, 1, 4)["best"] == 2.5 and CC.quality(db, 1, 4)["cells"] == 2
    assert CC.quality(db, 1, 99)["n"] == 4
    assert CC.quality(db, 3, 5) == {"n": 0, "best": None, "cells": 0, "timed": {}}
    # the same kernels found, timed slower beside other work: judged by the serial run's timing
    serial = {"n": 3, "best": 1.6, "cells": 2, "timed": {"a": 1.6, "b": 0.7}}
    many = {"n": 3, "best": 1.1, "cells": 2, "timed": {"a": 1.1, "b": 0.7, "c": 0.9}}
    assert CC.common_best(serial, many) == (2, 1.6)
    assert CC.common_best(serial, {"timed": {"c": 0.9}}) == (0, 0.9)
    assert CC.common_best(serial, {"timed": {}}) == (0, None)


import call_slots as CS  # noqa: E402  (bench/search)


def test_call_slots_windows_and_mean(tmp_path, capsys):
    assert CS.windows([100.0, 100.5, 119.9, 120.0, 165.0], 20.0) == [3, 1, 0, 1]  # an empty window is idle
    assert CS.windows([], 20.0) == []
    log = tmp_path / "llm.log"
    log.write_text("".join(json.dumps({"time": 1000.0 + t, "purpose": "kernel"}) + "\n"
                           for t in (0, 1, 2, 3, 25, 41)))
    assert CS.main([str(log), "--latency-ms", "20000", "--slots", "4"]) == 0
    out = capsys.readouterr().out
    assert "calls begun per 20-s window: 4 1 1" in out and "mean 2.00 of 4 slots (50%), 6 calls" in out
    log.write_text('{"purpose": "kernel"}\n')
    with pytest.raises(SystemExit) as e:
        CS.main([str(log), "--latency-ms", "20000", "--slots", "4"])
    assert ':1: a request without a numeric "time"' in str(e.value)


def _conc_run(lat, n, jph, busy, ov_ms, peak, at_equal, rc=0):
    return {"latency_ms": lat, "in_flight": n, "time_budget_s": 575, "rc": rc,
            "timed_out": False,
            "concurrency": {"search_s": 500.0, "candidates": 40, "judged": 30,
                            "judged_per_hour": jph, "harness_busy": busy, "model_calls": 100,
                            "peak_in_flight": peak, "best": 1.3, "cells": 3,
                            "overhead_s": ov_ms * 0.04, "overhead_per_candidate_ms": ov_ms,
                            "cpu_per_candidate_ms": ov_ms / 2, "model_wait_share": 0.3,
                            "thread": {"samples": 25000}, "at_equal": at_equal}}


def test_concurrency_report_ratios_and_targets():
    a = types.SimpleNamespace(seed=1, deadline=2500)
    q = lambda best, cells: {"n": 6, "best": best, "cells": cells}  # noqa: E731
    res = {"operator": "tests/operators/kb_relu.py", "latencies_ms": [20000, 2000],
           "in_flight": [1, 8], "run_seconds": 600, "elapsed_s": 2450.0,
           "runs": [_conc_run(20000, 1, 40.0, 0.08, 30.0, 1, q(1.2, 2)),
                    _conc_run(20000, 8, 260.0, 0.55, 150.0, 8, q(1.1, 1)),
                    _conc_run(2000, 1, 300.0, 0.4, 20.0, 1, q(1.2, 3)),
                    _conc_run(2000, 8, 900.0, 0.45, 250.0, 8, q(0.5, 0))]}
    text, ok = CC.report(res, "cuda", a)
    assert ok, text
    assert "20000 ms, 8 vs 1 in flight: 6.50x candidates judged per hour: met" in text
    assert "GPU busy 55%: met; overhead 150.0 ms per candidate: met" in text
    assert ("after 6 judged candidates each: best 1.10x vs 1.20x as timed in each run, 1.10x vs 1.20x"
            " with the kernels both verified timed as in the 1-in-flight run (0 of its 0 verified),"
            " 1 vs 2 cells filled: met") in text
    # only the 20 s latency is judged against the targets
    assert "2000 ms, 8 vs 1 in flight: 3.00x candidates judged per hour\n" in text
    assert "overhead 250.0 ms per candidate\n" in text and "not run at" not in text
    assert "on cuda that is the GPU's busy share" in text
    # missed targets are figures, not failures; a broken run or pool is a failed check
    res["runs"][1] = _conc_run(20000, 8, 200.0, 0.3, 300.0, 9, q(1.0, 0), rc=1)
    text, ok = CC.report(res, "cpu", a)
    assert not ok
    assert "5.00x candidates judged per hour: missed" in text
    assert "harness busy 30%: missed; overhead 300.0 ms per candidate: missed" in text
    assert "best 1.00x vs 1.20x as timed in each run" in text and "0 vs 2 cells filled: missed" in text
    assert "20000 ms, 8 in flight: at most 8 model calls in flight (the simulator saw 9): no" in text
    assert "20000 ms, 8 in flight: `kernelbot run` finished (exit 1): no" in text
    res["latencies_ms"], res["runs"] = [2000], res["runs"][2:]
    text, ok = CC.report(res, "cpu", a)
    assert ok and "(not run at 20000 ms latency: the targets are judged there only)" in text


@pytest.mark.skipif(not os.access(BIN, os.X_OK), reason="kernelbot binary not built")
def test_bench_search_concurrency_end_to_end_on_cpu(tmp_path):
    """--latency-ms on the real binary: the simulator's latency, the
    search's calls in flight (1: never two at once; 4: several) and the
    sampled overhead. Counts only: how much fits is the machine's matter."""
    work, out = str(tmp_path / "work"), str(tmp_path / "out")
    py = os.environ.get("KERNELBOT_PYTHON") or "/usr/bin/python3"
    p = subprocess.run([sys.executable, BENCH, "--bin", BIN, "--backend", "cpu", "--python", py,
                        "--workdir", work, "--out", out, "--latency-ms", "300",
                        "--in-flight", "1,4", "--run-seconds", "60"],
                       capture_output=True, text=True, timeout=600, cwd=TOP)
    assert p.returncode in (0, 1), p.stdout[-3000:] + p.stderr[-3000:]
    with open(os.path.join(out, "bench-search-results.json")) as f:
        res = json.load(f)
    text = open(os.path.join(out, "bench-search-report.txt")).read()
    assert "300 ms, 4 vs 1 in flight" in text and "harness busy" in text
    assert os.path.exists(os.path.join(out, "bench-search-300ms-4-run.err"))
    serial, wide = res["runs"]
    assert (serial["in_flight"], wide["in_flight"]) == (1, 4)
    for r in res["runs"]:
        assert r["rc"] == 0 or r["timed_out"], r
        c = r["concurrency"]
        if c["model_calls"] < 2:
            pytest.skip("the templates left no time for the search on this machine")
        assert c["thread"]["samples"] >= 10 and c["overhead_s"] is not None
        assert 0 <= c["thread"]["working_share"] <= 1
    # calls_in_flight = 1 is the serial search; 4 keeps several calls at once
    assert serial["concurrency"]["peak_in_flight"] == 1
    assert 2 <= wide["concurrency"]["peak_in_flight"] <= 4
    cfg = open(os.path.join(work, "lat300-n4", "bench-search.ini")).read()
    assert "calls_in_flight = 4" in cfg and "max_in_flight = 4" in cfg
    assert (p.returncode == 0) == all(res["checks"].values()), res["checks"]
