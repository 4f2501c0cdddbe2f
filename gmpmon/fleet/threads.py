"""Per-thread CPU and run-queue time from the kernel's own accounting: no probe, no BPF.

``/proc/PID/task/TID/schedstat`` holds three numbers per thread (``Documentation/scheduler/
sched-stats.rst``): nanoseconds on a CPU, nanoseconds waiting on a run queue (runnable but
not running: CPU contention from outside Go), and timeslices run. Every Go M is a thread, so
the sums are the process's on-CPU time and kernel run-queue delay.

Threads exit (Go rarely ends Ms, but cgo and LockOSThread ones do): a thread's last reading
is kept, so the totals never go backwards, as a Prometheus counter must not.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ThreadTotals:
    oncpu_ns: int
    runq_delay_ns: int
    threads: int  # threads alive at this reading


class SchedstatTotals:
    """Monotonic on-CPU and run-queue-delay totals of one process's threads."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._last: dict[int, tuple[int, int]] = {}
        self._gone_oncpu = 0
        self._gone_wait = 0

    def read(self) -> ThreadTotals | None:
        """None once the process is gone."""
        try:
            tids = [int(t) for t in os.listdir(f"/proc/{self.pid}/task")]
        except (OSError, ValueError):
            return None
        now: dict[int, tuple[int, int]] = {}
        for tid in tids:
            try:
                with open(f"/proc/{self.pid}/task/{tid}/schedstat", "rb") as f:
                    fields = f.read().split()
                now[tid] = (int(fields[0]), int(fields[1]))
            except (OSError, ValueError, IndexError):
                # Exited between listdir and open: its last reading moves to "gone" below.
                continue
        for tid, (run, wait) in self._last.items():
            if tid not in now:
                self._gone_oncpu += run
                self._gone_wait += wait
        self._last = now
        return ThreadTotals(
            oncpu_ns=self._gone_oncpu + sum(r for r, _ in now.values()),
            runq_delay_ns=self._gone_wait + sum(w for _, w in now.values()),
            threads=len(now),
        )
