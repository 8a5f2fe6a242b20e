"""A pytest plugin for tests/run.sh: one line per test file as it finishes,
with a running count, so that a 20-minute pytest run is never silent.

    python3 -m pytest -p kb_progress ...     (tests/python on PYTHONPATH)

The lines go to the descriptor named by KB_PROGRESS_FD (run.sh points it
at its own standard output while pytest's goes to the log); without it the
plugin does nothing. Each line:

    pytest test_analyze.py          12 passed, 0 failed, 1 skipped  [3/31 files, 140/912 tests, 4 min]
      skipped test_x: no GPU here

Every skipped test is listed with its reason under its file's line, and
each failure by name, so the terminal says why without opening the log.
A file that runs long gets a line when a test of it ends and nothing was
said for HEARTBEAT_S:

    ... test_bot_e2e.py: 5 of 15 tests done, 3 min
"""
import os
import time

_FD_VAR = "KB_PROGRESS_FD"
# seconds without a line before a long file says how far it got
HEARTBEAT_S = float(os.environ.get("KB_PROGRESS_HEARTBEAT_S") or 60)


class Progress:
    def __init__(self, out):
        self.out = out
        self.t0 = time.monotonic()
        self.left = {}          # file -> tests not yet finished
        self.order = []         # files in collection order
        self.counts = {}        # file -> [passed, failed, skipped]
        self.notes = {}         # file -> ["skipped name: reason", ...]
        self.outcome = {}       # nodeid -> outcome so far
        self.files_done = 0
        self.tests_done = 0
        self.total = 0
        self.said = time.monotonic()

    def write(self, line):
        self.out.write(line + "\n")
        self.out.flush()
        self.said = time.monotonic()

    def pytest_collection_finish(self, session):
        for item in session.items:
            f = item.nodeid.split("::")[0]
            if f not in self.left:
                self.order.append(f)
                self.left[f] = 0
                self.counts[f] = [0, 0, 0]
                self.notes[f] = []
            self.left[f] += 1
        self.total = len(session.items)
        self.write("pytest: %d tests in %d files" % (self.total, len(self.order)))

    def pytest_runtest_logreport(self, report):
        nid = report.nodeid
        f = nid.split("::")[0]
        if f not in self.counts:
            return
        name = nid.split("::", 1)[-1]
        prev = self.outcome.get(nid)
        if report.failed:
            if prev != "failed":
                self.notes[f].append("failed %s (%s)" % (name, report.when))
            self.outcome[nid] = "failed"
        elif report.skipped and prev is None:
            self.outcome[nid] = "skipped"
            reason = ""
            if isinstance(report.longrepr, tuple) and len(report.longrepr) == 3:
                reason = str(report.longrepr[2])
            if hasattr(report, "wasxfail"):
                reason = "expected failure: %s" % report.wasxfail
            reason = reason.replace("Skipped: ", "", 1) or "no reason given"
            self.notes[f].append("skipped %s: %s" % (name, reason))
        elif report.when == "call" and report.passed and prev is None:
            self.outcome[nid] = "passed"
        if report.when == "teardown":
            self._finished(f, nid)

    def _finished(self, f, nid):
        c = self.counts[f]
        c[{"passed": 0, "failed": 1, "skipped": 2}.get(self.outcome.get(nid), 1)] += 1
        self.tests_done += 1
        self.left[f] -= 1
        if self.left[f]:
            if time.monotonic() - self.said >= HEARTBEAT_S:
                self.write("... %s: %d of %d tests done, %.0f min"
                           % (os.path.basename(f), sum(c), sum(c) + self.left[f],
                              (time.monotonic() - self.t0) / 60))
            return
        self.files_done += 1
        mins = (time.monotonic() - self.t0) / 60
        self.write("pytest %-30s %4d passed, %d failed, %d skipped  [%d/%d files, %d/%d tests, %.0f min]"
                   % (os.path.basename(f), c[0], c[1], c[2], self.files_done, len(self.order),
                      self.tests_done, self.total, mins))
        for note in self.notes[f]:
            self.write("  " + note)


def pytest_configure(config):
    fd = os.environ.get(_FD_VAR)
    if not fd:
        return
    try:
        out = os.fdopen(int(fd), "w", buffering=1)
    except (OSError, ValueError):
        return
    config.pluginmanager.register(Progress(out), "kb_progress_reporter")
