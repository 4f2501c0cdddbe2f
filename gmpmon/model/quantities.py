"""The quantity registry: each quantity gmpmon reports, defined once, with the sources that
can measure it in order of preference.

A :class:`Quantity` lists its :class:`Source` readers best first: probes in full mode, probes
in default mode's duty-cycle windows, the runtime's own counters and histograms, the goroutine
census, perf samples, tracepoints. ``best(snap)`` is the first source that measured the
quantity in this Snapshot, as a :class:`Measured` (value, source, coverage); ``None`` when
nothing did. The summary JSON and the text report take their values from here, so "not
measured" is null or "-" and never 0. /metrics publishes counters that must grow by one
source across scrapes: it keeps the runtime counters' (absent when not read), the
registry's choice after the probes.

Coverage words (docs/summary-schema.md "Quantities"): ``exact`` (every event since attach,
or the runtime's own exact counter), ``windows, N% of the time`` (counted only while default
mode's hot probes were attached), ``~1 in 8 sampled, bucket bounds`` (the runtime's histogram),
``census #N`` (a gauge at the newest walk of allgs), ``sampled`` (P status reads or perf
samples), ``lower bound``; a latency adds ``percentiles are bucket bounds`` (the probes'
histogram; its max was measured) or ``bucket bounds`` (the kernel's counters: max too).
Pure: reads a Snapshot, imports nothing above the model.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gmpmon.events import RT_FEATURE_NAMES, RtFeature
from gmpmon.model.runtime import RuntimeView
from gmpmon.model.snapshot import Snapshot
from gmpmon.model.thinning import thinning

__all__ = ["QUANTITIES", "Measured", "Quantity", "Source", "best", "bucket_edges",
           "max_is_measured", "measure_all"]

# Source names (the words every output prints).
PROBES = "probes"
WINDOWS = "probes (duty-cycle windows)"
COLD = "probes (cold)"
RT_COUNTERS = "runtime counters"
RT_HISTOGRAM = "runtime histogram"
CENSUS = "census"
P_SAMPLES = "memory samples (50 Hz)"
PERF = "perf samples"
TRACEPOINTS = "tracepoints"

EXACT = "exact"
RT_HIST_COVERAGE = "~1 in 8 sampled, bucket bounds"


@dataclass(frozen=True, slots=True)
class Measured:
    """One quantity's value as one source measured it."""

    value: Any  # int, LatencyStats, dict[int, int] (per P), dict[str, int] (by state)
    source: str
    coverage: str

    def describe(self) -> str:
        return self.source if self.coverage == EXACT else f"{self.source}: {self.coverage}"


@dataclass(frozen=True, slots=True)
class Source:
    name: str  # one of the source names above
    when: str  # when it measures (documentation: docs/summary-schema.md)
    read: Callable[[Snapshot], Measured | None]


@dataclass(frozen=True, slots=True)
class Quantity:
    name: str
    meaning: str
    sources: tuple[Source, ...]  # best first

    def best(self, snap: Snapshot) -> Measured | None:
        for s in self.sources:
            m = s.read(snap)
            if m is not None:
                return m
        return None


# ---------------------------------------------------------------- what each mode measured


def _has_probes(snap: Snapshot) -> bool:
    """Hot probes counted the whole run (full mode)."""
    return snap.window == "exact"


def _windows_pct(snap: Snapshot) -> float | None:
    """Default mode: the share of the run hot probes were attached; None when not windowed
    or no window was ever open (then the windows measured nothing)."""
    if snap.window != "windows" or snap.windows_covered_ns <= 0:
        return None
    return 100.0 * snap.windows_covered_ns / max(snap.now - snap.start, 1)


def windows_coverage(snap: Snapshot) -> str:
    pct = _windows_pct(snap)
    return f"windows, {pct:.0f}% of the time" if pct is not None else ""


def _cold(snap: Snapshot) -> bool:
    """Cold probes (STW, hand-off, preemption requests, lockSlow, entersyscallblock) are
    attached in every mode gmpmon captures in; a Snapshot with no event at all had none."""
    return snap.events_total > 0


