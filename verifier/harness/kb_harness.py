"""kernelbot's verification harness: what decides "correct" (and, after
that, "fast"). Spoken to by the bot through verifier/PROTOCOL.md:

    PYTHON -I -B -u kb_harness.py --request REQUEST.json
    PYTHON -I -B -u kb_harness.py --serve [DIR]   (request paths on stdin)

The nonce is read and the result channel secured before torch, the
operator or the kernel is loaded. Exactly one result record is written
per request, then (--request) the process exits 0 whatever the verdict; a
crash or a hang inside kernel code leaves no record, which the bot turns
into `crash`/`timeout`. --serve answers request after request in one
process (torch imported and CUDA initialised once) and exits 0 at EOF, or
non-zero right after a result that lost the CUDA context.
"""
import os
import sys
import time
import traceback

# what torch says when a kernel poisoned the CUDA context
DEVICE_FAULT_WORDS = ("illegal memory access", "device-side assert", "cuda error",
                      "illegal instruction", "misaligned address",
                      "unspecified launch failure", "acceleratorerror")
WORKER_FAULT_EXIT = 3
# a worker retires after this many requests: what each candidate leaves
# behind (loaded libraries, compile caches) stays bounded
WORKER_MAX_REQUESTS = 500


def _args(argv):
    """("request", PATH), ("serve", None) or None."""
    if len(argv) == 2 and argv[0] == "--request":
        return "request", argv[1]
    if len(argv) == 1 and argv[0].startswith("--request="):
        return "request", argv[0].split("=", 1)[1]
    if argv[:1] == ["--serve"] and len(argv) <= 2:
        return "serve", None  # DIR only names the worker's directory for ps
    return None


def _error(req, check, message, verdict="error"):
    from kernelbot_harness import evidence as kbh_evidence
    backend = (req or {}).get("backend") or "cpu"
    r = {"check": check, "config": None, "seed": None, "message": message, "count": 1}
    return {"protocol": 1, "mode": (req or {}).get("mode"), "verdict": verdict,
            "reasons": [r], "environment": kbh_evidence.environment(backend),
            "operator": None, "configs": [], "dropped_configs": [],
            "summary": None}


def device_fault(e):
    """True when the exception says the CUDA context is lost."""
    text = ("%s: %s" % (type(e).__name__, e)).lower()
    return any(w in text for w in DEVICE_FAULT_WORDS)


def _evaluate(path, chan, stages):
    from kernelbot_harness import request as kbh_request
    try:
        req = kbh_request.parse(path)
    except kbh_request.RequestError as e:
        return _error(None, "request", str(e))
    if req.get("mode") != "describe":
        from kernelbot_harness import zygote as kbh_zygote
        kbh_zygote.zygote()  # the kernel's side imports torch while we do
    from kernelbot_harness import run as kbh_run
    from kernelbot_harness.task import TaskError
    try:
        return kbh_run.evaluate(req, chan, stages)
    except kbh_request.RequestError as e:
        return _error(req, "request", str(e))
    except TaskError as e:
        return _error(req, "operator", str(e))
    except Exception as e:  # a harness bug must still end in one record
        tb = traceback.format_exc()[-3000:]
        sys.stderr.write(tb)
        if req.get("backend") == "cuda" and device_fault(e):
            return _error(req, "crash", "device error during the evaluation: %s: %s"
                          % (type(e).__name__, str(e)[:500]), verdict="rejected")
        return _error(req, "harness", "%s: %s\n%s" % (type(e).__name__, e, tb))


def _run(path, chan, seq=1):
    """One request's result body, with stages and the worker's identity."""
    t0 = time.perf_counter()
    stages = {}
    body = _evaluate(path, chan, stages)
    for k in ("load_s", "correctness_s", "timing_s", "baseline_s"):
        stages.setdefault(k, 0.0)  # a stage the evaluation never reached
    stages["total_s"] = round(time.perf_counter() - t0, 4)
    body["stages"] = stages
    env = body.get("environment")
    if isinstance(env, dict):
        env["worker_pid"] = os.getpid()
        env["worker_seq"] = seq
    return body


