"""The native kernel ABI (verifier/include/kernelbot_abi.h) through ctypes.

The structs mirror dlpack.h v0.6 field for field. DLPack v0.6 has no bool
code: bool tensors go as kDLUInt with 8 bits (one byte per element, 0 or 1).
"""
import ctypes
import os

import torch

kDLCPU, kDLCUDA = 1, 2
kDLInt, kDLUInt, kDLFloat, kDLBfloat = 0, 1, 2, 4

DTYPES = {
    torch.float32: (kDLFloat, 32), torch.float64: (kDLFloat, 64),
    torch.float16: (kDLFloat, 16), torch.bfloat16: (kDLBfloat, 16),
    torch.int8: (kDLInt, 8), torch.int16: (kDLInt, 16),
    torch.int32: (kDLInt, 32), torch.int64: (kDLInt, 64),
    torch.uint8: (kDLUInt, 8), torch.bool: (kDLUInt, 8),
}


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice),
                ("ndim", ctypes.c_int), ("dtype", DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


KB_FN = [ctypes.POINTER(DLTensor), ctypes.c_int, ctypes.POINTER(DLTensor),
         ctypes.c_int, ctypes.c_void_p]


class KernelLoadError(Exception):
    """Library or symbol missing, or the extension failed to build: `load`."""


def scalar_tensor(v):
    """A Python number as the ABI's 0-d host tensor: float64, or int64 for ints and bools."""
    if isinstance(v, bool) or isinstance(v, int):
        return torch.tensor(int(v), dtype=torch.int64)
    if isinstance(v, float):
        return torch.tensor(v, dtype=torch.float64)
    raise TypeError("argument of type '%s' has no ABI form" % type(v).__name__)


def _row_major(shape):
    strides, acc = [], 1
    for s in reversed(shape):
        strides.append(acc)
        acc *= max(1, s)
    return list(reversed(strides))


class TensorArray:
    """A DLTensor[] over torch tensors; keeps everything it points at alive."""

    def __init__(self, values):
        self.tensors = [v if torch.is_tensor(v) else scalar_tensor(v) for v in values]
        self.n = len(self.tensors)
        self.arr = (DLTensor * max(1, self.n))()
        self.keep = []  # shape and stride arrays
        for i, t in enumerate(self.tensors):
            self._fill(self.arr[i], t)

    def _fill(self, d, t):
        if t.dtype not in DTYPES:
            raise TypeError("dtype '%s' has no ABI form" % t.dtype)
        if not t.is_contiguous():
            raise TypeError("non-contiguous tensor given to the ABI")
        shape = (ctypes.c_int64 * max(1, t.dim()))(*t.shape)
        strides = (ctypes.c_int64 * max(1, t.dim()))(*_row_major(list(t.shape)))
        self.keep.extend([shape, strides])
        d.data = t.data_ptr()
        dev = kDLCUDA if t.device.type == "cuda" else kDLCPU
        d.device = DLDevice(dev, t.device.index or 0)
        d.ndim = t.dim()
        code, bits = DTYPES[t.dtype]
        d.dtype = DLDataType(code, bits, 1)
        d.shape = shape
        d.strides = strides
        d.byte_offset = 0


class NativeKernel:
    """kb_forward / kb_backward of a built .so."""

    abi = "native"

    def __init__(self, path, pass_):
        try:
            self.lib = ctypes.CDLL(path, mode=os.RTLD_NOW | os.RTLD_LOCAL)
        except OSError as e:
            raise KernelLoadError("could not load kernel library '%s': %s" % (path, e))
        name = "kb_backward" if pass_ == "backward" else "kb_forward"
        try:
            self.fn = getattr(self.lib, name)
        except AttributeError:
            raise KernelLoadError("symbol '%s' missing in '%s'" % (name, path))
        self.fn.restype = ctypes.c_int
        self.fn.argtypes = KB_FN

    def bind(self, args, outs):
        """A zero-argument callable running the kernel on these tensors
        (argument arrays built once: timing calls it many times)."""
        ins, res = TensorArray(args), TensorArray(outs)
        stream = None
        dev = next((t.device for t in outs if torch.is_tensor(t)), None)
        if dev is not None and dev.type == "cuda":
            stream = torch.cuda.current_stream(dev).cuda_stream
        fn = self.fn

        def call():
            return fn(ins.arr, ins.n, res.arr, res.n, stream)

        call.keep = (ins, res)
        return call
