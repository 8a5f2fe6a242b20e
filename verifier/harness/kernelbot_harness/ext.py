"""The torch-extension format: a source with PYBIND11_MODULE exporting
forward (and backward), built once per evaluation with torch's loader.

forward(*args) takes the same arguments as kb_forward, with scalars as
Python numbers, and returns a tensor or a tuple. backward: for a
robust-kbench task with an AutogradFunction, the module's backward fills
its backward_fn slot (the task's own protocol); otherwise
backward(*args, *grad_outputs) returns one gradient per floating tensor
argument, like kb_backward.
"""
import os

import torch

from kernelbot_harness.abi import KernelLoadError
from kernelbot_harness.task import as_outputs

LOG_CAP = 4000


class ExtKernel:
    abi = "torch-ext"

    def __init__(self, source, name, workdir, pass_):
        from torch.utils.cpp_extension import load
        build = os.path.join(workdir, "ext-" + name)
        os.makedirs(build, exist_ok=True)
        try:
            self.mod = load(name=name, sources=[source], build_directory=build,
                            verbose=False)
        except Exception as e:  # the loader raises several types; all mean "no kernel"
            raise KernelLoadError("could not build extension '%s': %s"
                                  % (source, str(e)[-LOG_CAP:]))
        self.pass_ = pass_
        fn = "backward" if pass_ == "backward" else "forward"
        if not hasattr(self.mod, fn):
            raise KernelLoadError("extension '%s' exports no '%s'" % (source, fn))
        self.fn = getattr(self.mod, fn)

    def forward(self, args):
        return as_outputs(self.fn(*args))

    def backward(self, task, case, args, grad_outs):
        if task.autograd_fn is not None and case.model is not None:
            return self._backward_autograd(task, case, args, grad_outs)
        return as_outputs(self.fn(*args, *grad_outs))

    def _backward_autograd(self, task, case, args, grad_outs):
        """robust-kbench: run AutogradFunction.apply as forward_fn with the
        kernel as backward_fn, then read every floating argument's grad."""
        fn = task.autograd_fn
        fn.backward_fn = self.fn
        leaves = [a.detach().clone().requires_grad_(True)
                  if torch.is_tensor(a) and a.is_floating_point() else a
                  for a in args]
        with torch.enable_grad():
            outs = as_outputs(fn.apply(*leaves))
            diff = [(o, g) for o, g in zip(outs, grad_outs) if o.requires_grad]
            if diff:
                torch.autograd.backward([o for o, _ in diff], [g for _, g in diff])
        return [a.grad if a.grad is not None else torch.zeros_like(a)
                for a in leaves if torch.is_tensor(a) and a.is_floating_point()]
