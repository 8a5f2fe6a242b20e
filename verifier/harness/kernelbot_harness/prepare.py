"""Config validation: run the reference once per candidate config, keep
those that work and fit, note the rest, stop at max_configs.

The probe also fixes what a config's trials need before the first
candidate call: output shapes and dtypes (outputs are preallocated from
them) and, for backward, the forward outputs' shapes (upstream gradients).
"""
from kernelbot_harness import reference as kbh_reference
from kernelbot_harness.task import TaskError, error_text

PROBE_SEED = 424242
SIZED_KINDS = ("rk", "extra", "own")  # the task's or the user's own: never dropped for size


def _numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def probe(task, cfg, device, pass_):
    """Run the reference once on cfg; fill in its specs and metadata."""
    with task.activate(cfg):
        case = task.make_case(cfg, PROBE_SEED, "own", "default", device)
        outs = kbh_reference.forward(case, case.args)
        cfg.fwd_specs = kbh_reference.specs(outs)
        cfg.out_specs = cfg.fwd_specs
        if pass_ == "backward":
            g = kbh_reference.grad_outputs(cfg.fwd_specs, PROBE_SEED, device)
            cfg.out_specs = kbh_reference.specs(kbh_reference.backward(case, case.args, g))
    cfg.inputs = case.tensor_meta()
    cfg.outputs = [{"shape": list(s), "dtype": str(d).replace("torch.", "")}
                   for s, d in cfg.out_specs]
    cfg.shapes = [list(m["shape"]) for m in cfg.inputs] + [list(s) for s, _ in cfg.fwd_specs]
    cfg.numel = max([_numel(s) for s in cfg.shapes] + [1])
    cfg.n_inputs = len(cfg.inputs)


def _ratios(cfg, own):
    """{constant: (own value, cfg value / own value)} for the size constants
    a scaled KernelBench config sets."""
    out = {}
    for k, v in cfg.params.items():
        base = own.params.get(k) if isinstance(own.params, dict) else None
        if isinstance(v, int) and isinstance(base, int) and base > 0:
            out[k] = (base, v / base)
    return out


def _tensor_estimate(shape, ratios):
    """One of own's tensors under the scaled constants, in elements.

    Each dimension equal to a constant's own value scales with it; dims of
    one value share the constants of that value (the largest ratios when
    there are more constants than dims, the largest repeated when fewer).
    A grown constant that matches no dimension may hide in a flattened or
    derived one, so it multiplies the tensor all the same."""
    n, used = 1.0, set()
    for v in set(shape):
        d = shape.count(v)
        match = sorted(((r, k) for k, (base, r) in ratios.items() if base == v), reverse=True)
        rs = [r for r, _ in match[:d]]
        if match:
            rs += [match[0][0]] * (d - len(rs))
        used.update(k for _, k in match[:d])
        for i in range(d):
            n *= v * (rs[i] if rs else 1.0)
    for k, (_, r) in ratios.items():
        if k not in used and r > 1:
            n *= r
    return n


def _estimate(cfg, own):
    """The largest tensor of a scaled config, in elements, from own's tensors
    (own probed), before its reference runs. Growth is not underestimated
    but where constants share a value; the real size is checked again
    after the probe."""
    ratios = _ratios(cfg, own)
    shapes = getattr(own, "shapes", None) or [[own.numel]]
    return max([_tensor_estimate(list(s), ratios) for s in shapes] + [1.0])


def _too_big(cfg, own, cap):
    """Left out before its reference runs: only a config that grows a
    constant can be larger than own, so one that grows none (half, seven,
    batch1, quarter) is probed and judged on its real size."""
    ratios = _ratios(cfg, own)
    return any(r > 1 for _, r in ratios.values()) and _estimate(cfg, own) > cap


def prepare(task, req, device):
    """(kept configs with index set, dropped [{name, params, reason}])."""
    cap, limit = req["max_numel"], req["max_configs"]
    kept, dropped = [], []
    for cfg in task.configs(limit, req["extra_configs"]):
        if len(kept) >= limit:
            break
        sized = cfg.kind not in SIZED_KINDS
        if kept and sized and _too_big(cfg, kept[0], cap):
            dropped.append(_note(cfg, "estimated tensor size above max_numel %d" % cap))
            continue
        try:
            probe(task, cfg, device, req["pass"])
        except Exception as e:  # the operator's own code may raise anything
            if not kept:
                raise TaskError("reference failed on config '%s': %s"
                                % (cfg.name, error_text(e, 1000)))
            dropped.append(_note(cfg, "reference raised %s" % error_text(e, 1000)))
            continue
        if kept and sized and cfg.numel > cap:
            dropped.append(_note(cfg, "tensor of %d elements above max_numel %d" % (cfg.numel, cap)))
            continue
        cfg.index = len(kept)
        kept.append(cfg)
    return kept, dropped


def _note(cfg, reason):
    return {"name": cfg.name, "kind": cfg.kind, "params": cfg.params,
            "reason": reason[:500]}
