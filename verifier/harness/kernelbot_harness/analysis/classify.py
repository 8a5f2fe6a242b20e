"""Which family an analysed graph is in: pointwise, rowwise, matmul, or
none with the reason (bot/templates/README.md has the record).

Broadcast patterns are formulas on flat indexes (every operand and the
iteration space row-major): full x[i], scalar x[0], row x[i % numel(x)],
col x[i / (numel(space) / numel(x))]. In the rowwise and matmul families
the space is a rows x row_len matrix and a row operand has exactly
row_len elements, a col operand exactly one per row.
"""
import re

from kernelbot_harness.analysis.graph import node, numel, replace_uses, users
from kernelbot_harness.analysis.ops import R

POINTWISE = {"add", "sub", "mul", "div", "neg", "abs", "exp", "log", "sqrt", "rsqrt", "pow",
             "relu", "leaky_relu", "gelu", "silu", "sigmoid", "tanh", "softplus", "elu", "selu",
             "celu", "hardtanh", "hardsigmoid", "hardswish", "clamp", "minimum", "maximum",
             "where", "reciprocal", "sin", "cos", "erf", "log1p", "expm1", "exp2", "log2",
             "log10", "sign", "floor", "ceil", "round", "trunc", "mish", "log_sigmoid",
             "softsign", "threshold", "cast", "gt", "lt", "ge", "le", "eq", "ne",
             "logical_not", "logical_and", "logical_or", "logical_xor", "floor_divide",
             "remainder", "fmod"}
PER_ROW = {"sum", "mean", "amax", "amin", "argmax", "argmin", "var", "std", "logsumexp",
           "norm", "cross_entropy", "mse_loss", "huber_loss"}
PER_ELEMENT = {"softmax", "log_softmax", "layer_norm", "rms_norm"}
PRODUCTS = {"linear", "matmul", "bmm", "addmm"}
KINDS = {"amax": "max", "amin": "min", "mse_loss": "mse", "huber_loss": "huber"}


class NotFamily(Exception):
    pass


def pattern(s, space, rows=None):
    """full | row | col | scalar, or None (see the module's doc)."""
    s, space = list(s), list(space)
    n = numel(s)
    if n == 1:
        return "scalar"
    if n == numel(space):
        return "full"
    while len(s) > len(space) and s[0] == 1:
        s.pop(0)
    if len(s) > len(space):
        return None
    s = [1] * (len(space) - len(s)) + s
    seq = ""
    for a, o in zip(s, space):
        if o == 1:
            if a != 1:
                return None
            continue
        seq += "M" if a == o else "B" if a == 1 else "?"
    p = "row" if re.fullmatch("B+M+", seq) else "col" if re.fullmatch("M+B+", seq) else None
    if p and rows is not None and n != (rows[1] if p == "row" else rows[0]):
        return None
    return p


def _ops(nodes):
    return ", ".join(sorted({n.op for n in nodes}))


class _Ann:
    def __init__(self, g):
        self.g, self.pat, self.bcast, self.domain = g, {}, [], {}

    def add_input(self, name, p):
        if name in self.g.inp and {"ref": name, "pattern": p} not in self.bcast:
            self.bcast.append({"ref": name, "pattern": p})

    def node(self, n, space, rows=None, same=None):
        """Patterns of n's operands against space; same(name): the operand
        node is evaluated in the same space as n."""
        for i, a in enumerate(n.args):
            if not isinstance(a, R):
                continue
            used = n.arg_shapes[i]
            p = pattern(used, space, rows)
            if p is None:
                raise NotFamily("operand '%s' %s of '%s' broadcasts against %s neither as a "
                                "row nor as a column" % (a.name, used, n.op, list(space)))
            base = node(self.g, a)
            if base is not None and list(used) != list(base.shape) and \
                    (same is None or same(a.name)):
                if pattern(base.shape, space, rows) != p:
                    raise NotFamily("a reshape of '%s' changes how it broadcasts" % base.op)
            self.pat[(n.name, i)] = p
            self.add_input(a.name, p)


def _ancestors(g, name):
    seen, stack = set(), [name]
    while stack:
        n = g.nodes.get(stack.pop())
        for a in n.args if n is not None else []:
            if isinstance(a, R) and a.name in g.nodes and a.name not in seen:
                seen.add(a.name)
                stack.append(a.name)
    return seen


def _descendants(g, name):
    out = {name}
    for n in g.nodes.values():
        if any(isinstance(a, R) and a.name in out for a in n.args):
            out.add(n.name)
    out.discard(name)
    return out


def _split(shape, dims):
    """(rows, row_len, row_ndim) when the reduced dims are the trailing
    ones (size-1 dims aside), else None."""
    r = len(shape)
    if dims is None:
        return 1, numel(shape), r
    real = [d for d in dims if shape[d] != 1] or list(dims)
    lo = min(real)
    for d in range(lo, r):
        if d not in dims and shape[d] != 1:
            return None
    n = numel([shape[d] for d in dims])
    return numel(shape) // max(n, 1), n, r - lo


