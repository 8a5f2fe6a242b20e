"""End to end: `kernelbot run` with a model configured runs the LLM search
(bot/search) on the CPU backend, with real torch, real g++ builds, the
real harness and the LLM simulator (tests/sim/llm_sim.py) on loopback
answering from its corpus for tests/operators/kb_relu.py and kb_softmax.py.

One state dir for the module: the templates' tuning, the build cache and
the final checks are shared, each test runs its own search (its own seed
or settings). What is checked:
  - the search keeps the fastest right kernel and never archives a wrong
    one; every wrong corpus kernel it was given is rejected for the
    reason the corpus says (OpenAI protocol, verifiers on, all audited);
  - the Anthropic protocol, injected 429 / 5xx / timeouts / malformed /
    empty replies, verifiers on without audit (wrong kernels filtered
    before any build);
  - a tiny money budget with non-zero prices: cut short, never overspent;
    verifiers off: not one verifier request;
  - SIGKILL mid-search and a rerun: the same search resumes, no candidate
    is evaluated twice, no model call is made twice;
  - --fresh with the same seed replays every recorded answer: no request
    but the rewrite of a kernel the first run did not tune, the same
    candidate sources from the models;
  - tune points of the archive's best kernel run in the models' waits,
    during the generations, and are never archived.
"""
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

TOP = os.environ.get("KB_TOP") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("KB_BIN") or os.path.join(TOP, "build", "kernelbot")
sys.path.insert(0, os.path.join(TOP, "tests", "sim"))

from llm_sim import LLMSim  # noqa: E402

pytestmark = pytest.mark.skipif(not os.path.exists(BIN), reason="kernelbot binary not built")

RELU = os.path.join(TOP, "tests", "operators", "kb_relu.py")
SOFTMAX = os.path.join(TOP, "tests", "operators", "kb_softmax.py")
CORPUS = os.path.join(TOP, "tests", "sim", "llm_corpus")

# the relu corpus entries the first search draws from (16: one epoch of its 16 kernel slots)
RELU_ONLY = ["fast_omp_simd", "duplicate_fast", "medium_scalar", "slow_indexed", "two_blocks",
             "unwritten", "out_of_bounds", "input_mutation", "precision", "wrong_formula",
             "error_return", "nocompile_syntax", "static_threads", "missing_entry",
             "malformed_no_block", "empty"]

SUMMARY_KEYS = {"proposer", "models", "candidates", "verified", "generations", "wall_s", "llm",
                "verifiers", "archive_grid", "filled_cells", "history", "cut_short", "best"}

EVAL_LINE = re.compile(r"^\[(?:translate|evolve \d+/\d+|templates|tune)(?: \d+/\d+)?\] #(\d+) ", re.M)


# --- the corpus, for mapping candidates back to entries ---

FENCE = re.compile(r"^(```|~~~)[^\n]*\n(.*?)^\1[ \t]*$", re.M | re.S)


def norm(code):
    """Comments dropped, whitespace collapsed: enough to match a candidate to its entry."""
    code = re.sub(r"/\*.*?\*/", " ", code, flags=re.S)
    code = re.sub(r"//[^\n]*", " ", code)
    return re.sub(r"\s+", "", code)


def corpus_entries(op):
    """norm(kernel) -> manifest entry, for the entries that carry a kernel."""
    d = os.path.join(CORPUS, op)
    with open(os.path.join(d, "manifest.json")) as f:
        man = json.load(f)
    out = {}
    for e in man["entries"]:
        with open(os.path.join(d, e["file"])) as f:
            blocks = [m.group(2) for m in FENCE.finditer(f.read())]
        blocks = [b for b in blocks if b.strip()]
        if not blocks:
            continue
        abi = [b for b in blocks if "kb_forward" in b]
        code = max(abi or blocks, key=len)
        out.setdefault(norm(code), e)
    return out


# --- fixtures ---

@pytest.fixture(scope="module")
def sim():
    s = LLMSim(seed=7).start()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    d = tmp_path_factory.mktemp("search-e2e")
    return {"dir": d, "state": d / "state", "runs": {}}


def config(env, sim, name, provider="openai", verifiers=True, audit=1.0, islands=2,
           generations=2, per_generation=3, initial=4, repair=1, meta=1, prices=(0, 0),
           budget_usd=0, max_tokens=4000, tune=True, in_flight=8):
    path = env["dir"] / ("%s.ini" % name)
    path.write_text(
        "[core]\nstate_dir = %s\n"
        "[harness]\npython = %s\nbackend = cpu\nseeds = 2\nmax_configs = 3\n"
        "[bench]\nwarmup = 1\nmin_time_ms = 5\nmax_reps = 20\n"
        "[templates]\nmax_points = 2\nexhaustive_limit = 1\nrefine_rounds = 1\n"
        "[llm]\nmodels = sim\ntimeout_s = 1\nmax_retries = 2\n"
        "[llm.sim]\nprovider = %s\nbase_url = %s\nmodel = sim-1\napi_key = sk-test\n"
        "max_tokens = %d\nprice_in_per_mtok = %g\nprice_out_per_mtok = %g\n"
        "[search]\nllm_verifiers = %s\nverifier_audit = %g\nislands = %d\ngenerations = %d\n"
        "per_generation = %d\ninitial = %d\nrepair_rounds = %d\nmeta_interval = %d\n"
        "migration_interval = 1\ncrossover = 0.3\ninspirations = 2\ntune_templates = %s\ntune_points = 4\n"
        "job_budget_usd = %g\ncalls_in_flight = %d\n"
        % (env["state"], sys.executable, provider, sim.base_url, max_tokens, prices[0], prices[1],
           "on" if verifiers else "off", audit, islands, generations, per_generation, initial,
           repair, meta, "on" if tune else "off", budget_usd, in_flight))
    return str(path)


