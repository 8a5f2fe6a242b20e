"""Config validation: run the reference once per candidate config, keep
those that work and fit, note the rest, stop at max_configs.

The probe also fixes what a config's trials need before the first
candidate call: output shapes and dtypes (outputs are preallocated from
them) and, for backward, the forward outputs' shapes (upstream gradients).
"""
from kernelbot_harness import reference as kbh_reference
from kernelbot_harness.task import TaskError

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
    shapes = [m["shape"] for m in cfg.inputs] + [list(s) for s, _ in cfg.fwd_specs]
    cfg.numel = max([_numel(s) for s in shapes] + [1])
    cfg.n_inputs = len(cfg.inputs)


def _estimate(cfg, own):
    """Upper bound on the largest tensor of a scaled config, from own's:
    every grown constant is assumed to appear in that tensor."""
    ratio = 1.0
    for k, v in cfg.params.items():
        base = own.params.get(k) if isinstance(own.params, dict) else None
        if isinstance(v, int) and isinstance(base, int) and base > 0:
            ratio *= max(1.0, v / base)
    return own.numel * ratio


def prepare(task, req, device):
    """(kept configs with index set, dropped [{name, params, reason}])."""
    cap, limit = req["max_numel"], req["max_configs"]
    kept, dropped = [], []
    for cfg in task.configs(limit, req["extra_configs"]):
        if len(kept) >= limit:
            break
        sized = cfg.kind not in SIZED_KINDS
        if kept and sized and _estimate(cfg, kept[0]) > cap:
            dropped.append(_note(cfg, "estimated tensor size above max_numel %d" % cap))
            continue
        try:
            probe(task, cfg, device, req["pass"])
        except Exception as e:  # the operator's own code may raise anything
            if not kept:
                raise TaskError("reference failed on config '%s': %s: %s"
                                % (cfg.name, type(e).__name__, e))
            dropped.append(_note(cfg, "reference raised %s: %s" % (type(e).__name__, e)))
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
