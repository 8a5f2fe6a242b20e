"""Messages between the judge and the runner (PROTOCOL.md "Judge and
runner"): a JSON header and the raw bytes of the tensors it names, over a
Unix stream socket.

    4 bytes  header length (big-endian, at most MAX_HEADER)
    header   UTF-8 JSON object; "tensors": [{"dtype", "shape"}, ...]
    payload  each tensor's bytes, C order, in that order

Values (argument lists, outputs) travel as a list of {"t": index} (a
tensor of the payload) or {"v": number} entries. The reader trusts
nothing: dtypes come from a fixed list, shapes are non-negative ints, the
sizes must add up, and the totals are capped. Tensors arrive on the CPU,
in memory of the reader's own (never a mapping the sender still holds).
"""
import json
import struct

import torch

MAX_HEADER = 4 << 20
MAX_PAYLOAD = 16 << 30
MAX_DIMS = 16

DTYPES = {
    "float32": torch.float32, "float64": torch.float64, "float16": torch.float16,
    "bfloat16": torch.bfloat16, "int8": torch.int8, "int16": torch.int16,
    "int32": torch.int32, "int64": torch.int64, "uint8": torch.uint8,
    "bool": torch.bool,
}
NAMES = {v: k for k, v in DTYPES.items()}


class WireError(Exception):
    """The peer closed the socket or sent something malformed."""


def _flat_bytes(t):
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    t = t.contiguous().reshape(-1)
    if t.numel() == 0:
        return b""
    return t.view(torch.uint8).numpy().data


def send(sock, header, tensors=()):
    """header (a dict) and the tensors it refers to by index."""
    specs, chunks = [], []
    for t in tensors:
        if t.dtype not in NAMES:
            raise WireError("dtype '%s' cannot be sent" % t.dtype)
        specs.append({"dtype": NAMES[t.dtype], "shape": list(t.shape)})
        chunks.append(_flat_bytes(t))
    h = dict(header, tensors=specs)
    raw = json.dumps(h, separators=(",", ":")).encode()
    if len(raw) > MAX_HEADER:
        raise WireError("message header of %d bytes" % len(raw))
    sock.sendall(struct.pack(">I", len(raw)) + raw)
    for c in chunks:
        if len(c):
            sock.sendall(c)


def _read_exact(sock, n):
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], min(n - got, 1 << 24))
        if k == 0:
            raise WireError("peer closed the connection")
        got += k
    return buf


def _numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def _spec(s):
    if not isinstance(s, dict) or s.get("dtype") not in DTYPES:
        raise WireError("tensor with an unknown dtype")
    shape = s.get("shape")
    if not isinstance(shape, list) or len(shape) > MAX_DIMS or \
            not all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d < (1 << 40)
                    for d in shape):
        raise WireError("tensor with a malformed shape")
    dtype = DTYPES[s["dtype"]]
    size = _numel(shape) * torch.empty((), dtype=dtype).element_size()
    return dtype, shape, size


def recv(sock):
    """(header dict, [CPU tensors]); WireError on EOF or malformed input."""
    (n,) = struct.unpack(">I", bytes(_read_exact(sock, 4)))
    if n > MAX_HEADER:
        raise WireError("message header of %d bytes" % n)
    try:
        h = json.loads(bytes(_read_exact(sock, n)).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise WireError("message header is not JSON: %s" % e)
    if not isinstance(h, dict) or not isinstance(h.get("tensors", []), list):
        raise WireError("message header is not an object")
    specs = [_spec(s) for s in h.get("tensors", [])]
    if sum(s[2] for s in specs) > MAX_PAYLOAD:
        raise WireError("message payload over %d bytes" % MAX_PAYLOAD)
    out = []
    for dtype, shape, size in specs:
        if size == 0:
            out.append(torch.empty(shape, dtype=dtype))
            continue
        raw = _read_exact(sock, size)
        out.append(torch.frombuffer(raw, dtype=torch.uint8).view(dtype).reshape(shape))
    return h, out


def encode_values(values, tensors):
    """Entries for values, their tensors appended to tensors."""
    out = []
    for v in values:
        if torch.is_tensor(v):
            out.append({"t": len(tensors)})
            tensors.append(v)
        elif isinstance(v, bool) or isinstance(v, int) or isinstance(v, float):
            out.append({"v": v})
        elif v is None:
            out.append({"n": True})
        else:
            raise WireError("argument of type '%s' cannot be sent" % type(v).__name__)
    return out


def decode_values(entries, tensors, device=None):
    """The values back, tensors moved to device (None: left on the CPU)."""
    if not isinstance(entries, list):
        raise WireError("values are not a list")
    out = []
    for e in entries:
        if not isinstance(e, dict):
            raise WireError("malformed value entry")
        if "t" in e:
            i = e["t"]
            if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < len(tensors):
                raise WireError("value refers to a missing tensor")
            t = tensors[i]
            out.append(t.to(device) if device is not None and device.type != "cpu" else t)
        elif "v" in e and isinstance(e["v"], (bool, int, float)):
            out.append(e["v"])
        elif e.get("n") is True:
            out.append(None)
        else:
            raise WireError("malformed value entry")
    return out
