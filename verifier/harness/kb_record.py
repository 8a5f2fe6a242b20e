"""The shapes a repository's own tests call one of its modules with
(bot/jobs/modop.h, `kernelbot operator`): the bot runs

    PYTHON -I -B kb_record.py --root REPO --target PATH.py:NAME --out FILE [--function] -- TEST...

in a sandbox that shows the repository read-only and lets it write only
its scratch folder (FILE lies there). What it writes is untrusted: the bot
reads it with a strict schema (bot/jobs/modop_record.c).
"""
import os
import sys


def main(argv):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # -I leaves it out
    from kernelbot_harness import record_shapes
    return record_shapes.main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
