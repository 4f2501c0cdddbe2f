"""Attach fast on a saturated machine: gmpmon reads the binary and compiles its BPF program
at a raised CPU priority, and goes back to its own once attached.

A target that keeps every CPU busy (or a loaded machine) made the compile lose to it for
seconds: 9.5 s to the first line on a 64-P target on 2 CPUs, ~0.8 s idle. Nice -15 gives
gmpmon's thread ~35x the weight of a nice-0 thread for that second or two; after the first
line every thread of gmpmon returns to the nice it started with, so the model, the ring
reader and the TUI never compete with the target above their station. The hot-probe
controller process sets its own (realtime) priority: it only sleeps and makes syscalls.

Nice alone was not enough: with 64 busy target threads and other work on 2 CPUs, the
first line still came after 5-7 s, most of it Python's own start and imports before the BPF
objects even load (py-spy dumps; docs/modes.md has the figures). So the
attaching thread also runs realtime (SCHED_RR, the lowest RT priority), **for at most
RT_MAX_S seconds**: a watchdog thread demotes it to nice -15 then, and restore() does at
once when attached. That bounds what the target can lose to the attach: one CPU for at
most RT_MAX_S (the kernel's RT throttle keeps 5% of it for everything else in any case),
the same CPU time nice -15 takes, only sooner. gmpmon's own threads started meanwhile
inherit it, and are ended with it; the program `gmpmon run` starts sets its policy and nice
back before it execs. The end of a run (LiveSession.close: the last snapshot, the outputs)
is boosted the same way, every thread, for the same reasons.

Linux nice values are per thread and inherited by new threads: ``restore`` sets every
thread of the process back. ``GMPMON_NO_BOOST=1`` turns the boost off.
"""

from __future__ import annotations

import contextlib
import os
import threading

BOOST_NICE = -15
RT_PRIORITY = 1  # the lowest SCHED_RR priority: any RT thread of the system comes first
RT_MAX_S = 2.0
BOOSTED: int | None = None  # the nice cli.main raised us from, for restore_boost()
_rt_over = threading.Event()  # the current boost's: set when its realtime is over


def _tids() -> list[int]:
    try:
        return [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        return [threading.get_native_id()]


def boost(every_thread: bool = False) -> int | None:
    """Raise this thread's priority (``every_thread``: every thread gmpmon has now); the
    nice to restore, or None if nothing changed."""
    if os.environ.get("GMPMON_NO_BOOST", "") not in ("", "0"):
        return None
    tids = _tids() if every_thread else [threading.get_native_id()]
    try:
        old = os.getpriority(os.PRIO_PROCESS, 0)
        if old <= BOOST_NICE:
            return None
        for tid in tids:
            with contextlib.suppress(ProcessLookupError):  # a thread that just ended
                os.setpriority(os.PRIO_PROCESS, tid, BOOST_NICE)
    except OSError:  # not root / no CAP_SYS_NICE: attach at the usual priority
        return None
    _realtime(tids)
    return old


def _realtime(tids: list[int]) -> None:
    """SCHED_RR for ``tids`` (and the threads they start), all ended after RT_MAX_S by a
    watchdog; nothing if refused (no CAP_SYS_NICE, or a cgroup without an RT budget).

    The watchdog is started first, at nice -15: Thread.start waits until the new thread
    runs, and on a saturated machine a thread at the usual priority can wait seconds for
    that. Threads started while realtime inherit it (SCHED_RESET_ON_FORK would make each
    Thread.start of the attach wait that long); the watchdog and restore() end it for every
    thread, and `gmpmon run`'s child sets its own policy back before it execs."""
    global _rt_over
    over = _rt_over = threading.Event()

    def watchdog() -> None:
        # Realtime itself, or a saturated machine could keep it from running on time.
        with contextlib.suppress(OSError):
            os.sched_setscheduler(0, os.SCHED_RR, os.sched_param(RT_PRIORITY))
        if not over.wait(RT_MAX_S):
            _end_realtime(_tids())

    threading.Thread(target=watchdog, name="gmpmon-rt-watchdog", daemon=True).start()
    try:
        for tid in tids:
            with contextlib.suppress(ProcessLookupError):
                os.sched_setscheduler(tid, os.SCHED_RR, os.sched_param(RT_PRIORITY))
    except OSError:
        over.set()
        _end_realtime(tids)


def _end_realtime(tids: list[int]) -> None:
    for tid in tids:
        with contextlib.suppress(OSError):  # a thread that just ended
            if os.sched_getscheduler(tid) != os.SCHED_OTHER:
                os.sched_setscheduler(tid, os.SCHED_OTHER, os.sched_param(0))


def end_realtime_here() -> None:
    """The calling thread (a forked child before exec) back to the usual policy."""
    _end_realtime([0])


def restore_boost() -> None:
    """What the commands call once attached: undo cli.main's boost (once)."""
    global BOOSTED
    old, BOOSTED = BOOSTED, None
    restore(old)


def restore(old: int | None) -> None:
    """Every thread of gmpmon back to ``old`` and to the usual policy (threads started
    meanwhile inherited the boost)."""
    if old is None:
        return
    tids = _tids()
    _rt_over.set()
    _end_realtime(tids)
    for tid in tids:
        with contextlib.suppress(OSError):  # a thread that just ended
            os.setpriority(os.PRIO_PROCESS, tid, old)


def nice_this_thread(nice: int = BOOST_NICE) -> None:
    """The calling thread alone at ``nice`` (best effort; GMPMON_NO_BOOST=1: nothing). For a
    reader whose CPU is already bounded (the census's duty): the nice only decides *when*
    it runs beside a saturating target, not how much."""
    if os.environ.get("GMPMON_NO_BOOST", "") not in ("", "0"):
        return
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), nice)


def name_thread() -> None:
    """Give the calling thread's OS name its Python name (``top -H``, /proc/PID/task/*/comm
    and scripts/bench's per-thread CPU then tell gmpmon's threads apart). Best effort."""
    import ctypes
    import threading

    with contextlib.suppress(Exception):  # not Linux, no libc: names are cosmetic
        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_name = 15
        libc.prctl(pr_set_name, threading.current_thread().name.encode()[:15], 0, 0, 0)
