"""Operator analysis for the built-in templates (bot/templates/README.md,
"The analysis"): the reference traced into a small graph of ops with
shapes and dtypes at the operator's own config, and its family:
pointwise, rowwise, matmul or none (with the reason).

    analyze(task, cfg, device) -> dict    (never raises)

Steps: the config's case (the harness's own ABI order and names), a
trace (kbh_analyze_trace: torch.fx, else the ops recorded on the run),
the vocabulary (kbh_analyze_ops, kbh_analyze_reduce), graph passes and
composite patterns (kbh_analyze_graph), the family (kbh_analyze_classify).
"""
import math
import traceback

import torch

from kernelbot_harness import prepare as kbh_prepare
from kernelbot_harness.analysis.classify import classify
from kernelbot_harness.analysis.graph import cse, dce, fold_transposes, fold_views, rename, rewrite_composites
from kernelbot_harness.analysis.ops import R
from kernelbot_harness.analysis.reduce import normalize  # also registers its builders
from kernelbot_harness.analysis.trace import (TraceFailed, record, same_outputs, trace_fx, wrap_scalar)
from kernelbot_harness.reference import clone_args

VERSION = 1


def analyze(task, cfg, device, method=None):
    """The analysis record of task at config cfg (its own sizes); method
    "record" skips fx (tests compare the two tracers)."""
    try:
        with task.activate(cfg):
            return _analyze(task, cfg, device, method)
    except Exception as e:  # the analysis must never cost the describe its result
        tb = traceback.format_exc()[-2000:]
        return _untraced(cfg, [], "analysis failed: %s: %s" % (type(e).__name__, str(e)[:300]),
                         [tb])


def _untraced(cfg, inputs, why, notes):
    return {"version": VERSION, "traced": False, "method": None, "family": "none",
            "why": why, "config": getattr(cfg, "name", None), "inputs": inputs,
            "nodes": [], "outputs": [], "notes": notes}


def _kind(task, name, value, params):
    if not torch.is_tensor(value):
        return "scalar"
    if name.startswith("param:") or params.get(name):
        return "param"
    if name.startswith("buffer:"):
        return "buffer"
    return "tensor"


def _abi_inputs(task, case, params):
    out = []
    for i, (name, a) in enumerate(zip(case.names, case.args)):
        d = {"name": name, "index": i, "kind": _kind(task, name, a, params)}
        if torch.is_tensor(a):
            d.update(dtype=str(a.dtype).replace("torch.", ""), shape=list(a.shape))
        else:
            d.update(dtype="float64" if isinstance(a, float) else "int64", shape=[],
                     value=a)
        out.append(d)
    return out


def _rk_split(task, case):
    """robust-kbench: how many ABI arguments are positional, and which
    are the model's parameters (by identity in the captured call)."""
    pos, kw = task._capture(case.model, case.model_inputs)
    ids = {id(p) for p in case.model.parameters()}
    params = {n: True for n, a in zip(case.names, list(pos) + list(kw.values()))
              if id(a) in ids}
    return len(pos), params


def _trace(task, case, expected, notes, method):
    """The raw graph: fx where it works and agrees with the reference,
    else the ops recorded on this config's run."""
    args = case.args
    if task.format == "kernelbench":
        model, n_in = case.model, len(case.model_inputs)
        by_id = {id(t): "param:" + n for n, t in model.named_parameters()}
        by_id.update({id(t): "buffer:" + n for n, t in model.named_buffers()})
        fx_root, fx_vals = model, list(case.model_inputs)
        fx_names = list(case.names[:n_in])

        def rec_call(vals):
            return model(*vals)
        rec_vals, rec_names = list(case.model_inputs), fx_names
        n_pos, kw_names = n_in, []
    else:
        n_pos, _ = _rk_split(task, case)
        fn = task.mod.forward_fn
        kw_names = case.names[n_pos:]
        by_id = {}
        fx_root = fn
        abi = dict(zip(case.names, args))
        fx_names, fx_vals = _fx_slots(fn, case.names, abi)

        def rec_call(vals):
            return fn(*vals[:n_pos], **dict(zip(kw_names, vals[n_pos:])))
        rec_vals, rec_names = list(args), list(case.names)
    try:
        if method == "record":
            raise TraceFailed("fx not tried")
        rg, outs = trace_fx(fx_root, fx_vals, fx_names, by_id)
        if same_outputs(outs, expected):
            return rg
        notes.append("the fx graph's outputs differ from the reference's: recorded instead")
    except TraceFailed as e:
        notes.append(str(e))
    wrapped = [wrap_scalar(v) for v in rec_vals]
    ids = dict(by_id)
    ids.update({id(v): n for v, n in zip(wrapped, rec_names)})
    try:
        rg, _ = record(lambda: rec_call(wrapped), ids)
    except Exception as e:  # the operator's own code may raise anything
        raise TraceFailed("%s; recording its ops failed: %s: %s"
                          % (notes[-1], type(e).__name__, str(e)[:300]))
    notes.extend(rg.notes)
    return rg


