"""The operator analysis (verifier/harness/kbh_analyze.py): tracing,
the op vocabulary, composites, the families and their fields, the ABI
order, the fallback when fx cannot trace, and the describe record."""
import json
import os
import sys
import textwrap

import pytest
import torch

from test_harness_common import TOP, op, request, run_harness

from kernelbot_harness.analysis import analyze as kbh_analyze  # noqa: E402
from kernelbot_harness import prepare as kbh_prepare  # noqa: E402
from kernelbot_harness import task as kbh_task  # noqa: E402
from kernelbot_harness.analysis.classify import pattern  # noqa: E402

CPU = torch.device("cpu")


def first_config(path):
    task = kbh_task.load(path, "forward")
    req = {"max_numel": 1 << 22, "max_configs": 1, "extra_configs": [], "pass": "forward"}
    cfgs, _ = kbh_prepare.prepare(task, req, CPU)
    return task, cfgs[0]


def analyze(path, method=None):
    task, cfg = first_config(path)
    a = kbh_analyze.analyze(task, cfg, CPU, method)
    json.dumps(a, allow_nan=False)  # what the result channel must be able to write
    return a


_seq = [0]


def kb_file(tmp_path, forward, init="", inputs="[torch.randn(4, 6)]", args="x"):
    """A KernelBench file whose forward body is `forward`."""
    _seq[0] += 1
    path = tmp_path / ("op%d.py" % _seq[0])
    body = textwrap.indent(textwrap.dedent(forward).strip(), " " * 8)
    ini = textwrap.indent(textwrap.dedent(init).strip() or "pass", " " * 8)
    path.write_text("import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n"
                    "class Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                    "%s\n\n    def forward(self, %s):\n%s\n\n\ndef get_inputs():\n    return %s\n\n\n"
                    "def get_init_inputs():\n    return []\n" % (ini, args, body, inputs))
    return str(path)


def ops(a):
    return [n["op"] for n in a["nodes"]]


def bcast(rec):
    return {b["ref"]: b["pattern"] for b in rec["broadcast"]}


# --- broadcast patterns ------------------------------------------------------------

def test_analyze_patterns_are_flat_index_formulas():
    assert pattern([4, 6], [4, 6]) == "full"
    assert pattern([6], [4, 6]) == "row"
    assert pattern([1, 6], [4, 6]) == "row"
    assert pattern([4, 1], [4, 6]) == "col"
    assert pattern([1], [4, 6]) == "scalar" and pattern([], [4, 6]) == "scalar"
    assert pattern([5, 6], [2, 5, 6]) == "row"  # trailing block: x[i % 30]
    assert pattern([3, 1, 1], [2, 3, 4, 4]) is None  # per-channel: neither
    assert pattern([4], [4, 6]) is None  # torch would not broadcast it either
    assert pattern([5, 6], [2, 5, 6], rows=(10, 6)) is None  # rowwise: a row is row_len long


# --- pointwise -----------------------------------------------------------------------

RELU_STYLES = ["return torch.relu(x)", "return F.relu(x)", "return x.relu()",
               "return torch.ops.aten.relu.default(x)", "return self.act(x)",
               "y = x.clone()\ny.relu_()\nreturn y", "return F.relu(x.contiguous(), inplace=True)"]


@pytest.mark.parametrize("style", RELU_STYLES)
@pytest.mark.parametrize("method", [None, "record"])
def test_analyze_relu_in_every_style(tmp_path, style, method):
    a = analyze(kb_file(tmp_path, style, init="self.act = nn.ReLU()"), method)
    assert a["traced"] and a["family"] == "pointwise", a["why"]
    assert a["method"] == (method or "fx")
    assert ops(a) == ["relu"]
    n = a["nodes"][0]
    assert n["args"] == [{"ref": "input0", "pattern": "full"}]
    assert n["shape"] == [4, 6] and n["dtype"] == "float32"
    assert a["outputs"] == [{"ref": n["name"], "dtype": "float32", "shape": [4, 6]}]


