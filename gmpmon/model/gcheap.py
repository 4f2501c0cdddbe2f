"""Model part for the GC and heap values of the runtime's memory (RT_GC events).

Pure: RT_GC in (capture/gcstats.py), a :class:`GcView` out. Gauges (heap live, goal, GOGC,
GOMEMLIMIT) are the last values read; cumulative values (cycles, pause time, GC CPU) are kept
as the runtime holds them (since the process started) and as deltas since the first read
(since attach). What the target's Go version or binary lacks is None ("not measured").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from gmpmon.events import RT_FEATURE_NAMES, EventTuple, GcField, Kind, RtFeature
from gmpmon.model.part import Context, Part

SOURCE_GC = "runtime memory"
NO_GOAL = (1 << 64) - 1
NO_LIMIT = (1 << 63) - 1  # math.MaxInt64: GOMEMLIMIT unset
GOAL_NOTE_LIMIT = ("GOMEMLIMIT is set and its goal's inputs read torn: the runtime may aim "
                   "lower than this GOGC goal")


@dataclass(frozen=True, slots=True)
class GcView:
    """The GC as the runtime's own memory says, at the last read and since attach."""

    reads: int  # reads with a change seen
    since: int  # ts of the first read (the baseline)
    at: int  # ts of the last read
    cycles_total: int  # memstats.numgc: /gc/cycles/total:gc-cycles
    cycles: int  # completed since attach
    cycles_per_s: float | None  # since attach (None before a second read)
    heap_live_bytes: int  # gcController.heapMarked: /gc/heap/live:bytes
    heap_in_use_bytes: int  # gcController.heapLive: in use now, as the pacer counts
    heap_goal_bytes: int | None  # /gc/heap/goal:bytes; None with GOGC=off and no limit
    gogc: int  # /gc/gogc:percent; -1 = off
    memory_limit_bytes: int | None  # /gc/gomemlimit:bytes; None = no limit (MaxInt64)
    pause_total_ns: int  # memstats.pause_total_ns (stop-the-world wall time), lifetime
    pause_ns: int  # since attach
    pause_per_cycle_ns: int | None  # pause_ns / cycles since attach; None without a cycle
    # work.cpuStats since attach (None: not measured: Go 1.19 has none)
    assist_cpu_ns: int | None  # /cpu/classes/gc/mark/assist:cpu-seconds
    dedicated_cpu_ns: int | None  # /cpu/classes/gc/mark/dedicated (with fractional workers)
    idle_cpu_ns: int | None  # /cpu/classes/gc/mark/idle
    pause_cpu_ns: int | None  # /cpu/classes/gc/pause (a pause x GOMAXPROCS)
    cpu_total_ns: dict[str, int] | None  # the same four, lifetime (as the metrics)
    goal_note: str  # "" or why the goal may differ from the runtime's
    missing: tuple[str, ...]
    source: str = SOURCE_GC


_CPU_NAMES = (
    (GcField.ASSIST_CPU, "assist"),
    (GcField.DEDICATED_CPU, "dedicated"),
    (GcField.IDLE_CPU, "idle"),
    (GcField.PAUSE_CPU, "pause"),
)


