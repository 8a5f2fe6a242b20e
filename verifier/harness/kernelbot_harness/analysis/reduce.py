"""Builders for the analysis's reductions, normalisations, losses and
matrix products (the pointwise ones are in kbh_analyze_ops.py), and the
normaliser that runs every raw call through them.

Reductions keep their dims as a sorted list of non-negative dims, or None
for all of them; product nodes take [a, b, bias] (bias None when absent).
"""
import torch

from kernelbot_harness.analysis.ops import BUILDERS, Builder, Graph, Node, R, Unsupported, bind, op
from kernelbot_harness.analysis.trace import Ref, TensorMeta, has_tensor, is_inplace


def _dims(b, dim, x):
    """dim as sorted non-negative dims; None when every dim is reduced."""
    n = b.ndim(x)
    d = b.val(dim, "dim")
    if d is None or n == 0:
        return None
    ds = sorted({int(v) % n for v in d}) if isinstance(d, (list, tuple)) else [int(d) % n]
    if not ds or len(ds) == n:
        return None
    return ds


def _reduce(opname):
    def build(b, args, kw):
        spec = "input, dim=None, keepdim=False"
        a = bind(b.key, args, kw, spec)
        x = b.tensor(a["input"])
        return b.emit(opname, [x], {"dim": _dims(b, a["dim"], x),
                                    "keepdim": bool(b.val(a["keepdim"], "keepdim"))})
    return build


for _k, _op in (("sum", "sum"), ("mean", "mean"), ("amax", "amax"), ("amin", "amin"),
                ("argmax", "argmax"), ("argmin", "argmin")):
    BUILDERS[_k] = _reduce(_op)


@op("max", "min")
def _maxmin(b, args, kw):
    x = b.tensor(args[0] if args else kw.get("input"))
    rest, kw = list(args[1:]), dict(kw)
    other = kw.pop("other", None)
    if rest and not isinstance(b.meta, tuple):  # max(x, y): not max(x, dim), which gives a pair
        other = rest.pop(0)
    if other is not None:
        return b.emit("maximum" if b.key == "max" else "minimum", [x, other])
    dim = kw.pop("dim", rest.pop(0) if rest else None)
    keepdim = bool(b.val(kw.pop("keepdim", rest.pop(0) if rest else False)))
    red = "amax" if b.key == "max" else "amin"
    if dim is None:
        return b.emit(red, [x], {"dim": None, "keepdim": False})
    attrs = {"dim": _dims(b, dim, x), "keepdim": keepdim}
    mv, mi = b.meta
    v = b.emit(red, [x], attrs, shape=mv.shape, dtype=mv.dtype)
    i = b.emit("arg" + red[1:], [x], attrs, shape=mi.shape, dtype=mi.dtype)
    return (v, i)


@op("var", "std")
def _var(b, args, kw):
    x = b.tensor(args[0] if args else kw.pop("input"))
    rest, kw = list(args[1:]), dict(kw)
    unbiased, correction = kw.pop("unbiased", None), kw.pop("correction", None)
    dim, keepdim = kw.pop("dim", None), kw.pop("keepdim", False)
    if rest and isinstance(rest[0], bool):
        unbiased = rest.pop(0)
    else:
        if rest:
            dim = rest.pop(0)
        if rest:
            unbiased = rest.pop(0)
        if rest:
            keepdim = rest.pop(0)
    kw.pop("dtype", None)
    kw.pop("out", None)
    if kw or rest:
        raise Unsupported("'%s' with arguments %s" % (b.key, sorted(kw) or rest))
    corr = b.val(correction, "correction") if correction is not None else \
        (0 if unbiased is False else 1)
    return b.emit(b.key, [x], {"dim": _dims(b, dim, x), "keepdim": bool(keepdim),
                               "correction": corr})


@op("logsumexp")
def _logsumexp(b, args, kw):
    a = bind(b.key, args, kw, "input, dim, keepdim=False")
    x = b.tensor(a["input"])
    return b.emit("logsumexp", [x], {"dim": _dims(b, a["dim"], x),
                                     "keepdim": bool(b.val(a["keepdim"]))})


@op("softmax", "log_softmax", "_softmax", "_log_softmax")
def _softmax(b, args, kw):
    a = bind(b.key, list(args)[:2], kw, "input, dim=None")  # 3rd: _stacklevel or dtype
    x = b.tensor(a["input"])
    n = b.ndim(x)
    d = b.val(a["dim"], "dim")
    if d is None:  # torch's legacy implicit dim
        d = 0 if n in (0, 1, 3) else 1
    return b.emit(b.key.lstrip("_"), [x], {"dim": [int(d) % n] if n else None})


