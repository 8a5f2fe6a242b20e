"""Every CUDA test kernel (tests/kernels/cuda/*.cu) builds with the flags the
bot uses for the native ABI, exports kb_forward, and ptxas reports its
resource usage (the C side parses that report). Skipped without nvcc."""

import glob
import os
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

TOP = os.environ.get("KB_TOP") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))
CORPUS = sorted(glob.glob(os.path.join(TOP, "tests", "kernels", "cuda",
                                       "*.cu")))
NVCC = shutil.which("nvcc")
NM = shutil.which("nm")

EXPECTED = {"ok_relu", "ok_softmax", "hack_unwritten", "hack_stale_memory",
            "hack_out_of_bounds", "hack_input_mutation", "hack_cached",
            "hack_shape", "hack_precision", "hack_stream",
            "hack_nondeterministic", "hack_error", "hack_crash", "hack_hang"}

pytestmark = pytest.mark.skipif(NVCC is None, reason="nvcc not on PATH")


def test_corpus_is_complete():
    names = {os.path.basename(p)[:-3] for p in CORPUS}
    assert EXPECTED <= names, EXPECTED - names


def _build(src, outdir):
    so = os.path.join(outdir, os.path.basename(src)[:-3] + ".so")
    cmd = [NVCC, "-O3", "-arch=sm_90", "-shared", "-Xcompiler", "-fPIC",
           "-I", os.path.join(TOP, "verifier", "include"), "-Xptxas", "-v",
           "-o", so, src]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       universal_newlines=True, timeout=300)
    return src, so, p.returncode, p.stdout


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    outdir = str(tmp_path_factory.mktemp("cuda_corpus"))
    with ThreadPoolExecutor(max_workers=2) as pool:
        return list(pool.map(lambda s: _build(s, outdir), CORPUS))


def test_every_kernel_compiles_and_exports_kb_forward(built):
    assert built
    failed = ["%s:\n%s" % (os.path.basename(s), log[-2000:])
              for s, _, rc, log in built if rc != 0]
    assert not failed, "\n".join(failed)
    if NM is None:
        pytest.skip("nm not on PATH")
    for src, so, _, _ in built:
        out = subprocess.run([NM, "-D", "--defined-only", so],
                             stdout=subprocess.PIPE,
                             universal_newlines=True).stdout
        assert re.search(r"^\S+ T kb_forward$", out, re.M), \
            "%s does not export kb_forward" % so


RESOURCE = re.compile(r"ptxas info\s*: Used (\d+) registers")
FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, "
                   r"(\d+) bytes spill loads")


def test_ptxas_reports_resources(built):
    for src, _, rc, log in built:
        assert rc == 0
        assert "ptxas info" in log, "%s: no ptxas report" % src
        with open(src) as f:
            if "__global__" not in f.read():
                continue    # no kernel: ptxas reports only "0 bytes gmem"
        assert RESOURCE.search(log), "%s: no register report:\n%s" % (
            src, log)
        assert FRAME.search(log), "%s: no stack/spill report" % src
    softmax = [log for s, _, _, log in built
               if os.path.basename(s) == "ok_softmax.cu"]
    if softmax:
        assert re.search(r"\d+ bytes smem", softmax[0]), softmax[0]
