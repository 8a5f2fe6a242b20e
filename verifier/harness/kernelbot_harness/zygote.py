"""The judge's handle on the runner zygote (PROTOCOL.md "Judge and
runner"): either the one the bot started in a sandbox of its own
(KB_RUNNER_FD, a socket) or one this process starts as its child. Light
on purpose (no torch): the judge starts its zygote first, so that the
zygote imports torch while the judge does the same.
"""
import os
import socket
import subprocess
import sys

_zygote = []  # [Zygote]: one per judge process


class RunnerError(Exception):
    """The zygote or a runner misbehaved or died."""


class Zygote:
    def __init__(self):
        self.proc = None
        fd = os.environ.pop("KB_RUNNER_FD", None)
        if fd is not None and fd.isdigit():
            self.isolation = "sandbox"
            self.sock = socket.socket(fileno=int(fd))
            os.set_inheritable(self.sock.fileno(), False)
        else:
            self.isolation = "process"
            self.sock = self._spawn()

    def _spawn(self):
        # kb_runner.py sits beside the package folder
        here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        d = os.path.join(os.environ.get("TMPDIR") or "/tmp", "runner-%d" % os.getpid())
        os.makedirs(d, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if k != "KB_RESULT_FD"}
        env["TMPDIR"] = d
        env["KB_RUNNER_PARENT"] = str(os.getpid())  # it dies with us
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-B", "-u", os.path.join(here, "kb_runner.py"),
             "--zygote", str(theirs.fileno())],
            pass_fds=[theirs.fileno()], cwd=d, env=env, stdin=subprocess.DEVNULL)
        theirs.close()
        return mine

    lost = False  # the zygote stopped answering

    def alive(self):
        return not self.lost and (self.proc is None or self.proc.poll() is None)

    def _gone(self, e):
        self.lost = True
        return RunnerError("the runner zygote is gone: %s" % e)

    def fork(self):
        from kernelbot_harness import wire as kbh_wire
        try:
            kbh_wire.send(self.sock, {"op": "fork"})
            _, fds, _, _ = socket.recv_fds(self.sock, 1, 1)
            if not fds:
                raise RunnerError("the runner zygote sent no socket")
            h, _ = kbh_wire.recv(self.sock)
        except (OSError, kbh_wire.WireError) as e:
            raise self._gone(e)
        return h.get("pid"), socket.socket(fileno=fds[0])

    def reap(self, pid):
        from kernelbot_harness import wire as kbh_wire
        try:
            kbh_wire.send(self.sock, {"op": "reap", "pid": pid})
            h, _ = kbh_wire.recv(self.sock)
        except (OSError, kbh_wire.WireError) as e:
            raise self._gone(e)
        return h


def zygote():
    """The zygote; one the judge started itself is started again when it
    died. One the bot handed over cannot be: lost() then says so."""
    if not _zygote or (not _zygote[0].alive() and _zygote[0].isolation == "process"):
        _zygote[:] = [Zygote()]
    return _zygote[0]


def lost():
    """The bot's zygote stopped answering: the worker must be restarted."""
    return bool(_zygote) and _zygote[0].isolation == "sandbox" and _zygote[0].lost
