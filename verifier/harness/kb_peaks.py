"""The device's peaks, measured by trusted code only (PROTOCOL.md
"Starting the harness"): the bot runs

    PYTHON -I -B kb_peaks.py --measure cpu|cuda --cache PATH

in a sandbox that loads no operator and no candidate, then writes PATH's
figures to <state_dir>/peaks.json itself.
"""
import os
import sys


def main(argv):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # -I leaves it out
    from kernelbot_harness.timing import roofline
    return roofline.main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
