"""The trap-free readers of the target's memory, driven from capture's reader thread.

:class:`RuntimeSources` owns one /proc/PID/mem handle and two readers: the runtime's counters
(capture/runtime_counters.py, read in capture's thread every ``counters_s``) and the goroutine
census (capture/census.py, in a thread of its own every ``census_s``: a walk of a big program
may take longer than capture may stall its ring buffer). Walks are backed off so that their
CPU time stays under ``CENSUS_DUTY`` of one core. A finished census is handed to capture's
thread and stamped with the time it is handed over, so it never arrives "late" for the model.
"""

from __future__ import annotations

import threading
import time

from gmpmon import priority
from gmpmon.binary.info import BinaryInfo
from gmpmon.capture.census import Census
from gmpmon.capture.censusstacks import census_unwinder
from gmpmon.capture.gcstats import GcStats
from gmpmon.capture.gosites import GoSites
from gmpmon.capture.readernotes import ReaderNotes
from gmpmon.capture.runtime_counters import RuntimeCounters
from gmpmon.capture.sampler import check_layout
from gmpmon.capture.targetmem import TargetMemory
from gmpmon.errors import GmpmonError
from gmpmon.events import NO_P, EventTuple, Kind, RtFeature
from gmpmon.priority import name_thread

# What the runtime counters read (off with them); the census, the P sampler and the GC panel
# have their own.
_COUNTER_FEATURES = tuple(sorted(
    set(RtFeature) - {RtFeature.CENSUS, RtFeature.CENSUS_WAIT, RtFeature.CENSUS_SITES,
                      RtFeature.CENSUS_STACKS, RtFeature.P_SAMPLES,
                      RtFeature.GC, RtFeature.GC_CPU}))
COUNTERS_S = 0.1  # 10 Hz: a read is ~130 µs on a loaded machine, and its deltas feed the model
CENSUS_S = 1.0
CENSUS_DUTY = 0.02

Stacks = dict[int, tuple[str, ...]]