def run(env, cfg, op, out, *args, timeout=240):
    t = time.monotonic()
    r = subprocess.run([BIN, "run", op, "-c", cfg, "--backend", "cpu", "--seeds", "2",
                        "--out", str(env["dir"] / out)] + list(args),
                       capture_output=True, text=True, timeout=timeout, cwd=str(env["dir"]))
    r.seconds = time.monotonic() - t
    return r


def db(env):
    return sqlite3.connect(str(env["state"] / "kernelbot.db"))


def kernel_json(env, out):
    with open(env["dir"] / out / "kernel.json") as f:
        return json.load(f)


def candidates(env, search_id):
    with db(env) as c:
        rows = c.execute("SELECT id, proposer, source, verdict, reasons, speedup, cell, verifiers,"
                         " call_key, evidence IS NOT NULL FROM candidates WHERE search_id = ?"
                         " ORDER BY id", (search_id,)).fetchall()
    keys = ("id", "proposer", "source", "verdict", "reasons", "speedup", "cell", "verifiers",
            "call_key", "has_evidence")
    out = []
    for row in rows:
        d = dict(zip(keys, row))
        d["reasons"] = json.loads(d["reasons"]) if d["reasons"] else []
        d["verifiers"] = json.loads(d["verifiers"]) if d["verifiers"] else None
        out.append(d)
    return out


def archive_ids(env, search_id):
    with db(env) as c:
        return {r[0] for r in c.execute("SELECT candidate_id FROM archive_cells WHERE search_id = ?",
                                        (search_id,))}


def checks_of(cand):
    return {r.get("check") for r in cand["reasons"]}


def relu_search(env, sim):
    """The first relu search (once per module)."""
    if "relu" not in env["runs"]:
        sim.only(RELU_ONLY)
        try:
            cfg = config(env, sim, "relu")
            r = run(env, cfg, RELU, "relu", "--seed", "101")
        finally:
            sim.only(None)
        env["runs"]["relu"] = r
    return env["runs"]["relu"]


# --- the search keeps the best and never archives a wrong kernel ---

