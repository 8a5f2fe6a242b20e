"""KernelBench's candidate format: a Python file with `class ModelNew`
that builds its kernels with torch.utils.cpp_extension.load_inline (or
load), evaluated as it is, in the runner only (it is candidate code).

- The file is imported with torch's loaders wrapped: every extension is
  built under the runner's directory, its CUDA sources get the no-op
  switch (kbh_noop), and the module it returns is wrapped (ExtProxy) so
  that calls into it are counted, timed and, for the proof call, have
  their outputs poisoned.
- ModelNew is built as KernelBench builds it: the operator's
  get_init_inputs() with the config's constants active, under the trial's
  seed. Its parameters and buffers get the judge's values by name
  (`conv.weight` is `conv.weight`), else by position when names differ but
  the shapes line up (at copy time); one without a counterpart keeps its
  own init.
- forward only: KernelBench's format has no backward.
"""
import inspect
import json
import os
import time

import torch

from kernelbot_harness import noop as kbh_noop
from kernelbot_harness.abi import KernelLoadError
from kernelbot_harness.task import TaskError, as_outputs, error_text, import_file

LOG_CAP = 4000


class _Params:
    """What KernelBenchTask.activate needs of a config."""

    def __init__(self, params):
        self.params = params


def _poison(t):
    if t.is_floating_point() or t.is_complex():
        t.fill_(float("nan"))
    elif t.dtype == torch.bool:
        t.fill_(True)
    else:
        t.fill_(torch.iinfo(t.dtype).max)


class ExtProxy:
    """An extension module as the candidate sees it: attribute access as
    usual, function calls counted and timed; in poison mode the tensors a
    call returns or writes are filled with NaN (or the dtype's max)."""

    def __init__(self, mod, owner):
        object.__setattr__(self, "_kb_mod", mod)
        object.__setattr__(self, "_kb_owner", owner)

    def __getattr__(self, name):
        v = getattr(self._kb_mod, name)
        if not callable(v) or isinstance(v, type):
            return v
        owner = self._kb_owner

        def call(*args, **kwargs):
            return owner.ext_call(v, args, kwargs)
        call.__name__ = name
        return call

    def __setattr__(self, name, value):
        setattr(self._kb_mod, name, value)


def _tensors(v):
    if torch.is_tensor(v):
        return [v]
    if isinstance(v, (list, tuple)):
        return [t for x in v for t in _tensors(x)]
    return []


