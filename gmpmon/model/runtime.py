"""Model part for the runtime's own counters and the goroutine census (events 40-59).

Pure: RT_* and CENSUS_* events in (capture/runtime_counters.py, capture/census.py), a
:class:`RuntimeView` out. Every number here comes from the target's memory ("runtime
counters", "census"), never from probes, so it means the same in every mode.

Histogram percentiles follow gmpmon.model.hist: the lower bound of the bucket holding the
rank. Bucket bounds are the runtime's own (runtime/histogram.go:timeHistogramMetricsBuckets):
on 1.19 16 linear buckets per power of two, on 1.21+ 4, starting at 2^9 ns.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from gmpmon.events import (
    CENSUS_SITE_BASE,
    RT_FEATURE_NAMES,
    UNKNOWN_FRAME,
    CensusCut,
    EventTuple,
    Kind,
    RtFeature,
    RtHist,
    RtTotal,
)
from gmpmon.model.part import Context, Part
from gmpmon.model.rthist import HIST_BUCKETS, bucket_bounds, hist_stats
from gmpmon.model.values import LatencyStats
from gmpmon.model.waitstacks import CensusStack, site_names, stack_frames

__all__ = ["HIST_BUCKETS", "RuntimePart", "RuntimeView", "bucket_bounds", "hist_stats"]

SOURCE_COUNTERS = "runtime counters"
SOURCE_CENSUS = "census"
# The runtime times one goroutine transition in gTrackingPeriod (8): the histogram is a sample.
LATENCY_NOTE = "runtime histogram, ~1 in 8 sampled"


@dataclass(frozen=True, slots=True)
class CensusRow:
    state: str  # "waiting", "runnable", ... (Header.g_status)
    reason: str  # wait reason ("" unless waiting)
    system: bool  # a runtime goroutine (not counted by NumGoroutine)
    count: int
    waited: int = 0  # goroutines with g.waitsince set (parked across a GC)
    wait_sum_ns: int = 0
    wait_max_ns: int = 0


@dataclass(frozen=True, slots=True)
class CensusSite:
    creator: str  # the function with the go statement (g.gopc)
    start: str  # the goroutine's function (g.startpc)
    count: int


@dataclass(frozen=True, slots=True)
class CensusView:
    seq: int  # census number since attach
    ts: int  # when the walk ended
    duration_ns: int
    allglen: int  # allgs entries at the start (dead Gs included)
    walked: int  # G structs read
    cut: tuple[str, ...]  # why it stopped early: "limit", "time", "target exited"; () = complete
    goroutines: int  # user goroutines counted (what NumGoroutine counts)
    system: int  # runtime goroutines counted
    rows: tuple[CensusRow, ...]  # by count desc
    sites: tuple[CensusSite, ...]  # top creation sites of user goroutines, by count desc
    source: str = SOURCE_CENSUS
    # Where they are parked: groups by (state, wait reason, stack, creation site), largest
    # first; None when this capture took no stacks (no unwinder, or a version 1 recording).
    stacks: tuple[CensusStack, ...] | None = None
    # allgs entries skipped: a G pointer outside user space or to no mapped page (the
    # target's memory is not trusted); those Gs are in no count above.
    skipped: int = 0


@dataclass(frozen=True, slots=True)
class ReaderNote:
    """A reader of the target's memory that met a bad value: it stopped (``stopped``), or
    skipped ``skipped`` reads and went on. ``why``: the one line (the first skip's)."""

    part: str  # RT_FEATURE_NAMES
    stopped: bool
    skipped: int
    why: str


@dataclass(frozen=True, slots=True)
class PTicks:
    p: int
    schedules: int  # schedtick delta since attach: goroutines scheduled on this P
    syscalls: int  # syscalltick delta since attach


@dataclass(frozen=True, slots=True)
class RuntimeView:
    """What the runtime itself counted since attach (deltas), and its gauges now."""

    reads: int  # RT_SCHED samples seen
    since: int  # ts of the first sample (the baseline)
    latency: LatencyStats  # sched.timeToRun delta: /sched/latencies:seconds
    goroutines: int  # gcount(): runtime.NumGoroutine, last sample
    allglen: int
    npidle: int
    nmspinning: int
    global_runq: int
    gcwaiting: bool
    gomaxprocs: int
    procs: tuple[PTicks, ...]
    stw_gc: LatencyStats | None  # sched.stwTotalTimeGC delta (None: version lacks it)
    stw_other: LatencyStats | None
    stopping_gc: LatencyStats | None  # time to stop the world, GC
    stopping_other: LatencyStats | None
    mutex_wait_ns: int | None  # totalMutexWaitTime delta (None: version lacks it)
    runtime_lock_wait_ns: int | None
    missing: tuple[str, ...]  # features this target lacks, one line each
    census: CensusView | None
    # Of ``missing``, those whose reader stopped mid-run (the target's memory held an
    # implausible value): what was read before that is kept, nothing after.
    stopped: tuple[str, ...] = field(default=())
    # Every reader that stopped or skipped reads, with why (the report and summary say it).
    failed: tuple[ReaderNote, ...] = field(default=())
    latency_note: str = LATENCY_NOTE
    source: str = SOURCE_COUNTERS
    # Recent goroutine counts (ts, gcount), one per ~100 ms, for a sparkline or a series.
    goroutines_series: tuple[tuple[int, int], ...] = field(default=())


_RT_HISTS = int(Kind.RT_HISTS)
_CUT_NAMES = ((CensusCut.LIMIT, "limit"), (CensusCut.TIME, "time"),
              (CensusCut.TARGET_GONE, "target exited"))


class RuntimePart(Part):
    """Folds RT_* and CENSUS_* events; ``view()`` gives the RuntimeView (None until any)."""

    @classmethod
    def for_model(cls, ctx: Context) -> RuntimePart:
        return cls(ctx.header.g_status, ctx.header.wait_reasons, ctx.stacks)

    def section(self, at: object) -> dict[str, object]:
        return {"runtime": self.view()}

    def __init__(
        self,
        g_status: tuple[str, ...],
        wait_reasons: tuple[str, ...],
        stacks: dict[int, tuple[str, ...]],
        series_len: int = 600,
    ) -> None:
        self.g_status = g_status
        self.wait_reasons = wait_reasons
        self.stacks = stacks  # the model's stack table (census sites live there)
        self._hists: dict[int, list[int]] = {}
        self._hist_stats: dict[int, LatencyStats] = {}
        self._dirty: set[int] = set()
        self._totals: dict[int, int] = {}
        self._has_total: set[int] = set()
        self._missing: set[int] = set()
        self._stopped: set[int] = set()
        self._notes: dict[int, list[int]] = {}  # feature -> [stop note id, skipped, note id]
        self._ticks: dict[int, list[int]] = {}
        self.reads = 0
        self._since = -1
        self._gauges = (0, 0, 0, 0, 0, 0, 0)
        self._series: list[tuple[int, int]] = []
        self._series_len = series_len
        self._census: CensusView | None = None
        self._building: dict[str, object] | None = None
        self._stacks_seen = False  # a CENSUS_STACK was ever seen: stacks are measured
        self._groups: list[list[int]] = []  # this walk's [sid, site, a0, n, waited, sum, max]

    def handlers(self) -> list[tuple[int, Callable[[EventTuple], None]]]:
        return [
            (Kind.RT_HIST, self.on_hist),
            (Kind.RT_HISTS, self.on_hist),
            (Kind.RT_SCHED, self.on_sched),
            (Kind.RT_TOTAL, self.on_total),
            (Kind.RT_PTICK, self.on_ptick),
            (Kind.RT_MISSING, self.on_missing),
            (Kind.RT_SKIPPED, self.on_skipped),
            (Kind.CENSUS_BEGIN, self.on_census_begin),
            (Kind.CENSUS_STATE, self.on_census_state),
            (Kind.CENSUS_WAIT, self.on_census_wait),
            (Kind.CENSUS_SITE, self.on_census_site),
            (Kind.CENSUS_END, self.on_census_end),
            (Kind.CENSUS_STACK, self.on_census_stack),
            (Kind.CENSUS_STACK_WAIT, self.on_census_stack_wait),
        ]

    # ------------------------------------------------------------------ counters

    def on_hist(self, e: EventTuple) -> None:
        n = e[3]
        if n not in HIST_BUCKETS:
            return  # not a timeHistogram layout (a damaged or hand-made event): never allocate n
        kind = e[4]
        hist = self._hists.get(kind)
        if hist is None or len(hist) != n + 2:
            hist = self._hists[kind] = [0] * (n + 2)
        if e[1] != _RT_HISTS:
            i = e[5]
            if 0 <= i < n + 2:
                hist[i] += e[6]
                self._dirty.add(kind)
            return
        # Four packed buckets (histpack.hist_buckets' layout) unpacked inline: on Prometheus
        # ~500 RT_HISTS a second, a list of pairs each was a tenth of sample mode's model.
        a0, a1 = e[5], e[6]
        moved = False
        for b in (a0 & 0xFFFFFFFF, a0 >> 32, a1 & 0xFFFFFFFF, a1 >> 32):
            if b and (b & 0x3FF) < n + 2:
                hist[b & 0x3FF] += b >> 10
                moved = True
        if moved:
            self._dirty.add(kind)

    def on_sched(self, e: EventTuple) -> None:
        a0, a1 = e[5], e[6]
        self._gauges = (
            e[4],
            a0 & 0xFFFFFFFF,
            a1 & 0xFFFF,
            (a1 >> 16) & 0xFFFF,
            a0 >> 32,
            (a1 >> 32) & 1,
            (a1 >> 40) & 0xFFFF,
        )
        if self._since < 0:
            self._since = e[0]
        self.reads += 1
        series = self._series
        if not series or e[0] - series[-1][0] >= 100_000_000:
            series.append((e[0], e[4]))
            if len(series) > self._series_len:
                del series[: len(series) - self._series_len]

    def on_total(self, e: EventTuple) -> None:
        self._totals[e[4]] = self._totals.get(e[4], 0) + e[6]

    def on_ptick(self, e: EventTuple) -> None:
        row = self._ticks.get(e[2])
        if row is None:
            self._ticks[e[2]] = [e[5], e[6]]
        else:
            row[0] += e[5]
            row[1] += e[6]

    def on_missing(self, e: EventTuple) -> None:
        self._missing.add(e[5])
        if e[6] == 1:
            self._stopped.add(e[5])
            self._notes.setdefault(e[5], [0, 0, 0])[0] = e[4]

    def on_skipped(self, e: EventTuple) -> None:
        note = self._notes.setdefault(e[5], [0, 0, 0])
        note[1] += max(e[6], 0)
        note[2] = note[2] or e[4]

    def _failed(self) -> tuple[ReaderNote, ...]:
        def text(sid: int) -> str:
            got = self.stacks.get(sid) if sid else None
            return got[0] if got else ""

        return tuple(
            ReaderNote(RT_FEATURE_NAMES.get(f, f"feature {f}"), f in self._stopped, n,
                       text(stop_sid) or text(skip_sid))
            for f, (stop_sid, n, skip_sid) in sorted(self._notes.items()))

    # ------------------------------------------------------------------ census

    def on_census_begin(self, e: EventTuple) -> None:
        self._building = {"seq": e[5], "allglen": e[6], "rows": {}, "sites": []}
        self._groups = []

    def on_census_stack(self, e: EventTuple) -> None:
        self._stacks_seen = True
        if self._building is not None:
            self._groups.append([e[4], e[3], e[5], e[6], 0, 0, 0])

    def on_census_stack_wait(self, e: EventTuple) -> None:
        if self._building is not None and self._groups:
            g = self._groups[-1]
            g[4], g[5], g[6] = e[3], e[4], e[6]

    def _stack_groups(self) -> tuple[CensusStack, ...] | None:
        if not self._stacks_seen:
            return None
        out = []
        for sid, site, a0, n, waited, wsum, wmax in self._groups:
            status, reason = a0 & 0xFFFF, (a0 >> 16) & 0xFFFF
            creator, start = site_names(self.stacks, site)
            out.append(CensusStack(
                stack_id=sid,
                state=self._name(self.g_status, status),
                reason=self._name(self.wait_reasons, reason) if status == 4 else "",
                system=bool(a0 >> 32),
                frames=stack_frames(self.stacks, sid),
                creator=creator,
                start=start,
                count=n,
                waited=waited,
                wait_sum_ns=wsum,
                wait_max_ns=wmax,
            ))
        out.sort(key=lambda s: (s.system, -s.count, -s.wait_max_ns, s.stack_id, s.creator))
        return tuple(out)

    def _row(self, a0: int) -> list[int]:
        b = self._building
        assert b is not None
        rows = b["rows"]
        assert isinstance(rows, dict)
        row: list[int] | None = rows.get(a0)
        if row is None:
            row = rows[a0] = [0, 0, 0, 0]
        return row

    def on_census_state(self, e: EventTuple) -> None:
        if self._building is not None:
            self._row(e[5])[0] += e[6]

    def on_census_wait(self, e: EventTuple) -> None:
        if self._building is not None:
            row = self._row(e[5])
            row[1] += e[3]
            row[2] += e[4]
            row[3] = max(row[3], e[6])

    def on_census_site(self, e: EventTuple) -> None:
        b = self._building
        if b is not None:
            sites = b["sites"]
            assert isinstance(sites, list)
            sites.append((e[5], e[6]))

    def on_census_end(self, e: EventTuple) -> None:
        b, self._building = self._building, None
        if b is None:
            return
        rows_in = b["rows"]
        sites_in = b["sites"]
        assert isinstance(rows_in, dict) and isinstance(sites_in, list)
        rows: list[CensusRow] = []
        user = system = 0
        for a0, (count, waited, wsum, wmax) in rows_in.items():
            status, reason, sysg = a0 & 0xFFFF, (a0 >> 16) & 0xFFFF, bool(a0 >> 32)
            if sysg:
                system += count
            else:
                user += count
            rows.append(
                CensusRow(
                    state=self._name(self.g_status, status),
                    reason=self._name(self.wait_reasons, reason) if status == 4 else "",
                    system=sysg,
                    count=count,
                    waited=waited,
                    wait_sum_ns=wsum,
                    wait_max_ns=wmax,
                )
            )
        rows.sort(key=lambda r: (r.system, -r.count, r.state, r.reason))
        sites: list[CensusSite] = []
        for sid, count in sites_in:
            frames = self.stacks.get(sid) if sid >= CENSUS_SITE_BASE else None
            creator, start = (frames[0], frames[-1]) if frames else (UNKNOWN_FRAME,) * 2
            sites.append(CensusSite(creator, start, count))
        sites.sort(key=lambda s: (-s.count, s.creator, s.start))
        cut = tuple(name for bit, name in _CUT_NAMES if e[6] & bit)
        if e[6] & CensusCut.TARGET_GONE and not rows_in and self._census is not None:
            return  # the target was gone before this walk counted anything: keep the last
        seq, allglen = b["seq"], b["allglen"]
        assert isinstance(seq, int) and isinstance(allglen, int)
        self._census = CensusView(
            seq=seq,
            ts=e[0],
            duration_ns=e[4],
            allglen=allglen,
            walked=e[5],
            cut=cut,
            goroutines=user,
            system=system,
            rows=tuple(rows),
            sites=tuple(sites),
            stacks=self._stack_groups(),
            skipped=e[3],
        )

    @staticmethod
    def _name(names: tuple[str, ...], i: int) -> str:
        if 0 <= i < len(names) and names[i]:
            return names[i]
        return f"#{i}"

    # ------------------------------------------------------------------ view

    def _hist(self, kind: int) -> LatencyStats | None:
        counts = self._hists.get(kind)
        if counts is None:
            return None if kind != RtHist.TIME_TO_RUN else LatencyStats()
        stats = self._hist_stats.get(kind)
        if stats is None or kind in self._dirty:  # only recomputed after an RT_HIST
            stats = self._hist_stats[kind] = hist_stats(counts)
            self._dirty.discard(kind)
        return stats

    def view(self) -> RuntimeView | None:
        if not self.reads and self._census is None and not self._missing and not self._notes:
            return None
        has_stw = RtFeature.STW not in self._missing
        g = self._gauges
        stw_default = LatencyStats() if has_stw and self.reads else None

        def stw(kind: int) -> LatencyStats | None:
            got = self._hist(kind)
            return got if got is not None else stw_default

        def total(kind: int, feature: int) -> int | None:
            if feature in self._missing or not self.reads:
                return None
            return self._totals.get(kind, 0)

        return RuntimeView(
            reads=self.reads,
            since=max(self._since, 0),
            latency=self._hist(RtHist.TIME_TO_RUN) or LatencyStats(),
            goroutines=g[0],
            allglen=g[1],
            npidle=g[2],
            nmspinning=g[3],
            global_runq=g[4],
            gcwaiting=bool(g[5]),
            gomaxprocs=g[6],
            procs=tuple(PTicks(p, r[0], r[1]) for p, r in sorted(self._ticks.items())),
            stw_gc=stw(RtHist.STW_TOTAL_GC),
            stw_other=stw(RtHist.STW_TOTAL_OTHER),
            stopping_gc=stw(RtHist.STW_STOPPING_GC),
            stopping_other=stw(RtHist.STW_STOPPING_OTHER),
            mutex_wait_ns=total(RtTotal.MUTEX_WAIT, RtFeature.MUTEX_WAIT),
            runtime_lock_wait_ns=total(RtTotal.RUNTIME_LOCK_WAIT, RtFeature.RUNTIME_LOCK_WAIT),
            missing=tuple(RT_FEATURE_NAMES.get(f, f"feature {f}") for f in sorted(self._missing)),
            census=self._census,
            stopped=tuple(RT_FEATURE_NAMES.get(f, f"feature {f}") for f in sorted(self._stopped)),
            failed=self._failed(),
            goroutines_series=tuple(self._series),
        )
