"""Passes over the analysis graph before it is classified: views folded
into the operands that use them, dead and duplicate nodes removed,
hand-written composites (softmax, log-softmax, logsumexp, layer norm, RMS
norm, MSE, norms, nll of log-softmax) rewritten into their fused node,
and the final names n0, n1, ...

A view never reorders elements, so an operand read through view/expand
is the view's source read with the view's shape (`Node.arg_shapes`);
broadcast patterns are computed from that shape.
"""
import math

from kernelbot_harness.analysis.ops import R

VIEWS = ("view", "expand")


def numel(shape):
    return math.prod(shape) if shape else 1


def node(g, x):
    return g.nodes.get(x.name) if isinstance(x, R) else None


def users(g):
    u = {}
    for n in g.nodes.values():
        for a in n.args:
            if isinstance(a, R):
                u.setdefault(a.name, []).append(n.name)
    for o in g.outputs:
        if isinstance(o, R):
            u.setdefault(o.name, []).append("<output>")
    return u


def _strip(g, x):
    """(base, shape as used) of an operand read through views."""
    n = node(g, x)
    if n is None or n.op not in VIEWS or not isinstance(n.args[0], R):
        return x, g.shape(x)
    base, used = _strip(g, n.args[0])
    if n.op == "expand":
        return base, used  # broadcasting: the same as using the source
    if numel(n.attrs["shape"]) != numel(used):
        return x, g.shape(x)
    return base, list(n.attrs["shape"])


def fold_views(g):
    for n in g.nodes.values():
        n.arg_shapes = []
        new = []
        for a in n.args:
            if isinstance(a, R):
                a, used = _strip(g, a)
                n.arg_shapes.append(used)
            else:
                n.arg_shapes.append(None)
            new.append(a)
        n.args = new
    g.out_shapes = []
    outs = []
    for o in g.outputs:
        if isinstance(o, R):
            g.out_shapes.append(g.shape(o))
            o = _strip(g, o)[0]
        else:
            g.out_shapes.append(None)
        outs.append(o)
    g.outputs = outs


def fold_transposes(g):
    """A product reading a transposed input (x @ w.t(), F.linear(x, w.T))
    reads the input itself, with a_transposed/b_transposed set."""
    for n in g.nodes.values():
        if n.op not in ("linear", "matmul", "bmm", "addmm"):
            continue
        for i, flag in ((0, "a_transposed"), (1, "b_transposed")):
            p = node(g, n.args[i])
            if p is None or p.op != "permute" or not isinstance(p.args[0], R) or \
                    p.args[0].name not in g.inp:
                continue
            k = len(p.shape)
            if k >= 2 and p.attrs["dims"] == list(range(k - 2)) + [k - 1, k - 2]:
                n.args[i] = p.args[0]
                n.arg_shapes[i] = g.shape(p.args[0])
                n.attrs[flag] = not n.attrs.get(flag, False)


def dce(g):
    live = {o.name for o in g.outputs if isinstance(o, R)}
    for name in reversed(list(g.nodes)):
        if name in live:
            live.update(a.name for a in g.nodes[name].args if isinstance(a, R))
    for name in [n for n in g.nodes if n not in live]:
        del g.nodes[name]


def replace_uses(g, old, new):
    for n in g.nodes.values():
        n.args = [new if isinstance(a, R) and a.name == old else a for a in n.args]
    g.outputs = [new if isinstance(o, R) and o.name == old else o for o in g.outputs]


def _key(n):
    args = tuple(("R", a.name) if isinstance(a, R) else ("c", repr(a)) for a in n.args)
    shapes = tuple(tuple(s) if s is not None else None for s in n.arg_shapes)
    return (n.op, args, shapes, repr(sorted(n.attrs.items())))


def cse(g):
    seen = {}
    for name in list(g.nodes):
        n = g.nodes[name]
        if n.reason is not None:
            continue
        k = _key(n)
        if k in seen:
            replace_uses(g, name, R(seen[k]))
            del g.nodes[name]
        else:
            seen[k] = name


