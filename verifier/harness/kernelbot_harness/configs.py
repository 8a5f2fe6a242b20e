"""Which configs an operator is checked on.

KernelBench: a file's own sizes alone would let a kernel hard-code them, so
the module-level int constants that get_inputs()/get_init_inputs() read
(directly or through helper functions of the module) are scaled down, up
and set to odd values. Hyper-parameters (kernel sizes, strides, axes,
heads...) and small values keep their own value: changing them changes the
operator, not its size. robust-kbench: the task's own configs, the cross
product of init, input and shared configs.

Each config is (kind, name, params); the runner validates them in order
(a reference that raises drops the config) until max_configs are kept.
"""
import re
import types

HYPER = re.compile(r"kernel|stride|pad|dilat|group|head|axis|layer|eps|seed"
                   r"|iter|step|top_?k|^k$|num_class", re.I)
SIZE = re.compile(r"batch|size|len|feature|channel|hidden|width|height|depth"
                  r"|seq|dim|^[bnmkcdhwl]$|^num_", re.I)
BATCH = re.compile(r"batch|^b$|^n$", re.I)
SMALL = 8  # an unnamed constant at or below this is taken for a hyper-parameter


class Config:
    """One config: kind says how it was made (own, half, odd, rk, extra...)."""

    def __init__(self, kind, name, params):
        self.kind, self.name, self.params = kind, name, params
        self.index = None

    def describe(self):
        return {"index": self.index, "name": self.name, "kind": self.kind,
                "params": self.params}


def _code_names(code, acc):
    acc.extend(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            _code_names(c, acc)


def read_constants(mod, roots=("get_inputs", "get_init_inputs")):
    """Module-level int constants read by the roots, transitively through
    the module's own functions, in first-use order."""
    order, seen = [], set()
    stack = [getattr(mod, r, None) for r in roots]
    while stack:
        f = stack.pop(0)
        code = getattr(f, "__code__", None)
        if code is None or id(f) in seen:
            continue
        seen.add(id(f))
        names = []
        _code_names(code, names)
        for n in names:
            v = mod.__dict__.get(n)
            if isinstance(v, int) and not isinstance(v, bool):
                if n not in order:
                    order.append(n)
            elif isinstance(v, types.FunctionType) and \
                    v.__module__ == mod.__name__:
                stack.append(v)
    return {n: mod.__dict__[n] for n in order}


def scalable(name, value):
    if value < 1 or HYPER.search(name):
        return False
    return value > SMALL or bool(SIZE.search(name))


def odd_size(c):
    """A non-multiple of 32 (and odd) near c: 16384 -> 16401, 16 -> 17."""
    if c >= 32:
        return c - c % 32 + 17
    return c | 1 if c > 2 else c + 1


def _variants(sizes):
    """(kind, overrides) in priority order: the mix kept under max_configs."""
    names = list(sizes)
    batch = [n for n in names if BATCH.search(n)] or names[:1]
    out = [("half", {n: max(1, v // 2) for n, v in sizes.items()}),
           ("odd", {n: odd_size(v) for n, v in sizes.items()}),
           ("double", {n: 2 * v for n, v in sizes.items()}),
           ("batch1", {n: 1 for n in batch}),
           ("seven", {n: 7 for n in names}),
           ("quarter", {n: max(1, v // 4) for n, v in sizes.items()})]
    if len(names) > 1:
        skew = {n: (2 * v if i == 0 else max(1, v // 2))
                for i, (n, v) in enumerate(sizes.items())}
        out.append(("skew", skew))
    for n in names:
        out.append(("odd:" + n, {n: odd_size(sizes[n])}))
        out.append(("double:" + n, {n: 2 * sizes[n]}))
    return out


def _name(kind, params):
    return kind + "(" + ",".join("%s=%s" % kv for kv in params.items()) + ")"


def _kb_extra(own, extra):
    out = []
    for i, e in enumerate(extra):
        over = e.get("params", e) if isinstance(e, dict) else {}
        params = dict(own)
        params.update({k: v for k, v in over.items() if k != "name"})
        name = e.get("name") if isinstance(e, dict) else None
        out.append(Config("extra", name or _name("extra%d" % i, params), params))
    return out


def _shape_sets(mod, own):
    """A generated operator's further shape sets (.kernelbot.ini's
    [operator NAME] sections, bot/jobs/modop.h): KB_SHAPE_SETS, a list of
    {constant: value}. Each is the user's own shapes: a config of kind
    "own" (never dropped for size, counted in the headline)."""
    sets = mod.__dict__.get("KB_SHAPE_SETS")
    out, seen = [], {tuple(sorted(own.items()))}
    for s in sets[:64] if isinstance(sets, (list, tuple)) else ():
        if not isinstance(s, dict):
            continue
        params = dict(own)
        params.update({k: v for k, v in s.items() if isinstance(k, str) and
                       isinstance(v, int) and not isinstance(v, bool)})
        if tuple(sorted(params.items())) not in seen:
            seen.add(tuple(sorted(params.items())))
            out.append(Config("own", _name("own", params), params))
    return out


def kernelbench_configs(mod, extra=()):
    """Own config first (with a generated operator's further shape sets),
    then the request's extra configs, then scaled and odd variants."""
    consts = read_constants(mod)
    sizes = {n: v for n, v in consts.items() if scalable(n, v)}
    own = dict(sizes)
    out = [Config("own", _name("own", own), own)] + _shape_sets(mod, own) + _kb_extra(own, extra)
    seen = {tuple(sorted(c.params.items())) for c in out}
    for kind, over in _variants(sizes):
        params = dict(own)
        params.update(over)
        key = tuple(sorted(params.items()))
        if key not in seen:
            seen.add(key)
            out.append(Config(kind, _name(kind, params), params))
    return out


def _pick(cfg, key):
    multi, single = cfg.get("multi_" + key), cfg.get("single_" + key)
    return list(multi or single or [{}])


def spread(n, k):
    """Indices 0..n-1 reordered so that the first k are spread evenly (0 first)."""
    if k >= n:
        return list(range(n))
    first = sorted({round(i * (n - 1) / max(1, k - 1)) for i in range(k)})
    return first + [i for i in range(n) if i not in first]


def _rk_extra(base, extra):
    out = []
    for i, e in enumerate(extra):
        params = {"init": dict(base["init"], **e.get("init", {})),
                  "input": dict(base["input"], **e.get("input", {}))}
        if "init" not in e and "input" not in e:
            params["input"].update({k: v for k, v in e.items() if k != "name"})
        out.append(Config("extra", e.get("name") or "extra%d" % i, params))
    return out


def robust_kbench_configs(cfg, max_configs, extra=()):
    """The cross product init x input x shared (shared overrides both), its
    order spread so that a cap keeps a mix; extra configs after the first."""
    inits, inputs, shared = (_pick(cfg, "init_configs"),
                             _pick(cfg, "input_configs"),
                             _pick(cfg, "shared_configs"))
    full = []
    for a, init in enumerate(inits):
        for b, inp in enumerate(inputs):
            for c, sh in enumerate(shared):
                params = {"init": dict(init, **sh), "input": dict(inp, **sh)}
                full.append(Config("rk", "init%d-input%d-shared%d" % (a, b, c), params))
    order = [full[i] for i in spread(len(full), max_configs)]
    base = full[0].params if full else {"init": {}, "input": {}}
    return order[:1] + _rk_extra(base, extra) + order[1:]
