"""The analysis graph and the normaliser: raw torch calls (torch.relu,
F.relu, x.relu(), operator.add, torch.ops.aten.relu.default ...) turned
into nodes of one op vocabulary (bot/templates/README.md), with their
options as attrs and their shape and dtype at the traced config.

A builder per torch name binds the call's arguments, emits zero or more
nodes and returns what the call's result is: a reference to a node or an
input (an alias such as .contiguous()), a Python constant (ones_like) or
a tuple (max with a dim: values, indices). A call it cannot express
becomes an unsupported node carrying the reason.
"""
import ast

import torch

from kernelbot_harness.analysis.trace import Opaque, TensorMeta


class R:
    """A reference to an ABI input or a node, by name."""
    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name

    def __eq__(self, o):
        return isinstance(o, R) and o.name == self.name

    def __hash__(self):
        return hash(("R", self.name))

    def __repr__(self):
        return "R(%s)" % self.name


class Node:
    def __init__(self, name, op, args, attrs, shape, dtype):
        self.name, self.op, self.args, self.attrs = name, op, args, attrs
        self.shape, self.dtype = shape, dtype
        self.attr_refs = {}
        self.reason = None  # set on an unsupported node


class Graph:
    def __init__(self, inputs):
        self.inputs = inputs                       # ABI inputs, dicts, ABI order
        self.inp = {i["name"]: i for i in inputs}
        self.nodes = {}                            # name -> Node, topological
        self.outputs = []
        self._n = 0

    def new_name(self):
        self._n += 1
        return "t%d" % self._n

    def shape(self, x):
        if isinstance(x, R):
            n = self.nodes.get(x.name)
            return list(n.shape) if n is not None else list(self.inp[x.name]["shape"])
        return []

    def dtype(self, x):
        if isinstance(x, R):
            n = self.nodes.get(x.name)
            return n.dtype if n is not None else self.inp[x.name]["dtype"]
        return "float64" if isinstance(x, float) else "int64"

    def is_scalar_input(self, x):
        return isinstance(x, R) and x.name in self.inp and self.inp[x.name]["kind"] == "scalar"


class Unsupported(Exception):
    pass


_REQ = object()
_IGNORED_KW = ("_stacklevel", "inplace", "memory_format", "non_blocking", "copy",
               "layout", "device", "pin_memory", "requires_grad", "generator")


def _parse(spec):
    """[(name, default or _REQ)] from a parameter list written as in Python."""
    fn = ast.parse("def f(%s): pass" % spec).body[0].args
    defaults = [_REQ] * (len(fn.args) - len(fn.defaults)) + \
        [ast.literal_eval(d) for d in fn.defaults]
    return [(a.arg, d) for a, d in zip(fn.args, defaults)]


_SPECS = {}


def bind(key, args, kwargs, spec):
    """Arguments by parameter name, defaults filled in."""
    params = _SPECS.get(spec)
    if params is None:
        params = _SPECS[spec] = _parse(spec)
    names = [p for p, _ in params]
    if len(args) > len(params):
        raise Unsupported("'%s' called with %d positional arguments" % (key, len(args)))
    out = dict(zip(names, args))
    for k, v in kwargs.items():
        if k in names:
            out[k] = v
        elif k == "out" and v is not None:
            raise Unsupported("'%s' with out=" % key)
        elif k not in _IGNORED_KW and k != "out" and k != "dtype":
            raise Unsupported("'%s' with argument '%s'" % (key, k))
    for k, d in params:
        if k not in out:
            if d is _REQ:
                raise Unsupported("'%s' without its argument '%s'" % (key, k))
            out[k] = d
    return out


