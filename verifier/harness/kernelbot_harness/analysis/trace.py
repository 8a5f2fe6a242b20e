"""Tracing for the operator analysis (kbh_analyze.py): the reference's
forward as a flat list of raw calls, each with its arguments (references
to ABI inputs or to earlier calls, or Python constants) and the shape and
dtype of its result at one config.

Two ways, tried in order:
- torch.fx symbolic tracing through every module (no leaf modules, so
  nn.Linear arrives as F.linear on its parameters), then the graph run on
  the config's values with ShapeProp; its outputs must equal the
  reference's, else the trace is not trusted;
- recording the torch functions actually called on the config's values
  (a TorchFunctionMode): works where fx cannot (control flow on values),
  but holds only the path taken for these inputs.
"""
import inspect
import math
import operator

import torch
import torch.fx
from torch.fx.passes.shape_prop import ShapeProp

from kernelbot_harness import task as kbh_task


class TraceFailed(Exception):
    pass


class Ref:
    """An ABI input (key: its name) or a raw call's result (key: its
    index; item: the element of a tuple result)."""
    __slots__ = ("key", "item")

    def __init__(self, key, item=None):
        self.key, self.item = key, item

    def __repr__(self):
        return "Ref(%r, %r)" % (self.key, self.item)


class TensorMeta:
    """Shape and dtype of a tensor; value when all its elements are equal
    and it depends on no input (a constant the operator made itself)."""
    __slots__ = ("shape", "dtype", "value")

    def __init__(self, t, keep_value=False):
        self.shape = list(t.shape)
        self.dtype = str(t.dtype).replace("torch.", "")
        self.value = _uniform(t) if keep_value else None

    def numel(self):
        return math.prod(self.shape) if self.shape else 1


class Opaque:
    """A tensor made inside forward whose elements are not all equal."""

    def __init__(self, meta):
        self.meta = meta


class Raw:
    __slots__ = ("index", "key", "args", "kwargs", "value", "inplace")

    def __init__(self, index, key, args, kwargs, value):
        self.index, self.key, self.args, self.kwargs = index, key, args, kwargs
        self.value = value
        self.inplace = False


class RawGraph:
    def __init__(self, method):
        self.method = method
        self.calls = []
        self.outputs = None
        self.notes = []


def _uniform(t, limit=1 << 20):
    if t.numel() == 0 or t.numel() > limit or t.is_complex():
        return None
    flat = t.detach().reshape(-1)
    v = flat[0]
    if t.numel() > 1 and not bool((flat == v).all()):
        return None
    return v.item()


def meta_of(v, keep_value=False):
    if torch.is_tensor(v):
        return TensorMeta(v, keep_value)
    if isinstance(v, (tuple, list)) and any(torch.is_tensor(x) for x in v):
        return tuple(meta_of(x, keep_value) for x in v)
    return v


def has_tensor(m):
    if isinstance(m, TensorMeta):
        return True
    return isinstance(m, tuple) and any(has_tensor(x) for x in m)


# calls that make a tensor from nothing but its size: their value is kept
FACTORIES = {"ones_like", "zeros_like", "full_like", "ones", "zeros", "full", "tensor",
             "as_tensor", "scalar_tensor", "new_ones", "new_zeros", "new_full", "new_tensor"}

# Python operators as fx records them, by the name the normaliser knows
_OPERATORS = {operator.add: "add", operator.sub: "sub", operator.mul: "mul",
              operator.truediv: "div", operator.floordiv: "floor_divide",
              operator.mod: "remainder", operator.pow: "pow", operator.neg: "neg",
              operator.pos: "positive", operator.abs: "abs", operator.matmul: "matmul",
              operator.getitem: "getitem", operator.gt: "gt", operator.lt: "lt",
              operator.ge: "ge", operator.le: "le", operator.eq: "eq", operator.ne: "ne",
              operator.and_: "logical_and", operator.or_: "logical_or",
              operator.invert: "logical_not", operator.iadd: "add_",
              operator.isub: "sub_", operator.imul: "mul_", operator.itruediv: "div_",
              getattr: "getattr"}

# dunder methods whose operands are swapped
_REFLECTED = {"radd", "rsub", "rmul", "rdiv", "rtruediv", "rpow", "rmatmul",
              "rfloordiv", "rmod"}