class ModelNewKernel:
    abi = "modelnew"

    def __init__(self, source, task, workdir, device, pass_):
        if pass_ == "backward":
            raise KernelLoadError(
                "'%s' is a KernelBench ModelNew file, which has no backward: the format "
                "cannot express a backward kernel (use a torch extension exporting "
                "backward(), or the native abi's kb_backward)" % os.path.basename(source))
        if task is None or not hasattr(task, "mod") or not hasattr(task.mod, "get_init_inputs"):
            raise KernelLoadError("a ModelNew kernel needs a KernelBench operator "
                                  "(a .py file with class Model and get_init_inputs())")
        self.task, self.workdir, self.device = task, workdir, device
        self.switch = kbh_noop.Switch()
        self.modules = 0
        self.calls = 0          # extension calls since the last reset
        self.ext_s = 0.0        # seconds inside extension calls (host side)
        self.bound_calls = 0    # calls of the last bound() callable
        self.poisoning = False
        self.instances = {}     # model key -> (module, mapping, number of inputs)
        self.current = None
        self.mod = self._import(source)
        if not isinstance(getattr(self.mod, "ModelNew", None), type):
            raise KernelLoadError("'%s' defines no class ModelNew" % os.path.basename(source))

    # -- loading -------------------------------------------------------
    def _import(self, source):
        from torch.utils import cpp_extension as ce
        saved = (ce.load_inline, ce.load)
        ce.load_inline = self._wrap(saved[0], inline=True)
        ce.load = self._wrap(saved[1], inline=False)
        try:
            return import_file(source, "modelnew")
        except TaskError as e:
            msg = str(e)
            if "could not build" in msg or "Error building extension" in msg:
                raise KernelLoadError("could not build the extension of '%s': %s"
                                      % (os.path.basename(source), msg[-LOG_CAP:]))
            raise KernelLoadError(msg[-LOG_CAP:])
        finally:
            ce.load_inline, ce.load = saved

    def _wrap(self, orig, inline):
        sig = inspect.signature(orig)

        def loader(*args, **kwargs):
            ba = sig.bind(*args, **kwargs)
            a = ba.arguments
            name = str(a.get("name") or "ext")
            build = os.path.join(self.workdir, "ext-%d-%s" % (self.modules, name))
            os.makedirs(build, exist_ok=True)
            a["build_directory"] = build
            first = len(self.switch.units)
            if inline:
                self._instrument_inline(a)
            else:
                self._instrument_files(a, build)
            mod = orig(*ba.args, **ba.kwargs)
            self.modules += 1
            path = getattr(mod, "__file__", None)
            if path is None:   # is_python_module=False: a path, or nothing
                return mod
            self.switch.built(path, first)
            return ExtProxy(mod, self)
        loader.__name__ = orig.__name__
        return loader

    def _instrument_inline(self, a):
        cu = a.get("cuda_sources")
        if not cu:
            return
        text = cu if isinstance(cu, str) else "\n".join(cu)
        text, tag, n = kbh_noop.instrument(text)
        self.switch.add(tag, n)
        a["cuda_sources"] = [text]

    def _instrument_files(self, a, build):
        srcs = a.get("sources")
        srcs = [srcs] if isinstance(srcs, str) else list(srcs or [])
        out, dirs = [], []
        for s in srcs:
            if not str(s).endswith(".cu"):
                out.append(s)
                continue
            with open(s, encoding="utf-8", errors="replace") as f:
                text, tag, n = kbh_noop.instrument(f.read())
            if tag is None:
                out.append(s)
                continue
            self.switch.add(tag, n)
            dst = os.path.join(build, "kb%s-%s" % (tag, os.path.basename(s)))
            with open(dst, "w", encoding="utf-8") as f:
                f.write(text)
            out.append(dst)
            dirs.append(os.path.dirname(os.path.abspath(s)))
        a["sources"] = out
        if dirs:  # the copy's own #include "x.h" still finds its neighbours
            a["extra_include_paths"] = list(a.get("extra_include_paths") or []) + dirs

    # -- what the judge asks about the custom code --------------------
    def custom(self):
        """How custom work is proven: 'noop' (CUDA kernels switched off),
        'poison' (outputs of extension calls poisoned), or None (no
        extension: a torch fallback)."""
        method = "noop" if self.switch.available() else "poison" if self.modules else None
        return {"method": method, "modules": self.modules, "kernels": self.switch.kernels}

    def set_noop(self, on):
        """True when the custom code is switched as asked."""
        if self.switch.available():
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            return self.switch.set(on)
        self.poisoning = on
        return True

    def ext_call(self, fn, args, kwargs):
        self.calls += 1
        before = None
        if self.poisoning:
            before = [(t, t.clone()) for t in _tensors(list(args) + list(kwargs.values()))]
        t0 = time.perf_counter()
        r = fn(*args, **kwargs)
        self.ext_s += time.perf_counter() - t0
        if self.poisoning:
            for t in _tensors(r):
                _poison(t)
            for t, was in before:
                if not torch.equal(t, was):
                    _poison(t)
        return r

    # -- the model -----------------------------------------------------
    def configure(self, model):
        """The ModelNew instance for a config and seed (built once each)."""
        key = json.dumps([model.get("params"), model.get("seed")], sort_keys=True, default=str)
        inst = self.instances.get(key)
        if inst is None:
            inst = self._build(model)
            self.instances[key] = inst
        self.current = inst

    def _build(self, model):
        params = dict(model.get("params") or {})
        g = self.mod.__dict__
        saved = {k: g[k] for k in params if k in g}
        g.update({k: v for k, v in params.items() if k in g})
        try:
            with self.task.activate(_Params(params)):
                torch.manual_seed(int(model.get("seed") or 0))
                m = self.mod.ModelNew(*self.task.mod.get_init_inputs())
        except Exception as e:  # candidate code: anything
            raise _CallError("ModelNew(*get_init_inputs()) raised %s" % error_text(e))
        finally:
            g.update(saved)
        if not isinstance(m, torch.nn.Module):
            raise _CallError("ModelNew(...) is not a torch.nn.Module")
        m = m.to(self.device)
        names = list(model.get("names") or [])
        return m, _match(m, names), sum(1 for n in names if n.startswith("input"))

    def _load_values(self, args):
        m, mapping, n_in = self.current
        with torch.no_grad():
            for target, i in mapping:
                if i < len(args) and torch.is_tensor(args[i]) and \
                        target.shape == args[i].shape:
                    target.copy_(args[i])
        return m, args[:n_in]

    def forward(self, args):
        if self.current is None:
            raise _CallError("no model configured for the call")
        m, inputs = self._load_values(args)
        with torch.no_grad():
            return as_outputs(m(*inputs))

    def bound(self, args):
        """A zero-argument call for timing: values loaded once."""
        m, inputs = self._load_values(args)
        self.bound_calls = 0

        def call():
            self.bound_calls += 1
            with torch.no_grad():
                return m(*inputs)
        return call


class _CallError(Exception):
    """Raised inside a call: the Caller reports it as the kernel's error."""


def _match(m, names):
    """[(ModelNew's tensor, argument index)] by name, else by position."""
    own = [("param:" + n, t) for n, t in m.named_parameters()] + \
          [("buffer:" + n, t) for n, t in m.named_buffers()]
    index = {n: i for i, n in enumerate(names)}
    mapping = [(t, index[n]) for n, t in own if n in index]
    if not mapping:
        theirs = [i for i, n in enumerate(names) if n.startswith(("param:", "buffer:"))]
        mapping = [(t, i) for (_, t), i in zip(own, theirs)]
    return mapping