def _rt(snap: Snapshot, f: RtFeature) -> RuntimeView | None:
    rv = snap.runtime
    if rv is None or not rv.reads or RT_FEATURE_NAMES[f] in rv.missing:
        return None
    return rv


def _full_coverage(snap: Snapshot) -> str:
    """``exact`` only when no record was lost or thinned; else whether the counts stayed
    whole (every total from its in-kernel counter: gmpmon.model.thinning) or not."""
    t = thinning(snap)
    if not t.thinned:
        return EXACT
    return "whole count, records thinned" if t.counts_whole else "records thinned, short"


def _hot(read: Callable[[Snapshot], Any], *, counters: str = "") -> tuple[Source, Source]:
    """The two probe sources of a hot-probe quantity: full mode (exact) and default mode's
    windows. ``counters``: for a latency, the Snapshot.sources table that says when the
    kernel aggregated it into buckets (then its max is a bucket bound too; counts of the
    kernel's counters are exact counts)."""

    def full(snap: Snapshot) -> Measured | None:
        if not _has_probes(snap):
            return None
        return Measured(read(snap), PROBES, _full_coverage(snap) + _bounds(snap))

    def windows(snap: Snapshot) -> Measured | None:
        cov = windows_coverage(snap)
        return Measured(read(snap), WINDOWS, cov + _bounds(snap)) if cov else None

    def _bounds(snap: Snapshot) -> str:
        """A latency's percentiles are bucket bounds; its max too when the kernel counted."""
        if not counters:
            return ""
        if snap.sources.get(counters) == "counters":
            return ", bucket bounds"
        return ", percentiles are bucket bounds"

    return (Source(PROBES, "full mode", full),
            Source(WINDOWS, "default mode, while hot probes are attached", windows))


def _cold_mutex(read: Callable[[Snapshot], Any], sampled: bool) -> Source:
    """lockSlow's probes, every wait traced (``sampled`` False) or, when the budget's
    governor traced 1 in N of them for a while (``sampled`` True), each such wait weighed N:
    an estimate, after the runtime's own counter where it has one."""

    def f(snap: Snapshot) -> Measured | None:
        n, every_max = snap.mutex_sampling
        paused = sum(c.paused_ns for c in snap.cost.cut_back) if snap.cost else 0
        if not _cold(snap) or (n > 0 or paused > 0) != sampled:
            return None
        if not sampled:
            return Measured(read(snap), COLD, EXACT)
        said = []
        if n:
            said.append(f"sampled 1 in up to {every_max} while over budget ({n} waits "
                        "traced), scaled")
        if paused:
            pct = 100.0 * paused / max(snap.now - snap.start, 1)
            said.append(f"its sites not linked {min(pct, 100):.0f}% of the time: a lower bound")
        return Measured(read(snap), COLD, "; ".join(said))

    return Source(COLD, "every mode, lockSlow is a cold probe" + (
        "; traced 1 in N while over the budget" if sampled else ""), f)


def _cold_source(read: Callable[[Snapshot], Any], why: str = "") -> Source:
    def f(snap: Snapshot) -> Measured | None:
        return Measured(read(snap), COLD, EXACT) if _cold(snap) else None

    return Source(COLD, why or "every mode, cold probes are always attached", f)


# ---------------------------------------------------------------- runtime and census readers


def _rt_latency(snap: Snapshot) -> Measured | None:
    rv = _rt(snap, RtFeature.LATENCY)
    return None if rv is None else Measured(rv.latency, RT_HISTOGRAM, RT_HIST_COVERAGE)


def _rt_goroutines(snap: Snapshot) -> Measured | None:
    rv = _rt(snap, RtFeature.GOROUTINES)
    return None if rv is None else Measured(rv.goroutines, RT_COUNTERS, "gcount(), last read")


def _census_goroutines(snap: Snapshot) -> Measured | None:
    c = snap.runtime.census if snap.runtime else None
    if c is None:
        return None
    cut = (", cut short" if c.cut else "") + (f", {c.skipped} Gs unreadable" if c.skipped else "")
    return Measured(c.goroutines, CENSUS, f"census #{c.seq}{cut}")