def fn_key(target):
    """The canonical name of a callable (or an fx method name): 'relu',
    'add', 'rsub', 'attr:T', 'linalg_vector_norm', ..."""
    if isinstance(target, str):
        name = target
    elif _hashable(target) and target in _OPERATORS:
        return _OPERATORS[target]
    else:
        name = getattr(target, "__name__", None) or str(target)
        owner = getattr(target, "__self__", None)
        if name == "__get__" and owner is not None:  # a property: x.T, x.mT
            return "attr:" + getattr(owner, "__name__", "?")
        mod = getattr(target, "__module__", None) or ""
        if mod == "builtins" and name in ("max", "min", "sum", "round", "abs", "pow", "len"):
            return "py_" + name
        if str(type(target)).find("OpOverload") >= 0:  # torch.ops.aten.relu.default
            name = str(target).split(".")[1] if "." in str(target) else name
    if name.startswith("__") and name.endswith("__"):
        core = name[2:-2]
        if core.startswith("i") and core[1:] in ("add", "sub", "mul", "truediv", "div",
                                                 "pow", "and", "or"):
            return {"truediv": "div"}.get(core[1:], core[1:]) + "_"
        return {"truediv": "div", "floordiv": "floor_divide", "mod": "remainder",
                "and": "logical_and", "or": "logical_or", "invert": "logical_not",
                "pos": "positive", "rtruediv": "rdiv"}.get(core, core)
    return name


def _hashable(x):
    try:
        hash(x)
        return True
    except TypeError:
        return False


def is_inplace(key, kwargs):
    return (key.endswith("_") and not key.endswith("__")) or kwargs.get("inplace") is True


# --- fx ----------------------------------------------------------------------

class _Tracer(torch.fx.Tracer):
    """Traces through every module: the graph holds functional calls only."""

    def is_leaf_module(self, m, qualname):
        return False


class _Prop(ShapeProp):
    """ShapeProp that also keeps each node's result as a meta (non-tensor
    results as they are: sizes, dims)."""

    def __init__(self, gm):
        super().__init__(gm)
        self.metas = {}

    def run_node(self, n):
        result = super().run_node(n)
        keep = n.op == "get_attr" or (n.op in ("call_function", "call_method") and
                                      fn_key(n.target) in FACTORIES)
        self.metas[n.name] = meta_of(result, keep_value=keep)
        return result


def _map(a, f):
    if isinstance(a, torch.fx.Node):
        return f(a)
    if isinstance(a, tuple):
        return tuple(_map(x, f) for x in a)
    if isinstance(a, list):
        return [_map(x, f) for x in a]
    if isinstance(a, dict):
        return {k: _map(v, f) for k, v in a.items()}
    if isinstance(a, slice):
        return slice(_map(a.start, f), _map(a.stop, f), _map(a.step, f))
    return a


def _fetch(root, target):
    obj = root
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def trace_fx(root, values, names, by_id):
    """root: an nn.Module or a function; values: one value per placeholder
    (the ABI argument, or a default); names: the ABI name of each
    placeholder (None for a default); by_id: id(parameter) -> ABI name."""
    tracer = _Tracer()
    concrete = _defaults(root, names)
    values, names = list(values), list(names)
    for k, v in list(concrete.items())[len(concrete) - max(0, _n_params(root) - len(values)):]:
        values.append(v)
        names.append(None)
    try:
        graph = tracer.trace(root, concrete_args=concrete or None)
        gm = torch.fx.GraphModule(tracer.root, graph)
    except Exception as e:  # any failure of symbolic tracing means: record instead
        raise TraceFailed("torch.fx could not trace it: %s: %s"
                          % (type(e).__name__, str(e).splitlines()[0][:300] if str(e) else ""))
    prop = _Prop(gm)
    try:
        with torch.no_grad():  # run, not propagate: torch 2's propagate clones scalars too
            outs = prop.run(*[v.clone() if torch.is_tensor(v) else v for v in values])
    except Exception as e:  # the traced graph does not run: it is not the reference
        raise TraceFailed("the fx graph did not run: %s: %s" % (type(e).__name__, str(e)[:300]))
    rg = RawGraph("fx")
    env = {}
    ph = 0
    for n in gm.graph.nodes:
        if n.op == "placeholder":
            name = names[ph] if ph < len(names) else None
            env[n.name] = Ref(name) if name is not None else values[ph]
            ph += 1
        elif n.op == "get_attr":
            obj = _fetch(gm, n.target)
            if id(obj) in by_id:
                env[n.name] = Ref(by_id[id(obj)])
            elif torch.is_tensor(obj):
                m = prop.metas[n.name]
                env[n.name] = m.value if m.value is not None else Opaque(m)
            else:
                env[n.name] = obj
        elif n.op in ("call_function", "call_method", "call_module"):
            key = fn_key(n.target) if n.op != "call_module" else \
                "module:" + type(_fetch(gm, n.target)).__name__
            if n.target is torch._assert:
                env[n.name] = None
                continue
            args = _map(n.args, lambda x: env[x.name])
            kwargs = _map(dict(n.kwargs), lambda x: env[x.name])
            raw = Raw(len(rg.calls), key, args, kwargs, prop.metas.get(n.name))
            rg.calls.append(raw)
            env[n.name] = Ref(raw.index)
        elif n.op == "output":
            rg.outputs = _map(n.args[0], lambda x: env[x.name])
    return rg, outs


