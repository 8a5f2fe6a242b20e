"""Every Python suite imports the harness as the package it is
(verifier/harness/kernelbot_harness) and the shared test helpers of this
folder: both roots go on sys.path here, once."""
import os
import sys

_TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
for _d in (os.path.join(_TOP, "verifier", "harness"), os.path.dirname(os.path.abspath(__file__))):
    if _d not in sys.path:
        sys.path.insert(0, _d)