def _census_states(snap: Snapshot) -> Measured | None:
    c = snap.runtime.census if snap.runtime else None
    if c is None:
        return None
    by: dict[str, int] = {}
    for r in c.rows:
        if not r.system:
            by[r.state] = by.get(r.state, 0) + r.count
    cut = ", cut short" if c.cut else ""
    return Measured(dict(sorted(by.items())), CENSUS, f"census #{c.seq}{cut}")


def _rt_syscalls(snap: Snapshot) -> Measured | None:
    rv = _rt(snap, RtFeature.P_TICKS)
    if rv is None or not rv.procs:
        return None
    return Measured(sum(p.syscalls for p in rv.procs), RT_COUNTERS, "per-P syscalltick")


def _tp_syscalls(snap: Snapshot) -> Measured | None:
    k = snap.kernel
    if k is None or "syscalls" not in k.sources:
        return None
    return Measured(k.syscalls, TRACEPOINTS, "every syscall of the process, not only Go's")


def _rt_schedules(snap: Snapshot) -> Measured | None:
    rv = _rt(snap, RtFeature.P_TICKS)
    if rv is None or not rv.procs:
        return None
    return Measured({p.p: p.schedules for p in rv.procs}, RT_COUNTERS,
                    "schedtick: executes that start a time slice, lower bound")


def _rt_stw(snap: Snapshot) -> Measured | None:
    rv = _rt(snap, RtFeature.STW)
    if rv is None or rv.stw_gc is None:
        return None
    return Measured(rv.stw_gc.count, RT_HISTOGRAM, "GC pauses only, bucket bounds")


def _rt_mutex_wait(snap: Snapshot) -> Measured | None:
    rv = _rt(snap, RtFeature.MUTEX_WAIT)
    if rv is None or rv.mutex_wait_ns is None:
        return None
    return Measured(rv.mutex_wait_ns, RT_COUNTERS, "~1 in 8 sampled and scaled")


def _gc_cycles(snap: Snapshot) -> Measured | None:
    return None if snap.gc is None else Measured(snap.gc.cycles, "runtime memory", EXACT)


def _p_running(window: str, source: str, coverage: str) -> Source:
    """P running time from the P timeline: probes (full), probes in windows with 50 Hz
    status reads between (default), the status reads alone (sample)."""

    def read(snap: Snapshot) -> Measured | None:
        value = {p.id: p.running_ns for p in snap.procs}
        if snap.window != window:
            return None
        # Windows or samples: measured once any P state was timed (a P read idle ran for a
        # measured 0); a default-mode run without a window or a status read measured none.
        if window != "exact" and not any(
                p.running_ns + p.idle_ns + p.searching_ns + p.syscall_ns + p.gcstop_ns
                for p in snap.procs):
            return None
        return Measured(value, source, coverage)

    when = {"exact": "full mode", "windows": "default mode", "sampled": "sample mode"}[window]
    return Source(source, when, read)


def _perf_running(snap: Snapshot) -> Measured | None:
    k = snap.kernel
    if k is None or "samples" not in k.sources or k.samples.off:
        return None
    per = k.samples.period_ns
    return Measured({p: n * per for p, n in k.cpu_by_p.items()}, PERF, "sampled")


# ---------------------------------------------------------------- the registry


def _q(name: str, meaning: str, *sources: Source) -> Quantity:
    return Quantity(name, meaning, sources)


