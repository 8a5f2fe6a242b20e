"""The examples (examples/kernelbench/*.py, examples/robust-kbench/*/): every
one loads in the harness, its configs are the ones expected, its reference
runs on each of them, backward tasks yield reference gradients, and the two
formats of one example compute the same function.

The harness always evaluates an operator's own sizes (max_numel caps only
scaled variants), and the examples carry GPU sizes, so the harness runs
here use the small copies examples/shrink.py writes; the real files are
checked in-process (configs, sizes, shapes) and at small sizes (values).
"""
import concurrent.futures
import importlib.util
import json
import math
import os
import subprocess
import sys

import pytest
import torch

from test_harness_common import PYTHON, TOP, request, run_harness, scratch_dir

sys.dont_write_bytecode = True  # no __pycache__ inside examples/
sys.path.insert(0, os.path.join(TOP, "examples"))
from kernelbot_harness import configs as kbh_configs  # noqa: E402
import shrink  # noqa: E402

EXAMPLES = os.path.join(TOP, "examples")
KB_DIR = os.path.join(EXAMPLES, "kernelbench")
RK_DIR = os.path.join(EXAMPLES, "robust-kbench")
FACTOR = 32
MAX_NUMEL = 1 << 16

# name -> (family, output shape from the input shapes, output dtype)
SAME = lambda s: s[0]  # noqa: E731
ROWS = lambda s: s[0][:-1]  # noqa: E731
EXPECTED = {
    "fused_pointwise": ("pointwise", SAME, "float32"),
    "softmax": ("rowwise", SAME, "float32"),
    "layernorm": ("rowwise", SAME, "float32"),
    "rmsnorm": ("rowwise", SAME, "float32"),
    "cross_entropy": ("rowwise", lambda s: [], "float32"),
    "linear_gelu": ("matmul", lambda s: [s[0][0], s[1][0]], "float32"),
    "l2_norm": ("rowwise", ROWS, "float32"),
    "row_argmax": ("rowwise", ROWS, "int64"),
}
BACKWARD = ("fused_pointwise", "rmsnorm")
NAMES = sorted(EXPECTED)


def _import(path, tag):
    name = "kb_example_%s_%s" % (tag, os.path.basename(os.path.dirname(path)) +
                                 os.path.basename(path)[:-3])
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def kb_module(name):
    return _import(os.path.join(KB_DIR, name + ".py"), "kb")


def rk_module(name, which="forward"):
    return _import(os.path.join(RK_DIR, name, "func_%s.py" % which), "rk" + which)


def rk_config(name, which="forward"):
    with open(os.path.join(RK_DIR, name, "config_%s.json" % which)) as f:
        return json.load(f)


def cross_product(cfg):
    n = 1
    for key in ("init_configs", "input_configs", "shared_configs"):
        n *= len(cfg.get("multi_" + key) or cfg.get("single_" + key) or [{}])
    return n


# --- the harness runs, all at once (a process each, two at a time) ---

