"""The GC and heap values the runtime keeps in its own memory: no probe, no trap.

What runtime/metrics reports for the GC is read from the same fields (metrics.go at each tag):

- ``/gc/cycles/total:gc-cycles`` is ``memstats.numgc``; ``MemStats.PauseTotalNs`` is
  ``memstats.pause_total_ns`` (stop-the-world wall time, every version);
- ``/gc/gogc:percent`` and ``/gc/gomemlimit:bytes`` are ``gcController.gcPercent`` and
  ``gcController.memoryLimit``;
- ``/gc/heap/live:bytes`` (1.21+) is ``gcController.heapMarked``, the heap marked live by the
  last cycle; ``gcController.heapLive`` is what the pacer counts as in use now;
- ``/gc/heap/goal:bytes`` is ``gcController.heapGoal()``, computed here as
  ``mgcpacer.go:heapGoalInternal`` does: the memory limit's goal (``memoryLimitHeapGoal``,
  from ``mappedReady``, ``heapFree`` and ``totalAlloc - totalFree``) when it is lower than
  GOGC's, else GOGC's (``gcPercentHeapGoal``) raised to ``sweepDistMinTrigger`` and to
  ``triggered`` + 64 KiB;
- ``/cpu/classes/gc/{mark/assist,mark/dedicated,mark/idle,pause}:cpu-seconds`` are
  ``work.cpuStats`` (1.20+; its fields are capitalised from 1.25). The runtime adds a cycle's
  mark time there at mark termination, so these move once a cycle, as the metrics do.
  Go 1.19 has no cumulative GC CPU (``gcController.assistTime`` and friends restart each
  cycle): not measured.

Each value goes to the model as an RT_GC event when it changes (the first read sends all).
Offsets from DWARF or the per-version table; the globals are checked on the live process
first (``validate.py``: the ``gc`` group).
"""

from __future__ import annotations

import struct

from gmpmon.binary.info import BinaryInfo
from gmpmon.capture.runtime_counters import absent, global_addr
from gmpmon.capture.targetmem import TargetMemory
from gmpmon.events import NO_P, EventTuple, GcField, Kind, RtFeature

NO_GOAL = (1 << 64) - 1
MAX_INT64 = (1 << 63) - 1
MIN_RUNWAY = 64 << 10  # mgcpacer.go:heapGoalInternal's minRunway
MIN_HEADROOM = 1 << 20  # memoryLimitMinHeapGoalHeadroom (1.19: memoryLimitHeapGoalHeadroom)
HEADROOM_PERCENT = 3  # memoryLimitHeapGoalHeadroomPercent (1.21+)

_CPU = (
    (GcField.ASSIST_CPU, "gcAssistTime"),
    (GcField.DEDICATED_CPU, "gcDedicatedTime"),
    (GcField.IDLE_CPU, "gcIdleTime"),
    (GcField.PAUSE_CPU, "gcPauseTime"),
)
_CTRL = ("gcPercent", "memoryLimit", "heapMarked", "heapLive", "gcPercentHeapGoal",
         "sweepDistMinTrigger", "triggered", "heapFree", "totalAlloc", "totalFree",
         "mappedReady")