class RuntimeSources:
    def __init__(
        self,
        info: BinaryInfo,
        pid: int,
        *,
        counters_s: float = COUNTERS_S,
        census_s: float = CENSUS_S,
        starting: bool = False,
        sites: GoSites | None = None,
        stacks: bool = True,
        notes: ReaderNotes | None = None,
    ) -> None:
        self.counters_ns = int(counters_s * 1e9)
        self.census_s = census_s
        self.errors: list[str] = []  # one line each, for the user
        # The target's memory is not trusted (capture/targetmem.py): a reader that meets an
        # implausible value stops, or skips that read, says so here and in the model
        # (RT_MISSING a1 = 1, RT_SKIPPED), and the capture goes on.
        self.notes = ReaderNotes() if notes is None else notes
        self.counters: RuntimeCounters | None = None
        self.census: Census | None = None
        self.gc: GcStats | None = None
        off: set[RtFeature] = set()
        # Nothing is read through a global or an offset the live process has not confirmed
        # (binary/validate.py): a feature whose checks fail is off, said in one line.
        layout = check_layout(info, pid, ("procs", "sched", "allgs", "allm", "gc"),
                              starting=starting)
        self.mem = TargetMemory(pid)
        self._gc_missing: dict[RtFeature, str] = {}
        if layout.ok("gc"):
            try:
                self.gc = GcStats(info, self.mem)
                self._gc_missing = self.gc.missing
            except (KeyError, ValueError) as e:
                self._gc_missing[RtFeature.GC] = f"{e}"
        else:
            self._gc_missing[RtFeature.GC] = layout.why("gc")
        off |= set(self._gc_missing)
        if RtFeature.GC in self._gc_missing:  # a version's lack is only RT_MISSING
            self.errors.append(f"GC panel off: {self._gc_missing[RtFeature.GC]}")
        if layout.ok("procs", "sched"):
            try:
                self.counters = RuntimeCounters(info, self.mem)
            except (KeyError, ValueError) as e:
                self.errors.append(f"runtime counters off: {e}")
                off |= set(_COUNTER_FEATURES)
            if self.counters is not None and not layout.ok("allm"):
                self.counters.allm = None  # no pending per-M lock waits: a bit short
            if self.counters is not None:
                self.notes.watch("runtime counters", RtFeature.P_TICKS, self.counters.skips)
                self.notes.watch("runtime counters", RtFeature.RUNTIME_LOCK_WAIT,
                                 self.counters.m_skips)
        else:
            self.errors.append(f"runtime counters off: {layout.why('procs', 'sched')}")
            off |= set(_COUNTER_FEATURES)
        if census_s > 0 and layout.ok("allgs"):
            try:
                # Wait stacks need the binary's pclntab in memory (an Unwinder holds the file):
                # `gmpmon serve` watching many processes goes without (stacks=False).
                unwind = census_unwinder(info, self.mem) if stacks else None  # lazy
                self.census = Census(info, self.mem, sites=sites, unwind=unwind)
                self.notes.watch("goroutine census", RtFeature.CENSUS, self.census.skips)
                if not stacks:  # not asked for: nothing missing to say
                    self.census.missing.pop(RtFeature.CENSUS_STACKS, None)
            except (KeyError, ValueError) as e:
                self.errors.append(f"goroutine census off: {e}")
                off.add(RtFeature.CENSUS)
        elif census_s > 0:
            self.errors.append(f"goroutine census off: {layout.why('allgs')}")
            off.add(RtFeature.CENSUS)
        self._off = sorted(off)
        self._next_counters = time.monotonic_ns()
        self.failed_reads = 0
        self._lock = threading.Lock()
        self._done: list[tuple[list[EventTuple], Stacks]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if self.census is not None:
            self._thread = threading.Thread(target=self._census_loop, name="gmpmon-census",
                                            daemon=True)
            self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self.mem.close()

    def _census_loop(self) -> None:
        name_thread()
        # This thread alone, at attach's nice: the walk's CPU is bounded by its duty, the nice
        # only decides when it runs beside a saturating target (a walk must not set the nice
        # of whichever thread calls it).
        priority.nice_this_thread()
        census = self.census
        assert census is not None
        while not self._stop.is_set():
            events: list[EventTuple] = []
            stacks: Stacks = {}
            try:
                census.walk(events, stacks)
            except Exception as e:  # said in the report: a reader never dies silently
                self.notes.stopped("goroutine census", e, (RtFeature.CENSUS,),
                                   time.monotonic_ns())
                return
            with self._lock:
                self._done.append((events, stacks))
            if census.target_gone:
                return  # nothing more to walk; the last census stands
            self._stop.wait(max(self.census_s, census.last_cpu_s / CENSUS_DUTY))

    @property
    def failures(self) -> list[tuple[str, int]]:
        """(one line, exit code) of each reader that stopped mid-run, in order."""
        return self.notes.stops

    def poll(self, now: int, out: list[EventTuple], stacks: Stacks, *, final: bool = False
             ) -> None:
        """Read the counters when due (always when ``final``: the last deltas), and hand on
        the censuses finished since the last poll."""
        if self._off:
            out.extend((now, Kind.RT_MISSING, NO_P, 0, 0, int(f), 0) for f in self._off)
            self._off = []
        if (self.counters is not None or self.gc is not None) and (
                final or now >= self._next_counters):
            try:
                if self.counters is not None:
                    self.counters.read(now, out)
                    for what, fs, e in self.counters.stopped:  # a part: the rest reads on
                        self.notes.stopped(f"runtime counters' {what}", e, fs, now)
                    self.counters.stopped.clear()
            except OSError:
                self.failed_reads += 1  # the target is gone: capture's liveness check says so
            except GmpmonError as e:
                self.notes.stopped("runtime counters", e, _COUNTER_FEATURES, now)
                self.counters = None
            try:
                if self.gc is not None:
                    self.gc.read(now, out)
            except OSError:
                self.failed_reads += 1
            except GmpmonError as e:
                self.notes.stopped("GC panel", e, (RtFeature.GC, RtFeature.GC_CPU), now)
                self.gc = None
            self._next_counters = now + self.counters_ns
        if self._done:
            with self._lock:
                done, self._done = self._done, []
            for events, new in done:
                stacks.update(new)
                out.extend((now, *e[1:]) for e in events)
        self.notes.take(now, out, stacks)