QUANTITIES: dict[str, Quantity] = {q.name: q for q in (
    _q("sched_latency", "runnable -> running latency of goroutines",
       *_hot(lambda s: s.sched_latency, counters="sched_latency"),
       Source(RT_HISTOGRAM, "every mode, sched.timeToRun", _rt_latency)),
    _q("goroutines_live", "goroutines alive now, as runtime.NumGoroutine counts them "
       "(system goroutines apart)",
       Source(RT_COUNTERS, "every mode, gcount", _rt_goroutines),
       Source(CENSUS, "every mode, walk of allgs", _census_goroutines),
       Source(PROBES, "full mode, when the runtime counters are missing (older recordings)",
              lambda s: Measured(s.goroutines_live, PROBES, "seen since attach, lower bound")
              if _has_probes(s) else None)),
    _q("goroutines_by_state", "user goroutines by state now",
       Source(CENSUS, "every mode, walk of allgs", _census_states)),
    _q("goroutines_created", "goroutines created since attach",
       *_hot(lambda s: s.goroutines_created)),
    _q("goroutines_exited", "goroutines that exited since attach",
       *_hot(lambda s: s.goroutines_exited)),
    _q("syscalls", "syscalls made by goroutines (entersyscall)",
       *_hot(lambda s: s.syscalls),
       Source(RT_COUNTERS, "every mode, syscalltick", _rt_syscalls),
       Source(TRACEPOINTS, "--kernel syscalls", _tp_syscalls)),
    _q("syscalls_blocking", "syscalls entered with entersyscallblock",
       _cold_source(lambda s: s.syscalls_blocking)),
    _q("handoffs", "Ps handed off (handoffp)", _cold_source(lambda s: s.handoffs)),
    _q("executes", "goroutines started on each P (execute)",
       *_hot(lambda s: {p.id: p.executes for p in s.procs}),
       Source(RT_COUNTERS, "every mode, schedtick", _rt_schedules)),
    _q("p_running_ns", "time each P ran a goroutine",
       _p_running("exact", PROBES, EXACT),
       _p_running("windows", WINDOWS, "probes in windows, 50 Hz status reads between"),
       _p_running("sampled", P_SAMPLES, "sampled"),
       Source(PERF, "--kernel samples", _perf_running)),
    _q("steals", "goroutines stolen from other Ps' run queues",
       *_hot(lambda s: s.steals.goroutines)),
    _q("parks", "parks (gopark) by wait reason", *_hot(lambda s: s.park_reasons)),
    _q("preempt_requested", "preemption requests (preemptone)",
       _cold_source(lambda s: s.preempt_requested)),
    _q("preempted", "goroutines preempted", *_hot(lambda s: s.preempted),
       Source(COLD, "every mode, gopreempt_m only", lambda s: Measured(
           s.preempted, COLD, "gopreempt_m only, lower bound") if _cold(s) else None)),
    _q("gosched", "voluntary runtime.Gosched", *_hot(lambda s: s.gosched)),
    _q("stw", "stop-the-world pauses", _cold_source(lambda s: s.stw_count),
       Source(RT_HISTOGRAM, "Go 1.22+, stwTotalTimeGC", _rt_stw)),
    _q("mutex_waits", "contended sync.Mutex waits (lockSlow)",
       _cold_mutex(lambda s: s.mutex_contentions, False),
       _cold_mutex(lambda s: s.mutex_contentions, True)),
    _q("mutex_wait_ns", "time goroutines waited for a sync.Mutex",
       _cold_mutex(lambda s: s.mutex_wait_ns, False),
       Source(RT_COUNTERS, "Go 1.21+, totalMutexWaitTime", _rt_mutex_wait),
       _cold_mutex(lambda s: s.mutex_wait_ns, True)),
    _q("gc_cycles", "GC cycles since attach",
       Source("runtime memory", "every mode, memstats.numgc", _gc_cycles)),
)}


def best(snap: Snapshot, name: str) -> Measured | None:
    return QUANTITIES[name].best(snap)


def measure_all(snap: Snapshot) -> dict[str, Measured | None]:
    return {name: q.best(snap) for name, q in QUANTITIES.items()}


def max_is_measured(m: Measured, snap: Snapshot) -> bool:
    """Percentiles are always bucket bounds; the max is measured only when probes timed each
    wait (not the kernel's counters, not the runtime's histogram)."""
    return m.source in (PROBES, WINDOWS) and snap.sources.get("sched_latency") != "counters"


def bucket_edges(m: Measured, go_version: str) -> tuple[int, ...] | None:
    """The lower edges of the histogram a latency came from: the runtime's own layout
    (1.19: 720 buckets, 1.21+: 160), or None for gmpmon's (gmpmon.model.hist)."""
    if m.source != RT_HISTOGRAM:
        return None
    from gmpmon.model.rthist import bucket_bounds

    return bucket_bounds(720 if go_version.startswith("go1.19") else 160)