def _outputs(g, allowed):
    outs = [o for o in g.outputs]
    if len(outs) != 1:
        raise NotFamily("%d outputs (this family has one)" % len(outs))
    if outs[0].name not in allowed:
        raise NotFamily("the output is not computed from the reduction or product")


def pointwise(g, ann):
    bases = [g.nodes[o.name] for o in g.outputs]
    space = bases[0].shape
    if any(numel(b.shape) != numel(space) for b in bases):
        raise NotFamily("outputs of different sizes")
    for n in g.nodes.values():
        if n.op not in POINTWISE:
            raise NotFamily("'%s' is not pointwise" % n.op)
        if pattern(n.shape, space) is None:
            raise NotFamily("'%s' of shape %s broadcasts against %s neither as a row nor as a "
                            "column" % (n.op, n.shape, space))
        ann.node(n, space)
    return {"broadcast": ann.bcast}, "every op is pointwise (%s)" % _ops(g.nodes.values())


def rowwise(g, r, ann):
    main = r.args[0]
    if r.op in ("mse_loss", "huber_loss"):
        a, b = r.arg_shapes[0] or [], r.arg_shapes[1] or []
        space = a if numel(a) >= numel(b) else b
    else:
        space = r.arg_shapes[0]
        base = node(g, main)
        shp = base.shape if base is not None else g.shape(main)
        if list(space) != list(shp):
            raise NotFamily("a reshape right before '%s'" % r.op)
    dims = r.attrs.get("dim")
    split = _split(space, dims)
    if split is None:
        raise NotFamily("'%s' over dim %s of %s: not over the last dimension(s)"
                        % (r.op, dims, list(space)))
    rows, row_len, row_ndim = split
    anc, desc = _ancestors(g, r.name), _descendants(g, r.name)
    prologue = [n for n in g.nodes.values() if n.name in anc]
    epilogue = [n for n in g.nodes.values() if n.name not in anc and n.name != r.name]
    for n in epilogue:
        if n.name not in desc:
            raise NotFamily("'%s' does not depend on '%s': two separate computations"
                            % (n.op, r.op))
    for n in prologue + epilogue:
        if n.op not in POINTWISE:
            raise NotFamily("'%s' and '%s': two reductions or a reduction and a '%s'"
                            % (r.op, n.op, n.op))
    rm = (rows, row_len)
    elem = {n.name for n in prologue}
    for n in prologue:
        if pattern(n.shape, space, rm) is None:
            raise NotFamily("'%s' of shape %s does not follow the rows of %s"
                            % (n.op, n.shape, list(space)))
        ann.node(n, space, rm)
    if r.op == "cross_entropy":
        ann.pat[(r.name, 0)] = "full"
        ann.add_input(main.name, "full")
        ann.pat[(r.name, 1)] = "col"
        if isinstance(r.args[2], R):
            ann.pat[(r.name, 2)] = "row"
            ann.add_input(r.args[2].name, "row")
    else:
        ann.node(r, space, rm)
    per_row = r.op in PER_ROW
    ann.domain[r.name] = "row" if per_row else "element"
    if not per_row:
        elem.add(r.name)
    for n in epilogue:
        refs = [a.name for a in n.args if isinstance(a, R)]
        if any(x in elem or (x in g.inp and numel(g.shape(R(x))) == numel(space) and rows > 1)
               for x in refs) or numel(n.shape) != numel(r.shape):
            d = "element"
        else:
            d = "row"
        ann.domain[n.name] = d
        if d == "element":
            elem.add(n.name)
            if pattern(n.shape, space, rm) is None:
                raise NotFamily("'%s' of shape %s does not follow the rows of %s"
                                % (n.op, n.shape, list(space)))
            ann.node(n, space, rm, same=lambda x: x in elem)
        else:
            ann.node(n, r.shape, None, same=lambda x: x not in elem)
    _outputs(g, {r.name} | {n.name for n in epilogue})
    kind = KINDS.get(r.op, r.op)
    if r.op == "norm":
        kind = "norm_" + {1: "l1", 2: "l2", "fro": "fro"}[r.attrs["p"]]
    attrs = {k: v for k, v in r.attrs.items() if k != "dim"}
    if dims is None:
        attrs["rows"] = "all"
    if r.op in ("layer_norm", "rms_norm") and dims is not None:
        attrs["normalized_shape"] = [space[d] for d in dims]

    def ref(i):
        return r.args[i].name if len(r.args) > i and isinstance(r.args[i], R) else None
    rec = {"kind": kind, "node": r.name, "input": ref(0), "dim": -1 if dims is not None else None,
           "reduced_dims": list(dims) if dims is not None else list(range(len(space))),
           "row_ndim": row_ndim, "rows": rows if dims is not None else "all", "row_len": row_len,
           "prologue": [n.name for n in prologue], "epilogue": [n.name for n in epilogue],
           "weight": ref(1) if r.op in ("layer_norm", "rms_norm") else
           ref(2) if r.op == "cross_entropy" else None,
           "bias": ref(2) if r.op == "layer_norm" else None,
           "target": ref(1) if r.op in ("cross_entropy", "mse_loss", "huber_loss") else None,
           "attrs": attrs, "broadcast": ann.bcast}
    if r.attr_refs:
        rec["attr_refs"] = dict(r.attr_refs)
    why = "one %s over %s of %s" % (r.op, "all elements" if dims is None else
                                    "the last dimension" if row_ndim == 1 else
                                    "the last %d dimensions" % row_ndim, list(space))
    if prologue or epilogue:
        why += " with pointwise %s" % _ops(prologue + epilogue)
    return rec, why


