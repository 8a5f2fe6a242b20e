"""kernelbot's verification harness: what decides "correct" (and, after
that, "fast"). Spoken to by the bot through verifier/PROTOCOL.md:

    PYTHON -I -B -u kb_harness.py --request REQUEST.json

The nonce is read and the result channel secured before torch, the
operator or the kernel is loaded. Exactly one result record is written,
then the process exits 0 whatever the verdict; a crash or a hang inside
kernel code leaves no record, which the bot turns into `crash`/`timeout`.
"""
import os
import sys
import traceback


def _args(argv):
    """--request PATH (the only argument)."""
    if len(argv) == 2 and argv[0] == "--request":
        return argv[1]
    if len(argv) == 1 and argv[0].startswith("--request="):
        return argv[0].split("=", 1)[1]
    return None


def _error(req, check, message):
    import kbh_evidence
    backend = (req or {}).get("backend") or "cpu"
    r = {"check": check, "config": None, "seed": None, "message": message, "count": 1}
    return {"protocol": 1, "mode": (req or {}).get("mode"), "verdict": "error",
            "reasons": [r], "environment": kbh_evidence.environment(backend),
            "operator": None, "configs": [], "dropped_configs": [],
            "summary": None}


def _run(path, chan):
    import kbh_request
    try:
        req = kbh_request.parse(path)
    except kbh_request.RequestError as e:
        return _error(None, "request", str(e))
    import kbh_run
    from kbh_task import TaskError
    try:
        return kbh_run.evaluate(req, chan)
    except kbh_request.RequestError as e:
        return _error(req, "request", str(e))
    except TaskError as e:
        return _error(req, "operator", str(e))
    except Exception as e:  # a harness bug must still end in one record
        tb = traceback.format_exc()[-3000:]
        sys.stderr.write(tb)
        return _error(req, "harness", "%s: %s\n%s" % (type(e).__name__, e, tb))


def main(argv):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # -I leaves it out
    import kbh_channel
    try:
        chan = kbh_channel.open_channel()
    except kbh_channel.ChannelError as e:
        sys.stderr.write("kb_harness: %s\n" % e)
        return 2
    path = _args(argv)
    if path is None:
        body = _error(None, "request", "usage: kb_harness.py --request REQUEST.json")
    else:
        body = _run(path, chan)
    chan.result(body)
    return 0


if __name__ == "__main__":
    rc = main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    # no interpreter teardown: kernel threads or atexit handlers cannot
    # change anything after the verdict
    os._exit(rc)
