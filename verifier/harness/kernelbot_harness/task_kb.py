"""KernelBench single-file tasks: Model, get_inputs(), get_init_inputs().

ABI order: get_inputs() in order, then named_parameters(), then
named_buffers(). A config sets the module's size constants for as long as
it is evaluated (get_inputs, Model.__init__ and forward read them as globals),
and the module-level assignments derived from them are evaluated again
(KernelBench's level 2 writes `bias_shape = (out_channels, 1, 1)`: a
config that scales out_channels must scale bias_shape with it).
"""
import ast
import contextlib

import torch

from kernelbot_harness import configs as kbh_configs
from kernelbot_harness import inputs as kbh_inputs
from kernelbot_harness.task import Case, TaskError, as_outputs, functional_call, import_file, kernel_arg


_MISSING = object()


class KernelBenchTask:
    format = "kernelbench"

    def __init__(self, path, pass_):
        self.path, self.pass_ = path, pass_
        self.mod = import_file(path, "kb")
        for name in ("Model", "get_inputs", "get_init_inputs"):
            if not hasattr(self.mod, name):
                raise TaskError("'%s' has no '%s'" % (path, name))
        self.autograd_fn = None
        self.derived = _derived_assignments(path)

    def configs(self, max_configs, extra):
        return kbh_configs.kernelbench_configs(self.mod, extra)

    @contextlib.contextmanager
    def activate(self, config):
        """Set the config's constants on the module, restore them after."""
        g = self.mod.__dict__
        saved = {k: g.get(k, _MISSING) for k in config.params}
        g.update(config.params)
        changed = {k for k, v in config.params.items() if saved[k] is not v}
        for targets, loads, code in self.derived if changed else ():
            if loads & changed and not targets & set(config.params):
                for t in targets:
                    saved.setdefault(t, g.get(t, _MISSING))
                try:
                    exec(code, g)  # noqa: S102 (the operator's own line, in its sandbox)
                except Exception:  # a line that cannot run again keeps its value
                    continue
                changed |= targets
        try:
            yield
        finally:
            for k, v in saved.items():
                if v is _MISSING:
                    g.pop(k, None)
                else:
                    g[k] = v

    def _model(self, seed, init, device):
        torch.manual_seed(seed)
        model = self.mod.Model(*self.mod.get_init_inputs())
        model = model.to(device)
        kbh_inputs.apply_init(model, init, seed)
        return model

    def make_case(self, config, seed, dist, init, device):
        """Fresh inputs and parameters for one trial (constants already active)."""
        torch.manual_seed(seed)
        inputs = list(self.mod.get_inputs())
        inputs = kbh_inputs.apply_distribution(inputs, dist, seed)
        inputs = [kernel_arg(v, device) for v in inputs]
        model = self._model(seed, init, device)
        params = list(model.named_parameters())
        buffers = list(model.named_buffers())
        names = ["input%d" % i for i in range(len(inputs))]
        names += ["param:" + n for n, _ in params] + ["buffer:" + n for n, _ in buffers]
        args = inputs + [kernel_arg(t, device) for _, t in params + buffers]
        keys = [n for n, _ in params + buffers]
        n_in = len(inputs)

        def ref(a):
            tensors = dict(zip(keys, a[n_in:]))
            return as_outputs(functional_call(model, tensors, a[:n_in]))

        case = Case(names, args, ref, model, inputs)
        case.model_init = {"params": dict(config.params), "seed": seed, "names": names}
        return case


def _derived_assignments(path):
    """[(target names, names read, code)] of the module's top-level
    assignments that read other names (`bias_shape = (out_channels, 1, 1)`),
    in source order; [] when the file does not parse."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            tree = ast.parse(f.read(), path)
    except (OSError, SyntaxError, ValueError):
        return []
    out = []
    for node in tree.body:
        if not isinstance(node, (ast.Assign, ast.AnnAssign)) or node.value is None:
            continue
        targets = set()
        for t in (node.targets if isinstance(node, ast.Assign) else [node.target]):
            for n in ast.walk(t):
                if isinstance(n, ast.Name):
                    targets.add(n.id)
        loads = {n.id for n in ast.walk(node.value)
                 if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        if targets and loads:
            code = compile(ast.Module(body=[node], type_ignores=[]), path, "exec")
            out.append((targets, loads, code))
    return out