def test_search_finds_and_keeps_the_best(env, sim):
    r = relu_search(env, sim)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "verified kernel for" in r.stdout
    k = kernel_json(env, "relu")
    s = k["search"]
    assert SUMMARY_KEYS <= set(s), set(s) ^ SUMMARY_KEYS
    assert s["proposer"] == "llm search" and s["models"] == ["sim"]
    assert s["generations"] == 2 and s["cut_short"] is None
    assert set(s["llm"]) >= {"calls", "prompt_tokens", "completion_tokens", "cost_usd"}
    assert s["llm"]["calls"] > 0 and s["llm"]["prompt_tokens"] > 0
    assert set(s["best"]) >= {"candidate_id", "proposer", "model", "generation", "island", "cell"}
    assert s["filled_cells"] >= 1 and "cells filled" in s["archive_grid"]
    assert s["history"] and all(a["speedup"] <= b["speedup"]
                                for a, b in zip(s["history"], s["history"][1:]))

    sid = s["search_id"]
    cands = candidates(env, sid)
    verified = [c for c in cands if c["verdict"] == "verified"]
    assert verified
    best = max((c for c in verified if c["proposer"] != "tune"), key=lambda c: c["speedup"])
    # kept: the fastest verified kernel is an elite (tune points are never archived)
    assert best["id"] in archive_ids(env, sid)
    assert not {c["id"] for c in cands if c["proposer"] == "tune"} & archive_ids(env, sid)
    best = max(verified, key=lambda c: c["speedup"])
    if s["best"]["candidate_id"] != best["id"]:
        assert "final check of #%d failed" % best["id"] in r.stderr, r.stderr
    shipped = [c for c in cands if c["id"] == s["best"]["candidate_id"]][0]
    with open(env["dir"] / "relu" / "kernel.cpp") as f:
        assert f.read() == shipped["source"]
    assert k["verdict"] == "verified"

    # the corpus: every entry was proposed (one epoch), the duplicate was dropped
    entries = corpus_entries("kb_relu")
    by_name = {}
    for c in cands:
        e = entries.get(norm(c["source"]))
        if e:
            by_name.setdefault(e["name"], []).append(c)
    for name in ("fast_omp_simd", "medium_scalar", "slow_indexed", "unwritten", "wrong_formula",
                 "nocompile_syntax", "static_threads"):
        assert name in by_name, (name, sorted(by_name))
    assert "duplicate_fast" not in by_name  # same normalised source as fast_omp_simd
    assert len(by_name["fast_omp_simd"]) == 1
    # the fast kernel beats the slow one, and nothing the search kept is slower than it needs be
    fast = by_name["fast_omp_simd"][0]
    slow = by_name["slow_indexed"][0]
    assert fast["verdict"] == "verified" and slow["verdict"] == "verified"
    assert fast["speedup"] > slow["speedup"]
    assert best["speedup"] >= fast["speedup"]

    # never a wrong kernel in the archive, and every wrong one rejected for its reason
    for cid in archive_ids(env, sid):
        c = [x for x in cands if x["id"] == cid][0]
        assert c["verdict"] == "verified" and c["speedup"] > 0
        e = entries.get(norm(c["source"]))
        assert e is None or e["kind"] == "right", (cid, e)
    wrong = 0
    for name, cs in by_name.items():
        e = [x for x in entries.values() if x["name"] == name][0]
        if e["kind"] == "right":
            continue
        for c in cs:
            wrong += 1
            if e["expect"] == "build":
                assert c["verdict"] == "build", (name, c["verdict"], c["reasons"])
            elif e["expect"] == "static":
                assert c["verdict"] == "static", (name, c["verdict"], c["reasons"])
            else:
                assert c["verdict"] == "rejected", (name, c["verdict"], c["reasons"])
                assert e["expect"] in checks_of(c), (name, c["reasons"])
    assert wrong >= 6

    # the verifiers ran on every candidate past the static checks; all audited, so measured
    for c in cands:
        if c["verdict"] in ("verified", "rejected", "build") and c["proposer"] not in ("template", "tune"):
            assert c["verifiers"] and set(c["verifiers"]) >= {"compile", "numerics", "memory", "pass"}
    v = s["verifiers"]
    assert set(v) >= {"precision", "recall", "tp", "fp", "fn", "tn"}
    assert v["tp"] > 0 and v["precision"] is not None and v["recall"] is not None
    assert 0 <= v["precision"] <= 1 and 0 <= v["recall"] <= 1
    assert "precision" in r.stdout

    # meta-prompts: a rewrite was asked and stored; repairs happened
    st = sim.stats()
    assert st["by_purpose"].get("verify", 0) > 0 and st["by_purpose"].get("rewrite", 0) > 0
    with db(env) as c:
        assert c.execute("SELECT count(*) FROM prompts WHERE search_id = ? AND parent_id IS NOT NULL",
                         (sid,)).fetchone()[0] >= 1
        assert c.execute("SELECT count(*) FROM prompts WHERE search_id = ? AND fitness > 0",
                         (sid,)).fetchone()[0] >= 1
        assert c.execute("SELECT state FROM searches WHERE id = ?", (sid,)).fetchone()[0] == "done"
        assert c.execute("SELECT count(*) FROM search_history WHERE search_id = ?", (sid,)).fetchone()[0] >= 1
    assert any(c["proposer"] == "repair" for c in cands)

    # report.md, search.json and the progress lines
    with open(env["dir"] / "relu" / "report.md") as f:
        md = f.read()
    for h in ("## LLM search", "### Archive", "### LLM verifiers", "Found by the LLM search"):
        assert h in md, h
    with open(env["dir"] / "relu" / "search.json") as f:
        sj = json.load(f)
    assert SUMMARY_KEYS <= set(sj) and sj["search_id"] == sid and sj["state"] == "done"
    assert sj["best"]["candidate_id"] == s["best"]["candidate_id"]
    assert "[translate" in r.stderr and "[evolve 2/2" in r.stderr and "[final check]" in r.stderr
    assert re.search(r"#\d+ \w+: \d+\.\d\dx$", r.stderr, re.M)


def test_finished_search_returns_at_once(env, sim):
    r0 = relu_search(env, sim)
    assert r0.returncode == 0
    before = sim.stats()["requests"]
    cfg = config(env, sim, "relu")
    r = run(env, cfg, RELU, "relu-again", "--seed", "101")
    assert r.returncode == 0, r.stderr
    assert "finished earlier" in r.stdout
    assert sim.stats()["requests"] == before
    a, b = kernel_json(env, "relu"), kernel_json(env, "relu-again")
    assert a["sha256"] == b["sha256"] and a["search"]["search_id"] == b["search"]["search_id"]


def test_job_id_must_name_a_job_of_the_state_dir(env, sim):
    before = sim.stats()["requests"]
    cfg = config(env, sim, "relu")
    r = run(env, cfg, RELU, "relu-job", "--job-id", "4242")
    assert r.returncode == 2, r.stderr
    assert "--job-id 4242: no such job in the state dir" in r.stderr, r.stderr
    r = run(env, cfg, RELU, "relu-job", "--job-id", "x")
    assert r.returncode == 2 and "--job-id 'x' is not a positive number" in r.stderr, r.stderr
    assert sim.stats()["requests"] == before