def test_analyze_pointwise_chain_with_bias_and_scalar():
    a = analyze(op("an_chain.py"))
    assert a["family"] == "pointwise", a["why"]
    assert ops(a) == ["add", "mul", "silu", "clamp"]
    add, mul, _, clamp = a["nodes"]
    assert add["args"] == [{"ref": "input0", "pattern": "full"},
                           {"ref": "param:bias", "pattern": "row"}]
    assert mul["args"] == [{"ref": add["name"], "pattern": "full"}, {"const": 0.5}]
    assert clamp["attrs"] == {"min": None, "max": 4.0}
    assert bcast(a["pointwise"]) == {"input0": "full", "param:bias": "row"}
    assert all(n["shape"] == [8, 96] for n in a["nodes"])


def test_analyze_robust_kbench_scalar_input_and_params():
    a = analyze(op("rk_scale_shift"))
    assert a["family"] == "pointwise" and ops(a) == ["mul", "add", "mul"]
    kinds = {i["name"]: (i["index"], i["kind"]) for i in a["inputs"]}
    assert kinds == {"x": (0, "tensor"), "weight": (1, "param"), "bias": (2, "param"),
                     "alpha": (3, "scalar")}
    assert a["inputs"][3]["value"] == 1.5 and a["inputs"][3]["dtype"] == "float64"
    assert bcast(a["pointwise"]) == {"x": "full", "weight": "row", "bias": "row",
                                     "alpha": "scalar"}


@pytest.mark.parametrize("name,node_ops,attrs", [
    ("an_gelu_tanh.py", ["gelu"], [{"approximate": "tanh"}]),
    ("an_leaky_relu.py", ["leaky_relu"], [{"negative_slope": 0.2}]),
    ("an_hardtanh_clamp.py", ["hardtanh", "clamp"],
     [{"min_val": -2.0, "max_val": 2.5}, {"min": -1.5, "max": None}]),
    ("kb_linear_gelu.py", ["linear", "gelu"], [{}, {"approximate": "none"}]),
])
def test_analyze_op_attrs(name, node_ops, attrs):
    a = analyze(op(name))
    assert ops(a) == node_ops
    assert [n["attrs"] for n in a["nodes"]] == attrs


def test_analyze_spellings_and_inplace(tmp_path):
    a = analyze(kb_file(tmp_path, "y = x.clone()\ny.mul_(2)\ny += 1\n"
                        "return 2 - y / 3 + torch.square(y)"))
    assert ops(a) == ["mul", "add", "div", "sub", "pow", "add"]
    sub = a["nodes"][3]
    assert sub["args"][0] == {"const": 2}  # 2 - y keeps its order
    a = analyze(kb_file(tmp_path, "return x * torch.sigmoid(x) + F.hardtanh(x, max_val=float('inf'))"))
    assert ops(a) == ["sigmoid", "mul", "hardtanh", "add"]
    assert a["nodes"][2]["attrs"]["max_val"] == "inf"  # JSON has no Inf


def test_analyze_views_fold_into_operands(tmp_path):
    a = analyze(kb_file(tmp_path, "return torch.tanh(x + self.b.view(-1, 1, 1)).view(x.shape[0], -1)",
                        init="self.b = nn.Parameter(torch.randn(4))",
                        inputs="[torch.randn(4, 2, 3)]"))
    assert a["family"] == "pointwise", a["why"]
    assert a["nodes"][0]["args"][1] == {"ref": "param:b", "pattern": "col", "as": [4, 1, 1]}
    assert a["outputs"][0]["shape"] == [4, 6] and a["nodes"][-1]["shape"] == [4, 2, 3]


# --- rowwise -------------------------------------------------------------------------

