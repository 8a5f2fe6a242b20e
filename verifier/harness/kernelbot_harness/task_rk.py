"""robust-kbench task folders: func_forward.py (forward_fn, Model,
get_inputs(**cfg), input_names) and config_forward.json; func_backward.py
and config_backward.json for the backward pass.

ABI order: forward_fn's arguments exactly as Model.forward passes them,
captured by calling Model.forward with an fn that records its arguments.
"""
import inspect
import json
import os

import torch

from kernelbot_harness import configs as kbh_configs
from kernelbot_harness import inputs as kbh_inputs
from kernelbot_harness.task import Case, TaskError, as_outputs, import_file, kernel_arg, nothing


def _pick_file(path, pass_, stem, ext):
    """func_backward.py / config_backward.json for backward when present."""
    if pass_ == "backward":
        p = os.path.join(path, "%s_backward.%s" % (stem, ext))
        if os.path.exists(p):
            return p
    return os.path.join(path, "%s_forward.%s" % (stem, ext))


def _read_config(path):
    if not os.path.exists(path):
        return {}
    try:
        with open(path) as f:
            cfg = json.load(f)
    except (OSError, ValueError) as e:
        raise TaskError("could not read '%s': %s" % (path, e))
    if not isinstance(cfg, dict):
        raise TaskError("'%s' is not a JSON object" % path)
    return cfg


def _arg_names(fn, n_pos, kw):
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        params = []
    pos = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY,
                                                p.POSITIONAL_OR_KEYWORD)]
    names = pos[:n_pos] + ["arg%d" % i for i in range(len(pos), n_pos)]
    return names + list(kw)


class RobustKBenchTask:
    format = "robust-kbench"

    def __init__(self, path, pass_):
        self.path, self.pass_ = path, pass_
        src = _pick_file(path, pass_, "func", "py")
        if not os.path.exists(src):
            raise TaskError("task folder '%s' has no '%s'" % (path, os.path.basename(src)))
        self.mod = import_file(src, "rk")
        for name in ("forward_fn", "Model", "get_inputs"):
            if not hasattr(self.mod, name):
                raise TaskError("'%s' has no '%s'" % (src, name))
        self.cfg = _read_config(_pick_file(path, pass_, "config", "json"))
        self.autograd_fn = getattr(self.mod, "AutogradFunction", None)

    def configs(self, max_configs, extra):
        return kbh_configs.robust_kbench_configs(self.cfg, max_configs, extra)

    def activate(self, config):
        return nothing()

    def _capture(self, model, inputs):
        """forward_fn's arguments as Model.forward passes them."""
        rec = {}
        fn = self.mod.forward_fn

        def recorder(*a, **kw):
            rec["a"], rec["kw"] = a, kw
            return fn(*a, **kw)

        with torch.no_grad():
            try:
                model(*inputs, fn=recorder)
            except TypeError as e:
                if "a" not in rec:
                    raise TaskError("Model.forward(..., fn=) failed: %s" % e)
                raise
        if "a" not in rec:
            raise TaskError("Model.forward never called its fn")
        return list(rec["a"]), rec["kw"]

    def make_case(self, config, seed, dist, init, device):
        """Fresh inputs and parameters for one trial."""
        fn = self.mod.forward_fn
        torch.manual_seed(seed)
        inputs = list(self.mod.get_inputs(**config.params["input"]))
        inputs = kbh_inputs.apply_distribution(inputs, dist, seed)
        inputs = [kernel_arg(v, device) for v in inputs]
        torch.manual_seed(seed)
        model = self.mod.Model(**config.params["init"]).to(device)
        kbh_inputs.apply_init(model, init, seed)
        pos, kw = self._capture(model, inputs)
        names = _arg_names(fn, len(pos), kw)
        args = [kernel_arg(v, device) for v in pos + list(kw.values())]
        n_pos, keys = len(pos), list(kw)

        def ref(a):
            return as_outputs(fn(*a[:n_pos], **dict(zip(keys, a[n_pos:]))))

        return Case(names, args, ref, model, inputs)