# --- Anthropic, faults, filtered candidates ---

def test_anthropic_faults_and_filter(env, sim):
    # 10 kernel slots, at most 5 lost to the faults: the 4 entries are all drawn at least once
    # one call at a time: the simulator's faults hit the calls in the order they were asked
    cfg = config(env, sim, "softmax", provider="anthropic", audit=0.0, islands=1, generations=2,
                 per_generation=3, initial=4, repair=0, meta=0, tune=False, in_flight=1)
    sim.only(["fast_rows_omp", "wrong_axis", "input_mutation", "nocompile_typo"])
    sim.faults({"status": 429, "retry_after": "0", "count": 3},
               {"body": "{not json"},
               {"empty": True},
               {"status": 529, "retry_after": "0", "count": 3},
               {"delay_ms": 2500, "count": 3})
    try:
        r = run(env, cfg, SOFTMAX, "softmax", "--seed", "202")
    finally:
        sim.only(None)
    assert r.returncode == 0, r.stdout + r.stderr
    assert sim.pending_faults() == []
    st = sim.stats()
    assert st["by_path"].get("/v1/messages", 0) > 0
    s = kernel_json(env, "softmax")["search"]
    sid = s["search_id"]
    with db(env) as c:
        statuses = {row[0] for row in c.execute("SELECT DISTINCT status FROM llm_calls WHERE search_id = ?",
                                                (sid,))}
    assert {"ok", "rate_limited", "malformed", "empty", "server_error", "timeout"} <= statuses, statuses
    assert s["llm"]["failed"] >= 5
    cands = candidates(env, sid)
    entries = corpus_entries("kb_softmax")
    filtered = [c for c in cands if c["verdict"] == "filtered"]
    assert filtered
    for c in filtered:
        # rejected before any build: no evidence, never archived
        assert not c["has_evidence"] and c["verifiers"]["pass"] is False
        assert c["id"] not in archive_ids(env, sid)
        e = entries.get(norm(c["source"]))
        assert e is None or e["kind"] != "right"
    for c in cands:
        e = entries.get(norm(c["source"]))
        if e and e["kind"] == "right":
            assert c["verdict"] == "verified", (e["name"], c["verdict"], c["reasons"])
    assert any(c["verdict"] == "verified" and c["proposer"] != "template" for c in cands)


# --- budgets and verifiers off ---

def test_budget_cuts_short_without_overspending(env, sim):
    budget = 10.0
    cfg = config(env, sim, "budget", verifiers=False, prices=(1000, 1000), budget_usd=budget,
                 max_tokens=2000, generations=3)
    before = sim.stats()["by_purpose"].get("verify", 0)
    r = run(env, cfg, RELU, "budget", "--seed", "303")
    assert r.returncode == 0, r.stdout + r.stderr
    s = kernel_json(env, "budget")["search"]
    assert s["cut_short"] and "budget" in s["cut_short"], s["cut_short"]
    assert "cut short:" in r.stdout
    sid = s["search_id"]
    with db(env) as c:
        spent, calls = c.execute("SELECT coalesce(sum(cost_usd), 0), count(*) FROM llm_calls"
                                 " WHERE search_id = ?", (sid,)).fetchone()
        assert c.execute("SELECT count(*) FROM candidates WHERE search_id = ? AND verifiers IS NOT NULL",
                         (sid,)).fetchone()[0] == 0
    assert 0 < calls < 10
    assert 0 < spent <= budget
    assert abs(spent - s["llm"]["cost_usd"]) < 1e-6
    # verifiers off: not one verifier request
    assert sim.stats()["by_purpose"].get("verify", 0) == before
    assert s["verifiers"]["enabled"] is False


# --- resume after SIGKILL, then replay with --fresh ---

def search_row(env, seed):
    with db(env) as c:
        return c.execute("SELECT id, generation, state FROM searches WHERE key LIKE ? AND key NOT LIKE '%fresh%'",
                         ("%%|%d" % seed,)).fetchone()


