"""kernelbot's wiring check: a repository's module, patched to call a
verified kernel, against its own original code (PROTOCOL.md "Wiring
check"). Spoken to like the harness:

    PYTHON -I -B -u kb_wiring.py --request REQUEST.json

The nonce is read and the result channel secured before torch or anything
of the repository is loaded; exactly one result record, then exit 0.
"""
import json
import os
import sys
import traceback


def _error(message):
    return {"protocol": 1, "mode": "wiring", "verdict": "error",
            "reasons": [{"check": "wiring", "message": message[:2000]}]}


def main(argv):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # -I leaves it out
    from kernelbot_harness import channel as kbh_channel
    try:
        chan = kbh_channel.open_channel()
    except kbh_channel.ChannelError as e:
        sys.stderr.write("kb_wiring: %s\n" % e)
        return 2
    if len(argv) != 2 or argv[0] != "--request":
        chan.result(_error("usage: kb_wiring.py --request REQUEST.json"))
        return 0
    try:
        with open(argv[1]) as fh:
            req = json.load(fh)
        from kernelbot_harness import wiring
        body = wiring.check(req)
    except Exception as e:  # the repository's code or ours: one record all the same
        sys.stderr.write(traceback.format_exc()[-3000:])
        body = _error("%s: %s" % (type(e).__name__, e))
    sys.stdout.flush()
    sys.stderr.flush()
    chan.result(body)
    return 0


if __name__ == "__main__":
    rc = main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)