def rename(g):
    taken = set(g.inp)
    prefix = "n"
    while any(("%s%d" % (prefix, i)) in taken for i in range(len(g.nodes))):
        prefix += "_"
    mapping = {old: "%s%d" % (prefix, i) for i, old in enumerate(g.nodes)}

    def fix(a):
        return R(mapping[a.name]) if isinstance(a, R) and a.name in mapping else a
    nodes = {}
    for old, n in g.nodes.items():
        n.name = mapping[old]
        n.args = [fix(a) for a in n.args]
        nodes[n.name] = n
    g.nodes = nodes
    g.outputs = [fix(o) for o in g.outputs]


# --- composites ----------------------------------------------------------------

def _op(g, x, *ops):
    n = node(g, x)
    return n if n is not None and n.op in ops else None


def _square_of(g, x):
    n = _op(g, x, "pow", "mul")
    if n is None or not isinstance(n.args[0], R):
        return None, None
    if n.op == "pow" and not isinstance(n.args[1], R) and n.args[1] == 2:
        return n.args[0], n
    if n.op == "mul" and n.args[1] == n.args[0] and n.arg_shapes[0] == n.arg_shapes[1]:
        return n.args[0], n
    return None, None


def _kept_use(g, user, i, red):
    """The user reads reduction red (its i-th operand) with the reduced
    dims kept as 1, so it broadcasts along the rows of red's input."""
    if red.attrs.get("dim") is None:
        return numel(user.arg_shapes[i]) == 1
    src = g.shape(red.args[0])
    kept = [1 if d in red.attrs["dim"] else s for d, s in enumerate(src)]
    used = list(user.arg_shapes[i])
    while len(used) < len(kept):
        used.insert(0, 1)
    return used == kept


def _red(g, user, i, *ops):
    r = _op(g, user.args[i], *ops)
    if r is None or not _kept_use(g, user, i, r):
        return None
    return r


def _pairs(n):
    """Both operand orders of a commutative node (add, mul)."""
    yield 0, 1
    if n.op in ("add", "mul"):
        yield 1, 0


def _eps(g, x):
    """(value, input name or None) of an eps operand."""
    if isinstance(x, R):
        if g.is_scalar_input(x):
            return g.inp[x.name]["value"], x.name
        return None
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return float(x), None
    return None


def _softmax_parts(g, e_user, ei, z_user, zi):
    """E = exp(X - amax(X)) read by e_user, Z = sum(E) read (kept) by
    z_user: (X, dims, [matched nodes]) or None."""
    en = _op(g, e_user.args[ei], "exp")
    zn = _red(g, z_user, zi, "sum")
    if en is None or zn is None or zn.args[0] != e_user.args[ei]:
        return None
    sn = _op(g, en.args[0], "sub")
    if sn is None:
        return None
    mn = _red(g, sn, 1, "amax")
    if mn is None or mn.args[0] != sn.args[0] or mn.attrs["dim"] != zn.attrs["dim"]:
        return None
    return sn.args[0], zn.attrs["dim"], [en, zn, sn, mn]


def _rw_softmax(g, n):
    if n.op != "div":
        return None
    p = _softmax_parts(g, n, 0, n, 1)
    return p and ("softmax", [p[0]], {"dim": p[1]}, p[2])


def _rw_logsumexp(g, n):
    if n.op != "add":
        return None
    for i, j in _pairs(n):
        ln, mn = _op(g, n.args[i], "log"), _red(g, n, j, "amax")
        if ln is None or mn is None:
            continue
        zn = _red(g, ln, 0, "sum")
        en = zn and _op(g, zn.args[0], "exp")
        sn = en and _op(g, en.args[0], "sub")
        if sn and sn.args[1] == n.args[j] and sn.args[0] == mn.args[0] and \
                mn.attrs["dim"] == zn.attrs["dim"]:
            return ("logsumexp", [mn.args[0]], {"dim": mn.attrs["dim"], "keepdim": True},
                    [ln, zn, en, sn, mn])
    return None