class GcPart(Part):
    """Folds RT_GC (and RT_MISSING for GC features); ``view()`` is None until a read."""

    @classmethod
    def for_model(cls, ctx: Context) -> GcPart:
        return cls()

    def __init__(self) -> None:
        self._now: dict[int, int] = {}
        self._first: dict[int, int] = {}
        self._since = -1
        self._at = -1
        self._ts_first_cycle = -1
        self.reads = 0
        self._missing: set[int] = set()

    def handlers(self) -> list[tuple[int, Callable[[EventTuple], None]]]:
        return [(Kind.RT_GC, self.on_gc), (Kind.RT_MISSING, self.on_missing)]

    def section(self, at: object) -> dict[str, object]:
        return {"gc": self.view()}

    def on_gc(self, e: EventTuple) -> None:
        k, v = e[4], e[6]
        if self._since < 0:
            self._since = e[0]
        if e[0] != self._at:
            self.reads += 1
        self._at = e[0]
        self._first.setdefault(k, v)
        self._now[k] = v

    def on_missing(self, e: EventTuple) -> None:
        if e[5] in (RtFeature.GC, RtFeature.GC_CPU):
            self._missing.add(e[5])

    def _delta(self, k: int) -> int | None:
        if k not in self._now:
            return None
        return max(self._now[k] - self._first[k], 0)

    def view(self) -> GcView | None:
        now = self._now
        if GcField.CYCLES not in now:
            return None  # not read (RuntimeView.missing says why, if it was not there)
        cycles = self._delta(GcField.CYCLES) or 0
        pause = self._delta(GcField.PAUSE_TOTAL) or 0
        span = (self._at - self._since) / 1e9
        pct = now.get(GcField.GOGC, 100)
        pct = pct - (1 << 32) if pct >= 1 << 31 else pct
        goal = now.get(GcField.HEAP_GOAL, NO_GOAL)
        limit = now.get(GcField.MEMORY_LIMIT, NO_LIMIT)
        has_cpu = GcField.ASSIST_CPU in now
        return GcView(
            reads=self.reads,
            since=self._since,
            at=self._at,
            cycles_total=now[GcField.CYCLES],
            cycles=cycles,
            cycles_per_s=cycles / span if span > 0 else None,
            heap_live_bytes=now.get(GcField.HEAP_MARKED, 0),
            heap_in_use_bytes=now.get(GcField.HEAP_LIVE, 0),
            # GOGC=off and no limit: the runtime's goal is ~MaxInt64, i.e. none
            heap_goal_bytes=None if goal == NO_GOAL or (pct < 0 and limit >= NO_LIMIT)
            else goal,
            gogc=pct,
            memory_limit_bytes=None if limit >= NO_LIMIT else limit,
            pause_total_ns=now.get(GcField.PAUSE_TOTAL, 0),
            pause_ns=pause,
            pause_per_cycle_ns=pause // cycles if cycles else None,
            assist_cpu_ns=self._delta(GcField.ASSIST_CPU),
            dedicated_cpu_ns=self._delta(GcField.DEDICATED_CPU),
            idle_cpu_ns=self._delta(GcField.IDLE_CPU),
            pause_cpu_ns=self._delta(GcField.PAUSE_CPU),
            cpu_total_ns={n: now[k] for k, n in _CPU_NAMES if k in now} if has_cpu else None,
            goal_note=GOAL_NOTE_LIMIT if limit < NO_LIMIT and now.get(GcField.GOAL_TORN)
            else "",
            missing=tuple(RT_FEATURE_NAMES[f] for f in sorted(self._missing)),
        )


def gc_delta(cur: GcView | None, base: GcView | None) -> GcView | None:
    """``cur`` counted from ``base`` (model/delta.py: the TUI's "last 10 s" and reset):
    cycles, pause and CPU as differences, the rate over that time; gauges stay."""
    if cur is None or base is None:
        return cur

    def sub(a: int | None, b: int | None) -> int | None:
        return None if a is None else max(a - (b or 0), 0)

    cycles = max(cur.cycles - base.cycles, 0)
    pause = max(cur.pause_ns - base.pause_ns, 0)
    span = (cur.at - base.at) / 1e9
    return dataclasses.replace(
        cur, since=base.at, cycles=cycles, cycles_per_s=cycles / span if span > 0 else None,
        pause_ns=pause, pause_per_cycle_ns=pause // cycles if cycles else None,
        assist_cpu_ns=sub(cur.assist_cpu_ns, base.assist_cpu_ns),
        dedicated_cpu_ns=sub(cur.dedicated_cpu_ns, base.dedicated_cpu_ns),
        idle_cpu_ns=sub(cur.idle_cpu_ns, base.idle_cpu_ns),
        pause_cpu_ns=sub(cur.pause_cpu_ns, base.pause_cpu_ns),
    )