@pytest.mark.parametrize("name,kind,fields", [
    ("kb_softmax.py", "softmax", {"rows": 16, "row_len": 16384, "input": "input0"}),
    ("an_log_softmax.py", "log_softmax", {"rows": 8, "row_len": 100}),
    ("an_layernorm.py", "layer_norm", {"rows": 10, "row_len": 48, "weight": "param:ln.weight",
                                       "bias": "param:ln.bias", "reduced_dims": [2]}),
    ("an_rmsnorm.py", "rms_norm", {"weight": "param:weight", "bias": None, "prologue": [],
                                   "epilogue": []}),
    ("an_cross_entropy.py", "cross_entropy", {"input": "input0", "target": "input1",
                                              "rows": 8, "row_len": 50}),
    ("an_mse.py", "mse", {"input": "input0", "target": "input1", "rows": "all", "dim": None}),
    ("an_huber.py", "huber", {"target": "input1", "rows": "all"}),
    ("an_argmax.py", "argmax", {"rows": 8, "row_len": 64, "dim": -1}),
    ("an_l2_norm.py", "norm_l2", {"rows": 8, "row_len": 64}),
])
def test_analyze_rowwise_kinds(name, kind, fields):
    a = analyze(op(name))
    assert a["family"] == "rowwise", a["why"]
    rec = a["rowwise"]
    assert rec["kind"] == kind
    for k, v in fields.items():
        assert rec[k] == v, (k, rec)
    assert rec["node"] in [n["name"] for n in a["nodes"]]


def test_analyze_rowwise_attrs():
    assert analyze(op("an_layernorm.py"))["rowwise"]["attrs"] == \
        {"eps": 1e-6, "normalized_shape": [48]}
    assert analyze(op("an_rmsnorm.py"))["rowwise"]["attrs"]["eps"] == 1e-5
    assert analyze(op("an_huber.py"))["rowwise"]["attrs"] == \
        {"reduction": "mean", "delta": 0.5, "rows": "all"}
    ce = analyze(op("an_cross_entropy.py"))["rowwise"]["attrs"]
    assert ce["reduction"] == "sum" and ce["target"] == "indices" and ce["ignore_index"] == -100
    a = analyze(op("an_argmax.py"))
    assert a["outputs"][0]["dtype"] == "int64" and a["outputs"][0]["shape"] == [8]


HAND = [
    ("m = x.max(dim=-1, keepdim=True)[0]\ne = torch.exp(x - m)\nreturn e / e.sum(-1, keepdim=True)",
     "softmax"),
    ("m = torch.amax(x, -1, keepdim=True)\n"
     "return x - m - torch.log(torch.exp(x - m).sum(-1, keepdim=True))", "log_softmax"),
    ("return x - x.logsumexp(-1, keepdim=True)", "log_softmax"),
    ("mu = x.mean(-1, keepdim=True)\nvar = ((x - mu) ** 2).mean(-1, keepdim=True)\n"
     "return (x - mu) / torch.sqrt(var + 1e-5) * self.w + self.b", "layer_norm"),
    ("return (x - x.mean(-1, keepdim=True)) * torch.rsqrt(x.var(-1, keepdim=True, "
     "unbiased=False) + 1e-5)", "layer_norm"),
    ("return self.w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))", "rms_norm"),
    ("return torch.sqrt((x ** 2).sum(-1))", "norm_l2"),
    ("return x.abs().sum(-1)", "norm_l1"),
    ("return torch.norm(x)", "norm_fro"),
    ("return torch.linalg.matrix_norm(x)", "norm_fro"),
    ("return F.nll_loss(F.log_softmax(x, dim=1), t)", "cross_entropy"),
    ("return torch.mean((x - t) ** 2)", "mse"),
]


@pytest.mark.parametrize("body,kind", HAND)
def test_analyze_composites_written_out(tmp_path, body, kind):
    two = "t)" in body
    target = "torch.randint(0, 6, (4,))" if "nll" in body else "torch.randn(4, 6)"
    a = analyze(kb_file(tmp_path, body, args="x, t" if two else "x",
                        init="self.w = nn.Parameter(torch.randn(6))\n"
                             "self.b = nn.Parameter(torch.randn(6))",
                        inputs="[torch.randn(4, 6)%s]" % (", " + target if two else "")))
    assert a["family"] == "rowwise", a["why"]
    rec = a["rowwise"]
    assert rec["kind"] == kind
    assert len(a["nodes"]) == 1, ops(a)  # the pattern became one fused node
    if kind == "layer_norm" and "self.w" in body:
        assert (rec["weight"], rec["bias"]) == ("param:w", "param:b")
        assert rec["attrs"]["eps"] == 1e-5