def memory_limit_goal(limit: int, heap_free: int, heap_alloc: int, mapped_ready: int,
                      heap_marked: int, minor: int) -> int | None:
    """mgcpacer.go:memoryLimitHeapGoal (1.19: a fixed 1 MiB headroom; 1.21-1.27: 3% of the
    goal, at least 1 MiB). None for a torn read (the runtime retries until
    heapFree + heapAlloc <= mappedReady)."""
    if heap_alloc < 0 or heap_free + heap_alloc > mapped_ready:
        return None
    non_heap = mapped_ready - heap_free - heap_alloc
    overage = max(mapped_ready - limit, 0)
    if non_heap + overage >= limit:
        return heap_marked
    goal = limit - (non_heap + overage)
    headroom = MIN_HEADROOM if minor < 21 else max(goal // 100 * HEADROOM_PERCENT, MIN_HEADROOM)
    goal = headroom if goal < headroom or goal - headroom < headroom else goal - headroom
    return max(goal, heap_marked)


def heap_goal(pct_goal: int, sweep_trigger: int, triggered: int,
              limit_goal: int | None = None) -> int:
    """mgcpacer.go:heapGoalInternal (1.19-1.27 alike): the memory limit's goal when lower,
    else GOGC's with its adjustments."""
    if limit_goal is not None and limit_goal < pct_goal:
        return limit_goal
    goal = pct_goal
    if sweep_trigger > goal:
        goal = sweep_trigger
    if triggered != NO_GOAL and goal < triggered + MIN_RUNWAY:
        goal = triggered + MIN_RUNWAY
    return goal


class GcStats:
    """RT_GC events from one target's memory. ``read()`` with the runtime counters."""

    def __init__(self, info: BinaryInfo, mem: TargetMemory) -> None:
        self.mem = mem
        self.minor = info.go_minor
        o = info.offsets
        self.missing: dict[RtFeature, str] = {}
        addrs = []
        for name in ("runtime.memstats", "runtime.gcController", "runtime.work"):
            addr = global_addr(info, name)
            if addr is None:
                raise ValueError(absent(info, name))
            addrs.append(addr)
        self.memstats, self.ctrl, self.work = addrs
        self.numgc = o["runtime.mstats.numgc"]
        self.pause = o["runtime.mstats.pause_total_ns"]
        c = {f: o[f"runtime.gcControllerState.{f}"] for f in _CTRL}
        self.c_lo = min(c.values())
        self.c_size = max(c.values()) + 8 - self.c_lo
        self.c = {f: v - self.c_lo for f, v in c.items()}
        cpu = [(k, o.get(f"runtime.workType.cpuStats.{f}")) for k, f in _CPU]
        self.cpu = tuple((k, v) for k, v in cpu if v is not None)
        if len(self.cpu) < len(_CPU):
            self.missing[RtFeature.GC_CPU] = (
                f"{info.go_version} has no work.cpuStats (Go 1.20+)")
            self.cpu = ()
        self.cpu_lo = min((v for _, v in self.cpu), default=0)
        self.cpu_size = max((v for _, v in self.cpu), default=-8) + 8 - self.cpu_lo
        self._last: dict[int, int] = {}

    def read(self, now: int, out: list[EventTuple]) -> None:
        """Append RT_GC events for the values that changed. Raises OSError when the target
        is gone."""
        mem = self.mem
        ms_lo = min(self.numgc, self.pause)
        ms = mem.read(self.memstats + ms_lo, max(self.numgc + 4, self.pause + 8) - ms_lo)
        cb = mem.read(self.ctrl + self.c_lo, self.c_size)
        c = self.c

        def u64(f: str) -> int:
            v: int = struct.unpack_from("<Q", cb, c[f])[0]
            return v

        pct = struct.unpack_from("<i", cb, c["gcPercent"])[0]
        limit = u64("memoryLimit") & MAX_INT64
        marked = u64("heapMarked")
        limit_goal = memory_limit_goal(limit, u64("heapFree"),
                                       u64("totalAlloc") - u64("totalFree"),
                                       u64("mappedReady"), marked, self.minor)
        if limit_goal is None:  # torn: once more, as the runtime loops
            cb = mem.read(self.ctrl + self.c_lo, self.c_size)
            limit_goal = memory_limit_goal(limit, u64("heapFree"),
                                           u64("totalAlloc") - u64("totalFree"),
                                           u64("mappedReady"), marked, self.minor)
        vals = {
            GcField.CYCLES: struct.unpack_from("<I", ms, self.numgc - ms_lo)[0],
            GcField.PAUSE_TOTAL: struct.unpack_from("<Q", ms, self.pause - ms_lo)[0],
            GcField.HEAP_MARKED: marked,
            GcField.HEAP_LIVE: u64("heapLive"),
            GcField.GOGC: pct & 0xFFFFFFFF,
            GcField.MEMORY_LIMIT: limit,
            # GOGC=off: gcPercentHeapGoal is ^0, so the limit's goal (if any) decides
            GcField.HEAP_GOAL: heap_goal(u64("gcPercentHeapGoal"), u64("sweepDistMinTrigger"),
                                         u64("triggered"), limit_goal),
            GcField.GOAL_TORN: int(limit_goal is None),
        }
        if self.cpu:
            w = mem.read(self.work + self.cpu_lo, self.cpu_size)
            for k, off in self.cpu:
                vals[k] = struct.unpack_from("<q", w, off - self.cpu_lo)[0] & MAX_INT64
        last = self._last
        for k, v in vals.items():
            if last.get(k) != v:
                last[k] = v
                out.append((now, Kind.RT_GC, NO_P, 0, int(k), 0, v))
