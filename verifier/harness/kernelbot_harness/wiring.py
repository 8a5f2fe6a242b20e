"""The wiring check (PROTOCOL.md "Wiring check"): a module patched to call a
verified kernel (report/module_patch.h) against itself with the kernel
switched off (ops.ENABLED = False: its original code), on the recorded
shapes, forward and backward; then the repository's own tests on the
patched tree. Runs in the sandbox like the harness; everything it imports
is the repository's.
"""
import copy
import importlib
import json
import os
import shutil
import subprocess
import sys

from kernelbot_harness.checks import compare as kbh_compare

FLOATS = ("float32", "float64", "float16", "bfloat16")
TEST_OUTPUT_CAP = 4000


class WiringError(Exception):
    """The check cannot run: the reason is the result."""


def _copy_tree(req):
    """The repository with the overlays on top (the run's folder at its place, the
    patched files), writable: binding.py compiles beside itself, pytest writes."""
    dst = os.path.join(req["workdir"], "tree")
    skip = shutil.ignore_patterns(".git", ".kb_build", "__pycache__")
    shutil.copytree(req["tree"], dst, symlinks=True, ignore=skip)
    for src, where in req.get("overlays") or []:
        shutil.copytree(src, os.path.join(dst, where), symlinks=True, ignore=skip,
                        dirs_exist_ok=True)
    return dst


def _module_name(req, root):
    if req.get("module"):
        return req["module"]
    path = os.path.join(root, req["module_file"])
    for entry in req.get("sys_path") or ["."]:
        base = os.path.normpath(os.path.join(root, entry))
        rel = os.path.relpath(path, base)
        if not rel.startswith(".."):
            return rel[:-3].replace(os.sep, ".") if rel.endswith(".py") else rel.replace(os.sep, ".")
    raise WiringError("'%s' lies in no sys_path entry" % req["module_file"])


def _imports(req, root):
    for entry in reversed(req.get("sys_path") or ["."]):
        sys.path.insert(0, os.path.normpath(os.path.join(root, entry)))
    try:
        ops = importlib.import_module(req["ops_module"])
        mod = importlib.import_module(_module_name(req, root))
    except Exception as e:
        raise WiringError("import failed: %s: %s" % (type(e).__name__, str(e)[:500]))
    cls = getattr(mod, req["class"], None)
    if cls is None:
        raise WiringError("module '%s' has no class '%s'" % (mod.__name__, req["class"]))
    return ops, cls


def _inputs(torch, specs, device, dtype=None):
    """forward's arguments: (positional, keyword) from the specs."""
    args, kwargs = [], {}
    for s in specs:
        if "value" in s:
            v = s["value"]
        elif s["dtype"] in FLOATS:
            d = dtype if dtype is not None else getattr(torch, s["dtype"])
            v = torch.randn(s["shape"], dtype=d, device=device)
        elif s["dtype"] == "bool":
            v = torch.rand(s["shape"], device=device) > 0.5
        else:
            v = torch.randint(0, 8, s["shape"], dtype=getattr(torch, s["dtype"]), device=device)
        if s.get("keyword"):
            kwargs[s["keyword"]] = v
        else:
            args.append(v)
    return args, kwargs


def _tensors(out):
    if hasattr(out, "shape"):
        return [out]
    return [o for o in out if hasattr(o, "shape")]


def _leaf(torch, a):
    if not torch.is_tensor(a):
        return a
    return a.detach().clone().requires_grad_(a.is_floating_point())


def _run(torch, ops, model, inputs, enabled, upstream):
    """Outputs, the gradients of the floating arguments and of the parameters, and the kernel calls.
    The speed gate is off: the kernel is proven on every verified shape, fast there or not."""
    ops.ENABLED = enabled
    ops.SPEED_GATE = False
    args = [_leaf(torch, a) for a in inputs[0]]
    kwargs = {k: _leaf(torch, a) for k, a in inputs[1].items()}
    calls = ops.CALLS
    with torch.enable_grad():
        outs = _tensors(model(*args, **kwargs))
        calls = ops.CALLS - calls
        if upstream is None:
            upstream = [torch.randn_like(o) if o.is_floating_point() else None for o in outs]
        pairs = [(o, g) for o, g in zip(outs, upstream) if g is not None and o.requires_grad]
        if pairs:
            torch.autograd.backward([o for o, _ in pairs], [g for _, g in pairs])
    named = [("input%d" % i, a) for i, a in enumerate(args)] + [("kw:" + k, a) for k, a in kwargs.items()]
    grads = [(n, a.grad) for n, a in named if torch.is_tensor(a) and a.grad is not None]
    grads += [("param:" + n, p.grad) for n, p in model.named_parameters() if p.grad is not None]
    ops.ENABLED, ops.SPEED_GATE = True, True
    return [o.detach() for o in outs], grads, calls, upstream


def _used(torch, ops, model, inputs):
    """Does the module call the kernel here with its speed gate on (a forward alone)?"""
    calls = ops.CALLS
    with torch.no_grad():
        model(*inputs[0], **inputs[1])
    return ops.CALLS > calls


