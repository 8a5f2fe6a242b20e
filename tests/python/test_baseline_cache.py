"""The baseline cache and the candidate's time budget (issue 15; PROTOCOL.md
"Baseline cache", "Timeouts"): `kernelbot bench` with the real harness, torch
(cpu backend, torch 1.13: no torch.compile, so eager is what is cached and
anchored) and the state store.

Eager timed on this shared machine moves by tens of percent between runs:
the configs here set a wide drift band, and the stale case edits the stored
figures by a factor of 1000."""

import json
import os
import shutil
import sqlite3
import subprocess

import pytest

import test_harness_common as hc

TOP = os.environ.get("KB_TOP") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("KB_BIN") or os.path.join(TOP, "build", "kernelbot")
OPS = os.path.join(TOP, "tests", "operators")
CPU = os.path.join(TOP, "tests", "kernels", "cpu")
OK = os.path.join(CPU, "ok_relu.cpp")

pytestmark = pytest.mark.skipif(not os.path.exists(BIN), reason="kernelbot binary not built")


def config(tmp_path, bench="warmup = 1\nmin_time_ms = 5\nmax_reps = 10\n"):
    state = tmp_path / "state"
    path = tmp_path / "config.ini"
    path.write_text("[core]\nstate_dir = %s\n[harness]\nbaseline_drift = 5\n[bench]\n%s"
                    % (state, bench))
    return str(path), str(state / "kernelbot.db")


def bench(cfg, op, tmp_path, *extra, kernel=OK, name="ev.json", configs=2):
    out = tmp_path / name
    r = subprocess.run([BIN, "bench", "-c", cfg, op, kernel, "--backend", "cpu", "--seeds", "1",
                        "--max-configs", str(configs), "--json", str(out)] + list(extra),
                       capture_output=True, text=True, timeout=600, cwd=TOP)
    ev = json.loads(out.read_text()) if out.exists() else None
    return r, ev


def sources(ev):
    return [c["timing"]["baseline_source"] for c in ev["configs"]]


def rows(db):
    with sqlite3.connect(db) as con:
        return con.execute("SELECT operator_hash, key, figures FROM baselines").fetchall()


def edit_rows(db, sql, *args):
    with sqlite3.connect(db) as con:
        con.execute(sql, args)


@pytest.fixture
def relu(tmp_path):
    """A copy of the ReLU operator this test may edit."""
    p = tmp_path / "relu_op.py"
    shutil.copy(os.path.join(OPS, "kb_relu.py"), p)
    return str(p)


def test_second_bench_reuses_cached_baselines(tmp_path, relu):
    cfg, db = config(tmp_path)
    r, first = bench(cfg, relu, tmp_path, name="1.json")
    assert r.returncode == 0, r.stdout + r.stderr
    assert sources(first) == ["measured", "measured"]
    assert all(c["timing"]["baseline_cache"]["why"] == "no cached entry" for c in first["configs"])
    assert "baselines_measured" not in first      # filed by the bot, not evidence
    stored = rows(db)
    assert len(stored) == 2 and len({h for h, _, _ in stored}) == 1
    assert all('"torch":' in k and '"device":' in k for _, k, _ in stored)

    r, again = bench(cfg, relu, tmp_path, name="2.json")
    assert r.returncode == 0, r.stdout + r.stderr
    assert sources(again) == ["cache", "cache"]
    for c in again["configs"]:
        t, info = c["timing"], c["timing"]["baseline_cache"]
        assert info["age_s"] >= 0 and isinstance(info["eager_drift"], float)
        assert info["band"] == 5
        assert t["eager"]["median_ms"] > 0            # eager timed again beside the kernel
        assert t["compile"] is None and "torch.compile" in t["compile_reason"]
        assert t["speedup_eager"] > 0
    assert rows(db) == stored                      # a hit stores nothing


def test_changed_operator_misses(tmp_path, relu):
    cfg, db = config(tmp_path)
    r, _ = bench(cfg, relu, tmp_path, name="1.json")
    assert r.returncode == 0, r.stdout + r.stderr
    with open(relu, "a") as f:
        f.write("\n# edited: another operator content\n")
    r, ev = bench(cfg, relu, tmp_path, name="2.json")
    assert r.returncode == 0, r.stdout + r.stderr
    assert sources(ev) == ["measured", "measured"]
    assert len({h for h, _, _ in rows(db)}) == 2   # filed under the new content's hash


