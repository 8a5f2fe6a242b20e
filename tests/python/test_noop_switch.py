"""The no-op switch the harness puts into a candidate's CUDA kernels
(kernelbot_harness/noop.py) to prove that custom code does work: where it
goes in real sources, and that the instrumented source still builds with
nvcc, keeps its line numbers and exports the setter. Switching it at run
time needs a GPU: tests/gpu/test_gpu_modelnew.py."""
import glob
import os
import shutil
import subprocess
import sys

import pytest

TOP = os.environ.get("KB_TOP") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(TOP, "verifier", "harness"))

from kernelbot_harness import noop as kbh_noop  # noqa: E402

NVCC = shutil.which("nvcc")
NM = shutil.which("nm")

TRICKY = r'''
// __global__ void in_a_comment() { }
/* __global__ void in_a_block_comment() { } */
const char *s = "__global__ void in_a_string() { }";
__global__ void declared_only(float *x);
template <typename T>
__global__ void __launch_bounds__(256, 2) scaled(T *x, T a, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] * a + T('{' == '}');
}
extern "C" __global__ void plain(float *x) { x[0] = 1.0f; }
'''


def test_switch_goes_into_definitions_only():
    bodies = kbh_noop.kernel_bodies(TRICKY)
    assert len(bodies) == 2
    text, tag, n = kbh_noop.instrument(TRICKY)
    assert n == 2 and tag is not None
    flag = "kb_noop_flag_%s" % tag
    assert text.count("if (*(volatile const int *)&%s) return;" % flag) == 2
    assert "in_a_comment() { }" in text and "in_a_string() { }" in text
    assert "__global__ void declared_only(float *x);" in text
    # the switch is the first statement of each body
    assert "plain(float *x) { if (*(volatile const int *)&%s) return;  x[0] = 1.0f; }" \
        % flag in text


def test_source_without_kernels_is_left_alone():
    src = "#include <torch/extension.h>\nint f() { return 1; }\n"
    assert kbh_noop.instrument(src) == (src, None, 0)


@pytest.mark.skipif(NVCC is None or NM is None, reason="nvcc or nm not on PATH")
def test_instrumented_corpus_builds_and_exports_the_setter(tmp_path):
    """Every CUDA test kernel, instrumented, builds with nvcc and exports
    kb_noop_set_<tag>; an error keeps the line the author wrote."""
    srcs = sorted(glob.glob(os.path.join(TOP, "tests", "kernels", "cuda", "ok_*.cu")))[:3]
    assert srcs
    for src in srcs:
        with open(src) as f:
            text, tag, n = kbh_noop.instrument(f.read())
        assert n >= 1, src
        cu = tmp_path / os.path.basename(src)
        cu.write_text(text)
        so = tmp_path / (cu.name + ".so")
        p = subprocess.run([NVCC, "-O1", "-arch=sm_90", "-shared", "-Xcompiler", "-fPIC",
                            "-I", os.path.join(TOP, "verifier", "include"),
                            "-I", os.path.dirname(src), "-o", str(so), str(cu)],
                           capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr[-2000:]
        syms = subprocess.run([NM, "-D", "--defined-only", str(so)], capture_output=True,
                              text=True).stdout
        assert "kb_noop_set_%s" % tag in syms
    bad = "__global__ void k(float *x)\n{\n    x[0] = 1.0f;\n    undefined_name = 2;\n}\n"
    text, _, _ = kbh_noop.instrument(bad)
    cu = tmp_path / "bad.cu"
    cu.write_text(text)
    p = subprocess.run([NVCC, "-c", "-arch=sm_90", "-o", str(tmp_path / "bad.o"), str(cu)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode != 0
    assert "bad.cu(4)" in p.stdout + p.stderr, p.stdout + p.stderr