class Builder:
    """What a builder sees of one raw call."""

    def __init__(self, g, key, meta):
        self.g, self.key, self.meta = g, key, meta
        self.attr_refs = {}

    def _meta(self, shape, dtype):
        m = self.meta
        if shape is None and isinstance(m, TensorMeta):
            shape, dtype = m.shape, dtype or m.dtype
        if shape is None:  # a scalar computed from a scalar input (fx)
            shape = []
            dtype = dtype or ("float64" if isinstance(m, float) else
                              "bool" if isinstance(m, bool) else "int64")
        return list(shape), dtype

    def emit(self, op, args, attrs=None, shape=None, dtype=None):
        shape, dtype = self._meta(shape, dtype)
        for a in args:
            if isinstance(a, Opaque):
                raise Unsupported("'%s' reads a tensor created inside forward" % self.key)
            if isinstance(a, (tuple, list)):
                raise Unsupported("'%s' with a list argument" % self.key)
        n = Node(self.g.new_name(), op, list(args), dict(attrs or {}), shape, dtype)
        n.attr_refs, self.attr_refs = self.attr_refs, {}
        self.g.nodes[n.name] = n
        return R(n.name)

    def val(self, x, attr=None):
        """A constant for an attr: scalar inputs give their value (noted in
        attr_refs), tensors are refused."""
        if isinstance(x, R):
            if self.g.is_scalar_input(x):
                if attr:
                    self.attr_refs[attr] = x.name
                return self.g.inp[x.name]["value"]
            raise Unsupported("'%s' takes '%s' from a tensor" % (self.key, attr or "an option"))
        if isinstance(x, Opaque):
            raise Unsupported("'%s' reads a tensor created inside forward" % self.key)
        if isinstance(x, (tuple, list)):
            return [self.val(v, attr) for v in x]
        if isinstance(x, torch.dtype):
            return str(x).replace("torch.", "")
        return x

    def tensor(self, x, what="input"):
        if not isinstance(x, R):
            raise Unsupported("'%s' on a constant %s" % (self.key, what))
        return x

    def ndim(self, x):
        return len(self.g.shape(x))


BUILDERS = {}


def op(*keys):
    def deco(f):
        for k in keys:
            BUILDERS[k] = f
        return f
    return deco


# --- pointwise ---------------------------------------------------------------

UNARY = {"relu": "relu", "sigmoid": "sigmoid", "special_expit": "sigmoid", "expit": "sigmoid",
         "tanh": "tanh", "exp": "exp", "log": "log", "abs": "abs", "absolute": "abs",
         "neg": "neg", "negative": "neg", "sqrt": "sqrt", "rsqrt": "rsqrt",
         "reciprocal": "reciprocal", "sin": "sin", "cos": "cos", "erf": "erf",
         "special_erf": "erf", "log1p": "log1p", "expm1": "expm1", "exp2": "exp2",
         "log2": "log2", "log10": "log10", "sign": "sign", "floor": "floor", "ceil": "ceil",
         "trunc": "trunc", "fix": "trunc", "silu": "silu", "selu": "selu", "mish": "mish",
         "hardswish": "hardswish", "hardsigmoid": "hardsigmoid", "log_sigmoid": "log_sigmoid",
         "logsigmoid": "log_sigmoid", "softsign": "softsign", "logical_not": "logical_not",
         "sigmoid_": "sigmoid"}
for _k, _v in list(UNARY.items()):
    UNARY[_k + "_"] = _v  # in-place forms


def _unary(b, args, kw):
    a = bind(b.key, args, kw, "input, inplace=False")
    return b.emit(UNARY[b.key], [b.tensor(a["input"])])


for _k in UNARY:
    BUILDERS[_k] = _unary


@op("positive", "contiguous", "clone", "detach", "cpu", "cuda", "attr:data", "requires_grad_",
    "detach_", "alias", "identity")
def _alias(b, args, kw):
    return args[0] if args else kw.get("input")


@op("to", "type", "float", "double", "half", "bfloat16", "int", "long", "bool", "type_as")
def _cast(b, args, kw):
    x = args[0]
    if isinstance(x, R) and isinstance(b.meta, TensorMeta) and b.meta.dtype == b.g.dtype(x):
        return x
    return b.emit("cast", [b.tensor(x)], {"dtype": b.meta.dtype})


@op("round")
def _round(b, args, kw):
    a = bind(b.key, args, kw, "input, decimals=0")
    if a["decimals"]:
        raise Unsupported("'round' with decimals")
    return b.emit("round", [b.tensor(a["input"])])


@op("square", "square_")
def _square(b, args, kw):
    return b.emit("pow", [b.tensor(args[0]), 2])