def _rw_log_softmax(g, n):
    if n.op != "sub":
        return None
    lse = _red(g, n, 1, "logsumexp")
    if lse is not None and lse.args[0] == n.args[0]:
        return "log_softmax", [n.args[0]], {"dim": lse.attrs["dim"]}, [lse]
    ln = _op(g, n.args[1], "log")
    if ln is None:
        return None
    zn = _red(g, ln, 0, "sum")
    en = zn and _op(g, zn.args[0], "exp")
    if en is None or en.args[0] != n.args[0]:
        return None
    sn = _op(g, n.args[0], "sub")
    mn = sn and _red(g, sn, 1, "amax")
    if mn is None or mn.args[0] != sn.args[0] or mn.attrs["dim"] != zn.attrs["dim"]:
        return None
    return "log_softmax", [sn.args[0]], {"dim": zn.attrs["dim"]}, [ln, zn, en, sn, mn]


def _norm_tail(g, n):
    """n = x / sqrt(A) or x * rsqrt(A): (x index, A node-ref, [matched])."""
    if n.op == "div":
        q = _op(g, n.args[1], "sqrt")
        if q is not None:
            return 0, q.args[0], [q]
    if n.op == "mul":
        for i, j in _pairs(n):
            q = _op(g, n.args[j], "rsqrt")
            if q is not None:
                return i, q.args[0], [q]
    return None


def _var_eps(g, a):
    """A = V + eps (or V alone): (V node, eps, eps input, [matched])."""
    an = _op(g, a, "add")
    if an is not None:
        for i, j in _pairs(an):
            e = _eps(g, an.args[j])
            v = node(g, an.args[i])
            if e is not None and v is not None:
                return v, e[0], e[1], [an], an, i
    v = node(g, a)
    return (v, 0.0, None, [], None, None) if v is not None else None


def _rw_norms(g, n):
    """Layer norm and RMS norm written out."""
    t = _norm_tail(g, n)
    if t is None:
        return None
    xi, a, matched = t
    ve = _var_eps(g, a)
    if ve is None:
        return None
    v, eps, eps_ref, m2, an, vi = ve
    holder, hi = (an, vi) if an is not None else (matched[0], 0)
    x = n.args[xi]
    out = None
    if v.op == "mean" and _kept_use(g, holder, hi, v):
        sq, sqn = _square_of(g, v.args[0])
        if sq is not None and sq == x:  # rms: x * rsqrt(mean(x^2) + eps)
            out = ("rms_norm", [x, None], {"dim": v.attrs["dim"], "eps": eps},
                   matched + m2 + [v, sqn])
        cn = _op(g, x, "sub")
        mu = cn and _red(g, cn, 1, "mean")
        if sq is not None and sq == x and mu is not None and mu.args[0] == cn.args[0] and \
                mu.attrs["dim"] == v.attrs["dim"]:
            out = ("layer_norm", [cn.args[0], None, None], {"dim": v.attrs["dim"], "eps": eps},
                   matched + m2 + [v, sqn, cn, mu])
    elif v.op == "var" and v.attrs.get("correction") == 0 and _kept_use(g, holder, hi, v):
        cn = _op(g, x, "sub")
        mu = cn and _red(g, cn, 1, "mean")
        if mu is not None and mu.args[0] == cn.args[0] == v.args[0] and \
                mu.attrs["dim"] == v.attrs["dim"]:
            out = ("layer_norm", [cn.args[0], None, None], {"dim": v.attrs["dim"], "eps": eps},
                   matched + m2 + [v, cn, mu])
    if out is not None and out[2]["dim"] is None:
        return None
    if out is not None and eps_ref:
        out[2]["attr_refs"] = {"eps": eps_ref}
    return out


