"""Which configs an operator is checked on: KernelBench size scaling and
odd values, robust-kbench cross products, caps, extra configs, drops."""
import os
import sys

from test_harness_common import TOP, op, request, run_harness

from kernelbot_harness import configs as kbh_configs  # noqa: E402


def describe(operator, **kw):
    return run_harness(request(operator, mode="describe", **kw)).result


def test_harness_kernelbench_configs_scaled_and_odd():
    res = describe(op("kb_relu.py"), max_configs=16)
    assert res["verdict"] == "described"
    cfgs = res["configs"]
    assert len(cfgs) >= 8
    own = cfgs[0]
    assert own["kind"] == "own"
    assert own["params"] == {"batch_size": 16, "dim": 16384}
    shapes = [tuple(c["inputs"][0]["shape"]) for c in cfgs]
    assert len(set(shapes)) == len(shapes)  # every config a new shape
    numel = [a * b for a, b in shapes]
    assert max(numel) > numel[0]  # scaled up
    assert min(numel) < numel[0]  # scaled down
    assert any(a == 1 for a, _ in shapes)  # batch of one
    assert any(b % 32 and b > 32 for _, b in shapes)  # odd, not a multiple of 32
    assert any(b == 7 for _, b in shapes)
    for c in cfgs:
        assert c["outputs"][0]["shape"] == c["inputs"][0]["shape"]
        assert c["flops"] > 0 and c["bytes"] > 0


def test_harness_max_configs_caps_and_keeps_own():
    cfgs = describe(op("kb_relu.py"), max_configs=3)["configs"]
    assert [c["index"] for c in cfgs] == [0, 1, 2]
    assert cfgs[0]["kind"] == "own"


def test_harness_numel_cap_drops_large_configs():
    res = describe(op("kb_relu.py"), max_configs=16, max_numel=1 << 18)
    assert all(c["inputs"][0]["shape"][0] * c["inputs"][0]["shape"][1] <= 1 << 18
               for c in res["configs"][1:])
    assert any("max_numel" in d["reason"] for d in res["dropped_configs"])


def test_harness_small_configs_never_dropped_for_size():
    """An operator whose own size is above max_numel (the examples on the
    cpu): the size estimate shrinks with the shrunk constants, so the 7x7,
    batch-of-one and quarter configs are kept, and every config left out
    for its size really is above the cap (issue 14 item 2)."""
    cap = 1 << 16                      # own: 16 x 16384 = 262144 elements
    res = describe(op("kb_relu.py"), max_configs=16, max_numel=cap)
    kept = {c["kind"]: c["inputs"][0]["shape"] for c in res["configs"]}
    assert kept["own"] == [16, 16384]
    assert kept.get("seven") == [7, 7], kept
    assert kept.get("batch1") == [1, 16384], kept
    assert kept.get("quarter") == [4, 4096], kept
    for c in res["configs"][1:]:
        assert c["inputs"][0]["shape"][0] * c["inputs"][0]["shape"][1] <= cap
    dropped = res["dropped_configs"]
    assert dropped and all("max_numel" in d["reason"] for d in dropped)
    for d in dropped:
        assert d["params"]["batch_size"] * d["params"]["dim"] > cap, d


COINCIDENT = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, hidden_size):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(hidden_size))

    def forward(self, x):
        return torch.tanh(x + self.bias)


batch_size = 64
hidden_size = 64


def get_inputs():
    return [torch.randn(batch_size, hidden_size)]


def get_init_inputs():
    return [hidden_size]
'''


def test_harness_size_estimate_with_equal_constants(tmp_path):
    """Two size constants of one value (64 x 64, as the examples have): a
    batch of one is 1 x 64 whichever dimension is which, and is kept."""
    path = tmp_path / "coincident.py"
    path.write_text(COINCIDENT)
    cap = 1024                         # own: 4096 elements
    res = describe(str(path), max_configs=16, max_numel=cap)
    kept = {c["kind"]: c["inputs"][0]["shape"] for c in res["configs"]}
    assert kept.get("batch1") == [1, 64], kept
    assert kept.get("seven") == [7, 7], kept
    assert kept.get("half") == [32, 32], kept
    for d in res["dropped_configs"]:
        assert d["params"]["batch_size"] * d["params"]["hidden_size"] > cap, d


def test_harness_raising_variant_dropped_and_noted():
    res = describe(op("kb_pairs.py"), max_configs=16)
    feats = [c["params"]["features"] for c in res["configs"]]
    assert all(f % 2 == 0 for f in feats)
    dropped = res["dropped_configs"]
    assert dropped and all("reference raised" in d["reason"] for d in dropped)
    assert any(d["params"]["features"] % 2 for d in dropped)


def test_harness_extra_configs_come_first():
    res = describe(op("kb_relu.py"), max_configs=3,
                   extra_configs=[{"name": "tiny", "params": {"batch_size": 3, "dim": 5}}])
    c1 = res["configs"][1]
    assert c1["name"] == "tiny" and c1["inputs"][0]["shape"] == [3, 5]


def test_harness_robust_kbench_cross_product():
    res = describe(op("rk_scale_shift"), max_configs=16)
    cfgs = res["configs"]
    # 2 init x 3 input x 2 shared configs (multi_ lists)
    assert len(cfgs) == 12
    names = {c["name"] for c in cfgs}
    assert len(names) == 12
    c = next(c for c in cfgs if c["name"] == "init1-input2-shared1")
    assert c["params"] == {"init": {"init_scale": 0.01, "alpha": -0.5, "num_features": 100},
                           "input": {"batch_size": 129, "num_features": 100}}
    assert c["inputs"][0]["shape"] == [129, 100]
    assert res["operator"]["format"] == "robust-kbench"


def test_harness_robust_kbench_cap_spreads():
    cfgs = describe(op("rk_scale_shift"), max_configs=4)["configs"]
    assert len(cfgs) == 4
    assert cfgs[0]["name"] == "init0-input0-shared0"
    assert "init1-input2-shared1" in {c["name"] for c in cfgs}


def test_harness_backward_config_file():
    cfgs = describe(op("rk_scale_shift"), max_configs=16, **{"pass": "backward"})["configs"]
    assert len(cfgs) == 4  # config_backward.json: 1 x 2 x 2


def test_harness_constants_found_through_helpers():
    import types
    mod = types.ModuleType("kb_fake_op")
    exec(compile(
        "import torch\n"
        "batch = 4\nwidth = 300\nkernel_size = 3\nflag = True\nunused = 99\n"
        "def _make():\n    return torch.randn(batch, width)\n"
        "def get_inputs():\n    return [_make() for _ in range(2)]\n"
        "def get_init_inputs():\n    return [kernel_size, flag]\n",
        "kb_fake_op", "exec"), mod.__dict__)
    consts = kbh_configs.read_constants(mod)
    assert consts == {"batch": 4, "width": 300, "kernel_size": 3}  # no bool, no unused
    cfgs = kbh_configs.kernelbench_configs(mod)
    assert all(c.params.keys() == {"batch", "width"} for c in cfgs)  # kernel_size kept
    odd = next(c for c in cfgs if c.kind == "odd")
    assert odd.params == {"batch": 5, "width": 305}


def test_harness_odd_size_rule():
    assert kbh_configs.odd_size(16384) == 16401
    assert kbh_configs.odd_size(64) % 32 and kbh_configs.odd_size(64) % 2
    assert kbh_configs.odd_size(16) == 17
    assert kbh_configs.spread(12, 4)[:4] == [0, 4, 7, 11]