def _trailing(b, x, shape):
    k = len(shape) if isinstance(shape, (list, tuple)) else 1
    n = b.ndim(x)
    return list(range(n - k, n))


@op("layer_norm")
def _layer_norm(b, args, kw):
    a = bind(b.key, args, kw, "input, normalized_shape, weight=None, bias=None, eps=1e-05, "
             "cudnn_enable=True")
    x = b.tensor(a["input"])
    dims = _trailing(b, x, b.val(a["normalized_shape"]))
    return b.emit("layer_norm", [x, a["weight"], a["bias"]],
                  {"dim": dims, "eps": b.val(a["eps"], "eps")})


@op("rms_norm")
def _rms_norm(b, args, kw):
    a = bind(b.key, args, kw, "input, normalized_shape, weight=None, eps=None")
    x = b.tensor(a["input"])
    eps = b.val(a["eps"], "eps")
    if eps is None:
        eps = torch.finfo(getattr(torch, b.g.dtype(x))).eps
    dims = _trailing(b, x, b.val(a["normalized_shape"]))
    return b.emit("rms_norm", [x, a["weight"]], {"dim": dims, "eps": eps})


def _kept(shape, dims):
    return [1 if i in dims else s for i, s in enumerate(shape)]


@op("normalize")
def _normalize(b, args, kw):
    a = bind(b.key, args, kw, "input, p=2.0, dim=1, eps=1e-12, out=None")
    x = b.tensor(a["input"])
    dims = [int(b.val(a["dim"], "dim")) % b.ndim(x)]
    ks, dt = _kept(b.g.shape(x), dims), b.g.dtype(x)
    nrm = _norm(b, x, b.val(a["p"], "p"), dims, True, ks, dt)
    c = b.emit("clamp", [nrm], {"min": b.val(a["eps"], "eps"), "max": None}, shape=ks, dtype=dt)
    return b.emit("div", [x, c])


def _norm(b, x, p, dims, keepdim, shape=None, dtype=None):
    if p == "fro":
        p = "fro" if dims is None or len(dims) > 1 else 2
    elif p in (None, 2, 2.0):
        p = 2
    elif p in (1, 1.0):
        p = 1
    else:
        raise Unsupported("norm with p=%r is not a supported reduction" % (p,))
    return b.emit("norm", [x], {"p": p, "dim": dims, "keepdim": bool(keepdim)},
                  shape=shape, dtype=dtype)


@op("norm")
def _torch_norm(b, args, kw):
    a = bind(b.key, args, kw, "input, p='fro', dim=None, keepdim=False, out=None, dtype=None")
    x = b.tensor(a["input"])
    return _norm(b, x, b.val(a["p"], "p"), _dims(b, a["dim"], x), b.val(a["keepdim"]))


@op("linalg_vector_norm", "vector_norm")
def _vector_norm(b, args, kw):
    a = bind(b.key, args, kw, "x, ord=2, dim=None, keepdim=False, dtype=None")
    x = b.tensor(a["x"])
    p = b.val(a["ord"], "ord")
    if p == "fro":
        raise Unsupported("vector_norm with ord='fro'")
    return _norm(b, x, p, _dims(b, a["dim"], x), b.val(a["keepdim"]))


@op("linalg_norm")
def _linalg_norm(b, args, kw):
    a = bind(b.key, args, kw, "input, ord=None, dim=None, keepdim=False, out=None, dtype=None")
    x = b.tensor(a["input"])
    p, d = b.val(a["ord"], "ord"), b.val(a["dim"], "dim")
    two = isinstance(d, (list, tuple)) and len(d) == 2 or (d is None and b.ndim(x) == 2)
    if two and p not in (None, "fro"):
        raise Unsupported("matrix norm with ord=%r is not a supported reduction" % (p,))
    if two or (p is None and d is None):
        p = "fro"
    return _norm(b, x, p, _dims(b, a["dim"], x), b.val(a["keepdim"]))


@op("linalg_matrix_norm", "matrix_norm")
def _matrix_norm(b, args, kw):
    a = bind(b.key, args, kw, "input, ord='fro', dim=(-2, -1), keepdim=False, dtype=None")
    x = b.tensor(a["input"])
    if b.val(a["ord"], "ord") != "fro":
        raise Unsupported("matrix norm with ord=%r is not a supported reduction" % (a["ord"],))
    return _norm(b, x, "fro", _dims(b, a["dim"], x), b.val(a["keepdim"]))


