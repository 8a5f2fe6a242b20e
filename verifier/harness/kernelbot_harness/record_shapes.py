"""Record what a module of the repository is built and called with while
the repository's own tests run (kb_record.py is the entry point).

The target class's __init__ and forward (or the target function) are
wrapped in place, before the tests are collected, so every import of it
sees the wrappers; a copy of the module imported under another name is
found again before each test by its file. Each call of an instance of
exactly that class (not a subclass: it may be built differently) adds one
to the count of its (init arguments, forward arguments): tensors by shape,
dtype and requires_grad, other values tagged by their Python type so the
bot can tell a literal from an object. forward's keyword arguments are
put in their positions where the signature allows; a call that cannot be
written positionally is marked "unbound". The counts are written after
every test (a test that kills the process loses nothing before it).
"""
import argparse
import functools
import importlib
import importlib.util
import inspect
import json
import os
import sys
import types

MAX_RECORDS = 64       # written, the most frequent first
MAX_KEYS = 4096        # distinct calls held while the tests run
MAX_ITEMS = 16
MAX_DEPTH = 3
MAX_TEXT = 300


def tag(v, depth=0):
    """A value as ["type", value]: what the bot can write back as a literal."""
    if isinstance(v, bool):
        return ["bool", v]
    if v is None:
        return ["none"]
    if isinstance(v, int) and abs(v) < 2 ** 53:
        return ["int", v]
    if isinstance(v, float):
        return ["float", repr(v)]
    if isinstance(v, str):
        return ["str", v[:65]]
    if isinstance(v, (tuple, list)) and depth < MAX_DEPTH and len(v) <= MAX_ITEMS:
        return ["tuple" if isinstance(v, tuple) else "list", [tag(x, depth + 1) for x in v]]
    return ["object", type(v).__name__[:64]]


def arg(v):
    import torch
    if torch.is_tensor(v):
        return {"tensor": {"shape": [int(s) for s in v.shape],
                           "dtype": str(v.dtype).replace("torch.", ""),
                           "requires_grad": bool(v.requires_grad)}}
    return tag(v)


def positional(fn, args, kwargs, skip_first):
    """forward's arguments in their positions, or None when some keyword
    argument has no position (keyword-only, **kwargs, a gap of defaults)."""
    try:
        sig = inspect.signature(fn)
        bound = sig.bind(*((None,) if skip_first else ()), *args, **kwargs)
    except (TypeError, ValueError):
        return None
    out, gap = [], False
    params = list(sig.parameters.values())[1 if skip_first else 0:]
    for p in params:
        given = p.name in bound.arguments
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            if given and gap:
                return None
            if given:
                out.append(bound.arguments[p.name])
            gap = gap or not given
        elif p.kind == p.VAR_POSITIONAL:
            if bound.arguments.get(p.name) and gap:
                return None
            out.extend(bound.arguments.get(p.name, ()))
        elif given and (p.kind == p.KEYWORD_ONLY or bound.arguments[p.name]):
            return None
    return out