def test_kill_with_calls_in_flight_repeats_no_completed_call(env, sim):
    """Calls answer after 0.8 s and up to 8 are in flight: the search is
    killed (-9) while several are; every call that completed before the kill
    was stored by then (by the thread that made it), and the resumed search
    asks none of them again."""
    seed = 505
    cfg = config(env, sim, "inflight", audit=0.0, generations=1, per_generation=3, initial=4,
                 repair=1, meta=0, tune=False)
    relu_search(env, sim)  # the templates' tuning is cached by now
    peak0 = sim.stats()["peak_in_flight"]
    sim.latency(800)
    killed, in_flight_at_kill = False, 0
    try:
        with open(env["dir"] / "inflight-1.log", "w") as errf:
            p = subprocess.Popen([BIN, "run", RELU, "-c", cfg, "--backend", "cpu", "--seeds", "2",
                                  "--out", str(env["dir"] / "inflight"), "--seed", str(seed)],
                                 stdout=subprocess.DEVNULL, stderr=errf, cwd=str(env["dir"]),
                                 start_new_session=True)
            deadline = time.monotonic() + 180
            try:
                while time.monotonic() < deadline and p.poll() is None:
                    row = search_row(env, seed) if (env["state"] / "kernelbot.db").exists() else None
                    if row:
                        with db(env) as c:
                            n = c.execute("SELECT count(*) FROM llm_calls WHERE search_id = ?",
                                          (row[0],)).fetchone()[0]
                        st = sim.stats()
                        if n >= 3 and st["in_flight"] >= 2:
                            in_flight_at_kill = st["in_flight"]
                            os.kill(p.pid, signal.SIGKILL)
                            killed = True
                            break
                    time.sleep(0.02)
            finally:
                p.wait()
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
    finally:
        sim.latency(0)
    assert killed, "the search finished before it could be killed with calls in flight"
    assert in_flight_at_kill >= 2
    sid = search_row(env, seed)[0]
    with db(env) as c:
        before = {row[0] for row in c.execute(
            "SELECT call_key FROM llm_calls WHERE search_id = ? AND status = 'ok'", (sid,))}
    assert before
    r = run(env, cfg, RELU, "inflight", "--seed", str(seed))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "resuming search %d" % sid in r.stderr
    with db(env) as c:
        twice = c.execute("SELECT call_key, count(*) FROM llm_calls WHERE search_id = ?"
                          " AND status IN ('ok', 'empty', 'malformed')"
                          " GROUP BY call_key HAVING count(*) > 1", (sid,)).fetchall()
        after = {row[0] for row in c.execute(
            "SELECT call_key FROM llm_calls WHERE search_id = ? AND status = 'ok'", (sid,))}
    assert twice == []
    assert before <= after and len(after) > len(before)
    # several calls were in flight at once, by the simulator's own count
    assert sim.stats()["peak_in_flight"] >= max(2, peak0)


def test_resume_after_kill_then_replay(env, sim):
    seed = 404
    cfg = config(env, sim, "resume", audit=0.0, generations=3, per_generation=2, initial=2, repair=1)
    relu_search(env, sim)  # the templates' tuning is cached by now: the kill lands in the search
    st0 = sim.stats()["requests"]
    log1 = env["dir"] / "resume-1.log"
    # calls take 0.3 s: with calls in flight a generation is over in moments
    # otherwise, and the kill must land inside an evolving generation (2 or 3;
    # 4 is the template step, which asks no meta-prompt rewrite)
    sim.latency(300)
    with open(log1, "w") as errf:
        p = subprocess.Popen([BIN, "run", RELU, "-c", cfg, "--backend", "cpu", "--seeds", "2",
                              "--out", str(env["dir"] / "resume"), "--seed", str(seed)],
                             stdout=subprocess.DEVNULL, stderr=errf, cwd=str(env["dir"]),
                             start_new_session=True)
        deadline = time.monotonic() + 180
        killed = False
        try:
            while time.monotonic() < deadline and p.poll() is None:
                row = search_row(env, seed) if (env["state"] / "kernelbot.db").exists() else None
                if row and 2 <= row[1] <= 3:
                    with db(env) as c:
                        n = c.execute("SELECT count(*) FROM candidates WHERE search_id = ? AND generation = ?"
                                      " AND verdict != 'pending'", (row[0], row[1])).fetchone()[0]
                    if n >= 1:
                        os.kill(p.pid, signal.SIGKILL)
                        killed = True
                        break
                time.sleep(0.05)
        finally:
            p.wait()
            sim.latency(0)
            try:
                os.killpg(p.pid, signal.SIGKILL)  # the harness worker and compilers it left
            except ProcessLookupError:
                pass
    assert killed, "the search finished before it could be killed"
    sid, gen, state = search_row(env, seed)
    assert state == "running" and gen >= 2
    with db(env) as c:
        decided = {row[0] for row in c.execute("SELECT id FROM candidates WHERE search_id = ?"
                                               " AND verdict != 'pending'", (sid,))}
    assert decided
    # the failure diagnoses of the interrupted generation's decided candidates (search_diagnoses)
    with db(env) as c:
        diagnosed = [row[0] for row in c.execute(
            "SELECT text FROM search_diagnoses WHERE search_id = ? AND generation = ?"
            " AND candidate_id IS NOT NULL ORDER BY id", (sid, gen))]

    r = run(env, cfg, RELU, "resume", "--seed", str(seed))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "resuming search %d" % sid in r.stderr
    s = kernel_json(env, "resume")["search"]
    assert s["search_id"] == sid and s["generations"] == 3
    # nothing decided before the kill was evaluated again
    again = {int(m) for m in EVAL_LINE.findall(r.stderr)}
    assert not (again & decided), again & decided
    with db(env) as c:
        assert c.execute("SELECT count(*) FROM searches WHERE key LIKE ?", ("%%|%d" % seed,)).fetchone()[0] == 1
        # an answer (ok, or empty / malformed: the model's answer too) is never asked for twice
        twice = c.execute("SELECT call_key FROM llm_calls WHERE search_id = ?"
                          " AND status IN ('ok', 'empty', 'malformed')"
                          " GROUP BY call_key HAVING count(*) > 1", (sid,)).fetchall()
        rows = c.execute("SELECT count(*) FROM llm_calls WHERE search_id = ?", (sid,)).fetchone()[0]
    assert twice == []
    with db(env) as c:
        # every call's prompt is stored, redacted and linked by its key
        unprompted = c.execute("SELECT count(*) FROM llm_calls l WHERE search_id = ? AND NOT EXISTS"
                               " (SELECT 1 FROM search_prompt_texts p WHERE p.search_id = l.search_id"
                               "  AND p.call_key = l.call_key)", (sid,)).fetchone()[0]
        meta = c.execute("SELECT text FROM search_prompt_texts WHERE search_id = ? AND purpose = 'meta'"
                         " AND call_key LIKE ?", (sid, "%%/g%d/%%" % gen)).fetchone()
        moves = c.execute("SELECT count(DISTINCT generation) FROM search_migrations WHERE search_id = ?",
                          (sid,)).fetchone()[0]
    assert unprompted == 0
    assert moves == 3  # two islands, migration_interval 1: every generation of evolution
    # the interrupted generation's rewrite saw the diagnoses made before the kill
    assert meta is not None
    for d in diagnosed:
        assert ("- %s\n" % d) in meta[0] + "\n", (d, meta[0])
    # every request the simulator saw is a stored call (those in flight at the kill aside)
    made = sim.stats()["requests"] - st0
    assert rows <= made <= rows + 8, (rows, made)
    first = [c["source"] for c in candidates(env, sid) if c["proposer"] != "tune"]
    with db(env) as c:
        first_rewrites = {row[0] for row in c.execute(
            "SELECT call_key FROM llm_calls WHERE search_id = ? AND purpose = 'templatize'", (sid,))}

    # replay: a new search from the same seed answers everything from the store
    st1 = sim.stats()
    r = run(env, cfg, RELU, "replay", "--seed", str(seed), "--fresh")
    assert r.returncode == 0, r.stdout + r.stderr
    st2 = sim.stats()
    new = {k: n - st1["by_purpose"].get(k, 0) for k, n in st2["by_purpose"].items()}
    s2 = kernel_json(env, "replay")["search"]
    assert s2["search_id"] != sid
    # every answer the first run had is replayed: the one question a replay may
    # add is the rewrite (templatize) of a kernel the first run did not tune,
    # as the archive's best at a generation's start follows the order of
    # completions (the first run's, concurrent; here the slots')
    assert all(n == 0 for k, n in new.items() if k != "template"), new
    assert s2["llm"]["calls"] == st2["requests"] - st1["requests"] == new.get("template", 0)
    with db(env) as c:
        again = {row[0] for row in c.execute(
            "SELECT call_key FROM llm_calls WHERE search_id = ? AND purpose = 'templatize'",
            (s2["search_id"],))}
    assert not again & first_rewrites, again & first_rewrites
    # the same candidates from the models (tune points follow the rewrites)
    assert sorted(c["source"] for c in candidates(env, s2["search_id"])
                  if c["proposer"] != "tune") == sorted(first)