# --- losses ----------------------------------------------------------------------

def _legacy(b, a):
    if a.get("size_average") is not None or a.get("reduce") is not None:
        raise Unsupported("'%s' with size_average/reduce" % b.key)
    if a.get("weight") is not None and b.key not in ("cross_entropy", "nll_loss"):
        raise Unsupported("'%s' with weight" % b.key)
    r = b.val(a["reduction"], "reduction")
    if r not in ("mean", "sum", "none"):
        raise Unsupported("'%s' with reduction '%s'" % (b.key, r))
    return r


@op("cross_entropy", "nll_loss")
def _cross_entropy(b, args, kw):
    spec = "input, target, weight=None, size_average=None, ignore_index=-100, reduce=None, " \
           "reduction='mean'" + (", label_smoothing=0.0" if b.key == "cross_entropy" else "")
    a = bind(b.key, args, kw, spec)
    red = _legacy(b, a)
    x, t = b.tensor(a["input"]), b.tensor(a["target"], "target")
    attrs = {"dim": [1 if b.ndim(x) >= 2 else 0], "reduction": red,
             "ignore_index": b.val(a["ignore_index"], "ignore_index"),
             "target": "probs" if b.g.dtype(t).startswith(("float", "bfloat")) else "indices"}
    if b.key == "cross_entropy":
        attrs["label_smoothing"] = b.val(a["label_smoothing"], "label_smoothing")
    return b.emit(b.key, [x, t, a["weight"]], attrs)


def _diff(b, a):
    x, t = a["input"], a["target"]
    if not isinstance(x, R) and not isinstance(t, R):
        raise Unsupported("'%s' of two constants" % b.key)
    shape = list(torch.broadcast_shapes(tuple(b.g.shape(x)), tuple(b.g.shape(t))))
    dt = b.g.dtype(x if isinstance(x, R) else t)
    return b.emit("sub", [x, t], shape=shape, dtype=dt), shape, dt


def _reduced(b, v, red, shape, dt):
    if red == "none":
        return v
    return b.emit(red, [v], {"dim": None, "keepdim": False})


@op("mse_loss")
def _mse(b, args, kw):
    a = bind(b.key, args, kw, "input, target, size_average=None, reduce=None, "
             "reduction='mean', weight=None")
    red = _legacy(b, a)
    if red != "none":
        return b.emit("mse_loss", [a["input"], a["target"]], {"reduction": red, "dim": None})
    d, shape, dt = _diff(b, a)
    return b.emit("pow", [d, 2])


@op("l1_loss")
def _l1(b, args, kw):
    a = bind(b.key, args, kw, "input, target, size_average=None, reduce=None, "
             "reduction='mean', weight=None")
    red = _legacy(b, a)
    d, shape, dt = _diff(b, a)
    v = b.emit("abs", [d], shape=shape, dtype=dt)
    return _reduced(b, v, red, shape, dt)


@op("huber_loss", "smooth_l1_loss")
def _huber(b, args, kw):
    if b.key == "huber_loss":
        a = bind(b.key, args, kw, "input, target, reduction='mean', delta=1.0, weight=None")
        delta = b.val(a["delta"], "delta")
    else:
        a = bind(b.key, args, kw, "input, target, size_average=None, reduce=None, "
                 "reduction='mean', beta=1.0, weight=None")
        delta = b.val(a["beta"], "beta")
    red = _legacy(b, a)
    attrs = {"reduction": red, "delta": delta, "dim": None}
    if b.key == "smooth_l1_loss":
        attrs["smooth_l1"] = True
    if red != "none":
        return b.emit("huber_loss", [a["input"], a["target"]], attrs)
    d, shape, dt = _diff(b, a)  # elementwise: where(|d| < delta, 0.5 d^2, delta (|d| - delta/2))

    def e(o, xs, dtype=dt):
        return b.emit(o, xs, shape=shape, dtype=dtype)
    ad = e("abs", [d])
    quad = e("mul", [e("mul", [d, d]), 0.5])
    lin = e("mul", [e("sub", [ad, 0.5 * delta]), delta])
    out = e("where", [e("lt", [ad, delta], "bool"), quad, lin])
    if b.key == "smooth_l1_loss" and delta != 1.0:
        out = e("div", [out, delta])
    return out


# --- matrix products -------------------------------------------------------------

