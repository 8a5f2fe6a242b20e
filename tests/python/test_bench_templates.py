"""`make bench-templates`' driver (bench/templates/bench_templates.py) end to
end on the CPU backend, so it cannot rot between GPU runs: a tiny size
table, one operator per family, real `kernelbot run` and `kernelbot bench`
calls; the tables, the target lines and the --out files must come out. A
second run with a deadline too short for anything must say what it skipped
and still print every table and target line. Also the operator files
themselves: every operator of the table loads as a robust-kbench task whose
configs are its sizes. Nothing here judges how long anything took: a loaded
machine makes the suite slower, never red."""
import importlib.util
import json
import os
import re
import subprocess
import sys

import pytest
import torch

TOP = os.environ.get("KB_TOP") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("KB_BIN") or os.path.join(TOP, "build", "kernelbot")
DRIVER = os.path.join(TOP, "bench", "templates", "bench_templates.py")

sys.path.insert(0, os.path.join(TOP, "bench", "templates"))
import operators  # noqa: E402

needs_bin = pytest.mark.skipif(not os.path.exists(BIN), reason="kernelbot binary not built")

OPS = ["gelu_chain", "softmax", "linear_relu"]
SIZES = {"gelu_chain": {"small": [4, 32], "large": [16, 96]},
         "softmax": {"small": [4, 32], "large": [16, 96]},
         "linear_relu": {"small": [4, 8, 8], "large": [16, 32, 24]}}
TARGETS = ["target memory-bound kernels at the largest size >= 85% of copy bandwidth: ",
           "target fused pointwise chains (>= 3 ops) vs torch.compile >= 1.0x: ",
           "target fused pointwise chains (>= 3 ops) vs eager >= 1.5x: ",
           "target linear + epilogue vs eager >= 1.0x: "]
HEADER = ("operator", "size", "eager ms", "compile ms", "kernel ms", "vs eager", "vs compile",
          "achieved", "share", "tuning s", "points")


def drive(tmp, *args, timeout=400):
    sizes = tmp / "sizes.json"
    sizes.write_text(json.dumps(SIZES))
    argv = [sys.executable, DRIVER, "--bin", BIN, "--backend", "cpu", "--python", sys.executable,
            "--workdir", str(tmp / "work"), "--ops", ",".join(OPS), "--sizes", str(sizes),
            "--max-points", "1", "--exhaustive-limit", "1", "--refine-rounds", "0"] + list(args)
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=TOP)


def target_lines(text):
    return [ln for ln in text.splitlines() if ln.startswith("target ")]


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    # no --deadline: what it plans to skip depends on how fast the machine
    # is today (another job beside it); every table and file must come out
    # whatever the load. Skipping is test_deadline_skips_and_says_so's.
    # The timeout only catches a hang.
    tmp = tmp_path_factory.mktemp("bench-templates")
    r = drive(tmp, "--out", str(tmp / "out"), timeout=1800)
    return tmp, r


@needs_bin
def test_tables_and_targets(full):
    tmp, r = full
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-3000:]
    out = r.stdout
    for title in ("== fused pointwise chains ==", "== row-wise reductions ==",
                  "== linear + epilogue ==", "== targets =="):
        assert title in out, out
    header = [ln for ln in out.splitlines() if ln.startswith("operator ")]
    assert len(header) == 3, out
    for h in header:
        assert re.split(r"\s{2,}", h.strip())[:len(HEADER)] == list(HEADER), h
    # one row per operator and size, each with a kernel time and speedups
    for op in OPS:
        for label in SIZES[op]:
            rows = [ln for ln in out.splitlines()
                    if ln.startswith(op + " ") and (" %s " % label) in ln]
            assert len(rows) == 1, (op, label, out)
            cells = re.split(r"\s{2,}", rows[0].strip())
            assert re.match(r"^\d+\.\d+$", cells[4]), cells   # kernel ms
            assert re.match(r"^\d+\.\d+x$", cells[5]), cells  # vs eager
            assert re.match(r"^\d+/\d+$", cells[10]), cells   # points tried / space
    lines = target_lines(out)
    assert [ln[:len(t)] for ln, t in zip(lines, TARGETS)] == TARGETS, lines
    assert all(re.search(r" -> (met|missed|not measured)", ln) for ln in lines), lines
    # eager figures exist for the chain and the linear rows: those targets are decided
    assert re.search(r" -> (met|missed)$", lines[2]), lines
    assert re.search(r" -> (met|missed)$", lines[3]), lines
    if not hasattr(torch, "compile"):
        assert lines[1].endswith("-> not measured"), lines
        assert "torch.compile unavailable" in lines[1]
    assert "NOT RUN" not in out and "FAILED" not in out, out


