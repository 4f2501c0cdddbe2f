"""Attach fast on a saturated machine: gmpmon reads the binary and compiles its BPF program
at a raised CPU priority, and goes back to its own once attached.

A target that keeps every CPU busy (or a loaded machine) made the compile lose to it for
seconds: 9.5 s to the first line on a 64-P target on 2 CPUs, ~0.8 s idle. Nice -15 gives
gmpmon's thread ~35x the weight of a nice-0 thread for that second or two; after the first
line every thread of gmpmon returns to the nice it started with, so the model, the ring
reader and the TUI never compete with the target above their station. The hot-probe
controller process sets its own (realtime) priority: it only sleeps and makes syscalls.

Linux nice values are per thread and inherited by new threads: ``restore`` sets every
thread of the process back. ``GMPMON_NO_BOOST=1`` turns the boost off.
"""

from __future__ import annotations

import contextlib
import os

BOOST_NICE = -15
BOOSTED: int | None = None  # the nice cli.main raised us from, for restore_boost()


def boost() -> int | None:
    """Raise this thread's priority; the nice to restore, or None if nothing changed."""
    if os.environ.get("GMPMON_NO_BOOST", "") not in ("", "0"):
        return None
    try:
        old = os.getpriority(os.PRIO_PROCESS, 0)
        if old <= BOOST_NICE:
            return None
        os.setpriority(os.PRIO_PROCESS, 0, BOOST_NICE)
    except OSError:  # not root / no CAP_SYS_NICE: attach at the usual priority
        return None
    return old


def restore_boost() -> None:
    """What the commands call once attached: undo cli.main's boost (once)."""
    global BOOSTED
    old, BOOSTED = BOOSTED, None
    restore(old)


def restore(old: int | None) -> None:
    """Every thread of gmpmon back to ``old`` (threads started meanwhile inherited the boost)."""
    if old is None:
        return
    try:
        tids = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        tids = [0]
    for tid in tids:
        with contextlib.suppress(OSError):  # a thread that just ended
            os.setpriority(os.PRIO_PROCESS, tid, old)


def name_thread() -> None:
    """Give the calling thread's OS name its Python name (``top -H``, /proc/PID/task/*/comm
    and scripts/bench's per-thread CPU then tell gmpmon's threads apart). Best effort."""
    import ctypes
    import threading

    with contextlib.suppress(Exception):  # not Linux, no libc: names are cosmetic
        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_name = 15
        libc.prctl(pr_set_name, threading.current_thread().name.encode()[:15], 0, 0, 0)