def _fx_slots(fn, names, abi):
    """Per parameter of forward_fn: its ABI name and value (None and the
    default for one the harness does not pass)."""
    import inspect
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        raise TraceFailed("forward_fn has no signature")
    slot_names, vals = [], []
    for p in params:
        if p.name in abi:
            slot_names.append(p.name)
            vals.append(abi[p.name])
        else:
            slot_names.append(None)
            vals.append(None if p.default is p.empty else p.default)
    return slot_names, vals


def _analyze(task, cfg, device, method):
    case = task.make_case(cfg, kbh_prepare.PROBE_SEED, "own", "default", device)
    params = _rk_split(task, case)[1] if task.format == "robust-kbench" else {}
    inputs = _abi_inputs(task, case, params)
    notes = []
    with torch.no_grad():
        expected = case.ref(clone_args(case.args))
        try:
            rg = _trace(task, case, expected, notes, method)
        except TraceFailed as e:
            return _untraced(cfg, inputs, "could not trace the reference: %s" % e, notes)
    g = normalize(rg, inputs)
    fold_views(g)
    fold_transposes(g)
    dce(g)
    cse(g)
    rewrite_composites(g)
    dce(g)
    rename(g)
    family, rec, why, ann = classify(g)
    if rg.method == "record" and rg.notes and family != "none":
        why += "; recorded on the own config's inputs, where control flow read tensor values"
    out = {"version": VERSION, "traced": True, "method": rg.method, "family": family,
           "why": why, "config": cfg.name, "inputs": inputs,
           "nodes": [_node_json(g, n, ann) for n in g.nodes.values()],
           "outputs": [_out_json(g, o, s) for o, s in zip(g.outputs, g.out_shapes)],
           "notes": notes}
    if rec is not None:
        out[family] = rec
    return out


def jsonable(v):
    if isinstance(v, float) and not math.isfinite(v):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    if isinstance(v, (list, tuple)):
        return [jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): jsonable(x) for k, x in v.items()}
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, torch.dtype):
        return str(v).replace("torch.", "")
    return str(v)


def _node_json(g, n, ann):
    args = []
    for i, a in enumerate(n.args):
        if isinstance(a, R):
            d = {"ref": a.name}
            p = ann.pat.get((n.name, i))
            if p:
                d["pattern"] = p
            used = n.arg_shapes[i] if i < len(getattr(n, "arg_shapes", [])) else None
            if used is not None and list(used) != g.shape(a):
                d["as"] = list(used)
        else:
            d = {"const": jsonable(a)}
        args.append(d)
    out = {"name": n.name, "op": n.op, "args": args, "attrs": jsonable(n.attrs),
           "dtype": n.dtype, "shape": list(n.shape)}
    if n.attr_refs:
        out["attr_refs"] = dict(n.attr_refs)
    if n.name in ann.domain:
        out["domain"] = ann.domain[n.name]
    if n.reason:
        out["unsupported"] = n.reason
    return out


def _out_json(g, o, shape):
    if not isinstance(o, R):
        return {"const": jsonable(o)}
    return {"ref": o.name, "dtype": g.dtype(o), "shape": list(shape if shape is not None
                                                               else g.shape(o))}
