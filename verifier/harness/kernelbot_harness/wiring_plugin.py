"""pytest plugin of the wiring check (wiring.py): the session's outcomes by
kind and the wired kernel's forward calls, written to $KB_WIRING_OUT at the
session's end. A session that dies first writes nothing, which the check
reports as tests that did not run."""
import json
import os
import sys

_counts = {"passed": 0, "failed": 0, "skipped": 0, "errors": 0}


def pytest_configure(config):
    """The wired module's guard as the bot's ops.py will have it: the settings the check
    recorded (ops.ATTRIBUTES), so the tests call the kernel where the published branch will."""
    attrs = os.environ.get("KB_WIRING_ATTRIBUTES")
    name = os.environ.get("KB_WIRING_OPS")
    if attrs and name:
        import importlib
        try:
            ops = importlib.import_module(name)
        except Exception:  # the tests will fail to import it as well, and say why
            return
        ops.ATTRIBUTES = json.loads(attrs)


def pytest_collectreport(report):
    if report.failed:
        _counts["errors"] += 1


def pytest_runtest_logreport(report):
    if report.skipped or hasattr(report, "wasxfail"):
        if report.when != "teardown":
            _counts["skipped"] += 1
    elif report.when == "call":
        _counts["passed" if report.passed else "failed"] += 1
    elif report.failed:
        _counts["errors"] += 1


def pytest_sessionfinish(session, exitstatus):
    ops = sys.modules.get(os.environ.get("KB_WIRING_OPS", ""))
    record = dict(_counts, collected=int(getattr(session, "testscollected", 0)),
                  kernel_calls=int(getattr(ops, "CALLS", 0)) if ops is not None else 0)
    with open(os.environ["KB_WIRING_OUT"], "w") as fh:
        json.dump(record, fh)
