"""bench/corpora/corpora.py without a GPU: which kernels it picks from
each corpus's layout, and its report of verdicts beside claims."""
import json
import os
import sys

TOP = os.environ.get("KB_TOP") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(TOP, "bench", "corpora"))

import corpora  # noqa: E402


def _write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def _corpora(root):
    rk = root / "rk"
    _write(str(rk / "highlighted" / "results.csv"),
           "task_name,forward,Correct,Speedup,Speedup Compile\n"
           "lin,True,True,2.5,1.1\nlin,False,True,1.2,\n")
    for p in ("forward", "backward"):
        _write(str(rk / "highlighted" / "lin" / p / "kernel.cu"), "// %s\n" % p)
    _write(str(rk / "tasks" / "lin" / "func_forward.py"), "# task\n")
    kb = root / "kb"
    _write(str(kb / "KernelBench" / "level1" / "1_Square_matrix_multiplication_.py"), "# op\n")
    _write(str(kb / "KernelBench" / "level2" / "7_Conv.py"), "# op\n")
    _write(str(kb / "src" / "kernelbench" / "unit_tests" / "test_kernels" / "zero_out.py"), "#\n")
    lb = root / "lb"
    _write(str(lb / "docs" / "assets" / "data.json"), json.dumps({
        "Level 2: 7_Conv": [{"display_name": "m1", "torch_speedup": 0.9, "file": "aa"},
                            {"display_name": "m2", "torch_speedup": 2.3, "file": "bb"}],
        "Level 2: 99_Renamed": [{"display_name": "m3", "torch_speedup": 9.0, "file": "cc"}]}))
    for f in ("aa", "bb", "cc"):
        _write(str(lb / "docs" / "assets" / "solutions" / (f + ".py")), "# %s\n" % f)
    return str(rk), str(kb), str(lb)


def test_items_and_report(tmp_path):
    rk, kb, lb = _corpora(tmp_path / "src")
    work = str(tmp_path / "work")
    items = corpora.robust_kbench(rk, work) + corpora.kernelbench_adversarial(kb, work) + \
        corpora.leaderboard(lb, kb, work, 3)
    names = [(i.source, i.name, i.pass_) for i in items]
    assert ("robust-kbench", "lin/backward", "backward") in names
    assert ("kernelbench-adversarial", "zero_out", "forward") in names
    # the best claim of a problem KernelBench still has; a renamed one skipped
    lbi = [i for i in items if i.source == "leaderboard"]
    assert [i.name for i in lbi] == ["L2 7_Conv (m2)"] and lbi[0].claim["speedup"] == 2.3
    assert open(lbi[0].kernel).read() == "# bb\n"
    assert os.path.isfile(os.path.join(items[0].op, "func_forward.py"))
    ok = {"rc": 0, "wall_s": 1, "ev": {"verdict": "verified", "reasons": [],
                                       "summary": {"geomean_speedup_eager": 1.7}}}
    bad = {"rc": 1, "wall_s": 1, "ev": {"verdict": "rejected", "reasons": [
        {"check": "stream", "message": "launches on the legacy default stream"}]}}
    items[0].strict, items[0].kb = bad, ok      # published correct, right in kb mode
    lbi[0].strict = bad                         # published correct, not run in kb mode
    adv = next(i for i in items if i.source == "kernelbench-adversarial")
    adv.strict = bad                            # adversarial, rejected: agrees
    text = corpora.report(items, str(tmp_path / "r.txt"))
    rows = {line.split()[0] + line[24:82].strip(): line for line in text.splitlines()
            if line.startswith(("robust", "kernelbench", "leaderboard"))}
    assert "1.70" in rows["robust-kbenchlin/forward"] and " yes " in rows["robust-kbenchlin/forward"]
    assert " NO " in rows["leaderboardL2 7_Conv (m2)"]
    assert " yes " in rows["kernelbench-adversarialzero_out"]
    assert "kernels," in text.splitlines()[-1]


def test_modes_choose_which_runs(tmp_path, monkeypatch):
    """--modes kernelbench runs every kernel in that mode only (timed where a
    speedup was claimed), strict none of them a second time; the default
    runs strict first and kernelbench for the rejected and the claimed."""
    import concurrent.futures
    import time
    import types
    rk, kb, lb = _corpora(tmp_path / "src")
    calls = []

    def fake(binary, cfg, item, mode, outdir, timing):
        calls.append((item.name, mode, timing))
        v = "rejected" if item.source == "kernelbench-adversarial" else "verified"
        return {"rc": 0, "wall_s": 0, "ev": {"verdict": v, "reasons": []}}
    monkeypatch.setattr(corpora, "_run_one", fake)

    def run(modes):
        calls.clear()
        items = corpora.robust_kbench(rk, str(tmp_path / modes)) + \
            corpora.kernelbench_adversarial(kb, str(tmp_path / modes)) + \
            corpora.leaderboard(lb, kb, str(tmp_path / modes), 3)
        a = types.SimpleNamespace(bin="kb", deadline=600.0, modes=modes)
        with concurrent.futures.ThreadPoolExecutor(2) as ex:
            corpora._run_all(ex, a, "cfg", items, str(tmp_path), time.monotonic())
        return items, sorted(calls)
    items, c = run("kernelbench")
    assert {m for _, m, _ in c} == {"kernelbench"} and len(c) == len(items)
    assert all(i.kb is not None and i.strict is None for i in items)
    assert ("L2 7_Conv (m2)", "kernelbench", True) in c
    items, c = run("strict")
    assert {m for _, m, _ in c} == {"strict"} and len(c) == len(items)
    items, c = run("strict,kernelbench")
    kbm = [n for n, m, _ in c if m == "kernelbench"]
    # the adversarial one (rejected) and the claimed ones get a second run
    assert "zero_out" in kbm and "L2 7_Conv (m2)" in kbm
    assert len([n for n, m, _ in c if m == "strict"]) == len(items)