def test_tune_points_fill_the_models_waits(env, sim):
    """While the search waits on its models, the archive's best LLM kernel
    is templatized and its points run in the harness's idle time, during
    the generations and not only after the last one; a point is never
    archived, and no rewrite is asked twice."""
    relu_search(env, sim)  # the templates' tuning is cached by now
    cfg = config(env, sim, "waits", audit=0.0, generations=2, per_generation=2, initial=2, repair=0,
                 meta=0, tune=True)
    # right kernels only: an LLM elite exists from the translations on,
    # whatever the earlier tests drew from the simulator's permutation
    sim.only(["right"])
    sim.latency(700)  # under the config's 1 s call timeout
    try:
        r = run(env, cfg, RELU, "waits", "--seed", "505")
    finally:
        sim.latency(0)
        sim.only(None)
    assert r.returncode == 0, r.stdout + r.stderr
    s = kernel_json(env, "waits")["search"]
    sid = s["search_id"]
    with db(env) as c:
        tuned = c.execute("SELECT id, generation, verdict FROM candidates WHERE search_id = ?"
                          " AND proposer = 'tune'", (sid,)).fetchall()
        twice = c.execute("SELECT call_key FROM llm_calls WHERE search_id = ? AND purpose = 'templatize'"
                          " GROUP BY call_key HAVING count(*) > 1", (sid,)).fetchall()
        rewrites = c.execute("SELECT count(*) FROM llm_calls WHERE search_id = ? AND purpose = 'templatize'",
                             (sid,)).fetchone()[0]
    # generations 1 and 2 are the evolution's; the step after them is 3
    in_waits = [t for t in tuned if 1 <= t[1] <= 2 and t[2] != "pending"]
    assert in_waits, (tuned, r.stderr)
    assert rewrites >= 1 and twice == []
    assert not {t[0] for t in tuned} & archive_ids(env, sid)
    assert re.search(r"^\[tune(?: \d+/\d+)?\] #\d+ tune", r.stderr, re.M), r.stderr
    assert "tuning #" in r.stderr
    assert kernel_json(env, "waits")["verdict"] == "verified"