def _device_unhealthy():
    """None, or why the CUDA context no longer works."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        if not torch.cuda.is_available() or not torch.cuda.is_initialized():
            return None
    except Exception:  # torch without a usable cuda module: nothing to lose
        return None
    try:
        torch.cuda.synchronize()
        if int((torch.ones(1, device="cuda") + 1).item()) != 2:
            return "device arithmetic is wrong"
    except Exception as e:  # any failure here means the context is gone
        return "%s: %s" % (type(e).__name__, str(e)[:500])
    return None


def _worker_must_exit(body):
    """Serve mode: a broken device in this (the judge's) process ends the
    worker after this result, and is this candidate's crash. A kernel
    that crashed its own process (the runner) left the judge's context
    alone: checked, not assumed."""
    zyg = sys.modules.get("kernelbot_harness.zygote")
    if zyg is not None and zyg.lost():
        return True  # the bot starts the kernel's side again with the worker
    why = _device_unhealthy()
    if why is None:
        return False
    r = {"check": "crash", "config": None, "seed": None, "count": 1,
         "message": "device error after the evaluation: %s" % why}
    body["verdict"] = "rejected"
    body["reasons"] = list(body.get("reasons") or []) + [r]
    return True


def _preload():
    """Serve mode: the costly imports and CUDA's start, once, before the
    first request. A failure here shows up again, reported, in a request."""
    try:
        from kernelbot_harness import zygote as kbh_zygote
        kbh_zygote.zygote()  # the kernel's side starts beside our own start
        import torch
        from kernelbot_harness import run as kbh_run  # noqa: F401
        if torch.cuda.is_available():
            torch.zeros(1, device="cuda")
    except Exception:
        sys.stderr.write(traceback.format_exc()[-3000:])


def serve(chan, requests_fd):
    """One evaluation per request path read from requests_fd, in order."""
    from kernelbot_harness import cache as kbh_cache
    kbh_cache.enabled = True
    _preload()
    requests = os.fdopen(requests_fd, "rb", buffering=0)
    seq = 0
    while True:
        line = requests.readline()
        if not line:
            return 0
        path = line.decode("utf-8", "replace").strip()
        if not path:
            continue
        seq += 1
        rchan = chan.for_request(path)
        body = _run(path, rchan, seq)
        fatal = _worker_must_exit(body)
        retire = seq >= WORKER_MAX_REQUESTS
        if fatal or retire:
            body["worker_exit"] = True
        sys.stdout.flush()
        sys.stderr.flush()
        rchan.result(body)
        if fatal:
            return WORKER_FAULT_EXIT
        if retire:
            return 0


def _protect_self():
    """Non-dumpable before anything untrusted runs: the kernel's process
    (a runner of the same uid) cannot ptrace the judge or read its memory,
    descriptors or environment through /proc."""
    try:
        import ctypes
        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0
    except (OSError, AttributeError):
        pass


def main(argv):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # -I leaves it out
    _protect_self()
    from kernelbot_harness import channel as kbh_channel
    args = _args(argv)
    try:
        if args and args[0] == "serve":
            chan, requests_fd = kbh_channel.open_channel(serve=True)
            return serve(chan, requests_fd)
        chan = kbh_channel.open_channel()
    except kbh_channel.ChannelError as e:
        sys.stderr.write("kb_harness: %s\n" % e)
        return 2
    if args is None:
        body = _error(None, "request", "usage: kb_harness.py --request REQUEST.json | --serve [DIR]")
    else:
        body = _run(args[1], chan)
    chan.result(body)
    return 0


if __name__ == "__main__":
    rc = main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    # no interpreter teardown: kernel threads or atexit handlers cannot
    # change anything after the verdict
    os._exit(rc)
