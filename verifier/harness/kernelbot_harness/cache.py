"""Per-worker caches for serve mode (PROTOCOL.md "Serve mode"): what does
not depend on the candidate is computed once per worker process.

- the operator: its imported module (a task object) per (path, pass, the
  files' sizes and mtimes), so an edited operator is loaded again;
- its validated configs per (device, max_configs, max_numel, extra
  configs); every evaluation gets fresh copies, so one candidate's marks
  (trials, failures, timing) never reach the next;
- the torch.compile baseline per config: compiled once, reused by every
  later candidate (a recompile per candidate would cost seconds and run
  into dynamo's recompile limit, after which it silently runs eager).

Disabled (the default, --request mode) every function does the uncached
thing. Only the last MAX_OPERATORS operators are kept.
"""
import copy
import json
import os
import shutil
import stat
import sys
from collections import OrderedDict

from kernelbot_harness import prepare as kbh_prepare
from kernelbot_harness import task as kbh_task

MAX_OPERATORS = 4

enabled = False
_ops = OrderedDict()  # key -> {"task", "configs": {}, "compiled": {}}
_copies = [0]


def _signature(path):
    """(file, mtime_ns, size) of the operator's files."""
    if os.path.isdir(path):
        try:
            files = sorted(os.path.join(path, f) for f in os.listdir(path))
        except OSError:
            files = []
    else:
        files = [path]
    sig = []
    for f in files:
        try:
            st = os.stat(f)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode):
            sig.append((f, st.st_mtime_ns, st.st_size))
    return tuple(sig)


def _forget_sibling_modules(before, path):
    """Drop modules the operator imported from its own folder from
    sys.modules (the operator keeps its references): another operator's
    `import utils` must find its own utils.py, not this one's."""
    d = os.path.dirname(os.path.abspath(path)) if os.path.isfile(path) \
        else os.path.abspath(path)
    d = d.rstrip(os.sep) + os.sep
    for name in [n for n in sys.modules if n not in before]:
        f = getattr(sys.modules.get(name), "__file__", None) or ""
        if f and os.path.abspath(f).startswith(d) and not name.startswith("kb_op_"):
            sys.modules.pop(name, None)


# whether the last load_task and prepare came from the cache (the
# evidence's environment.operator_cached: a warm worker's reuse, shown)
hits = {"task": False, "configs": False}


def load_task(path, pass_):
    """kbh_task.load, cached when enabled."""
    hits["task"] = False
    if not enabled:
        return kbh_task.load(path, pass_)
    key = (os.path.abspath(path), pass_, _signature(path))
    entry = _ops.get(key)
    if entry is not None:
        _ops.move_to_end(key)
        hits["task"] = True
        return entry["task"]
    before = set(sys.modules)
    task = kbh_task.load(path, pass_)
    _forget_sibling_modules(before, path)
    entry = {"task": task, "configs": {}, "compiled": {}}
    task.kb_cache = entry
    _ops[key] = entry
    while len(_ops) > MAX_OPERATORS:
        _ops.popitem(last=False)
    return task


def _entry(task):
    return getattr(task, "kb_cache", None) if enabled else None


def prepare(task, req, device):
    """kbh_prepare.prepare, cached when enabled: fresh copies each call."""
    entry = _entry(task)
    hits["configs"] = False
    if entry is None:
        return kbh_prepare.prepare(task, req, device)
    key = (str(device), req["max_configs"], req["max_numel"],
           json.dumps(req["extra_configs"], sort_keys=True, default=str))
    hit = entry["configs"].get(key)
    hits["configs"] = hit is not None
    if hit is None:
        hit = kbh_prepare.prepare(task, req, device)
        entry["configs"][key] = hit
    kept, dropped = hit
    return [copy.copy(c) for c in kept], copy.deepcopy(dropped)


def compile_baseline(tmod, task, cfg, model, inputs, device):
    """(compiled callable or None, reason) for cfg, compiled once per worker.
    The cached callable keeps the model it was compiled from: every trial
    builds that model alike (timing seed, default init), so it computes what
    a fresh one would."""
    entry = _entry(task)
    if entry is None:
        return tmod.compile_baseline(model, inputs, device=device.type)
    key = (cfg.name, json.dumps(cfg.params, sort_keys=True, default=str), str(device))
    hit = entry["compiled"].get(key)
    if hit is None:
        hit = tmod.compile_baseline(model, inputs, device=device.type)
        entry["compiled"][key] = hit
    return hit


def private_library(path, workdir):
    """A copy of a kernel library under workdir, so each evaluation loads a
    fresh instance (dlopen of a path already loaded returns the loaded one,
    static state from an earlier evaluation included). The path itself when
    disabled or when the copy fails."""
    if not enabled:
        return path
    _copies[0] += 1
    dst = os.path.join(workdir, "kernel-%d-%s" % (_copies[0], os.path.basename(path)))
    try:
        shutil.copyfile(path, dst)
    except OSError:
        return path
    return dst


def clear():
    """Forget everything (tests)."""
    _ops.clear()