def test_next_generation_begins_while_one_ends(env, sim):
    """Generation 2 is planned and asked as soon as generation 1's
    proposals are judged, not after generation 1's repairs and its
    meta-prompt rewrite (asked last, when nothing of generation 1 is left):
    the calls in flight do not drain at a generation's end. Each
    generation is still committed whole and in order, and no call is
    asked twice."""
    relu_search(env, sim)  # the templates' tuning is cached by now
    cfg = config(env, sim, "overlap", audit=0.0, generations=3, per_generation=2, initial=2, repair=1,
                 meta=1, tune=False)
    sim.latency(300)
    try:
        r = run(env, cfg, RELU, "overlap", "--seed", "606")
    finally:
        sim.latency(0)
    assert r.returncode == 0, r.stdout + r.stderr
    s = kernel_json(env, "overlap")["search"]
    sid = s["search_id"]
    assert s["generations"] == 3
    err = r.stderr
    # the progress lines, in the order the search printed them: generation
    # 2's stage begins before generation 1's rewrite answers, and 3's before 2's
    metas = [m.start() for m in re.finditer(r"^\+?[\d.]* *meta-prompt rewr", err, re.M)]
    assert len(metas) >= 2, err
    assert err.index("[evolve 2/3") < metas[0], err
    assert err.index("[evolve 3/3") < metas[1], err
    with db(env) as c:
        twice = c.execute("SELECT call_key FROM llm_calls WHERE search_id = ?"
                          " GROUP BY call_key HAVING count(*) > 1", (sid,)).fetchall()
        meta_keys = sorted(row[0].split("/")[1] for row in c.execute(
            "SELECT call_key FROM llm_calls WHERE search_id = ? AND purpose = 'meta'", (sid,)))
        gen = c.execute("SELECT generation, state FROM searches WHERE id = ?", (sid,)).fetchone()
    assert twice == []
    assert meta_keys == ["g1", "g2", "g3"], meta_keys
    assert gen == (4, "done"), gen


def hung_model_config(env, sim, name, initial):
    """One island, two generations, no verifiers, repairs or rewrites, and
    the model's call timeout 120 s (with its 2 retries): a hung model call
    would last minutes."""
    cfg = config(env, sim, name, verifiers=False, islands=1, generations=2,
                 per_generation=2, initial=initial, repair=0, meta=0, tune=False)
    with open(cfg) as f:
        text = f.read().replace("timeout_s = 1\n", "timeout_s = 120\n")
    with open(cfg, "w") as f:
        f.write(text)
    return cfg


def test_time_budget_holds_with_a_hung_model(env, sim):
    """A model that hangs (each call answered after 120 s, the call timeout
    120 s, 2 retries) cannot outlast --time-budget: every call ends by the
    budget's deadline less the final check's reserve, and the templates'
    kernel is published. Without that one call overruns by minutes; the
    bound judged is half of one hung attempt, not a clock of this machine."""
    cfg = hung_model_config(env, sim, "relu-hang", initial=2)
    sim.faults({"delay_ms": 120000, "count": 50})
    try:
        r = run(env, cfg, RELU, "relu-hang", "--time-budget", "10", timeout=400)
    finally:
        sim.reset()
    assert r.seconds < 60, (r.seconds, r.stderr)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "the time budget ran out" in r.stderr, r.stderr
    assert kernel_json(env, "relu-hang")["verdict"] == "verified"


# --- issue 16: caching hacks cannot own the archive; deadlines bound every step ---

KERNELS_CPU = os.path.join(TOP, "tests", "kernels", "cpu")

# Fast when timed (a call whose output already holds the result returns at
# once, as the timed calls repeat the same call) and wrong for inputs beyond
# 100: the screening's two seeds (the file's own inputs, then normal ones)
# pass it, the third seed's large inputs do not.
OUTPUT_CACHING = r"""
#include "kernelbot_abi.h"
#include <string.h>

static inline float f(float v) { v = v < 0.0f ? 0.0f : v; return v > 100.0f ? 100.0f : v; }

KB_EXPORT int kb_forward(const DLTensor *inputs, int n_inputs,
                         DLTensor *outputs, int n_outputs, void *stream)
{
    (void)stream;
    if (n_inputs != 1 || n_outputs != 1)
        return 1;
    const float *x = (const float *)kb_data(&inputs[0]);
    float *y = (float *)kb_data(&outputs[0]);
    const int64_t n = kb_numel(&inputs[0]);
    bool same = n > 0;
    for (int64_t k = 0; k < 4 && same; k++) {
        int64_t i = k * (n - 1) / 3;
        float v = f(x[i]);
        same = memcmp(&v, &y[i], sizeof v) == 0;
    }
    if (same)
        return 0;
    for (int64_t i = 0; i < n; i++)
        y[i] = f(x[i]);
    return 0;
}
"""


def fenced(why, code, variant):
    """A reply with code made new to the search (as tests/sim's --vary does)."""
    return "%s\n\n```cpp\n%s\nstatic const int kb_variant_%d = %d;\n```\n" % (
        why, code.strip(), variant, variant)