def _worst(pairs, tolerances):
    """(max abs error, all within tolerance) over (kernel, original) tensor pairs."""
    worst, ok = 0.0, True
    for c, r in pairs:
        tol = tolerances.get(str(r.dtype).replace("torch.", ""), tolerances.get("float32"))
        d = kbh_compare.compare(c, r, tol["atol"], tol["rtol"], pattern=False)
        worst = max(worst, float(d.max_abs))
        ok = ok and d.ok
    return worst, ok


def _fits(model, cfg):
    """Are the module's parameters and buffers of the config's shapes (made by this init)?"""
    own = dict(model.named_parameters())
    own.update(model.named_buffers())
    return all(n in own and list(own[n].shape) == list(shape)
               for n, shape in (cfg.get("tensors") or {}).items())


def _buffers(model):
    return {n: b.detach().clone() for n, b in model.named_buffers()}


def _same_buffers(torch, got, want, tolerances):
    """A forward that updates the module's state (running statistics, counters) must update
    it alike with the kernel: the kernel computes outputs only."""
    if sorted(got) != sorted(want):
        return False
    floats = [(got[n], want[n]) for n in want if want[n].is_floating_point()]
    exact = all(torch.equal(got[n], want[n]) for n in want if not want[n].is_floating_point())
    return exact and _worst(floats, tolerances)[1]


def _eval_mode(torch, ops, model, twin, inputs, tolerances):
    """The module in eval mode (model.eval(): dropout off, running statistics used) with and
    without the kernel: a forward whose result depends on self.training computes something
    else there, which the kernel, verified on the training-mode forward, does not."""
    model.eval()
    twin.eval()
    try:
        with torch.no_grad():
            want, _, _, _ = _run(torch, ops, model, inputs, False, [])
            got, _, _, _ = _run(torch, ops, twin, inputs, True, [])
    finally:
        model.train()
        twin.train()
    if len(got) != len(want) or any(c.shape != r.shape for c, r in zip(got, want)):
        return False
    return _worst(zip(got, want), tolerances)[1]


def _config(torch, ops, cls, req, ci, cfg, seed):
    init = req.get("init") or {}
    device = "cuda" if req.get("backend") == "cuda" else "cpu"
    torch.manual_seed(1000 * ci + seed)
    model = cls(*init.get("args", []), **init.get("kwargs", {})).to(device)
    if not _fits(model, cfg):
        return None
    twin = copy.deepcopy(model)
    inputs = _inputs(torch, cfg["inputs"], device)
    want, want_g, _, upstream = _run(torch, ops, model, inputs, False, None)
    got, got_g, calls, _ = _run(torch, ops, twin, inputs, True, upstream)
    rec = {"config": cfg.get("name", str(ci)), "seed": seed, "kernel_calls": calls,
           "buffers_ok": _same_buffers(torch, _buffers(twin), _buffers(model), req["tolerances"]),
           "eval_ok": _eval_mode(torch, ops, model, twin, inputs, req["tolerances"])}
    rec["used"] = _used(torch, ops, twin, inputs)
    if len(got) != len(want) or any(c.shape != r.shape for c, r in zip(got, want)):
        rec.update(ok=False, outputs_max_abs=None, grads_max_abs=None, gradients=0)
        return rec
    rec["outputs_max_abs"], out_ok = _worst(zip(got, want), req["tolerances"])
    names = dict(want_g)
    same = sorted(n for n, _ in got_g) == sorted(names)
    rec["grads_max_abs"], grad_ok = _worst([(g, names[n]) for n, g in got_g if n in names],
                                           req["tolerances"])
    rec["gradients"] = len(want_g)
    rec["ok"] = bool(calls > 0 and out_ok and grad_ok and same and rec["buffers_ok"] and rec["eval_ok"])
    return rec


def _why(rec):
    """The first failing config's cause, in words."""
    if rec.get("kernel_calls", 0) <= 0:
        return "config '%s': the patched forward did not call the kernel" % rec["config"]
    if not rec.get("buffers_ok", True):
        return ("config '%s': the module's buffers (running statistics, counters) end up "
                "different with the kernel: its forward updates state the kernel does not"
                % rec["config"])
    if not rec.get("eval_ok", True):
        return ("config '%s': in eval mode (model.eval()) the module's output differs with the "
                "kernel: its forward depends on self.training (dropout, batch statistics), and "
                "the kernel was verified on the training-mode forward" % rec["config"])
    return ("config '%s': outputs or gradients differ with the kernel beyond the tolerances"
            % rec["config"])


def _fallback(torch, ops, cls, req, cfg):
    """A dtype the kernel was not verified for: the original code runs, untouched."""
    used = {s.get("dtype") for s in cfg["inputs"] if "value" not in s}
    if not used:
        return {"dtype": None, "kernel_calls": 0, "ok": False}
    other = "float64" if "float64" not in used else "float32"
    init = req.get("init") or {}
    device = "cuda" if req.get("backend") == "cuda" else "cpu"
    torch.manual_seed(7)
    model = cls(*init.get("args", []), **init.get("kwargs", {})).to(device, getattr(torch, other))
    inputs = _inputs(torch, cfg["inputs"], device, getattr(torch, other))
    want, _, _, upstream = _run(torch, ops, copy.deepcopy(model), inputs, False, None)
    got, _, calls, _ = _run(torch, ops, model, inputs, True, upstream)
    worst, ok = _worst(zip(got, want), req["tolerances"])
    return {"dtype": other, "kernel_calls": calls, "ok": bool(ok and calls == 0)}


