"""Task loading common to both formats, and the Case a trial runs on.

A Case is one trial's worth of data: the kernel-facing argument list in
ABI order, and a reference that maps such a list to the outputs. Running
the reference on copies of the arguments (not on objects the kernel saw)
keeps a kernel that mutates its inputs from changing the expected answer.
"""
import contextlib
import hashlib
import importlib.util
import os
import sys
import sysconfig
import traceback

import torch


class TaskError(Exception):
    """The operator could not be loaded or run: verdict "error"."""


_HARNESS_DIR = os.path.dirname(os.path.realpath(__file__)) + os.sep


def _library_dirs():
    """Python's and the installed packages' folders (torch's among them):
    frames there are not the operator's own code."""
    dirs = {sysconfig.get_paths().get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    dirs.add(os.path.dirname(os.path.dirname(os.path.realpath(torch.__file__))))
    return tuple(os.path.realpath(d) + os.sep for d in dirs if d)


_LIBRARY_DIRS = _library_dirs()


def where(e):
    """'op.py:12 in forward': the innermost frame of e's traceback in the
    operator's own code (not the harness's, Python's or torch's), or the
    file and line a SyntaxError names; '' when there is none."""
    found = ""
    for fs in traceback.extract_tb(e.__traceback__):
        path = os.path.realpath(fs.filename)
        if fs.filename.startswith("<") or path.startswith(_HARNESS_DIR) or \
                path.startswith(_LIBRARY_DIRS):
            continue
        found = "%s:%d in %s" % (os.path.basename(fs.filename), fs.lineno, fs.name)
    if isinstance(e, SyntaxError) and e.filename and e.lineno:
        found = "%s:%d" % (os.path.basename(e.filename), e.lineno)
    return found


def error_text(e, limit=300):
    """'ValueError: the message (at op.py:12 in forward)': what operator
    code raised, and where, so the author need not run it again to find out."""
    at = where(e)
    return "%s: %s%s" % (type(e).__name__, str(e)[:limit], " (at %s)" % at if at else "")


def import_file(path, tag):
    """Import path under a unique module name; its dir is on sys.path only
    while it executes (so sibling imports work and nothing leaks)."""
    path = os.path.abspath(path)
    digest = hashlib.sha1(path.encode()).hexdigest()[:12]
    name = "kb_op_%s_%s" % (tag, digest)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None:
        raise TaskError("could not import '%s'" % path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    d = os.path.dirname(path)
    sys.path.insert(0, d)
    try:
        spec.loader.exec_module(mod)
    except Exception as e:
        raise TaskError("could not import '%s': %s" % (path, error_text(e, 1000)))
    finally:
        sys.path.remove(d)
    return mod


def as_outputs(value):
    """The reference's return as a list of tensors (a tuple gives several)."""
    if torch.is_tensor(value):
        return [value]
    if isinstance(value, (list, tuple)) and value and \
            all(torch.is_tensor(v) for v in value):
        return list(value)
    raise TaskError("reference returned %s, not a tensor or a tuple of tensors"
                    % type(value).__name__)


def kernel_arg(v, device):
    """A value as the kernel sees it: a detached contiguous copy on device
    (so a parameter's autograd state never reaches the kernel)."""
    if torch.is_tensor(v):
        return v.detach().to(device).clone().contiguous()
    return v


class Case:
    """One trial: names/args in ABI order, ref(args) -> list of outputs;
    model and model_inputs run the eager operator for timing."""

    def __init__(self, names, args, ref, model, model_inputs):
        self.names, self.args, self.ref = names, args, ref
        self.model, self.model_inputs = model, model_inputs
        # what a ModelNew runner needs to build its model alike (task_kb)
        self.model_init = None

    def tensor_meta(self):
        out = []
        for n, a in zip(self.names, self.args):
            if torch.is_tensor(a):
                out.append({"name": n, "shape": list(a.shape),
                            "dtype": str(a.dtype).replace("torch.", "")})
            else:  # a scalar: the ABI passes it as a 0-d host tensor
                dt = "float64" if isinstance(a, float) else "int64"
                out.append({"name": n, "shape": [], "dtype": dt, "scalar": True})
        return out


def functional_call(model, tensors, args):
    """torch.func.functional_call on torch 2, torch.nn.utils.stateless on 1.13."""
    try:
        from torch.func import functional_call as fc
    except ImportError:
        from torch.nn.utils.stateless import functional_call as fc
    return fc(model, tensors, tuple(args))


@contextlib.contextmanager
def nothing():
    yield


def load(path, pass_):
    """A KernelBench file or a robust-kbench folder, by what path is."""
    if os.path.isdir(path):
        from kernelbot_harness.task_rk import RobustKBenchTask
        return RobustKBenchTask(path, pass_)
    if os.path.isfile(path) and path.endswith(".py"):
        from kernelbot_harness.task_kb import KernelBenchTask
        return KernelBenchTask(path, pass_)
    raise TaskError("operator '%s' is neither a .py file nor a task folder" % path)