def test_analyze_rowwise_prologue_epilogue_and_scalar_refs(tmp_path):
    a = analyze(op("an_rk_softmax"))
    rec = a["rowwise"]
    assert rec["kind"] == "softmax" and a["method"] == "record"  # dim=Proxy defeats fx
    div = a["nodes"][0]
    assert rec["prologue"] == [div["name"]] and rec["input"] == div["name"]
    assert div["args"] == [{"ref": "x", "pattern": "full"},
                           {"ref": "temperature", "pattern": "scalar"}]
    assert a["nodes"][1]["attr_refs"] == {"dim": "dim"} and rec["attr_refs"] == {"dim": "dim"}
    a = analyze(kb_file(tmp_path, "return (x / x.sum(-1, keepdim=True).exp()) * 2"))
    rec = a["rowwise"]
    assert rec["kind"] == "sum" and len(rec["epilogue"]) == 3
    doms = [n.get("domain") for n in a["nodes"]]
    assert doms == ["row", "row", "element", "element"]
    assert a["nodes"][2]["args"][1]["pattern"] == "col"  # the per-row value, per element


# --- matmul --------------------------------------------------------------------------

def test_analyze_linear_relu():
    a = analyze(op("an_linear_relu.py"))
    assert a["family"] == "matmul", a["why"]
    rec = a["matmul"]
    assert (rec["kind"], rec["a"], rec["b"], rec["b_transposed"], rec["bias"]) == \
        ("linear", "input0", "param:net.0.weight", True, "param:net.0.bias")
    assert [a["nodes"][int(e[1:])]["op"] for e in rec["epilogue"]] == ["relu"]


@pytest.mark.parametrize("name,kind,epi", [("an_matmul_scale.py", "matmul", ["mul"]),
                                           ("an_bmm.py", "bmm", [])])
def test_analyze_products(name, kind, epi):
    a = analyze(op(name))
    rec = a["matmul"]
    assert (rec["kind"], rec["a"], rec["b"], rec["b_transposed"], rec["bias"]) == \
        (kind, "input0", "input1", False, None)
    assert [n["op"] for n in a["nodes"] if n["name"] in rec["epilogue"]] == epi


def test_analyze_matmul_transposed_operand_and_folded_bias(tmp_path):
    a = analyze(kb_file(tmp_path, "return torch.relu(x @ w.t() + self.bias)", args="x, w",
                        init="self.bias = nn.Parameter(torch.randn(5))",
                        inputs="[torch.randn(4, 6), torch.randn(5, 6)]"))
    rec = a["matmul"]
    assert (rec["kind"], rec["b"], rec["b_transposed"], rec["bias"]) == \
        ("matmul", "input1", True, "param:bias")
    assert ops(a) == ["matmul", "relu"]  # the transpose and the bias add are folded


# --- none ----------------------------------------------------------------------------

@pytest.mark.parametrize("body,init,inputs,words", [
    (None, "", "", "conv2d"),
    ("return torch.relu(x), x.sum(dim=1)", "", "[torch.randn(4, 6)]", "two separate"),
    ("return x.sum(0)", "", "[torch.randn(4, 6)]", "not over the last"),
    ("return x + self.b", "self.b = nn.Parameter(torch.randn(3, 1, 1))",
     "[torch.randn(2, 3, 4, 4)]", "neither as a row nor as a column"),
    ("return torch.sigmoid(x) @ self.w", "self.w = nn.Parameter(torch.randn(6, 3))",
     "[torch.randn(4, 6)]", "before the product"),
    ("return x.softmax(-1) + x.amax(-1, keepdim=True)", "", "[torch.randn(4, 6)]",
     "2 reductions"),
    ("return x.transpose(0, 1).relu()", "", "[torch.randn(4, 6)]", "permute"),
    ("return x", "", "[torch.randn(4, 6)]", "unchanged"),
])
def test_analyze_none_says_why(tmp_path, body, init, inputs, words):
    path = op("an_conv2d.py") if body is None else kb_file(tmp_path, body, init, inputs)
    a = analyze(path)
    assert a["traced"] and a["family"] == "none"
    assert words in a["why"], a["why"]
    assert "pointwise" not in a and "rowwise" not in a and "matmul" not in a


