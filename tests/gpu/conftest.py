"""The GPU suite: the real `kernelbot` binary ($KB_BIN) on the CUDA corpus
(tests/kernels/cuda). Every test here is skipped, with the reason, where
torch sees no CUDA GPU or the binary is missing.

All correctness runs start together in one session fixture (one
`kernelbot verify OP K1 K2 ...` call per operator, the hang kernel in a
call of its own with a short timeout) so the suite takes about as long as
its slowest call; the timing checks run after them, on a quiet GPU.
Evidence and logs go to $KB_GPU_EVIDENCE when set (tests/gpu/run_on_runner.sh
sets it), else to a pytest temp dir.

KB_GPU_SUITE_BACKEND=cpu runs the same suite on the CPU corpus
(tests/kernels/cpu): a dry run of the driver and the checks on a machine
without a GPU.
"""
import concurrent.futures
import os
import sys

import pytest

TOP = os.environ.get("KB_TOP") or os.path.abspath(
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(TOP, "bench", "eval"))

import kbdrive  # noqa: E402

BIN = os.environ.get("KB_BIN") or os.path.join(TOP, "build", "kernelbot")
BACKEND = os.environ.get("KB_GPU_SUITE_BACKEND") or "cuda"
HANG_TIMEOUT_S = 20
GROUP_TIMEOUT_S = 180   # per evaluation; the crash costs a worker restart


def _skip_reason():
    if not os.path.exists(BIN):
        return "kernelbot binary '%s' not built" % BIN
    try:
        import torch
    except ImportError:
        return "no torch for %s" % sys.executable
    if BACKEND == "cuda" and not torch.cuda.is_available():
        return "no CUDA GPU visible to torch"
    return None


SKIP_REASON = _skip_reason()


def pytest_collection_modifyitems(config, items):
    if SKIP_REASON is None:
        return
    mark = pytest.mark.skip(reason=SKIP_REASON)
    here = os.path.dirname(os.path.abspath(__file__))
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(mark)


@pytest.fixture(scope="session")
def workdir(tmp_path_factory):
    d = os.environ.get("KB_GPU_EVIDENCE")
    if d:
        os.makedirs(d, exist_ok=True)
        return os.path.abspath(d)
    return str(tmp_path_factory.mktemp("gpu"))


@pytest.fixture(scope="session")
def kb(workdir):
    cfg = kbdrive.write_config(os.path.join(workdir, "config.ini"),
                               os.path.join(workdir, "state"),
                               python=os.environ.get("KERNELBOT_PYTHON") or sys.executable,
                               baselines="eager")
    return kbdrive.Kernelbot(BIN, cfg)


def _groups():
    """(name, operator, kernels, extra args) of every correctness call: one
    per operator (its correct kernel first), the hang alone."""
    groups = []
    oks = kbdrive.ok_kernels(BACKEND)
    relu_group = [oks["relu"]] if "relu" in oks else []
    hang = None
    by_op = {}
    for path, op in kbdrive.reject_kernels(BACKEND):
        if kbdrive.stem(path) == "hack_hang":
            hang = (path, op)
        elif os.path.basename(op) == "kb_relu.py":
            relu_group.append(path)
        else:
            by_op.setdefault(op, []).append(path)
    if relu_group:
        groups.append(("relu", kbdrive.operator_path("kb_relu.py"), relu_group,
                       ["--no-timing", "--timeout", str(GROUP_TIMEOUT_S)]))
    for op, path in sorted(oks.items()):
        if op == "relu":
            continue
        ks = [path] + by_op.pop(kbdrive.operator_path(kbdrive.OK_OPERATORS[op]), [])
        groups.append((op, kbdrive.operator_path(kbdrive.OK_OPERATORS[op]), ks,
                       ["--no-timing", "--timeout", str(GROUP_TIMEOUT_S)]))
    for op, ks in sorted(by_op.items()):
        groups.append((kbdrive.stem(op), op, ks,
                       ["--no-timing", "--timeout", str(GROUP_TIMEOUT_S)]))
    if hang:
        groups.append(("hang", hang[1], [hang[0]],
                       ["--no-timing", "--seeds", "1", "--timeout", str(HANG_TIMEOUT_S)]))
    return groups


@pytest.fixture(scope="session")
def corpus(kb, workdir):
    """{kernel stem: (evidence or None, Run)} for every kernel of the corpus,
    all calls running at once."""
    groups = _groups()

    def one(g):
        name, op, kernels, args = g
        return g, kb.verify(op, kernels, os.path.join(workdir, "verify-" + name),
                            args, timeout=900)

    out = {}
    with concurrent.futures.ThreadPoolExecutor(len(groups)) as ex:
        for (name, op, kernels, args), run in ex.map(one, groups):
            for k in kernels:
                out[kbdrive.stem(k)] = (run.evidence.get(kbdrive.stem(k)), run)
    return out
