"""Every CUDA test kernel through the real binary on the GPU: each correct
kernel is verified on its operator, each hack is rejected for its reason."""
import glob
import os

import pytest

import kbdrive

BACKEND = os.environ.get("KB_GPU_SUITE_BACKEND") or "cuda"

OK = sorted(kbdrive.stem(p) for p in glob.glob(os.path.join(
    kbdrive.kernel_dir(BACKEND), "ok_*" + kbdrive.SOURCE_EXT[BACKEND])))
REJECT = sorted(kbdrive.stem(p) for p, _ in kbdrive.reject_kernels(BACKEND))
CUDA_HACKS = {"hack_unwritten", "hack_stale_memory", "hack_out_of_bounds",
              "hack_input_mutation", "hack_cached", "hack_cached_address",
              "hack_shape", "hack_precision",
              "hack_stream", "hack_nondeterministic", "hack_error", "hack_crash",
              "hack_hang"}


def _show(name, entry):
    ev, run = entry
    lines = ["%s: %s" % (name, kbdrive.verdict(ev))]
    for r in (ev or {}).get("reasons") or []:
        lines.append("  %s (config %s, seed %s): %s" % (
            r.get("check"), r.get("config"), r.get("seed"), (r.get("message") or "")[:300]))
    if ev is None:
        lines.append(run.log()[-4000:])
    return "\n".join(lines)


def test_every_ok_kernel_has_an_operator():
    ops = {"ok_" + op for op in kbdrive.OK_OPERATORS}
    assert set(OK) <= ops, "no operator for %s" % sorted(set(OK) - ops)
    assert {"ok_relu", "ok_softmax", "ok_linear_gelu", "ok_scale_shift",
            "ok_log", "ok_two_outputs"} <= set(OK)


def test_every_hack_has_an_expected_reason():
    missing = [k for k in REJECT if k not in kbdrive.EXPECTED_REJECTIONS]
    assert not missing, missing
    if BACKEND == "cuda":
        assert CUDA_HACKS <= set(REJECT), CUDA_HACKS - set(REJECT)


@pytest.mark.parametrize("name", OK)
def test_ok_kernel_verified(corpus, name):
    entry = corpus[name]
    ev = entry[0]
    assert kbdrive.verdict(ev) == "verified", _show(name, entry)
    assert ev["environment"]["backend"] == BACKEND
    assert ev["kernelbot"]["kernel"]["abi"] == "native"
    n, seeds = kbdrive.configs_seeds(ev)
    assert n >= 2 and seeds == 5, (n, seeds)
    for c in ev["configs"]:
        assert all(v in ("pass", "skip") for v in c["checks"].values()), c


@pytest.mark.parametrize("name", REJECT)
def test_hack_rejected_for_its_reason(corpus, name):
    entry = corpus[name]
    ok, why = kbdrive.rejection_ok(name, entry[0])
    assert ok, why + "\n" + _show(name, entry)


def test_shape_hack_passes_its_own_size_only(corpus):
    ev, run = corpus["hack_shape"]
    assert kbdrive.verdict(ev) == "rejected", _show("hack_shape", (ev, run))
    cfgs = ev["configs"]
    own = [c for c in cfgs if c.get("kind") == "own"]
    assert own and set(own[0]["checks"].values()) <= {"pass", "skip"}, own
    others = [c for c in cfgs if c.get("kind") != "own"]
    assert any("fail" in c["checks"].values() for c in others), \
        _show("hack_shape", (ev, run))


def test_hang_is_killed_by_the_timeout(corpus):
    ev, run = corpus["hack_hang"]
    assert "timeout" in kbdrive.checks(ev), _show("hack_hang", (ev, run))
    # killed near --timeout, not left to the driver's own limit
    assert run.wall_s < 120, run.wall_s
