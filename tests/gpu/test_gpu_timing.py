"""Timing sanity: the same kernel benched twice, in two `kernelbot bench`
runs, agrees: geomean speedup over eager within 5%, each config's kernel
median within 10% or within 2 us (four times CUDA events' resolution of
about 0.5 us: a config of a few elements runs for a few microseconds).
A cpu dry run allows 25% and 50%: a shared CPU swings. Runs after the
correctness calls (it asks for the corpus fixture), so nothing else is on
the GPU."""
import os

import pytest

import kbdrive

BACKEND = os.environ.get("KB_GPU_SUITE_BACKEND") or "cuda"

GEOMEAN_TOL = 0.05 if BACKEND == "cuda" else 0.25
MEDIAN_TOL = 0.10 if BACKEND == "cuda" else 0.50
MEDIAN_SLACK_MS = 0.002


@pytest.fixture(scope="session")
def two_benches(kb, workdir, corpus):
    kernel = kbdrive.ok_kernels(BACKEND)["relu"]
    op = kbdrive.operator_path("kb_relu.py")
    runs = []
    for i in (1, 2):
        path = os.path.join(workdir, "bench-%d" % i, "ok_relu.json")
        runs.append(kb.bench(op, kernel, path, ["--seeds", "1"], timeout=600))
    return runs


def test_bench_twice_agrees(two_benches):
    evs = []
    for run in two_benches:
        assert run.rc == 0, run.log()[-4000:]
        ev = run.evidence.get("ok_relu")
        assert ev and ev["verdict"] == "verified", run.log()[-4000:]
        evs.append(ev)
    g = [kbdrive.geomean_speedup(ev) for ev in evs]
    assert all(x and x > 0 for x in g), g
    gs = kbdrive.spread(g)
    m1, m2 = (kbdrive.kernel_medians(ev) for ev in evs)
    assert m1 and set(m1) == set(m2), (sorted(m1), sorted(m2))
    per = {name: kbdrive.spread([m1[name], m2[name]]) for name in m1}
    worst = max(per, key=lambda k: per[k])
    print("geomean speedups %.4f %.4f (spread %.2f%%); worst config %s %.2f%%"
          % (g[0], g[1], 100 * gs, worst, 100 * per[worst]))
    assert gs <= GEOMEAN_TOL, "geomean speedups %s differ by %.1f%%" % (g, 100 * gs)
    bad = {k: "%.1f%%" % (100 * v) for k, v in per.items()
           if v > MEDIAN_TOL and abs(m1[k] - m2[k]) > MEDIAN_SLACK_MS}
    assert not bad, "kernel medians differ by more than %d%% and 2 us: %s\n%s\n%s" % (
        100 * MEDIAN_TOL, bad, m1, m2)
