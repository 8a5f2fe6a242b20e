"""How the verifier turns what a hold of the given stream showed into a
`stream` reason that names the cause and the fix, and not into the
symptoms (NaN, wrong values, nondeterminism): kbh_verify.Verifier driven
here without a GPU, through a stand-in Caller whose calls return what the
real kbh_calls.Caller reports on the H200 (tests/gpu/test_gpu_stream.py
runs the real thing). Also the messages of kbh_calls and kbh_timing."""
import contextlib
import os
import sys
import types

import pytest

torch = pytest.importorskip("torch")

TOP = os.environ.get("KB_TOP") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))

from kernelbot_harness.checks import calls as kbh_calls  # noqa: E402
from kernelbot_harness.checks import memory as kbh_memory  # noqa: E402
from kernelbot_harness.timing import evaluation as kbh_timing  # noqa: E402
from kernelbot_harness import verify as kbh_verify  # noqa: E402
from kernelbot_harness.checks.calls import CallResult  # noqa: E402

N = 64


def gate_info(conclusive=True, early=None, open_at_return=False, hold=4.0):
    return {"hold_ms": hold, "conclusive": conclusive, "open_at_return": open_at_return,
            "early_write": None if early is None else
            {"output": 0, "written": early, "numel": N}}


class FakeCaller:
    """Plays back one behaviour: relu computed right or wrong per call,
    with the gate info a real gated call would carry."""

    def __init__(self, behave, abi="native"):
        self.behave = behave
        self.kernel = types.SimpleNamespace(abi=abi)
        self.calls = []
        self.reasons = None

    def allocate(self, specs, pattern):
        pass

    def call(self, case, kargs, grad_outs, check_stream, gate=False):
        self.calls.append(gate)
        right, info = self.behave(len(self.calls), gate)
        r = CallResult()
        x = kargs[0]
        r.outs = [torch.relu(x) if right else torch.full_like(x, float("nan"))]
        r.poisoned, r.guards_ok, r.late = True, True, False
        r.gate = info if gate else None
        return r


class Task:
    def activate(self, cfg):
        return contextlib.nullcontext()

    def make_case(self, cfg, seed, dist, init, device):
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(N, generator=g)
        return types.SimpleNamespace(args=[x], names=["input0"],
                                     ref=lambda args: [torch.relu(args[0])])


def verify(behave, monkeypatch, abi="native", seeds=2):
    monkeypatch.setattr(kbh_memory, "poison_free_memory", lambda device: None)
    req = {"pass": "forward", "seeds": seeds,
           "tolerances": {"float32": {"atol": 1e-4, "rtol": 1e-4}}}
    chan = types.SimpleNamespace(nonce="0" * 32, progress=lambda *a: None)
    device = types.SimpleNamespace(type="cuda")     # the gated path; tensors stay on cpu
    v = kbh_verify.Verifier(req, Task(), types.SimpleNamespace(abi=abi), device, chan)
    v.caller = FakeCaller(behave, abi)
    cfg = types.SimpleNamespace(index=0, name="own", out_specs=[((N,), torch.float32)],
                                fwd_specs=[], inputs=[{"shape": [N]}])
    reasons = v.run([cfg])
    return reasons, cfg, v


def test_an_output_written_under_the_hold_is_the_one_reason(monkeypatch):
    # a legacy-stream kernel: written while the stream was held, and what it
    # computed from the NaN inputs is wrong; without the hold it is right
    reasons, cfg, v = verify(lambda n, gate: (not gate, gate_info(early=N)), monkeypatch)
    assert [r["check"] for r in reasons] == ["stream"], reasons
    msg = reasons[0]["message"]
    assert "held back" in msg and "64 of 64" in msg
    assert "legacy default stream" in msg and "(cudaStream_t)stream" in msg
    assert cfg.failed == {"stream"}
    assert v.checks_map(cfg)["stream"] == "fail"
    assert v.caller.calls == [True, False]      # no confirmation needed


def test_wrong_only_under_the_hold_twice_is_stream(monkeypatch):
    # reads its inputs early but writes through the given stream: no early
    # write, wrong under every hold, right without one
    reasons, cfg, v = verify(lambda n, gate: (not gate, gate_info()), monkeypatch,
                             abi="torch-ext")
    assert [r["check"] for r in reasons] == ["stream"], reasons
    msg = reasons[0]["message"]
    assert "inputs late" in msg and "at::cuda::getCurrentCUDAStream()" in msg
    assert v.caller.calls == [True, False, True, False]


def test_wrong_once_is_not_blamed_on_the_stream(monkeypatch):
    # wrong on the first call only (gated or not): the confirmation's held
    # call is right, so it stays a plain wrong result
    reasons, cfg, v = verify(lambda n, gate: (n != 1, gate_info()), monkeypatch)
    checks = [r["check"] for r in reasons]
    assert "stream" not in checks and "nan_mismatch" in checks, reasons


def test_a_correct_kernel_passes_behind_the_hold(monkeypatch):
    reasons, cfg, v = verify(lambda n, gate: (True, gate_info()), monkeypatch)
    assert reasons == []
    assert v.checks_map(cfg)["stream"] == "pass"
    assert v.caller.calls == [True, False, False, False]    # one gated call a config
    assert cfg.notes == []


def test_an_inconclusive_hold_is_noted_not_rejected(monkeypatch):
    reasons, cfg, v = verify(
        lambda n, gate: (True, gate_info(conclusive=False, open_at_return=True,
                                         hold=kbh_calls.HOLD_MAX_MS)), monkeypatch)
    assert reasons == []
    assert len(cfg.notes) == 1 and "inconclusive" in cfg.notes[0]
    assert "waits for the stream" in cfg.notes[0]


def test_the_fix_names_the_abi():
    assert "(cudaStream_t)stream" in kbh_calls.stream_fix("native")
    assert "getCurrentCUDAStream" in kbh_calls.stream_fix("torch-ext")
    both = kbh_calls.stream_fix(None)
    assert "(cudaStream_t)stream" in both and "getCurrentCUDAStream" in both
    for abi in ("native", "torch-ext", None):
        assert "legacy default stream" in kbh_calls.stream_fix(abi)


def test_timing_probe_messages():
    assert kbh_timing.stream_probe_message(None, "native") is None
    clean = {"hold_ms": 4.0, "conclusive": True, "early_write": None,
             "late_inputs": False, "late": False}
    assert kbh_timing.stream_probe_message(clean, "native") is None
    early = dict(clean, early_write={"output": 0, "written": 5, "numel": 9})
    msg = kbh_timing.stream_probe_message(early, "native")
    assert "5 of 9" in msg and "(cudaStream_t)stream" in msg
    msg = kbh_timing.stream_probe_message(dict(clean, late_inputs=True), "torch-ext")
    assert "inputs" in msg and "getCurrentCUDAStream" in msg
    assert "after the call returned" in kbh_timing.stream_probe_message(
        dict(clean, late=True), "native")


def test_side_stream_figures_end_with_the_fix():
    entry = {"kernel": {"median_ms": 0.004, "host_median_ms": 0.005, "sync_median_ms": 0.5,
                        "sync_excess_ms": 0.4, "tail_batch": 32},
             "eager": {"median_ms": 0.005, "host_median_ms": 0.01, "sync_median_ms": 0.2,
                       "sync_excess_ms": 0.0, "tail_batch": 32}}
    text = kbh_timing.side_stream_figures(entry)
    assert "32 calls back to back" in text
    assert text.endswith(kbh_calls.stream_fix(None))