def _rw_mse(g, n):
    if n.op not in ("mean", "sum"):
        return None
    d, p = _square_of(g, n.args[0])
    dn = _op(g, d, "sub")
    if dn is None or dn.arg_shapes[0] != dn.arg_shapes[1]:
        return None
    return ("mse_loss", [dn.args[0], dn.args[1]],
            {"reduction": n.op, "dim": n.attrs["dim"], "keepdim": n.attrs["keepdim"]}, [p, dn])


def _rw_vector_norm(g, n):
    if n.op == "sqrt":
        s = _op(g, n.args[0], "sum")
        x, p = _square_of(g, s.args[0]) if s is not None else (None, None)
        if x is not None:
            return ("norm", [x], {"p": 2, "dim": s.attrs["dim"], "keepdim": s.attrs["keepdim"]},
                    [s, p])
    if n.op == "sum":
        a = _op(g, n.args[0], "abs")
        if a is not None:
            return "norm", [a.args[0]], {"p": 1, "dim": n.attrs["dim"],
                                         "keepdim": n.attrs["keepdim"]}, [a]
    return None


def _rw_nll(g, n):
    if n.op != "nll_loss":
        return None
    ls = _op(g, n.args[0], "log_softmax")
    if ls is None or ls.attrs["dim"] != n.attrs["dim"]:
        return None
    attrs = dict(n.attrs, label_smoothing=0.0)
    return "cross_entropy", [ls.args[0]] + n.args[1:], attrs, [ls]


REWRITES = (_rw_logsumexp, _rw_softmax, _rw_log_softmax, _rw_norms, _rw_vector_norm,
            _rw_mse, _rw_nll)


def _apply(g, n, found):
    opname, args, attrs, matched = found
    u = users(g)
    names = {m.name for m in matched}
    inside = names | {n.name}
    for m in names:  # an intermediate read elsewhere is still needed: no rewrite
        if any(x not in inside for x in u.get(m, [])):
            return False
    refs = attrs.pop("attr_refs", None)
    n.op, n.args, n.attrs = opname, list(args), attrs
    n.arg_shapes = [g.shape(a) if isinstance(a, R) else None for a in n.args]
    if refs:
        n.attr_refs = refs
    for m in names:
        del g.nodes[m]
    return True


def _absorb_affine(g, n):
    """norm(x) * w (+ b) with w, b inputs along the row: into the node."""
    slots = [1, 2] if n.op == "layer_norm" else [1] if n.op == "rms_norm" else []
    x_shape = g.shape(n.args[0])
    row = [s for d, s in enumerate(x_shape) if d in (n.attrs.get("dim") or [])]
    changed = False
    for slot, combine in zip(slots, ("mul", "add")):
        if n.args[slot] is not None:
            return changed
        u = users(g).get(n.name, [])
        if len(u) != 1 or u[0] == "<output>":
            return changed
        un = g.nodes[u[0]]
        if un.op != combine:
            return changed
        k = 1 if un.args[0] == R(n.name) else 0
        w = un.args[k]
        if not isinstance(w, R) or w.name not in g.inp or un.args[1 - k] != R(n.name):
            return changed
        used = [s for s in un.arg_shapes[k]]
        while used and used[0] == 1 and len(used) > len(row):
            used.pop(0)
        if used != row:
            return changed
        n.args[slot] = w
        n.arg_shapes[slot] = un.arg_shapes[k]
        replace_uses(g, un.name, R(n.name))
        del g.nodes[un.name]
        changed = True
    return changed


def rewrite_composites(g):
    changed = True
    while changed:
        changed = False
        for rw in REWRITES:
            for name in list(g.nodes):
                n = g.nodes.get(name)
                if n is None or n.reason is not None:
                    continue
                found = rw(g, n)
                if found and _apply(g, n, found):
                    changed = True
        for n in list(g.nodes.values()):
            if n.op in ("layer_norm", "rms_norm") and _absorb_affine(g, n):
                changed = True
