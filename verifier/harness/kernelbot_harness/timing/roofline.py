"""Roofline figures for the kernelbot harness: FLOPs, bytes, measured peaks.

Part of the harness package (kernelbot_harness.timing); bench/ scripts import it from there.
Works on torch 1.13 (CPU only) and torch 2.x with CUDA; CUDA-only code runs
only for a "cuda" device.

Public API
----------
count(fn, inputs, outputs=None) -> Count
    Count is a 2-tuple (flops: int, bytes: int) with attributes .flops,
    .bytes, .reason ("" when counting worked, else why flops is 0) and
    .method (which counter ran). Unpack it as `flops, nbytes = count(...)`.
    Runs fn(*inputs) once under an op counter; never raises.
    bytes: the minimal traffic: every distinct input tensor read once (an
      nn.Module fn adds its parameters and buffers) plus every output tensor
      written once (`outputs` when given, else what fn returned). Scalars
      count nothing.
    flops, from the aten ops the reference runs:
      - matrix products and convolutions: 2*M*N*K (mm, addmm, bmm, baddbmm,
        matmul's decompositions), 2 * batch * out_spatial * C_out *
        C_in/groups * prod(kernel) for convolutions. On torch >= 2.1 these
        (and attention, and their backward ops) come from
        torch.utils.flop_counter.FlopCounterMode; on older torch from the
        same formulas here.
      - every other op that computes: one flop per element of the largest
        tensor it reads or writes, i.e. one per output element for
        pointwise ops and one per input element for reductions (a sum of N
        elements does about N additions; softmax and norms are counted once
        per element too, an underestimate).
      - views, copies, data movement (cat, index, gather, pad, ...) and
        tensor creation: 0.
peaks(device, cache_path=None) -> {"device", "backend", "key", "copy_gbps",
        "matmul_tflops", "matmul_dtype", "matmul_tflops_by_dtype",
        "measured_at"}
    The runner's measured ceilings. cuda: a 1 GiB device-to-device copy
    (bytes read + written, median of 10 event-timed copies) and matrix
    products on random data, 8192^3 bf16 and 4096^3 fp32 with TF32 off
    (median of 10); "matmul_tflops" is the bf16 figure. cpu: a 128 MiB
    tensor copy and an fp32 matrix product sized to take >= 50 ms (median
    of 3). Cached as JSON in cache_path under a key of backend, device name,
    driver, torch and CUDA version (cpu: model name and thread count), so a
    later call is a file read; an unreadable or corrupt cache is ignored and
    rewritten. Without cache_path the result is kept for the process. A
    failed measurement returns None figures plus "error" and is not cached.
shares(flops, bytes, median_ms, peaks, dtype=None) -> {"gbps", "tflops",
        "bw_share", "flops_share"}
    Achieved GB/s and TFLOP/s at median_ms and their shares of the peaks.
    The matrix peak is chosen by dtype (torch.dtype or name): bfloat16 and
    float16 use the bf16 figure (the same tensor-core rate), anything else
    the fp32 one; without dtype "matmul_tflops". None where a figure is
    missing or zero.
"""

import datetime
import json
import math
import os
import sys
import tempfile
import time

CACHE_VERSION = 1
_memo = {}

# ops that compute nothing: views, copies, data movement, creation
_ZERO_FLOP = frozenset("""
    alias as_strided as_strided_ cat chunk clone constant_pad_nd contiguous
    copy copy_ detach detach_ diagonal embedding empty empty_like
    empty_strided expand expand_as fill fill_ flip full full_like gather
    index index_put index_put_ index_select lift lift_fresh lift_fresh_copy
    masked_select narrow new_empty new_empty_strided new_full new_ones
    new_zeros ones ones_like permute repeat reshape resize_ roll scatter
    scatter_ select select_scatter set_ slice slice_scatter split
    split_with_sizes squeeze squeeze_ stack t transpose unbind unfold
    unsqueeze unsqueeze_ view view_as zero zero_ zeros zeros_like
    _local_scalar_dense _reshape_alias _to_copy _unsafe_view to arange
    linspace scalar_tensor rand rand_like randn randn_like randint
    randint_like normal normal_ uniform_ bernoulli bernoulli_ random_
    _pad_circular reflection_pad1d reflection_pad2d replication_pad1d
    replication_pad2d tril_indices triu_indices
""".split())


class Count(tuple):
    """(flops, bytes) with .reason and .method; see the module doc."""

    def __new__(cls, flops, nbytes, reason="", method=""):
        self = tuple.__new__(cls, (int(flops), int(nbytes)))
        self.reason = reason
        self.method = method
        return self

    @property
    def flops(self):
        return self[0]

    @property
    def bytes(self):
        return self[1]


# ------------------------------------------------------------------- bytes

