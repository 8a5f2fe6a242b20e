"""The no-op switch of a candidate's own CUDA kernels (issue: mixed kernels
must prove that their custom code does work).

Before a torch extension's CUDA source is built, every `__global__`
function definition gets `if (kb_noop_flag_T) return;` as its first
statement, `kb_noop_flag_T` a `__device__ int` declared at the top (read
through a volatile pointer), and
an `extern "C"` setter `kb_noop_set_T(int)` is appended. With the flag at
0 (always, except during the one proof call) a kernel runs as written, at
the cost of one cached global read per thread. With it at 1 every custom
kernel launch still happens and does nothing: a result that is still
correct then was computed by something else (torch, cuBLAS, cuDNN).

The candidate runs in its own process and could ignore or undo the switch;
that only hides its own laziness from the proof, never makes a wrong output
right (PROTOCOL.md "Judge and runner").
"""
import ctypes
import itertools

_tags = itertools.count()


def _skip_literal(src, i, n):
    """Past a string or character literal starting at src[i] (a quote)."""
    q = src[i]
    i += 1
    while i < n and src[i] != q:
        i += 2 if src[i] == "\\" else 1
    return i + 1


def _skip_comment(src, i, n):
    """Past a // or /* comment starting at src[i], else i unchanged."""
    if src.startswith("//", i):
        j = src.find("\n", i)
        return n if j < 0 else j
    if src.startswith("/*", i):
        j = src.find("*/", i + 2)
        return n if j < 0 else j + 2
    return i


def _code(src, i, n):
    """The offsets of src's code characters from i on: comments and string
    or character literals are stepped over."""
    while i < n:
        j = _skip_comment(src, i, n)
        if j != i:
            i = j
        elif src[i] in "\"'":
            i = _skip_literal(src, i, n)
        else:
            yield i
            i += 1


def _ident(c):
    return c.isalnum() or c == "_"


def kernel_bodies(src):
    """Offsets just after the opening brace of every __global__ function
    definition in src (declarations ending in ';' have none)."""
    out, n, word = [], len(src), "__global__"
    code = _code(src, 0, n)
    for i in code:
        if src.startswith(word, i) and (i == 0 or not _ident(src[i - 1])) and \
                not (i + len(word) < n and _ident(src[i + len(word)])):
            for _ in range(len(word) - 1):
                next(code, None)
            _to_body(code, src, out)
    return out


def _to_body(code, src, out):
    """From after `__global__` to the body's '{' (recorded) or a ';'."""
    depth = 0
    for i in code:
        c = src[i]
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif depth == 0 and c == ";":
            return
        elif depth == 0 and c == "{":
            out.append(i + 1)
            return


def instrument(src):
    """(instrumented source, tag, number of kernels); tag None when src
    defines no __global__ function (nothing to switch)."""
    bodies = kernel_bodies(src)
    if not bodies:
        return src, None, 0
    tag = "%d" % next(_tags)
    flag = "kb_noop_flag_%s" % tag
    parts, last = [], 0
    for b in bodies:
        parts.append(src[last:b])
        parts.append(" if (*(volatile const int *)&%s) return; " % flag)
        last = b
    parts.append(src[last:])
    # a device global read through a volatile pointer: nothing in device
    # code writes it, so the compiler would otherwise fold it to its
    # initializer (measured on the H200: the switch never took)
    head = "__device__ int %s = 0;\n#line 1\n" % flag
    tail = ('\nextern "C" __attribute__((visibility("default"))) int kb_noop_set_%s(int v)'
            ' { return (int)cudaMemcpyToSymbol(%s, &v, sizeof(int)); }\n'
            'extern "C" __attribute__((visibility("default"))) int kb_noop_get_%s(void)'
            ' { int v = -1; return cudaMemcpyFromSymbol(&v, %s, sizeof(int)) ? -1 : v; }\n'
            % (tag, flag, tag, flag))
    # #line 1: the compiler's messages keep the source's own line numbers
    return head + "".join(parts) + tail, tag, len(bodies)


class Switch:
    """The setters of every instrumented unit, found in the built modules."""

    def __init__(self):
        self.units = []      # (module file, tag)
        self.kernels = 0
        self.setters = None

    def add(self, tag, kernels):
        if tag is not None:
            self.units.append([None, tag])
            self.kernels += kernels

    def built(self, path, first_unit):
        """The library at path holds the units added since first_unit."""
        for u in self.units[first_unit:]:
            if u[0] is None:
                u[0] = path

    def _resolve(self):
        if self.setters is None:
            self.setters = []
            for path, tag in self.units:
                if not path:
                    continue
                try:
                    lib = ctypes.CDLL(path)
                    fn = getattr(lib, "kb_noop_set_%s" % tag)
                    get = getattr(lib, "kb_noop_get_%s" % tag)
                except (OSError, AttributeError):
                    continue
                fn.restype, fn.argtypes = ctypes.c_int, [ctypes.c_int]
                get.restype, get.argtypes = ctypes.c_int, []
                self.setters.append((fn, get))
        return self.setters

    def available(self):
        return bool(self._resolve())

    def set(self, on):
        """Every unit's flag to on, read back; False when one did not take."""
        ok = True
        want = 1 if on else 0
        for fn, get in self._resolve():
            ok = fn(want) == 0 and get() == want and ok
        return ok
