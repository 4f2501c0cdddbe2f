"""Watching one Go process without a probe: its runtime counters, census and threads.

A :class:`Watch` owns the trap-free readers of one target (gmpmon.capture.runtime_sources:
the runtime's counters and the goroutine census from /proc/PID/mem; the memory sampler of P
states; schedstat of its threads; its cgroup's CPU files) and folds what they read in the
same model part that ``attach`` uses (gmpmon.model.runtime), so a number means the same in
``serve``, ``ps`` and the TUI. The same events feed the findings engine over a sliding
window (gmpmon/fleet/findings.py). ``refresh()`` is called by one background thread for
every watch (``serve``); it never raises for a target that exits: the watch just goes down.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from gmpmon.binary import BinaryInfo
from gmpmon.capture.cgroup import CgroupCpuReader
from gmpmon.capture.runtime_sources import RuntimeSources
from gmpmon.capture.sampler import Sampler, read_gomaxprocs
from gmpmon.errors import GmpmonError
from gmpmon.events import RT_FEATURE_NAMES, EventTuple, Kind, RtFeature
from gmpmon.fleet.discover import GoProcess
from gmpmon.fleet.findings import WINDOW_S, FindingsWindow, sample_header
from gmpmon.fleet.infocache import InfoCache
from gmpmon.fleet.metrics import LATENCY_LE_NS, LatencyHistogram, ProcessReading
from gmpmon.fleet.threads import SchedstatTotals, ThreadTotals
from gmpmon.model.gcheap import GcPart, GcView
from gmpmon.model.runtime import RuntimePart, RuntimeView
from gmpmon.model.snapshot import LatencyStats

P_SAMPLE = int(Kind.P_SAMPLE)


class Watch:
    """Trap-free readings of one Go process."""

    def __init__(
        self,
        proc: GoProcess,
        info: BinaryInfo,
        *,
        census_s: float = 5.0,
        per_p: bool = False,
        findings_window_s: float = WINDOW_S,
    ) -> None:
        self.proc = proc
        self.info = info
        self.per_p = per_p
        self.down_reason: str | None = None
        self._stacks: dict[int, tuple[str, ...]] = {}
        self.part = RuntimePart(info.g_status, info.wait_reasons, self._stacks)
        self._handlers: dict[int, Callable[[EventTuple], None]] = dict(self.part.handlers())
        self.gc = GcPart()
        gc_handlers = dict(self.gc.handlers())
        self._handlers[Kind.RT_GC] = gc_handlers[Kind.RT_GC]
        self.sources: RuntimeSources | None = None
        self.sampler: Sampler | None = None
        self.threads = SchedstatTotals(proc.pid)
        self.missing: list[str] = []
        self._failures_said = 0
        self._p_seconds: dict[tuple[int, str], float] = {}
        self._p_last: dict[int, tuple[int, int]] = {}  # p -> (ts, status)
        self._ps_events: list[EventTuple] = []  # P samples taken between refreshes
        # RuntimeSources validates the live layout first (binary/validate.py) and turns off,
        # with one line each, whatever does not hold: never a number read through offsets
        # or addresses that do not fit this process.
        self.sources = RuntimeSources(info, proc.pid, counters_s=0.0, census_s=census_s,
                                      stacks=False)  # no Unwinder (the file) per process
        self.missing.extend(self.sources.errors)
        self.cgroup = CgroupCpuReader(proc.pid)
        self.findings: FindingsWindow | None = None
        if findings_window_s > 0:
            hdr = sample_header(info, proc.pid, read_gomaxprocs(info, proc.pid),
                                time.monotonic_ns())
            self.findings = FindingsWindow(hdr, window_s=findings_window_s)
        if per_p:
            try:
                self.sampler = Sampler(info, proc.pid)
                self.sources.notes.watch("P sampler", RtFeature.P_SAMPLES, self.sampler.skips)
            except (ValueError, OSError) as e:
                self.missing.append(f"P states: {e}")

    def close(self) -> None:
        if self.sources is not None:
            self.sources.close()
        if self.sampler is not None:
            self.sampler.close()

    def refresh(self, now: int | None = None) -> None:
        """Read everything that is due. Marks the watch down when the target is gone."""
        if self.down_reason is not None:
            return
        now = time.monotonic_ns() if now is None else now
        out: list[EventTuple] = []
        stacks: dict[int, tuple[str, ...]] = {}
        if self.sources is not None:
            failed = self.sources.failed_reads
            self.sources.poll(now, out, stacks)
            self._stacks.update(stacks)
            if self.sources.failed_reads > failed:
                self.down_reason = "target exited"
            for line, _ in self.sources.failures[self._failures_said:]:
                self.missing.append(line)  # a reader that met an implausible value
            self._failures_said = len(self.sources.failures)
            self.missing.extend(self.sources.notes.new_skips())  # one bad pointer: said once
        self._sample_ps(out)
        self.cgroup.read(now, out)
        for e in out:
            h = self._handlers.get(e[1])
            if h is not None:
                h(e)
            elif e[1] == P_SAMPLE:
                self._p_sample(e)
        if self.findings is not None:
            self._ps_events.extend(out)
            self.findings.feed(now, self._ps_events, stacks)
            self._ps_events = []
            self.findings.evaluate()
        if self.threads.read() is None:
            self.down_reason = "target exited"

    def sample_ps(self, now: int) -> None:
        """Only the P states (``--per-p`` samples them more often than the counters)."""
        if self.down_reason is not None:
            return
        out: list[EventTuple] = []
        self._sample_ps(out)
        for e in out:
            if e[1] == P_SAMPLE:
                self._p_sample(e)
        if self.findings is not None:
            self._ps_events.extend(out)  # the findings model takes them at the next refresh

    def _sample_ps(self, out: list[EventTuple]) -> None:
        if self.sampler is not None and self.down_reason is None:
            try:
                self.sampler.sample(out)
            except OSError:
                self.down_reason = "target exited"
            except GmpmonError as e:  # an implausible pointer in the target: no P states
                self.missing.append(f"P states stopped: {e.one_line()}")
                self.sampler.close()
                self.sampler = None

    def _p_sample(self, e: EventTuple) -> None:
        ts, p, status = e[0], e[2], e[5] & 0xFF
        last = self._p_last.get(p)
        if last is not None:
            names = self.info.p_status
            name = names[last[1]] if last[1] < len(names) else f"status{last[1]}"
            k = (p, name)
            self._p_seconds[k] = self._p_seconds.get(k, 0.0) + (ts - last[0]) / 1e9
        self._p_last[p] = (ts, status)

    def reading(self) -> ProcessReading:
        if self.down_reason is not None:
            return ProcessReading(proc=self.proc, up=False, missing=(self.down_reason,))
        return make_reading(
            self.proc, self.part.view(), self.threads.read(), tuple(self.missing),
            p_state_seconds=dict(self._p_seconds) if self.per_p else None,
            findings=self.finding_labels(), gc=self.gc.view(),
        )

    def finding_labels(self) -> tuple[tuple[str, str], ...] | None:
        """(id, severity) of each finding raised now; None when findings are off."""
        if self.findings is None:
            return None
        return tuple((f.id, f.severity.label) for f in self.findings.findings)


def make_reading(
    proc: GoProcess,
    v: RuntimeView | None,
    t: ThreadTotals | None,
    missing: tuple[str, ...],
    *,
    p_state_seconds: dict[tuple[int, str], float] | None = None,
    findings: tuple[tuple[str, str], ...] | None = None,
    handoffs_total: int | None = None,
    gc: GcView | None = None,
) -> ProcessReading:
    """One process's reading from the runtime part's view and its threads' schedstat."""
    if v is None or not v.reads:
        return ProcessReading(
            proc=proc,
            up=t is not None,
            kernel_runq_delay_seconds_total=t.runq_delay_ns / 1e9 if t else None,
            oncpu_seconds_total=t.oncpu_ns / 1e9 if t else None,
            missing=missing,
        )
    by_state: dict[str, int] | None = None
    if v.census is not None:
        by_state = {}
        for row in v.census.rows:
            if row.system:
                continue
            by_state[row.state] = by_state.get(row.state, 0) + row.count
    stw = v.stw_gc.sum / 1e9 if v.stw_gc is not None else None

    def has(f: RtFeature) -> bool:  # a feature this target lacks was not read: no series
        return RT_FEATURE_NAMES[f] not in v.missing

    ticks = has(RtFeature.P_TICKS) and bool(v.procs)
    return ProcessReading(
        proc=proc,
        up=True,
        gomaxprocs=v.gomaxprocs or None,
        goroutines=v.goroutines if has(RtFeature.GOROUTINES) else None,
        goroutines_by_state=by_state,
        latency=latency_histogram(v.latency) if has(RtFeature.LATENCY) else None,
        syscalls_total=sum(p.syscalls for p in v.procs) if ticks else None,
        handoffs_total=handoffs_total,
        gc_stw_seconds_total=stw,
        mutex_wait_seconds_total=(
            v.mutex_wait_ns / 1e9 if v.mutex_wait_ns is not None else None
        ),
        kernel_runq_delay_seconds_total=t.runq_delay_ns / 1e9 if t else None,
        oncpu_seconds_total=t.oncpu_ns / 1e9 if t else None,
        p_state_seconds=p_state_seconds,
        findings=findings,
        gc=gc,
        missing=(*missing, *v.missing),
    )


def latency_histogram(stats: LatencyStats) -> LatencyHistogram:
    """Re-bucket the runtime's histogram onto LATENCY_LE_NS. Every power of two is an edge of
    the runtime's buckets, so a bucket [lo, hi) lies at or below 2^k exactly when lo < 2^k."""
    hist = stats.histogram
    le = []
    for edge in LATENCY_LE_NS:
        le.append(sum(c for lo, c in hist if lo < edge))
    count = sum(c for _, c in hist)
    return LatencyHistogram(le_counts=tuple(le), count=count, sum_s=stats.sum / 1e9)


def watch_or_reason(
    proc: GoProcess, cache: InfoCache, **kw: float | bool
) -> tuple[Watch | None, str | None]:
    """A Watch, or why there cannot be one (one line)."""
    try:
        info = cache.get(proc)
        return Watch(proc, info, **kw), None  # type: ignore[arg-type]
    except GmpmonError as e:
        return None, e.one_line()
    except OSError as e:
        return None, f"cannot read process {proc.pid}: {e.strerror or e}"