@pytest.fixture(scope="module")
def small():
    """The small copies, written by the CLI as a user would."""
    out = scratch_dir()
    p = subprocess.run([PYTHON, os.path.join(EXAMPLES, "shrink.py"), out,
                        "--factor", str(FACTOR)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert len(p.stdout.splitlines()) == len(shrink.names())
    return out


@pytest.fixture(scope="module")
def described(small):
    """(name, format, pass) -> the describe result."""
    jobs = {}
    for name in NAMES:
        kb = os.path.join(small, "kernelbench", name + ".py")
        rk = os.path.join(small, "robust-kbench", name)
        jobs[(name, "kb", "forward")] = request(kb, mode="describe", max_configs=4,
                                                max_numel=MAX_NUMEL)
        jobs[(name, "rk", "forward")] = request(rk, mode="describe", max_configs=64)
        if name in BACKWARD:
            jobs[(name, "kb", "backward")] = request(kb, mode="describe", max_configs=4,
                                                     max_numel=MAX_NUMEL,
                                                     **{"pass": "backward"})
            jobs[(name, "rk", "backward")] = request(rk, mode="describe", max_configs=64,
                                                     **{"pass": "backward"})
    with concurrent.futures.ThreadPoolExecutor(2) as ex:
        runs = dict(zip(jobs, ex.map(lambda r: run_harness(r, timeout=120), jobs.values())))
    return {k: r.result for k, r in runs.items()}


def _check_described(res, name):
    assert res["verdict"] == "described", res["reasons"]
    assert not [d for d in res["dropped_configs"] if "reference raised" in d["reason"]]
    _, out_shape, out_dtype = EXPECTED[name]
    for c in res["configs"]:
        shapes = [i["shape"] for i in c["inputs"]]
        assert c["outputs"] == [{"shape": list(out_shape(shapes)), "dtype": out_dtype}], c
        assert c["bytes"] > 0


@pytest.mark.parametrize("name", NAMES)
def test_examples_kernelbench_describe(described, name):
    res = described[(name, "kb", "forward")]
    _check_described(res, name)
    assert res["operator"]["format"] == "kernelbench"
    cfgs = res["configs"]
    assert len(cfgs) >= 3
    kinds = [c["kind"] for c in cfgs]
    assert kinds[0] == "own" and "half" in kinds and "odd" in kinds
    odd = next(c for c in cfgs if c["kind"] == "odd")
    assert any(d % 32 and d % 2 for d in odd["inputs"][0]["shape"])
    assert len({tuple(c["inputs"][0]["shape"]) for c in cfgs}) == len(cfgs)


@pytest.mark.parametrize("name", NAMES)
def test_examples_robust_kbench_describe(described, name):
    res = described[(name, "rk", "forward")]
    _check_described(res, name)
    assert res["operator"]["format"] == "robust-kbench"
    assert len(res["configs"]) == cross_product(rk_config(name)) >= 3
    assert not res["dropped_configs"]


@pytest.mark.parametrize("fmt", ["kb", "rk"])
@pytest.mark.parametrize("name", BACKWARD)
def test_examples_backward_reference_gradients(described, name, fmt):
    res = described[(name, fmt, "backward")]
    assert res["verdict"] == "described", res["reasons"]
    assert res["operator"]["pass"] == "backward"
    assert not res["dropped_configs"]
    if fmt == "rk":
        assert len(res["configs"]) == cross_product(rk_config(name, "backward"))
    for c in res["configs"]:
        # one gradient per floating tensor argument (x, then bias or weight)
        floating = [i for i in c["inputs"] if not i.get("scalar") and
                    i["dtype"].startswith("float")]
        assert len(floating) == 2
        assert [o["shape"] for o in c["outputs"]] == [i["shape"] for i in floating]


# --- the real files, in-process ---

def test_examples_inventory():
    assert shrink.names() == NAMES
    with open(os.path.join(EXAMPLES, "README.md")) as f:
        readme = f.read()
    for name in NAMES:
        assert os.path.isfile(os.path.join(RK_DIR, name, "func_forward.py"))
        assert os.path.isfile(os.path.join(RK_DIR, name, "config_forward.json"))
        has_bwd = os.path.isfile(os.path.join(RK_DIR, name, "func_backward.py"))
        assert has_bwd == (name in BACKWARD)
        assert has_bwd == os.path.isfile(os.path.join(RK_DIR, name, "config_backward.json"))
        assert "`%s`" % name in readme
    families = {EXPECTED[n][0] for n in NAMES}
    assert families == {"pointwise", "rowwise", "matmul"}


@pytest.mark.parametrize("name", NAMES)
def test_examples_real_sizes_and_configs(name):
    """GPU sizes in the files, the same in both formats; the harness's
    config rules see the size constants."""
    mod = kb_module(name)
    cfgs = kbh_configs.kernelbench_configs(mod)
    own = cfgs[0].params
    assert cfgs[0].kind == "own" and own and max(own.values()) >= 1024
    kinds = {c.kind for c in cfgs}
    assert {"half", "odd", "double"} <= kinds
    for which in ("forward", "backward") if name in BACKWARD else ("forward",):
        cfg = rk_config(name, which)
        for key in ("init_configs", "input_configs", "shared_configs"):
            # robust-kbench without --multi_* runs the single_ lists: the main config
            assert cfg["single_" + key] == cfg["multi_" + key][:1], (which, key)
        rk = kbh_configs.robust_kbench_configs(cfg, 10 ** 6)
        assert len(rk) == cross_product(cfg)
        first = dict(rk[0].params["input"], **rk[0].params["init"])
        # the KernelBench file's own sizes are the robust-kbench folder's first config
        shared = {k: v for k, v in first.items() if k in mod.__dict__}
        assert shared and all(mod.__dict__[k] == v for k, v in shared.items()), (first, own)
        assert set(own) <= set(first)
    rk_mod = rk_module(name)
    assert list(rk_mod.input_names) and callable(rk_mod.forward_fn)


def _small_pair(name, params, which="forward"):
    """KernelBench module with constants set from a (shrunk) robust-kbench
    config, both models with the same random parameters, same inputs."""
    kb, rk = kb_module(name), rk_module(name, which)
    for k, v in dict(params["input"], **params["init"]).items():
        if k in kb.__dict__:
            kb.__dict__[k] = v
    torch.manual_seed(0)
    kb_model = kb.Model(*kb.get_init_inputs())
    rk_model = rk.Model(**params["init"])
    kp, rp = list(kb_model.parameters()), list(rk_model.parameters())
    assert [p.shape for p in kp] == [p.shape for p in rp]
    with torch.no_grad():
        for a, b in zip(kp, rp):
            a.copy_(torch.randn_like(a))
            b.copy_(a)
    torch.manual_seed(1)
    inputs = [t.detach() for t in kb.get_inputs()]
    torch.manual_seed(1)
    rk_inputs = rk.get_inputs(**params["input"])
    assert [(t.shape, t.dtype) for t in inputs] == [(t.shape, t.dtype) for t in rk_inputs]
    return kb_model, rk_model, rk, inputs


@pytest.mark.parametrize("name", NAMES)
def test_examples_formats_compute_the_same(name):
    cfg = shrink.shrink_config(rk_config(name), FACTOR)
    for c in kbh_configs.robust_kbench_configs(cfg, 10 ** 6):
        kb_model, rk_model, _, inputs = _small_pair(name, c.params)
        with torch.no_grad():
            a, b = kb_model(*inputs), rk_model(*inputs)
        assert a.shape == b.shape and a.dtype == b.dtype
        if a.is_floating_point():
            assert torch.isfinite(a).all()
            assert torch.allclose(a, b, rtol=1e-5, atol=1e-6), (c.name, (a - b).abs().max())
        else:
            assert torch.equal(a, b), c.name


@pytest.mark.parametrize("name", BACKWARD)
def test_examples_backward_formats_and_formula(name):
    """Gradients: the KernelBench model by autograd, robust-kbench's
    forward_fn by autograd, and its hand-written backward_fn through
    AutogradFunction agree."""
    cfg = shrink.shrink_config(rk_config(name, "backward"), FACTOR)
    for c in kbh_configs.robust_kbench_configs(cfg, 10 ** 6):
        kb_model, rk_model, rk, inputs = _small_pair(name, c.params, "backward")
        x = inputs[0]
        g = torch.randn(x.shape, generator=torch.Generator().manual_seed(7))
        grads = []
        for how in ("kb", "rk", "formula"):
            xi = x.clone().requires_grad_(True)
            if how == "kb":
                model = kb_model
                out = model(xi)
            else:
                model = rk_model
                fn = rk.AutogradFunction.apply if how == "formula" else rk.forward_fn
                out = model(xi, fn=fn)
            params = list(model.parameters())
            grads.append(torch.autograd.grad(out, [xi] + params, g))
        for other in grads[1:]:
            for a, b in zip(grads[0], other):
                assert a.shape == b.shape
                assert torch.allclose(a, b, rtol=1e-4, atol=1e-5), (c.name, (a - b).abs().max())
        # the backward task's forward is the forward task's
        fwd = rk_module(name).forward_fn
        args = [x] + list(rk_model.parameters())
        with torch.no_grad():
            assert torch.equal(rk.forward_fn(*args, *_scalars(rk_model)),
                               fwd(*args, *_scalars(rk_model)))


def _scalars(model):
    return [v for k, v in vars(model).items()
            if not k.startswith("_") and isinstance(v, float)]


# --- shrink.py ---

def test_examples_shrink_rules():
    assert shrink.shrink_value("hidden_size", 4096, 32) == 128
    assert shrink.shrink_value("hidden_size", 4097, 32) == 129  # odd stays odd
    assert shrink.shrink_value("batch_size", 1023, 32) == 31
    assert shrink.shrink_value("batch_size", 7, 32) == 7  # small: a hyper-parameter
    assert shrink.shrink_value("kernel_size", 64, 32) == 64  # named like one
    assert shrink.shrink_value("eps", 1e-5, 32) == 1e-5
    assert shrink.shrink_value("batch_size", 40, 64) == 1
    src = "import torch\nbatch_size = 4096\ndim = 4097  # odd\nk = 3\nscale = 0.5\n"
    new, changed = shrink.shrink_kernelbench_source(src, 32)
    assert new == "import torch\nbatch_size = 128\ndim = 129  # odd\nk = 3\nscale = 0.5\n"
    assert changed == {"batch_size": (4096, 128), "dim": (4097, 129)}


def test_examples_small_copies_differ_only_in_sizes(small):
    for name in NAMES:
        with open(os.path.join(KB_DIR, name + ".py")) as f:
            real = f.read().splitlines()
        with open(os.path.join(small, "kernelbench", name + ".py")) as f:
            copy = f.read().splitlines()
        diff = [(a, b) for a, b in zip(real, copy) if a != b]
        assert len(real) == len(copy) and diff
        for a, b in diff:
            ka, va = a.split(" = ")
            kb_, vb = b.split(" = ")
            assert ka == kb_ and int(vb) < int(va)
        small_cfg = os.path.join(small, "robust-kbench", name, "config_forward.json")
        with open(small_cfg) as f:
            cfg = json.load(f)
        assert cfg == shrink.shrink_config(rk_config(name), FACTOR)
        assert cross_product(cfg) == cross_product(rk_config(name))
        numel = max(math.prod(v for v in c.values() if isinstance(v, int))
                    for key in cfg for c in cfg[key] if isinstance(c, dict) and c)
        assert numel < 1 << 20