_BINARY = {"add": "add", "sub": "sub", "subtract": "sub", "mul": "mul", "multiply": "mul",
           "div": "div", "divide": "div", "true_divide": "div", "pow": "pow",
           "float_power": "pow", "minimum": "minimum", "maximum": "maximum",
           "fmin": "minimum", "fmax": "maximum", "floor_divide": "floor_divide",
           "remainder": "remainder", "fmod": "fmod", "gt": "gt", "lt": "lt", "ge": "ge",
           "le": "le", "eq": "eq", "ne": "ne", "greater": "gt", "less": "lt",
           "greater_equal": "ge", "less_equal": "le", "not_equal": "ne",
           "logical_and": "logical_and", "logical_or": "logical_or",
           "logical_xor": "logical_xor", "radd": "add", "rsub": "sub", "rmul": "mul",
           "rdiv": "div", "rpow": "pow", "rfloordiv": "floor_divide", "rmod": "remainder"}
_SWAPPED = {"radd", "rsub", "rmul", "rdiv", "rpow", "rfloordiv", "rmod"}


def _binary(b, args, kw):
    key = b.key[:-1] if b.key.endswith("_") else b.key
    names = "input, other, alpha=1" if key in ("add", "sub", "rsub", "subtract") else \
        "input, other, rounding_mode=None" if key in ("div", "divide") else "input, other"
    kw = dict(kw)
    if "exponent" in kw:
        kw["other"] = kw.pop("exponent")
    if "self" in kw:
        kw["input"] = kw.pop("self")
    a = bind(b.key, args, kw, names)
    x, y = a["input"], a["other"]
    if key in _SWAPPED:
        x, y = y, x
    if not isinstance(x, R) and not isinstance(y, R):
        raise Unsupported("'%s' of two constants" % b.key)
    alpha = b.val(a.get("alpha", 1), "alpha")
    if alpha != 1:  # add/sub/rsub: the alpha scales the operand subtracted or added
        y = b.emit("mul", [y, alpha])
    out = b.emit(_BINARY[key], [x, y])
    mode = a.get("rounding_mode")
    if mode is not None:
        out = b.emit({"floor": "floor", "trunc": "trunc"}[mode], [out])
    return out


for _k in _BINARY:
    BUILDERS[_k] = _binary
    BUILDERS[_k + "_"] = _binary


def _attr_op(opname, spec, rename=None):
    def build(b, args, kw):
        a = bind(b.key, args, kw, spec)
        attrs = {}
        for k, v in a.items():
            if k in ("input", "inplace"):
                continue
            attrs[(rename or {}).get(k, k)] = b.val(v, k)
        return b.emit(opname, [b.tensor(a["input"])], attrs)
    return build


for _keys, _op, _spec in (
        (("leaky_relu", "leaky_relu_"), "leaky_relu", "input, negative_slope=0.01, inplace=False"),
        (("gelu",), "gelu", "input, approximate='none'"),
        (("softplus",), "softplus", "input, beta=1.0, threshold=20.0"),
        (("elu", "elu_"), "elu", "input, alpha=1.0, inplace=False"),
        (("celu", "celu_"), "celu", "input, alpha=1.0, inplace=False"),
        (("hardtanh", "hardtanh_"), "hardtanh", "input, min_val=-1.0, max_val=1.0, inplace=False"),
        (("threshold", "threshold_"), "threshold", "input, threshold, value, inplace=False")):
    for _k in _keys:
        BUILDERS[_k] = _attr_op(_op, _spec)


@op("relu6", "relu6_")
def _relu6(b, args, kw):
    a = bind(b.key, args, kw, "input, inplace=False")
    return b.emit("hardtanh", [b.tensor(a["input"])], {"min_val": 0.0, "max_val": 6.0})


@op("clamp", "clip", "clamp_", "clip_", "clamp_min", "clamp_max", "clamp_min_", "clamp_max_")
def _clamp(b, args, kw):
    key = b.key.rstrip("_")
    spec = {"clamp_min": "input, min", "clamp_max": "input, max"}.get(
        key, "input, min=None, max=None")
    a = bind(b.key, args, kw, spec)
    x = b.tensor(a["input"])
    lo, hi = a.get("min"), a.get("max")
    if isinstance(lo, R) and not b.g.is_scalar_input(lo):
        x = b.emit("maximum", [x, lo])
        lo = None
    if isinstance(hi, R) and not b.g.is_scalar_input(hi):
        x = b.emit("minimum", [x, hi])
        hi = None
    if lo is None and hi is None:
        return x
    return b.emit("clamp", [x], {"min": b.val(lo, "min"), "max": b.val(hi, "max")})