@op("linear")
def _linear(b, args, kw):
    a = bind(b.key, args, kw, "input, weight, bias=None")
    return b.emit("linear", [b.tensor(a["input"]), b.tensor(a["weight"], "weight"), a["bias"]])


@op("matmul", "mm", "bmm", "mv", "dot", "rmatmul")
def _matmul(b, args, kw):
    kw = {("other" if k in ("mat2", "vec", "tensor") else k): v for k, v in kw.items()}
    a = bind(b.key, args, kw, "input, other")
    x, y = b.tensor(a["input"]), b.tensor(a["other"])
    if b.key == "rmatmul":
        x, y = y, x
    return b.emit("bmm" if b.key == "bmm" else "matmul", [x, y, None])


@op("addmm")
def _addmm(b, args, kw):
    a = bind(b.key, args, kw, "input, mat1, mat2, beta=1, alpha=1")
    return b.emit("addmm", [b.tensor(a["mat1"]), b.tensor(a["mat2"]), a["input"]],
                  {"beta": b.val(a["beta"], "beta"), "alpha": b.val(a["alpha"], "alpha")})


# --- the normaliser ---------------------------------------------------------------

_SCALAR_ARITH = {"add", "sub", "mul", "div", "neg", "pow", "radd", "rsub", "rmul", "rdiv",
                 "rpow", "abs", "py_abs"}


def _resolve(a, env):
    if isinstance(a, Ref):
        v = env[a.key]
        if a.item is not None and isinstance(v, tuple):
            return v[a.item]
        return v  # an unsupported node stands for each element of its result
    if isinstance(a, tuple):
        return tuple(_resolve(x, env) for x in a)
    if isinstance(a, list):
        return [_resolve(x, env) for x in a]
    if isinstance(a, dict):
        return {k: _resolve(v, env) for k, v in a.items()}
    if isinstance(a, slice):
        return slice(_resolve(a.start, env), _resolve(a.stop, env), _resolve(a.step, env))
    return a


def refs_in(a):
    if isinstance(a, R):
        return [a]
    if isinstance(a, (tuple, list)):
        return [r for x in a for r in refs_in(x)]
    if isinstance(a, dict):
        return [r for x in a.values() for r in refs_in(x)]
    return []


def _first_meta(m):
    if isinstance(m, TensorMeta):
        return m
    if isinstance(m, tuple):
        for x in m:
            if isinstance(x, TensorMeta):
                return x
    return None


def _unsupported(g, key, args, kwargs, reason):
    name = key.split(":", 1)[1] if key.startswith("module:") else key
    n = Node(g.new_name(), name, refs_in([args, kwargs]), {}, [], "")
    n.reason = reason
    g.nodes[n.name] = n
    return n, R(n.name)


def normalize(rg, inputs):
    """The raw graph as a Graph of vocabulary nodes (temporary names)."""
    g = Graph(inputs)
    env = {i["name"]: R(i["name"]) for i in inputs}
    scalars = {i["name"] for i in inputs if i["kind"] == "scalar"}
    for c in rg.calls:
        args, kwargs = _resolve(c.args, env), _resolve(c.kwargs, env)
        if not has_tensor(c.value):
            if c.key in _SCALAR_ARITH and any(r.name in scalars for r in refs_in([args, kwargs])):
                b = Builder(g, c.key.replace("py_", ""), c.value)
                try:
                    out = BUILDERS[b.key](b, args, kwargs)
                except Unsupported as e:
                    out = _unsupported(g, c.key, args, kwargs, str(e))[1]
                if isinstance(out, R):
                    scalars.add(out.name)
                env[c.index] = out
            else:
                env[c.index] = c.value  # a size, a dim: its value at this config
            continue
        b = Builder(g, c.key, c.value)
        fn = BUILDERS.get(c.key)
        try:
            if fn is None:
                raise Unsupported("'%s' is not a supported op" % c.key.replace("module:", ""))
            out = fn(b, args, kwargs)
        except Unsupported as e:
            n, out = _unsupported(g, c.key, args, kwargs, str(e))
            fm = _first_meta(c.value)
            if fm is not None:
                n.shape, n.dtype = fm.shape, fm.dtype
        env[c.index] = out
        if is_inplace(c.key, c.kwargs) and c.args and isinstance(c.args[0], Ref):
            env[c.args[0].key] = out  # later reads of the mutated tensor see the result
    outs = _resolve(rg.outputs, env)
    g.outputs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
    return g