def test_garbled_rows_ignored_with_a_warning(tmp_path, relu):
    cfg, db = config(tmp_path)
    r, _ = bench(cfg, relu, tmp_path, name="1.json")
    assert r.returncode == 0, r.stdout + r.stderr
    (_, k_own, _), (_, k_half, _) = sorted(rows(db), key=lambda x: "half(" in x[1])
    # a row of the wrong shape (valid JSON, as the table demands) and a forged figure
    edit_rows(db, "UPDATE baselines SET figures = '[1, 2]' WHERE key = ?", k_own)
    edit_rows(db, "UPDATE baselines SET figures = json_set(figures, '$.eager.median_ms', 'fast')"
                  " WHERE key = ?", k_half)
    r, ev = bench(cfg, relu, tmp_path, name="2.json")
    assert r.returncode == 0, r.stdout + r.stderr
    assert ev["verdict"] == "verified"
    assert sources(ev) == ["measured", "measured"]
    assert "without an object of figures ignored" in r.stderr, r.stderr
    whys = [c["timing"]["baseline_cache"]["why"] for c in ev["configs"]]
    assert whys[0] == "no cached entry"            # the bot left the bad row out
    assert "malformed" in whys[1] and "median_ms" in whys[1]
    # both replaced by fresh figures
    for _, _, fig in rows(db):
        assert json.loads(fig)["eager"]["median_ms"] > 0


def test_stale_entry_measured_again(tmp_path, relu):
    cfg, db = config(tmp_path)
    r, _ = bench(cfg, relu, tmp_path, name="1.json")
    assert r.returncode == 0, r.stdout + r.stderr
    before = {k: json.loads(f)["eager"]["median_ms"] for _, k, f in rows(db)}
    edit_rows(db, "UPDATE baselines SET figures = json_set(figures, '$.eager.median_ms',"
                  " json_extract(figures, '$.eager.median_ms') * 1000)")
    r, ev = bench(cfg, relu, tmp_path, name="2.json")
    assert r.returncode == 0, r.stdout + r.stderr
    assert sources(ev) == ["measured", "measured"]
    for c in ev["configs"]:
        assert c["timing"]["baseline_cache"]["why"].startswith("stale: eager now")
    after = {k: json.loads(f)["eager"]["median_ms"] for _, k, f in rows(db)}
    # re-measured and stored: far from the forged 1000x, near what was measured first
    assert all(after[k] < before[k] * 100 for k in before)


def test_candidate_timeout_leaves_out_the_baselines(tmp_path):
    """An operator whose eager forward sleeps 0.4 s: timing its baselines
    (2 turns of a warm-up and 20 calls) takes about 17 s, longer than the
    candidate's 10 s budget, while the candidate's own stages take a few.
    Judged by the stage figures in the evidence."""
    cfg, _ = config(tmp_path, bench="warmup = 1\nmin_time_ms = 100000\nmax_reps = 40\n")
    r, ev = bench(cfg, os.path.join(OPS, "kb_slow_eager.py"), tmp_path, "--timeout", "10",
                  configs=1)
    assert r.returncode == 0, r.stdout + r.stderr
    assert ev["verdict"] == "verified", ev["reasons"]
    st = ev["stages"]
    assert st["baseline_s"] > 10, st
    assert st["total_s"] - st["baseline_s"] < 10, st


def test_hanging_candidate_rejected_timeout_by_the_judge(tmp_path, relu):
    cfg, _ = config(tmp_path)
    r, ev = bench(cfg, relu, tmp_path, "--timeout", "3",
                  kernel=os.path.join(CPU, "hack_hang.cpp"))
    assert r.returncode == 1, r.stdout + r.stderr
    assert ev["verdict"] == "rejected"
    (reason,) = [x for x in ev["reasons"] if x["check"] == "timeout"]
    assert "candidate's own stages took more than 3 s" in reason["message"]
    assert "during the kernel call" in reason["message"]
    assert reason["config"] == 0 and reason["seed"] == 0
    assert "rejected: timeout: " in r.stdout


# --- the harness alone (no bot): what a request's cache entries may hold ---

def test_request_cache_entries_checked_one_by_one():
    """Entries without a key, of the wrong type or with figures that are
    not figures are ignored (measured again, never fatal); a cache that is
    not a list is a bad request."""
    t = {"enabled": True, "warmup": 1, "min_time_ms": 5, "max_reps": 10}
    req = hc.request(hc.op("kb_relu.py"), hc.kernel("ok_relu"), timing=t, max_configs=1)
    first = hc.run_harness(req, timeout=300).result
    (m,) = first["baselines_measured"]
    forged = dict(m, figures=dict(m["figures"], eager={"median_ms": 1.0, "reps": True}))
    run = hc.run_harness(dict(req, baseline_cache=[1, "x", {"key": 5}, forged]), timeout=300)
    ev = run.result
    assert ev["verdict"] == "verified", ev["reasons"]
    info = ev["configs"][0]["timing"]["baseline_cache"]
    assert "malformed" in info["why"] and "reps" in info["why"], info
    assert "3 entries without a key ignored" in run.stderr
    assert "entry ignored: eager reps" in run.stderr
    bad = hc.run_harness(dict(req, baseline_cache={"key": "k"}), timeout=300).result
    assert bad["verdict"] == "error" and bad["reasons"][0]["check"] == "request"
    assert "baseline_cache" in bad["reasons"][0]["message"]