@op("where")
def _where(b, args, kw):
    a = bind(b.key, args, kw, "condition, input, other")
    return b.emit("where", [a["condition"], a["input"], a["other"]])


@op("where_method")
def _where_method(b, args, kw):
    a = bind(b.key, args, kw, "input, condition, other")
    return b.emit("where", [a["condition"], a["input"], a["other"]])


# --- constants made inside forward ---------------------------------------------

@op("ones_like", "zeros_like", "full_like", "ones", "zeros", "full", "tensor", "as_tensor",
    "scalar_tensor", "new_ones", "new_zeros", "new_full", "new_tensor", "constant")
def _factory(b, args, kw):
    v = b.meta.value if isinstance(b.meta, TensorMeta) else None
    if v is None:
        raise Unsupported("'%s' makes a tensor whose elements differ" % b.key)
    if any(isinstance(a, R) and b.g.is_scalar_input(a) for a in list(args) + list(kw.values())):
        raise Unsupported("'%s' fills a tensor from a scalar input" % b.key)
    return v


# --- views ---------------------------------------------------------------------

@op("view", "reshape", "view_as", "reshape_as", "flatten", "unflatten", "squeeze", "unsqueeze",
    "squeeze_", "unsqueeze_", "ravel")
def _view(b, args, kw):
    x = b.tensor(args[0] if args else kw.get("input"))
    if b.meta.shape == b.g.shape(x):
        return x
    return b.emit("view", [x], {"shape": b.meta.shape})


@op("expand", "expand_as", "broadcast_to")
def _expand(b, args, kw):
    x = b.tensor(args[0] if args else kw.get("input"))
    if b.meta.shape == b.g.shape(x):
        return x
    return b.emit("expand", [x], {"shape": b.meta.shape})


@op("permute", "transpose", "swapaxes", "swapdims", "t", "attr:T", "attr:mT", "adjoint",
    "transpose_", "t_")
def _permute(b, args, kw):
    x = b.tensor(args[0] if args else kw.get("input"))
    n = b.ndim(x)
    key = b.key.rstrip("_")
    if key == "permute":
        if "dims" in kw:
            dims = list(kw["dims"])
        elif len(args) == 2 and isinstance(args[1], (tuple, list)):
            dims = list(args[1])  # x.permute((1, 0)) or torch.permute(x, (1, 0))
        else:
            dims = list(args[1:])  # x.permute(1, 0)
    elif key in ("t", "attr:T"):
        dims = list(range(n))[::-1]
    elif key in ("attr:mT", "adjoint"):
        dims = list(range(n - 2)) + [n - 1, n - 2]
    else:
        a = bind(b.key, args, kw, "input, dim0, dim1")
        d0, d1 = b.val(a["dim0"]) % n, b.val(a["dim1"]) % n
        dims = list(range(n))
        dims[d0], dims[d1] = dims[d1], dims[d0]
    dims = [b.val(d) % n for d in dims] if n else []
    if dims == sorted(dims) or all(s == 1 for s in b.g.shape(x)):
        return x
    return b.emit("permute", [x], {"dims": dims})


@op("getitem")
def _getitem(b, args, kw):
    x, idx = args
    if isinstance(x, tuple):
        return x[idx]
    x = b.tensor(x)
    parts = idx if isinstance(idx, tuple) else (idx,)
    if all(p is None or p is Ellipsis or (isinstance(p, slice) and p == slice(None))
           for p in parts):
        return _view(b, [x], {})
    raise Unsupported("indexing (x[...]) is not a supported op")


@op("getattr")
def _getattr(b, args, kw):
    x, name = args
    if isinstance(x, tuple) and name in ("values", "indices"):
        return x[0 if name == "values" else 1]
    if name in ("T", "mT"):
        b.key = "attr:" + name
        return _permute(b, [x], {})
    if name == "data":
        return x
    raise Unsupported("attribute '%s' of a tensor" % name)


@op("dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout")
def _dropout(b, args, kw):
    a = bind(b.key, args, kw, "input, p=0.5, training=True, inplace=False")
    if b.val(a["p"], "p") == 0 or not a["training"]:
        return a["input"]
    raise Unsupported("'%s' with p > 0 in training mode is random" % b.key)
