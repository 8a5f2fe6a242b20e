"""The candidate's time budget (PROTOCOL.md "Timing", "Timeouts").

The request's `candidate_timeout_s` bounds the evaluation's own work on
the candidate: loading (a torch extension's build), the trials and the
kernel's timing. The judge's work on the baselines (torch.compile's
compile and the baselines' timing) is not the candidate's: its clock is
stopped meanwhile (`baselines()`) and the seconds are reported as
`stages.baseline_s`. Every wait on the kernel's process is bounded by
what is left (kbh_remote's `_ask`); past the budget the evaluation ends
with the reason `timeout` naming the stage.

One budget per request; without `candidate_timeout_s` there is no limit
here (the bot's own kill still applies).
"""
import contextlib
import time

from kernelbot_harness.checks.calls import DeviceFault


class Exceeded(DeviceFault):
    """The candidate's stages outlived the request's budget. A DeviceFault
    (the kernel's process is killed and the evaluation ends there), told
    apart by its check: `timeout`."""

    check = "timeout"

    def __init__(self, budget, what):
        self.limit_s, self.what = budget.limit_s, what
        self.baseline_s = budget.baseline_s()
        text = ("the candidate's own stages took more than %g s, the evaluation's limit "
                "([harness] timeout_s, --timeout), %s (the kernel's process was killed)"
                % (budget.limit_s, what))
        if self.baseline_s >= 0.05:
            text += "; the judge's %.1f s on the baselines are not counted" % self.baseline_s
        super().__init__(text)


class Budget:
    def __init__(self, limit_s=None):
        self.limit_s = limit_s
        self.t0 = time.perf_counter()
        self._base = 0.0        # baseline seconds, spans ended
        self._since = None      # start of the open baseline span

    def baseline_s(self):
        open_s = time.perf_counter() - self._since if self._since is not None else 0.0
        return self._base + open_s

    def used_s(self):
        """Seconds charged to the candidate so far."""
        return time.perf_counter() - self.t0 - self.baseline_s()

    def left(self):
        """Seconds left, or None without a limit (may be <= 0)."""
        if self.limit_s is None:
            return None
        return self.limit_s - self.used_s()

    @contextlib.contextmanager
    def baselines(self):
        """The judge's baseline work: the candidate's clock stops. Nested
        spans count once."""
        if self._since is not None:
            yield
            return
        self._since = time.perf_counter()
        try:
            yield
        finally:
            self._base += time.perf_counter() - self._since
            self._since = None


_current = [Budget()]


def start(limit_s):
    """A fresh budget for a request (limit_s None: no limit)."""
    _current[0] = Budget(limit_s)
    return _current[0]


def current():
    return _current[0]
