"""What ``gmpmon ps`` reads of a process from /proc besides its memory: CPU and RSS, and
whether this host lets gmpmon attach at all.

CPU% is the process's ``utime + stime`` (``/proc/PID/stat`` fields 14-15, clock ticks, dead
threads included) over an interval of wall time, as top(1) computes it: 100% is one CPU.
RSS is ``/proc/PID/statm``'s resident pages. Both are cheap (one read each).
"""

from __future__ import annotations

import os
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
CAP_SYS_ADMIN, CAP_PERFMON, CAP_BPF = 21, 38, 39
UPROBE_PMU = Path("/sys/bus/event_source/devices/uprobe")


def cpu_ticks(pid: int) -> int | None:
    """utime + stime of the process in clock ticks, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        fields = stat[stat.rindex(b")") + 2 :].split()  # comm may hold spaces and ')'
        return int(fields[11]) + int(fields[12])  # stat(5) fields 14 and 15
    except (OSError, ValueError, IndexError):
        return None


def cpu_percent(t0: int | None, t1: int | None, seconds: float) -> float | None:
    """CPU% (100 = one CPU) between two cpu_ticks readings ``seconds`` apart."""
    if t0 is None or t1 is None or seconds <= 0:
        return None
    return max(t1 - t0, 0) / CLK_TCK / seconds * 100


def rss_bytes(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * PAGE
    except (OSError, ValueError, IndexError):
        return None


def host_attach_block() -> str | None:
    """Why no process on this host can be attached by this gmpmon (privileges, no uprobes),
    or None. The cheap part of ``gmpmon doctor``: it says the rest."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return "cannot read /proc/self/status"
    caps = 0
    for line in status.splitlines():
        if line.startswith("CapEff:"):
            caps = int(line.split()[1], 16)
    need = (1 << CAP_BPF) | (1 << CAP_PERFMON)
    if not caps & (1 << CAP_SYS_ADMIN) and caps & need != need:
        return "needs root (CAP_SYS_ADMIN or CAP_BPF+CAP_PERFMON)"
    if not UPROBE_PMU.exists() and not any(
            os.path.exists(p) for p in ("/sys/kernel/tracing/uprobe_events",
                                        "/sys/kernel/debug/tracing/uprobe_events")):
        return "the kernel has no uprobes (gmpmon doctor)"
    return None