MAX_ATTRIBUTES = 256


def _attributes(torch, ops, model):
    """The module's own settings (PROTOCOL.md "Wiring check"): per submodule path ("" the
    module), its plain attributes in ops.plain's form, which the kernel computes with baked
    in (a scale, an eps, a flag); and those of no plain kind ("path.name (type)"), which no
    guard can compare. torch's own attributes of every module are left out."""
    internal = set(vars(torch.nn.Module()))
    attrs, unknown, n = {}, [], 0
    for path, sub in model.named_modules():
        own = {}
        for name, v in sorted(vars(sub).items()):
            if name in internal or isinstance(v, torch.nn.Module):
                continue
            p = ops.plain(v)
            if p is ops.UNKNOWN:
                unknown.append("%s (%s)" % ((path + "." if path else "") + name, type(v).__name__))
                continue
            own[name] = list(p) if isinstance(p, tuple) else p
            n += 1
        if own:
            attrs[path] = own
    if n > MAX_ATTRIBUTES:
        unknown.append("%d attributes in all (at most %d are compared)" % (n, MAX_ATTRIBUTES))
    return attrs, unknown


def _pytest(req, root):
    """The repository's tests on the patched tree: counts by outcome and the kernel's calls."""
    out = os.path.join(req["workdir"], "pytest.json")
    env = dict(os.environ)
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    paths = [os.path.normpath(os.path.join(root, p)) for p in req.get("sys_path") or ["."]]
    env["PYTHONPATH"] = os.pathsep.join(paths + [here])
    env.update(KB_WIRING_OPS=req["ops_module"], KB_WIRING_OUT=out,
               KB_WIRING_ATTRIBUTES=json.dumps(req.get("attributes")))
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
           "-p", "kernelbot_harness.wiring_plugin"] + list(req["tests"])
    try:
        r = subprocess.run(cmd, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=req.get("tests_timeout_s", 600))
        sys.stderr.write(r.stdout.decode("utf-8", "replace")[-TEST_OUTPUT_CAP:])
    except subprocess.TimeoutExpired:
        return {"ran": False, "why": "the tests outlived %s s" % req.get("tests_timeout_s", 600)}
    try:
        with open(out) as fh:
            counts = json.load(fh)
    except (OSError, ValueError):
        return {"ran": False, "why": "pytest exited %d before its session ended" % r.returncode}
    counts.update(ran=True, exit_code=r.returncode)
    return counts


def check(req):
    """The result body (PROTOCOL.md "Wiring check")."""
    import torch
    root = _copy_tree(req)
    ops, cls = _imports(req, root)
    body = {"protocol": 1, "mode": "wiring", "implementation": ops.IMPLEMENTATION, "configs": []}
    # the module's settings as init makes them: the patched module calls the kernel only
    # when built alike (ops.configured), here and in the tests
    init = req.get("init") or {}
    attrs, unknown = _attributes(torch, ops, cls(*init.get("args", []), **init.get("kwargs", {})))
    ops.ATTRIBUTES = req["attributes"] = body["attributes"] = attrs
    if unknown:
        body["attributes_unknown"] = unknown[:16]
    fitting = []
    for ci, cfg in enumerate(req["configs"]):
        for seed in range(int(req.get("seeds", 2))):
            rec = _config(torch, ops, cls, req, ci, cfg, seed)
            if rec is None:
                break  # its module has other sizes: another init made it
            body["configs"].append(rec)
            fitting.append(cfg)
    body["configs_other_init"] = len(req["configs"]) - len({id(c) for c in fitting})
    if not fitting:
        raise WiringError("no verified config has the parameter shapes of %s(%s)"
                          % (req["class"], json.dumps(req.get("init") or {})[:200]))
    body["fallback"] = _fallback(torch, ops, cls, req, fitting[0])
    if req.get("tests"):
        body["tests"] = _pytest(req, root)
    ok = all(c["ok"] for c in body["configs"]) and body["fallback"]["ok"]
    body["verdict"] = "wired" if ok else "mismatch"
    bad = [c for c in body["configs"] if not c["ok"]]
    if bad:
        body["reasons"] = [{"check": "wiring", "message": _why(bad[0])}]
    elif unknown:
        body["verdict"] = "unguarded"
        body["reasons"] = [{"check": "wiring", "message": (
            "the module keeps settings no guard can compare (%s): the kernel computes with the "
            "verified module's baked in, so a module built otherwise would get wrong results; "
            "keep such settings as numbers, strings or flags, or tensors as buffers "
            "(register_buffer)" % ", ".join(unknown[:4]))}]
    return body
