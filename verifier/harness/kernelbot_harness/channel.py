"""The result channel (PROTOCOL.md): nonce from stdin, records on a pipe.

Imports nothing heavy: it must run before torch, the operator or the kernel
are loaded, so that no code under test ever sees descriptor 3 or stdin.
"""
import fcntl
import json
import os
import re

HIGH_FD_MIN = 512  # above anything torch or a kernel opens early
NONCE_RE = re.compile(r"^[0-9a-fA-F]{32}$")


class ChannelError(Exception):
    """The channel could not be set up: the harness cannot report at all."""


def _read_nonce():
    """Read the one nonce line byte by byte, so nothing after it is consumed."""
    data = b""
    while not data.endswith(b"\n") and len(data) < 128:
        chunk = os.read(0, 1)
        if not chunk:
            break
        data += chunk
    nonce = data.decode("ascii", "replace").strip()
    if not NONCE_RE.match(nonce):
        raise ChannelError("bad nonce on stdin '%s'" % nonce[:40])
    return nonce


def _close_on_null(fd, flags):
    """Close fd for good: /dev/null takes its number, so a file opened later
    never gets it and kernel code writing to it reaches nothing."""
    null = os.open(os.devnull, flags)
    if null != fd:
        os.dup2(null, fd)
        os.close(null)


def _finite(v):
    """JSON has no NaN/Inf: non-finite numbers become null (PROTOCOL.md)."""
    if isinstance(v, float):
        return v if v == v and v not in (float("inf"), float("-inf")) else None
    if isinstance(v, dict):
        return {str(k): _finite(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_finite(x) for x in v]
    return v


class Channel:
    """Writes nonce-stamped JSON lines; exactly one final result record.
    A channel for one request of a worker (for_request) stamps the request
    on each record and leaves the descriptor open for the next."""

    def __init__(self, fd, nonce, stamp=None, owns_fd=True):
        self.fd = fd
        self.nonce = nonce
        self.done = False
        self.stamp = dict(stamp or {})
        self.owns_fd = owns_fd

    def for_request(self, request):
        return Channel(self.fd, self.nonce, {"request": request}, owns_fd=False)

    def _write(self, record):
        record = dict(record)
        record.update(self.stamp)
        record["nonce"] = self.nonce
        data = json.dumps(_finite(record), allow_nan=False, default=str)
        data = (data + "\n").encode()
        while data:
            n = os.write(self.fd, data)
            data = data[n:]

    def progress(self, stage, config=None, seed=None):
        if not self.done:
            self._write({"type": "progress", "stage": stage,
                         "config": config, "seed": seed})

    def result(self, body):
        """Write the final record once; later calls are ignored."""
        if self.done:
            return
        self.done = True
        body = dict(body)
        body["type"] = "result"
        self._write(body)
        if self.owns_fd:
            os.close(self.fd)


def open_channel(serve=False):
    """Read the nonce, move the result fd high and close-on-exec, close 3
    and stdin (both left on /dev/null). serve: stdin, where request paths
    arrive, is moved high and close-on-exec too (0 is still /dev/null);
    returns (channel, its descriptor) then."""
    nonce = _read_nonce()
    fd = int(os.environ.get("KB_RESULT_FD", "3"))
    try:
        high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, HIGH_FD_MIN)
    except OSError as e:
        raise ChannelError("result descriptor '%d' not open: %s" % (fd, e))
    _close_on_null(fd, os.O_WRONLY)
    requests = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, HIGH_FD_MIN) if serve else None
    _close_on_null(0, os.O_RDONLY)
    os.environ.pop("KB_RESULT_FD", None)
    if serve:
        return Channel(high, nonce), requests
    return Channel(high, nonce)
