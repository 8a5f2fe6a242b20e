"""Was the machine busy with other work while a test ran?

A test that judges how long something took (a deadline kept, a bound on
overhead) measures the machine as much as the code when another CPU-heavy
job runs beside it. Contention measures, over the same interval as the
test's own work, the CPU time every process used (/proc/stat) and the CPU
time this process and the children it waited for used (os.times): the
difference is the other processes' share of the machine. A timing judgement
that fails while that share is above OVERLOADED is skipped with the figures
as its reason; one that fails on a quiet machine fails.

    load = machine_load.Contention()
    ... run the thing ...
    load.judge(elapsed <= limit, "finished in %.0f s of %d" % (elapsed, limit))

Judge the timing last: the test's other assertions hold whatever the load.
"""
import os
import time

import pytest

# other processes' share of all CPUs above which timing is not judged
OVERLOADED = 0.25


def _busy_s():
    """CPU seconds every process has used since boot (all CPUs)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal (guest is inside user)
    busy = sum(fields[:8]) - fields[3] - (fields[4] if len(fields) > 4 else 0)
    return busy / os.sysconf("SC_CLK_TCK")


def _ours_s():
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


class Contention:
    def __init__(self):
        self.t0 = time.monotonic()
        self.busy0 = _busy_s()
        self.ours0 = _ours_s()

    def others(self):
        """The other processes' share (0..1) of all CPUs since the start.
        Children not waited for yet count as others: wait first."""
        wall = time.monotonic() - self.t0
        if wall <= 0:
            return 0.0
        other = (_busy_s() - self.busy0) - (_ours_s() - self.ours0)
        return max(0.0, other / (wall * (os.cpu_count() or 1)))

    def judge(self, ok, what):
        """Assert ok, a judgement on timing, unless the machine was
        overloaded meanwhile: then the test is skipped, saying why."""
        if ok:
            return
        share = self.others()
        if share > OVERLOADED:
            pytest.skip("machine overloaded, timing not judged (%s): other processes used "
                        "%.0f%% of the CPUs meanwhile (limit %.0f%%)"
                        % (what, 100 * share, 100 * OVERLOADED))
        assert ok, "%s (other processes used %.0f%% of the CPUs meanwhile)" % (what, 100 * share)