@needs_bin
def test_out_dir(full):
    tmp, r = full
    assert r.returncode == 0, r.stdout[-4000:]
    out = tmp / "out"
    report = (out / "bench-templates-report.txt").read_text()
    assert report in r.stdout
    assert target_lines(report) == target_lines(r.stdout)
    data = json.loads((out / "bench-templates.json").read_text())
    assert data["backend"] == "cpu"
    rows = data["rows"]
    assert len(rows) == sum(len(v) for v in SIZES.values())
    for row in rows:
        assert row["source"] == "bench", row
        assert row["kernel_ms"] > 0 and row["eager_ms"] > 0, row
        assert row["points"] == 1 and row["tuning_s"] > 0, row
        share = row["flops_share"] if row["family"] == "matmul" else row["bw_share"]
        assert share is not None and share > 0, row
    assert {u["operator"]: u["state"] for u in data["units"]} == {op: "tuned" for op in OPS}
    assert [t["status"] for t in data["targets"]][2] in ("met", "missed")
    assert (out / "bench-templates-evidence.tar.gz").stat().st_size > 1000
    # the operator really had the table's sizes as its configs
    ev = json.loads((tmp / "work" / "operators" / "softmax-bench.json").read_text())
    shapes = [c["inputs"][0]["shape"] for c in ev["configs"]]
    assert shapes == [SIZES["softmax"]["small"], SIZES["softmax"]["large"]], shapes
    # the tuning state stays in the workdir
    assert (tmp / "work" / "state" / "tune").is_dir()


@needs_bin
def test_deadline_skips_and_says_so(tmp_path):
    r = drive(tmp_path, "--deadline", "1", timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert "NOT RUN (deadline 1 s): run and bench of gelu_chain; run and bench of softmax; " \
           "run and bench of linear_relu" in out, out
    assert out.count("not run: deadline") == sum(len(v) for v in SIZES.values()), out
    lines = target_lines(out)
    assert [ln[:len(t)] for ln, t in zip(lines, TARGETS)] == TARGETS, lines
    assert all(ln.endswith("-> not measured") for ln in lines), lines


@needs_bin
def test_workdir_guard_and_usage(tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "keep.txt").write_text("not ours")
    r = subprocess.run([sys.executable, DRIVER, "--bin", BIN, "--backend", "cpu",
                        "--workdir", str(other)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "not empty and not an earlier bench-templates' workdir" in r.stderr
    assert (other / "keep.txt").exists()
    r = subprocess.run([sys.executable, DRIVER, "--bin", BIN, "--backend", "cpu",
                        "--workdir", str(tmp_path / "w"), "--ops", "conv2d"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "unknown operator 'conv2d'" in r.stderr, r.stderr


def _load_task(folder, tag):
    spec = importlib.util.spec_from_file_location("bt_" + tag,
                                                  os.path.join(folder, "func_forward.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("name", operators.PRIORITY)
def test_operator_files(tmp_path, name):
    """Each operator at two of its cpu sizes: Model(**init+shared) and
    get_inputs(**shared) work, the sizes are paired (not a cross product),
    and the output has the expected shape."""
    sizes = operators.sizes_for(name, "cpu")[:2]
    folder = operators.write_operator(str(tmp_path / name), name, [d for _, d in sizes])
    cfg = json.loads(open(os.path.join(folder, "config_forward.json")).read())
    assert len(cfg["multi_shared_configs"]) == 2
    assert cfg["multi_input_configs"] == [{}] and len(cfg["multi_init_configs"]) == 1
    mod = _load_task(folder, name)
    spec = operators.OPS[name]
    assert name in operators.PRIORITY and spec["family"] in operators.FAMILIES
    for shared in cfg["multi_shared_configs"]:
        model = mod.Model(**dict(cfg["multi_init_configs"][0], **shared))
        inputs = mod.get_inputs(**shared)
        assert len(inputs) == len(mod.input_names)
        with torch.no_grad():
            y = model(*inputs)
        d = list(shared.values())
        if spec["family"] == "matmul":
            assert list(y.shape) == [d[0], d[2]]
        elif spec["kind"] == "cross_entropy":
            assert y.dim() == 0
        else:
            assert list(y.shape) == d
    assert set(operators.OPS) == set(operators.PRIORITY)
    for backend in ("cuda", "cpu"):
        labels = [lbl for lbl, _ in spec["sizes"][backend]]
        assert labels == ["small", "medium", "large"], (name, backend, labels)
    # the large GPU sizes are HBM-sized: >= 64 MB for the largest input
    dims = spec["sizes"]["cuda"][-1][1]
    assert re.search(r"\((\d+) MB\)", operators.size_text(name, dims))
    assert int(re.search(r"\((\d+) MB\)", operators.size_text(name, dims)).group(1)) >= 64
