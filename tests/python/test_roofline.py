"""Tests of bench/harness/roofline.py: counting FLOPs and bytes, peaks cache."""

import json
import os
import sys

import pytest
import torch

TOP = os.environ.get("KB_TOP") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))

from kernelbot_harness.timing import roofline as roofline  # noqa: E402


# ------------------------------------------------------------- count

def test_matmul_flops_and_bytes():
    m, k, n = 48, 32, 24
    a, b = torch.randn(m, k), torch.randn(k, n)
    c = roofline.count(torch.matmul, [a, b])
    flops, nbytes = c
    assert flops == 2 * m * n * k
    assert nbytes == (m * k + k * n + m * n) * 4
    assert c.reason == "" and c.method
    assert (c.flops, c.bytes) == (flops, nbytes)


def test_batched_matmul_flops():
    a, b = torch.randn(3, 8, 5), torch.randn(3, 5, 7)
    assert roofline.count(torch.bmm, [a, b]).flops == 2 * 3 * 8 * 7 * 5


def test_relu_flops_and_bytes():
    """The relu operator of tests/operators/kb_relu.py, scaled down."""
    x = torch.randn(16, 1024)
    flops, nbytes = roofline.count(torch.relu, [x])
    assert flops == x.numel()
    assert nbytes == 2 * x.numel() * 4


def test_module_parameters_are_read():
    lin = torch.nn.Linear(32, 16)
    x = torch.randn(8, 32)
    flops, nbytes = roofline.count(lin, [x])
    assert flops >= 2 * 8 * 16 * 32
    assert nbytes == (8 * 32 + 16 * 32 + 16 + 8 * 16) * 4


def test_conv_flops():
    conv = torch.nn.Conv2d(3, 8, 3, padding=1, bias=False)
    x = torch.randn(2, 3, 10, 10)
    flops, _ = roofline.count(conv, [x])
    assert flops == 2 * 2 * 10 * 10 * 8 * 3 * 9


def test_views_and_copies_cost_no_flops():
    x = torch.randn(16, 64)
    assert roofline.count(lambda t: t.t().contiguous(), [x]).flops == 0


def test_reduction_counts_its_input():
    x = torch.randn(16, 64)
    assert roofline.count(lambda t: t.sum(dim=1), [x]).flops == x.numel()


def test_shared_input_counted_once_and_scalars_ignored():
    x = torch.randn(100)
    _, nbytes = roofline.count(lambda a, b, s: a * b * s, [x, x, 2.0])
    assert nbytes == 2 * 100 * 4


def test_given_outputs_define_written_bytes():
    x = torch.randn(10)
    out = [torch.empty(10, dtype=torch.float64)]
    _, nbytes = roofline.count(torch.relu, [x], outputs=out)
    assert nbytes == 10 * 4 + 10 * 8


def test_failure_returns_zero_flops_and_reason():
    x = torch.randn(10)

    def broken(t):
        raise RuntimeError("reference broke")
    c = roofline.count(broken, [x])
    assert c.flops == 0
    assert "reference broke" in c.reason
    assert c.bytes == 40


# ------------------------------------------------------------- peaks

FAKE = {"copy_gbps": 123.0, "matmul_tflops": 4.5, "matmul_dtype": "float32",
        "matmul_tflops_by_dtype": {"float32": 4.5}}


def test_peaks_are_cached(tmp_path, monkeypatch):
    path = str(tmp_path / "sub" / "peaks.json")
    monkeypatch.setattr(roofline, "_measure", lambda dev: dict(FAKE))
    first = roofline.peaks("cpu", path)
    assert first["copy_gbps"] == 123.0 and first["matmul_tflops"] == 4.5
    for k in ("device", "copy_gbps", "matmul_tflops", "matmul_dtype",
              "measured_at"):
        assert k in first
    assert os.path.exists(path)

    def boom(dev):
        raise AssertionError("measured again instead of reading the cache")
    monkeypatch.setattr(roofline, "_measure", boom)
    second = roofline.peaks("cpu", path)
    assert second == first


def test_corrupt_cache_is_ignored_and_rewritten(tmp_path, monkeypatch):
    path = tmp_path / "peaks.json"
    path.write_text("{ this is not json")
    calls = []

    def fake(dev):
        calls.append(dev)
        return dict(FAKE)
    monkeypatch.setattr(roofline, "_measure", fake)
    p = roofline.peaks("cpu", str(path))
    assert calls == ["cpu"] and p["copy_gbps"] == 123.0
    data = json.loads(path.read_text())
    assert p["key"] in data["entries"]

    # a well-formed file with a bad entry: measured again, entry replaced
    data["entries"][p["key"]]["copy_gbps"] = "fast"
    path.write_text(json.dumps(data))
    roofline.peaks("cpu", str(path))
    assert len(calls) == 2
    data = json.loads(path.read_text())
    assert data["entries"][p["key"]]["copy_gbps"] == 123.0


def test_cache_keeps_other_devices(tmp_path, monkeypatch):
    path = tmp_path / "peaks.json"
    other = dict(FAKE, device="NVIDIA H200")
    path.write_text(json.dumps({"version": roofline.CACHE_VERSION,
                                "entries": {"cuda|NVIDIA H200|x": other}}))
    monkeypatch.setattr(roofline, "_measure", lambda dev: dict(FAKE))
    roofline.peaks("cpu", str(path))
    entries = json.loads(path.read_text())["entries"]
    assert "cuda|NVIDIA H200|x" in entries and len(entries) == 2


def test_failed_measurement_is_not_cached(tmp_path, monkeypatch):
    path = tmp_path / "peaks.json"

    def boom(dev):
        raise MemoryError("no room")
    monkeypatch.setattr(roofline, "_measure", boom)
    p = roofline.peaks("cpu", str(path))
    assert p["copy_gbps"] is None and "no room" in p["error"]
    assert not path.exists()


def test_real_cpu_measurement(tmp_path):
    p = roofline.peaks("cpu", str(tmp_path / "peaks.json"))
    assert p["copy_gbps"] > 0.1
    assert p["matmul_tflops"] > 1e-4
    assert p["matmul_dtype"] == "float32"


# ------------------------------------------------------------- shares

def test_shares_arithmetic_and_dtype_choice():
    peaks = {"copy_gbps": 4000.0, "matmul_tflops": 800.0,
             "matmul_tflops_by_dtype": {"bfloat16": 800.0, "float32": 50.0}}
    s = roofline.shares(10 ** 12, 2 * 10 ** 9, 1.0, peaks, torch.float32)
    assert s["gbps"] == pytest.approx(2000.0)
    assert s["tflops"] == pytest.approx(1000.0)
    assert s["bw_share"] == pytest.approx(0.5)
    assert s["flops_share"] == pytest.approx(20.0)
    s = roofline.shares(10 ** 12, 0, 2.0, peaks, "bfloat16")
    assert s["flops_share"] == pytest.approx(500.0 / 800.0)
    assert s["bw_share"] == 0.0
    assert roofline.shares(1, 1, 1.0, peaks, torch.float16)["flops_share"] \
        == pytest.approx(1e-9 / 800.0)
    assert roofline.shares(1, 1, 1.0, peaks)["flops_share"] == \
        pytest.approx(1e-9 / 800.0)
    none = roofline.shares(1, 1, 0.0, peaks)
    assert none == {"gbps": None, "tflops": None, "bw_share": None,
                    "flops_share": None}
    missing = roofline.shares(1, 1, 1.0, {"copy_gbps": None})
    assert missing["bw_share"] is None and missing["gbps"] is not None