# --- tracing fallback ----------------------------------------------------------------

@pytest.mark.parametrize("name", ["an_data_dependent.py", "kb_positive.py"])
def test_analyze_control_flow_falls_back_to_recording(name):
    a = analyze(op(name))
    assert a["traced"] and a["method"] == "record"
    assert any("fx could not trace" in n for n in a["notes"])
    assert any("control flow" in n for n in a["notes"])
    assert a["family"] == "pointwise" and "control flow" in a["why"]


def test_analyze_never_raises(monkeypatch):
    def boom(*a, **k):
        raise RuntimeError("recording exploded")
    monkeypatch.setattr(kbh_analyze, "record", boom)
    a = analyze(op("an_data_dependent.py"))  # fx fails, then recording fails
    assert not a["traced"] and a["family"] == "none" and a["method"] is None
    assert "fx could not trace" in a["why"] and "recording exploded" in a["why"]

    class Broken:
        format = "kernelbench"

        def activate(self, cfg):
            raise ValueError("broken task")
    a = kbh_analyze.analyze(Broken(), None, CPU)
    assert not a["traced"] and a["family"] == "none" and "broken task" in a["why"]


AN_OPS = sorted(f for f in os.listdir(os.path.join(TOP, "tests", "operators"))
                if f.startswith("an_") and f not in ("an_data_dependent.py", "an_rk_softmax"))


@pytest.mark.parametrize("name", AN_OPS + ["rk_scale_shift", "kb_linear_gelu.py"])
def test_analyze_fx_and_recording_agree(name):
    a, b = analyze(op(name)), analyze(op(name), method="record")
    assert a["method"] == "fx" and b["method"] == "record"
    for k in ("method", "notes", "why"):
        a.pop(k)
        b.pop(k)
    assert a == b


# --- ABI order ------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["an_linear_relu.py", "an_layernorm.py", "an_cross_entropy.py",
                                  "an_rk_softmax", "rk_scale_shift", "an_chain.py"])
def test_analyze_inputs_follow_the_harness_abi_order(name):
    task, cfg = first_config(op(name))
    a = kbh_analyze.analyze(task, cfg, CPU)
    assert [i["index"] for i in a["inputs"]] == list(range(len(cfg.inputs)))
    assert [(i["name"], i["shape"], i["dtype"]) for i in a["inputs"]] == \
        [(m["name"], m["shape"], m["dtype"]) for m in cfg.inputs]
    with task.activate(cfg):
        case = task.make_case(cfg, kbh_prepare.PROBE_SEED, "own", "default", CPU)
    for i, arg in zip(a["inputs"], case.args):  # what the kernel is called with
        assert (i["kind"] == "scalar") == (not torch.is_tensor(arg))
        if i["kind"] == "scalar":
            assert i["value"] == arg
    refs = {x["ref"] for n in a["nodes"] for x in n["args"] if "ref" in x}
    assert refs <= {i["name"] for i in a["inputs"]} | {n["name"] for n in a["nodes"]}


def test_analyze_rk_keyword_argument_comes_last():
    a = analyze(op("an_rk_softmax"))
    assert [(i["name"], i["kind"]) for i in a["inputs"]] == \
        [("x", "tensor"), ("temperature", "scalar"), ("dim", "scalar")]
    assert a["inputs"][2]["value"] == -1


# --- the describe record -----------------------------------------------------------------

@pytest.mark.parametrize("name,family", [("an_chain.py", "pointwise"),
                                         ("an_rk_softmax", "rowwise")])
def test_analyze_in_the_describe_record(name, family):
    res = run_harness(request(op(name), mode="describe", max_configs=2)).result
    assert res["verdict"] == "described", res["reasons"]
    a = res["analysis"]
    assert a["traced"] and a["family"] == family, a["why"]
    assert a["config"] == res["configs"][0]["name"]
    assert [i["name"] for i in a["inputs"]] == [m["name"] for m in res["configs"][0]["inputs"]]
