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

from kernelbot_harness import noop as kbh_noop
from kernelbot_harness.abi import KernelLoadError
from kernelbot_harness.task import as_outputs

LOG_CAP = 4000


class ExtKernel:
    abi = "torch-ext"

    def __init__(self, source, name, workdir, pass_):
        from torch.utils.cpp_extension import load
        build = os.path.join(workdir, "ext-" + name)
        os.makedirs(build, exist_ok=True)
        self.switch = kbh_noop.Switch()
        built, includes = self._instrumented(source, build)
        try:
            self.mod = load(name=name, sources=[built], build_directory=build,
                            extra_include_paths=includes, verbose=False)
        except Exception as e:  # the loader raises several types; all mean "no kernel"
            raise KernelLoadError("could not build extension '%s': %s"
                                  % (source, str(e)[-LOG_CAP:]))
        self.switch.built(getattr(self.mod, "__file__", None), 0)
        self.pass_ = pass_
        fn = "backward" if pass_ == "backward" else "forward"
        if not hasattr(self.mod, fn):
            raise KernelLoadError("extension '%s' exports no '%s'" % (source, fn))
        self.fn = getattr(self.mod, fn)

    def _instrumented(self, source, build):
        """A CUDA source with the no-op switch (kbh_noop), built from a
        copy in build (its own folder stays on the include path)."""
        if not source.endswith(".cu"):
            return source, []
        with open(source, encoding="utf-8", errors="replace") as f:
            text, tag, n = kbh_noop.instrument(f.read())
        if tag is None:
            return source, []
        self.switch.add(tag, n)
        dst = os.path.join(build, os.path.basename(source))
        with open(dst, "w", encoding="utf-8") as f:
            f.write(text)
        return dst, [os.path.dirname(os.path.abspath(source))]

    def custom(self):
        """How custom work is proven (kbh_modelnew.ModelNewKernel.custom):
        only with CUDA kernels to switch off; a C++ extension's exported
        function is all custom code (torch calls in it are refused
        statically on the cpu backend)."""
        return {"method": "noop" if self.switch.available() else None, "modules": 1,
                "kernels": self.switch.kernels}

    def set_noop(self, on):
        """True when the kernels are switched as asked."""
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        return self.switch.set(on)

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