def _tensors(obj, out, depth=0):
    import torch
    if depth > 8:
        return out
    if isinstance(obj, torch.Tensor):
        out.append(obj)
    elif isinstance(obj, (list, tuple)):
        for o in obj:
            _tensors(o, out, depth + 1)
    elif isinstance(obj, dict):
        for o in obj.values():
            _tensors(o, out, depth + 1)
    return out


def _distinct_bytes(tensors):
    seen = set()
    total = 0
    for t in tensors:
        n = t.numel() * t.element_size()
        try:
            key = (str(t.device), t.data_ptr(), n)
        except Exception:
            key = id(t)
        if n and key in seen:
            continue
        seen.add(key)
        total += n
    return total


# ------------------------------------------------------------------- flops

def _prod(xs):
    p = 1
    for x in xs:
        p *= int(x)
    return p


def _shape(x):
    return tuple(x.shape)


def _mm_flops(name, args, out):
    """2*M*N*K for the matrix products; None when name is not one."""
    if name == "mm":
        (m, k), n = _shape(args[0]), _shape(args[1])[1]
        return 2 * m * n * k
    if name == "addmm":
        (m, k), n = _shape(args[1]), _shape(args[2])[1]
        return 2 * m * n * k
    if name == "bmm":
        (b, m, k), n = _shape(args[0]), _shape(args[1])[2]
        return 2 * b * m * n * k
    if name == "baddbmm":
        (b, m, k), n = _shape(args[1]), _shape(args[2])[2]
        return 2 * b * m * n * k
    if name in ("mv", "addmv"):
        a = args[0] if name == "mv" else args[1]
        m, k = _shape(a)
        return 2 * m * k
    if name == "dot":
        return 2 * args[0].numel()
    if name in ("convolution", "_convolution"):
        x, w = args[0], args[1]
        transposed = bool(args[6]) if len(args) > 6 else False
        batch = _shape(x)[0]
        spatial = _shape(x)[2:] if transposed else _shape(out)[2:]
        c_out, c_in = _shape(w)[0], _shape(w)[1]
        return 2 * batch * _prod(spatial) * c_out * c_in * _prod(_shape(w)[2:])
    return None


def _is_view(func):
    try:
        for r in func._schema.returns:
            info = r.alias_info
            if info is not None and not info.is_write:
                return True
    except Exception:
        pass
    return False