def matmul(g, p, ann):
    a, b = p.args[0], p.args[1]
    at, bt = bool(p.attrs.get("a_transposed")), bool(p.attrs.get("b_transposed"))
    for i, x, what in ((0, a, "A"), (1, b, "B")):
        if x.name not in g.inp:
            raise NotFamily("operand %s of '%s' is computed by '%s' (no ops before the product)"
                            % (what, p.op, g.nodes[x.name].op))
        if list(p.arg_shapes[i]) != list(g.shape(x)):
            raise NotFamily("a reshape of '%s' before the product" % x.name)
    if p.op == "linear":
        bt = not bt
    before = _ancestors(g, p.name)
    if before:
        raise NotFamily("'%s' before the product" % _ops(g.nodes[n] for n in before))
    space = p.shape
    n_cols = space[-1] if space else 1
    rm = (numel(space) // max(n_cols, 1), n_cols)
    bias = p.args[2]
    if bias is None and p.op != "addmm":
        u = users(g).get(p.name, [])
        un = g.nodes.get(u[0]) if len(u) == 1 else None
        if un is not None and un.op == "add":
            k = 1 if un.args[0] == R(p.name) else 0
            w = un.args[k]
            if isinstance(w, R) and w.name in g.inp and un.args[1 - k] == R(p.name) and \
                    pattern(un.arg_shapes[k], space, rm) == "row":
                bias = w
                p.args[2], p.arg_shapes[2] = w, un.arg_shapes[k]
                replace_uses(g, un.name, R(p.name))
                del g.nodes[un.name]
    if isinstance(bias, R):
        bp = pattern(p.arg_shapes[2], space, rm)
        if bp is None:
            raise NotFamily("bias '%s' %s does not broadcast along the rows of %s"
                            % (bias.name, p.arg_shapes[2], space))
        ann.pat[(p.name, 2)] = bp
        ann.add_input(bias.name, bp)
    desc = _descendants(g, p.name)
    epilogue = [n for n in g.nodes.values() if n.name != p.name]
    for n in epilogue:
        if n.name not in desc:
            raise NotFamily("'%s' does not depend on the product" % n.op)
        if n.op not in POINTWISE:
            raise NotFamily("'%s' after the product is not pointwise" % n.op)
        if pattern(n.shape, space, rm) is None:
            raise NotFamily("'%s' of shape %s does not follow the rows of %s"
                            % (n.op, n.shape, space))
        ann.node(n, space, rm)
    _outputs(g, {p.name} | {n.name for n in epilogue})
    rec = {"kind": p.op, "node": p.name, "a": a.name, "b": b.name, "a_transposed": at,
           "b_transposed": bt, "bias": bias.name if isinstance(bias, R) else None,
           "epilogue": [n.name for n in epilogue],
           "attrs": {k: v for k, v in p.attrs.items() if not k.endswith("_transposed")},
           "broadcast": ann.bcast}
    why = "one %s" % p.op + (" with pointwise %s after it" % _ops(epilogue) if epilogue else "")
    return rec, why


def classify(g):
    """(family, record or None, why, annotations)."""
    ann = _Ann(g)
    try:
        if any(not isinstance(o, R) for o in g.outputs):
            raise NotFamily("it returns a constant")
        if all(o.name in g.inp for o in g.outputs):
            raise NotFamily("it returns its input unchanged: nothing to compute")
        for n in g.nodes.values():
            if n.reason is not None:
                raise NotFamily(n.reason)
        for n in g.nodes.values():
            if n.op == "nll_loss":
                raise NotFamily("'nll_loss' without log_softmax before it")
            if n.op == "view":
                raise NotFamily("a reshape of a broadcast tensor")
        prods = [n for n in g.nodes.values() if n.op in PRODUCTS]
        reds = [n for n in g.nodes.values() if n.op in PER_ROW | PER_ELEMENT]
        if len(prods) > 1:
            raise NotFamily("%d matrix products" % len(prods))
        if prods and reds:
            raise NotFamily("a matrix product and a reduction ('%s')" % reds[0].op)
        if any(n.op == "permute" for n in g.nodes.values()) and not prods:
            raise NotFamily("a transpose/permute changes the element order")
        if prods:
            rec, why = matmul(g, prods[0], ann)
            return "matmul", rec, why, ann
        if len(reds) > 1:
            raise NotFamily("%d reductions (%s)" % (len(reds), ", ".join(n.op for n in reds)))
        if reds:
            rec, why = rowwise(g, reds[0], ann)
            return "rowwise", rec, why, ann
        rec, why = pointwise(g, ann)
        return "pointwise", rec, why, ann
    except NotFamily as e:
        return "none", None, str(e), _Ann(g)