class Recorder:
    """A pytest plugin: counts the calls, writes them after every test."""

    def __init__(self, root, path, name, function, out):
        self.root, self.path, self.name, self.function, self.out = root, path, name, function, out
        self.file = os.path.realpath(os.path.join(root, path))
        self.counts = {}
        self.calls = 0
        self.truncated = False
        self.import_error = None
        self.patched = set()
        self.tests = {"collected": 0, "passed": 0, "failed": 0, "skipped": 0, "errors": 0}

    # -- what is recorded --------------------------------------------
    def add(self, init, args, kwargs, fn, skip_first):
        pos = positional(fn, args, kwargs, skip_first)
        rec = {"init": init, "inputs": [arg(v) for v in pos[:MAX_ITEMS]] if pos is not None else [],
               "unbound": pos is None or len(pos) > MAX_ITEMS}
        key = json.dumps(rec, sort_keys=True)
        self.calls += 1
        if key in self.counts:
            self.counts[key][0] += 1
        elif len(self.counts) < MAX_KEYS:
            self.counts[key] = [1, rec]
        else:
            self.truncated = True

    def patch_class(self, cls):
        if cls in self.patched or not isinstance(cls, type):
            return
        self.patched.add(cls)
        recorder, init0, fwd0 = self, cls.__init__, cls.forward

        @functools.wraps(init0)
        def __init__(self, *args, **kwargs):
            init0(self, *args, **kwargs)
            if type(self) is cls:
                object.__setattr__(self, "_kernelbot_init", {
                    "args": [tag(v) for v in args[:MAX_ITEMS]],
                    "kwargs": {str(k): tag(v) for k, v in list(kwargs.items())[:MAX_ITEMS]}})

        @functools.wraps(fwd0)
        def forward(self, *args, **kwargs):
            init = self.__dict__.get("_kernelbot_init")
            if type(self) is cls and init is not None:
                recorder.add(init, args, kwargs, fwd0, True)
            return fwd0(self, *args, **kwargs)

        cls.__init__, cls.forward = __init__, forward

    def patch_function(self, mod):
        fn = getattr(mod, self.name, None)
        if fn is None or fn in self.patched or getattr(fn, "_kernelbot_wrapped", False):
            return
        recorder = self

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            recorder.add({"args": [], "kwargs": {}}, args, kwargs, fn, False)
            return fn(*args, **kwargs)

        wrapper._kernelbot_wrapped = True
        self.patched.add(wrapper)
        setattr(mod, self.name, wrapper)

    def patch_module(self, mod):
        if self.function:
            self.patch_function(mod)
            return
        obj = mod
        for part in self.name.split("."):
            obj = getattr(obj, part, None)
        if isinstance(obj, type):
            self.patch_class(obj)

    def patch_loaded(self):
        """Copies of the target's file imported under any name."""
        for mod in list(sys.modules.values()):
            f = getattr(mod, "__file__", None)
            if f and os.path.realpath(f) == self.file:
                self.patch_module(mod)

    # -- pytest hooks --------------------------------------------------
    def pytest_configure(self, config):
        try:
            self.patch_module(import_target(self.root, self.path))
        except Exception as e:  # the repository's own code may raise anything
            self.import_error = "%s: %s" % (type(e).__name__, str(e)[:MAX_TEXT])

    def pytest_collection_finish(self, session):
        self.tests["collected"] = len(session.items)
        self.patch_loaded()

    def pytest_collectreport(self, report):
        if report.failed:
            self.tests["errors"] += 1

    def pytest_runtest_setup(self, item):
        self.patch_loaded()

    def pytest_runtest_logreport(self, report):
        if report.when == "call" or (report.when == "setup" and not report.passed):
            if report.passed:
                self.tests["passed"] += 1
            elif report.skipped:
                self.tests["skipped"] += 1
            elif report.when == "setup":
                self.tests["errors"] += 1
            else:
                self.tests["failed"] += 1

    def pytest_runtest_logfinish(self, nodeid, location):
        self.write()

    # -- output ----------------------------------------------------------
    def write(self):
        ranked = sorted(self.counts.values(), key=lambda cr: -cr[0])
        out = {"version": 1, "target": "%s:%s" % (self.path, self.name), "calls": self.calls,
               "import_error": self.import_error if not self.counts else None,
               "truncated": self.truncated or len(ranked) > MAX_RECORDS,
               "records": [dict(rec, count=c) for c, rec in ranked[:MAX_RECORDS]]}
        out.update(self.tests)
        tmp = self.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(out, f)
        os.replace(tmp, self.out)


def module_name(path):
    """'models/mlp.py' -> 'models.mlp' ('src/' left out); None when a part is no identifier."""
    parts = path[:-3].split("/")
    if parts[0] == "src" and len(parts) > 1:
        parts = parts[1:]
    if parts[-1] == "__init__" and len(parts) > 1:
        parts = parts[:-1]
    return ".".join(parts) if all(p.isidentifier() for p in parts) else None


def kernelbot_stand_in():
    """@kernelbot.operator is a marker: where no kernelbot module is installed, one that returns the function."""
    try:
        import kernelbot  # noqa: F401
    except ImportError:
        kb = types.ModuleType("kernelbot")
        kb.operator = lambda fn=None, **_kw: fn if callable(fn) else (lambda f: f)
        sys.modules["kernelbot"] = kb


def import_target(root, path):
    kernelbot_stand_in()
    name = module_name(path)
    if name:
        return importlib.import_module(name)
    spec = importlib.util.spec_from_file_location("kernelbot_target", os.path.join(root, path))
    mod = importlib.util.module_from_spec(spec)
    sys.modules["kernelbot_target"] = mod
    spec.loader.exec_module(mod)
    return mod


def main(argv):
    ap = argparse.ArgumentParser(prog="kb_record.py")
    ap.add_argument("--root", required=True)
    ap.add_argument("--target", required=True, help="PATH.py:NAME")
    ap.add_argument("--out", required=True)
    ap.add_argument("--function", action="store_true")
    ap.add_argument("tests", nargs="+")
    a = ap.parse_args(argv)
    path, _, name = a.target.rpartition(":")
    root = os.path.realpath(a.root)
    os.chdir(root)
    for p in (os.path.join(root, "src"), root):
        if os.path.isdir(p) and p not in sys.path:
            sys.path.insert(0, p)
    rec = Recorder(root, path, name, a.function, a.out)
    try:
        import pytest
    except ImportError:
        rec.import_error = "pytest is not installed for the harness's python"
        rec.write()
        return 0
    try:
        pytest.main(["-p", "no:cacheprovider", "-q", "--rootdir", root] + a.tests, plugins=[rec])
    finally:
        rec.write()
    return 0