def _n_params(root):
    fn = root.forward if isinstance(root, torch.nn.Module) else root
    try:
        return len(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return 0


def _defaults(root, names):
    """concrete_args for the parameters the harness does not pass."""
    fn = root.forward if isinstance(root, torch.nn.Module) else root
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return {}
    out = {}
    for i, p in enumerate(params):
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise TraceFailed("torch.fx could not trace it: forward takes *args or **kwargs")
        if i >= len(names) or names[i] is None:
            if p.default is p.empty:
                raise TraceFailed("parameter '%s' of forward has no value" % p.name)
            out[p.name] = p.default
    return out


# --- recording ---------------------------------------------------------------

class WrappedFloat(float):
    """A scalar ABI input, marked so that its uses can be told from literals."""


class WrappedInt(int):
    pass


def wrap_scalar(v):
    if isinstance(v, bool):
        return v
    if isinstance(v, float):
        return WrappedFloat(v)
    if isinstance(v, int):
        return WrappedInt(v)
    return v


_TO_PYTHON = {"bool", "item", "tolist", "int", "float", "index", "is_nonzero", "equal",
              "allclose"}  # fn_key names of calls that turn tensor values into Python values


def _mode_base():
    base = getattr(torch.overrides, "TorchFunctionMode", None)
    if base is None:
        raise TraceFailed("this torch has no TorchFunctionMode")
    return base


def record(call, by_id):
    """Run call() under a TorchFunctionMode; by_id: id(tensor or wrapped
    scalar) -> ABI name. Returns the raw graph and call()'s result."""
    base = _mode_base()
    events = []

    class Recorder(base):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            events.append((func, args, kwargs, out))
            return out

    with torch.no_grad():
        with Recorder():
            result = call()
    rg = RawGraph("record")
    ids = dict(by_id)  # id -> Ref; objects stay alive in events, so ids are stable
    for k in list(ids):
        ids[k] = Ref(ids[k])
    derived = set(ids)

    def arg(a):
        if torch.is_tensor(a) or isinstance(a, (WrappedFloat, WrappedInt)):
            r = ids.get(id(a))
            if r is not None:
                return r
            if torch.is_tensor(a):
                m = TensorMeta(a, keep_value=True)
                return m.value if m.value is not None else Opaque(m)
            return float(a) if isinstance(a, float) else int(a)
        if isinstance(a, (tuple, list)):
            return [arg(x) for x in a] if isinstance(a, list) else tuple(arg(x) for x in a)
        if isinstance(a, dict):
            return {k: arg(v) for k, v in a.items()}
        if isinstance(a, slice):
            return slice(arg(a.start), arg(a.stop), arg(a.step))
        return a

    for func, args, kwargs, out in events:
        key = fn_key(func)
        m = meta_of(out, keep_value=key in FACTORIES)
        if not has_tensor(m):
            if key in _TO_PYTHON and any(id(a) in derived for a in args if torch.is_tensor(a)):
                note = ("control flow or values read from tensors ('%s'): the recorded "
                        "ops are the path taken on the own config's inputs" % key)
                if note not in rg.notes:
                    rg.notes.append(note)
            continue
        raw = Raw(len(rg.calls), key, arg(tuple(args)), arg(dict(kwargs)), m)
        rg.calls.append(raw)
        if torch.is_tensor(out):
            ids[id(out)] = Ref(raw.index)
            derived.add(id(out))
        elif isinstance(out, (tuple, list)):
            for i, o in enumerate(out):
                if torch.is_tensor(o):
                    ids[id(o)] = Ref(raw.index, i)
                    derived.add(id(o))
    rg.outputs = arg(result if not torch.is_tensor(result) else result)
    rg._keep = events  # ids stay valid while the graph lives
    return rg, result


def same_outputs(a, b):
    """The traced graph's outputs against the reference's."""
    try:
        a, b = kbh_task.as_outputs(a), kbh_task.as_outputs(b)
    except kbh_task.TaskError:
        return False
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x.shape != y.shape or x.dtype != y.dtype:
            return False
        if x.is_floating_point():
            if not torch.allclose(x, y, rtol=1e-4, atol=1e-5, equal_nan=True):
                return False
        elif not torch.equal(x, y):
            return False
    return True