def test_caching_hacks_mutated_every_generation_never_own_the_archive(env, sim):
    """The finding of issue 16: a caching hack passed the two-seed screening,
    became the best of both islands, was mutated as the best parent and
    filled the archive's top; the final check tried three of them and
    published nothing. Here the stand-in answers every kernel request of
    every generation with a new variant of one of two caching hacks: one
    keeps its result per input address (the runner now hands every call
    its inputs in the same buffers: rejected at screening, cached_result),
    one keeps it in its output and is wrong on large inputs (passes the
    screening at many times eager; as a new best it is verified again with
    the final check's 4 seeds before it is archived: rejected there). No
    hack is archived, and an honest kernel is published."""
    with open(os.path.join(KERNELS_CPU, "hack_cached_address.cpp")) as f:
        by_address = f.read()
    replies = []
    for i in range(60):
        if i % 2:
            replies.append(fenced("The result is kept in the output; a call that finds it there"
                                  " returns at once.", OUTPUT_CACHING, i))
        else:
            replies.append(fenced("The result is kept per input buffer.", by_address, i))
    cfg = config(env, sim, "hacks", verifiers=False, islands=2, generations=3, per_generation=2,
                 initial=2, repair=1, meta=0, tune=False)
    sim.script(*[{"purpose": "kernel", "text": t} for t in replies])
    try:
        r = run(env, cfg, RELU, "hacks", "--seed", "606", "--seeds", "4", timeout=600)
    finally:
        sim.reset()
    assert r.returncode == 0, r.stdout + r.stderr
    k = kernel_json(env, "hacks")
    assert k["verdict"] == "verified"
    with open(env["dir"] / "hacks" / "kernel.cpp") as f:
        shipped = f.read()
    assert "cached_for" not in shipped and "returns at once" not in shipped
    assert "memcmp" not in shipped
    sid = k["search"]["search_id"]
    cands = candidates(env, sid)
    address = [c for c in cands if "cached_for" in c["source"]]
    output = [c for c in cands if "memcmp(&v, &y[i]" in c["source"]]
    # the stand-in kept proposing them, generation after generation
    with db(env) as c:
        gens = {g for (g,) in c.execute("SELECT DISTINCT generation FROM candidates WHERE search_id = ?"
                                        " AND proposer != 'template'", (sid,))}
    assert {0, 1, 2, 3} <= gens, (gens, r.stderr[-6000:])
    assert len(address) >= 4 and len(output) >= 4, (len(address), len(output))
    for c in address:
        assert c["verdict"] == "rejected", (c["id"], c["verdict"], c["reasons"])
        assert "cached_result" in checks_of(c), c["reasons"]
    for c in output:
        assert c["verdict"] == "rejected", (c["id"], c["verdict"], c["reasons"])
        assert "correctness" in checks_of(c), c["reasons"]
    # the output-caching ones passed the screening and were stopped by the confirmation
    confirmed = re.findall(r"#(\d+) \w+ passed the screening \([\d.]+x\) but not 4 seeds", r.stderr)
    assert {int(x) for x in confirmed} >= {c["id"] for c in output}, r.stderr
    archived = archive_ids(env, sid)
    assert not archived & {c["id"] for c in address + output}
    # what was published is the best archived kernel, honest and verified
    best = k["search"]["best"]["candidate_id"]
    assert best in archived
    assert [c for c in cands if c["id"] == best][0]["source"] == shipped


def test_hung_model_and_kernel_published_within_a_minute_of_the_deadline(env, sim):
    """--time-budget 20 with a model that hangs after its first answer, and
    that answer a kernel that never returns: the model calls end by the
    deadline less the final checks' reserve, the hung kernel's evaluation
    too (not after [harness] timeout_s, 300 s), and the templates' kernel
    is re-checked and published within 60 s of the deadline. A bound, not
    a speed claim: without the deadline on evaluations the hung kernel
    alone takes 300 s."""
    with open(os.path.join(KERNELS_CPU, "hack_hang.cpp")) as f:
        hang = f.read()
    cfg = hung_model_config(env, sim, "relu-hang-eval", initial=1)
    sim.script({"purpose": "kernel", "text": fenced("A fast ReLU.", hang, 0)})
    sim.faults({"delay_ms": 0, "count": 1}, {"delay_ms": 120000, "count": 50})
    try:
        r = run(env, cfg, RELU, "relu-hang-eval", "--seed", "707", "--time-budget", "20", timeout=600)
    finally:
        sim.reset()
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.seconds < 20 + 60, (r.seconds, r.stderr)
    assert "the time budget ran out" in r.stderr, r.stderr
    k = kernel_json(env, "relu-hang-eval")
    assert k["verdict"] == "verified"
    cands = [c for c in candidates(env, k["search"]["search_id"]) if c["proposer"] != "template"]
    assert len(cands) == 1 and "while (spin)" in cands[0]["source"]
    assert cands[0]["verdict"] == "rejected" and "timeout" in checks_of(cands[0]), cands[0]