def _make_counter(skip_packets):
    from torch.utils._python_dispatch import TorchDispatchMode

    class _OpCounter(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.flops = 0
            self.failed = set()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            try:
                self.flops += self._count(func, args, kwargs, out)
            except Exception:
                self.failed.add(str(func))
            return out

        def _count(self, func, args, kwargs, out):
            if func.overloadpacket in skip_packets:
                return 0
            name = func._schema.name.split("::")[-1]
            if name in _ZERO_FLOP or _is_view(func):
                return 0
            f = _mm_flops(name, args, out)
            if f is not None:
                return f
            biggest = 0
            for t in _tensors(list(args) + list(kwargs.values()), []):
                biggest = max(biggest, t.numel())
            for t in _tensors(out, []):
                biggest = max(biggest, t.numel())
            return biggest

    return _OpCounter()


def _flop_counter_mode():
    """(FlopCounterMode instance, its op packets) on torch >= 2.1, else None."""
    try:
        from torch.utils import flop_counter
    except Exception:
        return None
    try:
        fc = flop_counter.FlopCounterMode(display=False)
    except Exception:
        return None
    registry = getattr(fc, "flop_registry", None)
    if registry is None:
        registry = getattr(flop_counter, "flop_registry", {})
    return fc, frozenset(registry.keys())


def count(fn, inputs, outputs=None):
    """(flops, bytes) of one call of the reference; see the module doc."""
    try:
        import torch
    except Exception as e:  # pragma: no cover
        return Count(0, 0, "torch unavailable: %s" % e)
    inputs = list(inputs or [])
    reads = []
    try:
        _tensors(inputs, reads)
        if isinstance(fn, torch.nn.Module):
            reads.extend(fn.parameters())
            reads.extend(fn.buffers())
        read_bytes = _distinct_bytes(reads)
    except Exception as e:
        return Count(0, 0, "could not size the inputs: %s" % _one_line(e))

    def out_bytes(outs):
        try:
            return sum(t.numel() * t.element_size()
                       for t in _tensors(outs, []))
        except Exception:
            return 0

    given = out_bytes(outputs) if outputs is not None else None
    flops = 0
    method = ""
    result = None
    try:
        fcm = _flop_counter_mode()
        if fcm is not None:
            fc, packets = fcm
            counter = _make_counter(packets)
            with fc:
                with counter:
                    result = fn(*inputs)
            flops = int(fc.get_total_flops()) + counter.flops
            method = "FlopCounterMode+elementwise"
        else:
            counter = _make_counter(frozenset())
            with counter:
                result = fn(*inputs)
            flops = counter.flops
            method = "dispatch-mode"
    except Exception as e:
        nbytes = read_bytes + (given or 0)
        return Count(0, nbytes, "could not count the reference's flops: %s"
                     % _one_line(e), method)
    nbytes = read_bytes + (given if given is not None else out_bytes(result))
    return Count(flops, nbytes, "", method)


def _one_line(e):
    text = ("%s: %s" % (type(e).__name__, e)).strip()
    return (text.splitlines()[0] if text else type(e).__name__)[:300]


# ------------------------------------------------------------------- peaks

def _now():
    return datetime.datetime.now(datetime.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%SZ")


def _median(vals):
    s = sorted(vals)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def _backend(device):
    return "cuda" if str(device).startswith("cuda") else "cpu"


def _cuda_index(torch, device):
    d = torch.device(device)
    return d.index if d.index is not None else torch.cuda.current_device()


def _driver_version():
    try:
        with open("/proc/driver/nvidia/version") as f:
            for word in f.readline().split():
                if word[:1].isdigit() and "." in word:
                    return word
    except OSError:
        pass
    try:
        import ctypes
        lib = ctypes.CDLL("libcuda.so.1")
        v = ctypes.c_int(0)
        if lib.cuDriverGetVersion(ctypes.byref(v)) == 0:
            return "cuda-%d" % v.value
    except Exception:
        pass
    return "unknown"


def cpu_name():
    """The CPU's model name (what evidence and the peaks cache key name)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform
    return platform.processor() or platform.machine() or "cpu"


def _identity(device):
    """(device name, cache key) of a device."""
    import torch
    if _backend(device) == "cuda":
        idx = _cuda_index(torch, device)
        name = torch.cuda.get_device_name(idx)
        key = "cuda|%s|driver %s|torch %s|cuda %s" % (
            name, _driver_version(), torch.__version__, torch.version.cuda)
    else:
        name = cpu_name()
        key = "cpu|%s|threads %d|cpus %d|torch %s" % (
            name, torch.get_num_threads(), os.cpu_count() or 0,
            torch.__version__)
    return name, key


def _event_median_ms(torch, fn, warmup=3, reps=10):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return _median(times)


def _host_median_s(fn, warmup=1, reps=3):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return _median(times)


def _measure_cuda(device):
    import torch
    dev = torch.device("cuda", _cuda_index(torch, device))
    with torch.cuda.device(dev):
        n = (1 << 30) // 4
        src = torch.randn(n, device=dev)
        dst = torch.empty_like(src)
        ms = _event_median_ms(torch, lambda: dst.copy_(src))
        copy_gbps = 2 * n * 4 / (ms * 1e-3) / 1e9
        del src, dst

        n = 8192
        a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
        b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
        ms = _event_median_ms(torch, lambda: torch.mm(a, b))
        bf16 = 2 * n ** 3 / (ms * 1e-3) / 1e12
        del a, b

        old_tf32 = torch.backends.cuda.matmul.allow_tf32
        old_cudnn = torch.backends.cudnn.allow_tf32
        old_prec = torch.get_float32_matmul_precision()
        try:
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
            torch.set_float32_matmul_precision("highest")
            n = 4096
            a = torch.randn(n, n, device=dev)
            b = torch.randn(n, n, device=dev)
            ms = _event_median_ms(torch, lambda: torch.mm(a, b))
            fp32 = 2 * n ** 3 / (ms * 1e-3) / 1e12
            del a, b
        finally:
            torch.set_float32_matmul_precision(old_prec)
            torch.backends.cuda.matmul.allow_tf32 = old_tf32
            torch.backends.cudnn.allow_tf32 = old_cudnn
        torch.cuda.empty_cache()
    return {"copy_gbps": copy_gbps, "matmul_tflops": bf16,
            "matmul_dtype": "bfloat16",
            "matmul_tflops_by_dtype": {"bfloat16": bf16, "float32": fp32}}


def _measure_cpu(device):
    import torch
    n = (128 << 20) // 4
    src = torch.randn(n)
    dst = torch.empty_like(src)
    s = _host_median_s(lambda: dst.copy_(src), warmup=1, reps=5)
    copy_gbps = 2 * n * 4 / s / 1e9
    del src, dst

    n = 256
    while True:
        a = torch.randn(n, n)
        b = torch.randn(n, n)
        t0 = time.perf_counter()
        torch.mm(a, b)
        if time.perf_counter() - t0 >= 0.05 or n >= 4096:
            break
        n *= 2
    s = _host_median_s(lambda: torch.mm(a, b), warmup=0, reps=3)
    fp32 = 2 * n ** 3 / s / 1e12
    return {"copy_gbps": copy_gbps, "matmul_tflops": fp32,
            "matmul_dtype": "float32",
            "matmul_tflops_by_dtype": {"float32": fp32}}


def _measure(device):
    """Measure the peaks of device (no cache); tests replace this."""
    if _backend(device) == "cuda":
        return _measure_cuda(device)
    return _measure_cpu(device)


def _valid(entry):
    if not isinstance(entry, dict):
        return False
    for k in ("copy_gbps", "matmul_tflops"):
        v = entry.get(k)
        if not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            return False
    return isinstance(entry.get("matmul_tflops_by_dtype"), dict)


def _load_cache(path):
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("version") != CACHE_VERSION:
        return {}
    entries = data.get("entries")
    if not isinstance(entries, dict):
        return {}
    return {k: v for k, v in entries.items() if _valid(v)}


def _save_cache(path, entries):
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".peaks.", dir=d)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump({"version": CACHE_VERSION, "entries": entries}, f,
                      indent=1, sort_keys=True)
            f.write("\n")
        os.replace(tmp, path)
    except Exception:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def peaks(device, cache_path=None):
    """The device's measured copy and matrix peaks, cached; see module doc."""
    name, key = _identity(device)
    entries = _load_cache(cache_path) if cache_path else {}
    if key in entries:
        return dict(entries[key])
    # a sandboxed harness cannot write the cache file: a worker must still
    # not measure again for every request
    if key in _memo:
        return dict(_memo[key])
    try:
        p = dict(_measure(device))
    except Exception as e:
        return {"device": name, "backend": _backend(device), "key": key,
                "copy_gbps": None, "matmul_tflops": None,
                "matmul_dtype": None, "matmul_tflops_by_dtype": {},
                "measured_at": _now(),
                "error": "could not measure the peaks of '%s': %s"
                         % (name, _one_line(e))}
    p.update({"device": name, "backend": _backend(device), "key": key,
              "measured_at": _now()})
    if cache_path:
        # re-read: another process may have added its device meanwhile
        entries = _load_cache(cache_path)
        entries[key] = p
        try:
            _save_cache(cache_path, entries)
        except OSError:
            _memo[key] = p
    else:
        _memo[key] = p
    return dict(p)


# ------------------------------------------------------------------ shares

def _dtype_name(dtype):
    if dtype is None:
        return None
    s = str(dtype).replace("torch.", "").lower()
    return {"bf16": "bfloat16", "fp16": "float16", "half": "float16",
            "fp32": "float32", "float": "float32", "fp64": "float64",
            "double": "float64"}.get(s, s)


def _num(v):
    if isinstance(v, (int, float)) and math.isfinite(v) and v > 0:
        return float(v)
    return None


def _matmul_peak(peaks_, dtype):
    by = peaks_.get("matmul_tflops_by_dtype") or {}
    name = _dtype_name(dtype)
    if name is None:
        return _num(peaks_.get("matmul_tflops"))
    if name in ("bfloat16", "float16"):
        for k in (name, "bfloat16", "float16"):
            if _num(by.get(k)):
                return _num(by.get(k))
    if _num(by.get("float32")):
        return _num(by.get("float32"))
    return _num(peaks_.get("matmul_tflops"))


def shares(flops, bytes, median_ms, peaks, dtype=None):
    """Achieved GB/s and TFLOP/s and their shares of the measured peaks."""
    out = {"gbps": None, "tflops": None, "bw_share": None,
           "flops_share": None}
    t = _num(median_ms)
    if t is None:
        return out
    s = t * 1e-3
    if isinstance(bytes, (int, float)) and bytes >= 0:
        out["gbps"] = bytes / s / 1e9
    if isinstance(flops, (int, float)) and flops >= 0:
        out["tflops"] = flops / s / 1e12
    peaks = peaks or {}
    bw = _num(peaks.get("copy_gbps"))
    if bw and out["gbps"] is not None:
        out["bw_share"] = out["gbps"] / bw
    mm = _matmul_peak(peaks, dtype)
    if mm and out["tflops"] is not None:
        out["flops_share"] = out["tflops"] / mm
    return out


def main(argv):
    """`kb_peaks.py --measure cpu|cuda --cache PATH`: measure this device's
    peaks into PATH. The bot runs it in the sandbox with no operator and no
    candidate loaded, so the figures in PATH come from trusted code only."""
    import argparse
    ap = argparse.ArgumentParser(description=main.__doc__.split("\n")[0])
    ap.add_argument("--measure", choices=("cpu", "cuda"), required=True)
    ap.add_argument("--cache", required=True)
    a = ap.parse_args(argv)
    p = peaks(a.measure, a.cache)
    if p.get("copy_gbps") is None:
        sys.stderr.write("roofline: %s\n" % p.get("error", "no figures"))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
