"""The runner zygote (PROTOCOL.md "Judge and runner"):

    PYTHON -I -B -u kb_runner.py --zygote FD

FD is a Unix stream socket to the judge. The zygote imports torch and
the runner's modules once (it never initialises CUDA and never loads a
kernel), then forks one runner per evaluation:

  {"op": "fork"}        -> one byte carrying the runner's end of a new
                           socket pair (SCM_RIGHTS), then {"pid"}
  {"op": "reap", "pid"} -> kills the runner and every process it left
                           (the zygote is their subreaper), empties the
                           runner's directory, then {"status", "signal"}

A fork costs milliseconds where a fresh python with torch costs seconds,
and every candidate still gets a process no earlier candidate touched.
EOF on FD ends the zygote and, through the same kill, every runner.
"""
import ctypes
import os
import shutil
import signal
import socket
import sys
import time

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
REAP_ROUNDS = 2000  # x REAP_PAUSE_S: a fork storm gets 2 s to die out
REAP_PAUSE_S = 0.001
OUTPUT = "output.log"
OUTPUT_FSIZE = 1 << 30   # a runner writes at most this per file (its output, an extension build)
TAIL_BYTES = 16384


def _prctl(*args):
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(*args)
    except (OSError, AttributeError):
        return -1


def _die_with_parent(parent):
    """SIGKILL when the parent (the judge for the zygote, the zygote for a
    runner) dies: a killed judge leaves no runner spinning. Checked after
    setting it: a parent gone in between is seen one way or the other."""
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)


def _children(me):
    out = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for n in names:
        if not n.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % n, "rb") as f:
                stat = f.read().decode("ascii", "replace")
            ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == me:
            out.append(int(n))
    return out


def _reap_all(pid):
    """Kill pid and everything that came to us from it (orphans reparent
    to the subreaper); pid's wait status."""
    status = None
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    me = os.getpid()
    for _ in range(REAP_ROUNDS):
        for c in _children(me):
            try:
                os.kill(c, signal.SIGKILL)
            except ProcessLookupError:
                pass
        while True:
            try:
                got, st = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return status
            if got == 0:
                break
            if got == pid:
                status = st
        time.sleep(REAP_PAUSE_S)
    return status


def _own_output(workdir):
    """The runner's stdout and stderr go to a file of its own, capped: a
    pipe nobody drains between evaluations would stall a flood, and the
    judge hands the tail on to the operator's log (never to evidence)."""
    import resource
    fd = os.open(os.path.join(workdir, OUTPUT), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    cap = OUTPUT_FSIZE if hard == resource.RLIM_INFINITY else min(OUTPUT_FSIZE, hard)
    if soft == resource.RLIM_INFINITY or soft > cap:
        resource.setrlimit(resource.RLIMIT_FSIZE, (cap, hard))


def _tail(path):
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - TAIL_BYTES))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def zygote(fd):
    parent = os.environ.pop("KB_RUNNER_PARENT", "")
    _die_with_parent(int(parent) if parent.isdigit() else os.getppid())
    _prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    ctl = socket.socket(fileno=fd)
    base = os.getcwd()
    try:
        import torch  # noqa: F401  the costly import, once
        from kernelbot_harness.checks import calls as kbh_calls  # noqa: F401
        from kernelbot_harness import runner as kbh_runner  # noqa: F401
        from kernelbot_harness.timing import evaluation as kbh_timing
        kbh_timing.load_bench()
    except Exception as e:  # reported again by the runner that needs it
        sys.stderr.write("kb_runner: preload failed: %s\n" % e)
    workdirs = {}
    try:
        return _serve(ctl, base, workdirs)
    finally:
        # the judge is gone (EOF) or broke the protocol: no runner outlives us
        for pid in list(workdirs):
            _reap_all(pid)
            shutil.rmtree(workdirs.pop(pid), ignore_errors=True)
        shutil.rmtree(base, ignore_errors=True)  # our scratch: nothing is left in it


def _serve(ctl, base, workdirs):
    from kernelbot_harness import wire as kbh_wire
    seq = 0
    me = os.getpid()
    while True:
        try:
            h, _ = kbh_wire.recv(ctl)
        except kbh_wire.WireError:
            return 0
        if h.get("op") == "fork":
            seq += 1
            workdir = os.path.join(base, "run-%d" % seq)
            os.makedirs(workdir, exist_ok=True)
            mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            pid = os.fork()
            if pid == 0:
                rc = 2
                try:
                    _die_with_parent(me)
                    ctl.close()
                    mine.close()
                    _own_output(workdir)
                    from kernelbot_harness import runner as kbh_runner
                    rc = kbh_runner.serve(theirs, workdir)
                except BaseException:  # noqa: B902  the runner's end, whatever it was
                    import traceback
                    sys.stderr.write(traceback.format_exc()[-3000:])
                finally:
                    sys.stdout.flush()
                    sys.stderr.flush()
                    os._exit(rc)
            theirs.close()
            workdirs[pid] = workdir
            socket.send_fds(ctl, [b"F"], [mine.fileno()])
            mine.close()
            kbh_wire.send(ctl, {"pid": pid})
        elif h.get("op") == "reap":
            pid = h.get("pid")
            st = _reap_all(pid) if pid in workdirs else None
            d = workdirs.pop(pid, None)
            tail = _tail(os.path.join(d, OUTPUT)) if d else ""
            if d:
                shutil.rmtree(d, ignore_errors=True)
            kbh_wire.send(ctl, {"output_tail": tail,
                "status": os.WEXITSTATUS(st) if st is not None and os.WIFEXITED(st) else None,
                "signal": os.WTERMSIG(st) if st is not None and os.WIFSIGNALED(st) else None})
        else:
            return 2


def main(argv):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # -I leaves it out
    if len(argv) != 2 or argv[0] != "--zygote" or not argv[1].isdigit():
        sys.stderr.write("usage: kb_runner.py --zygote FD\n")
        return 2
    return zygote(int(argv[1]))


if __name__ == "__main__":
    rc = main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)
