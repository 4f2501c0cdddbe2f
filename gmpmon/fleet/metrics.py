"""Prometheus metric families from process readings. Pure: no /proc, no sockets.

Conventions (https://prometheus.io/docs/practices/naming/): base units in the names
(seconds), ``_total`` on counters (prometheus-client adds it to a CounterMetricFamily), and
only bounded label values: pid, exe basename, Go version, container (cgroup path), and per P
the P id (bounded by GOMAXPROCS) and its state. A goroutine id is never a label.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from gmpmon.fleet.discover import GoProcess
from gmpmon.model.gcheap import GcView

LABELS = ("pid", "exe", "go_version", "container")

# The runtime's timeHistogram has 160 (1.21+) or 720 (1.19) buckets; Prometheus series
# should be few. These boundaries (seconds) are a subset of the runtime's own bucket edges
# (powers of two of ns, which every layout has as edges), so re-bucketing is exact.
LATENCY_LE_NS: tuple[int, ...] = tuple(1 << k for k in range(10, 31, 2))  # 1.02 µs .. 1.07 s


@dataclass(frozen=True, slots=True)
class LatencyHistogram:
    """Cumulative scheduling-latency counts: counts[i] = samples <= LATENCY_LE_NS[i]."""

    le_counts: tuple[int, ...]
    count: int
    sum_s: float  # estimated from bucket midpoints: the runtime keeps no sum


@dataclass(frozen=True, slots=True)
class ProcessReading:
    """What one scrape says about one Go process; None = not measured for this process."""

    proc: GoProcess
    up: bool
    gomaxprocs: int | None = None
    goroutines: int | None = None
    goroutines_by_state: dict[str, int] | None = None
    latency: LatencyHistogram | None = None
    syscalls_total: int | None = None
    handoffs_total: int | None = None
    gc_stw_seconds_total: float | None = None
    mutex_wait_seconds_total: float | None = None
    kernel_runq_delay_seconds_total: float | None = None
    oncpu_seconds_total: float | None = None
    p_state_seconds: dict[tuple[int, str], float] | None = None
    findings: tuple[tuple[str, str], ...] | None = None  # (id, severity)
    gc: GcView | None = None  # the GC and heap from the runtime's memory
    missing: tuple[str, ...] = field(default=())


def _labels(p: GoProcess) -> list[str]:
    return [str(p.pid), p.exe_name, p.go_version, p.container]


def families(readings: Iterable[ProcessReading], scrape_errors: int = 0) -> Iterator[Metric]:
    rs = list(readings)
    up = GaugeMetricFamily(
        "gmpmon_up", "1 if gmpmon could read the Go process at this scrape, else 0",
        labels=LABELS,
    )
    procs = GaugeMetricFamily("gmpmon_gomaxprocs", "GOMAXPROCS of the Go process",
                              labels=LABELS)
    gor = GaugeMetricFamily(
        "gmpmon_goroutines",
        "Goroutines by state (goroutine census of runtime.allgs; state=\"all\": what "
        "runtime.NumGoroutine counts, from the runtime's own counters)",
        labels=[*LABELS, "state"],
    )
    lat = HistogramMetricFamily(
        "gmpmon_sched_latency_seconds",
        "Runnable-to-running latency from the runtime's own histogram (sched.timeToRun, "
        "about 1 in 8 transitions sampled by the runtime), since gmpmon started watching",
        labels=LABELS,
    )
    sysc = CounterMetricFamily(
        "gmpmon_syscalls", "Syscalls made by goroutines (sum of per-P syscalltick deltas)",
        labels=LABELS,
    )
    hand = CounterMetricFamily(
        "gmpmon_handoffs", "Ps handed off from Ms blocked in syscalls (handoffp probe: "
        "serve --mode sample|default|full only; absent without probes)",
        labels=LABELS,
    )
    stw = CounterMetricFamily(
        "gmpmon_gc_stw_seconds", "Time the world was stopped for GC, as the runtime counts it",
        labels=LABELS,
    )
    mutex = CounterMetricFamily(
        "gmpmon_mutex_wait_seconds",
        "Time goroutines spent blocked on sync.Mutex/RWMutex (runtime totalMutexWaitTime)",
        labels=LABELS,
    )
    runq = CounterMetricFamily(
        "gmpmon_kernel_runq_delay_seconds",
        "Time the process's threads (Ms) waited on a kernel run queue, runnable but not "
        "running (/proc/PID/task/*/schedstat): CPU contention from outside Go",
        labels=LABELS,
    )
    cpu = CounterMetricFamily(
        "gmpmon_oncpu_seconds", "Time the process's threads ran on a CPU (schedstat)",
        labels=LABELS,
    )
    pst = CounterMetricFamily(
        "gmpmon_p_state_seconds",
        "Time each P spent in each state, from samples of the P's status in memory",
        labels=[*LABELS, "p", "state"],
    )
    fnd = GaugeMetricFamily(
        "gmpmon_findings",
        "Scheduler findings raised over the process's last 30-60 s (1 per finding; "
        "docs/findings.md; trap-free sources unless serve --mode adds probes)",
        labels=[*LABELS, "id", "severity"],
    )
    gcf = _GcFamilies()
    for r in rs:
        lb = _labels(r.proc)
        up.add_metric(lb, 1.0 if r.up else 0.0)
        if not r.up:
            continue
        if r.gomaxprocs is not None:
            procs.add_metric(lb, r.gomaxprocs)
        if r.goroutines is not None:
            gor.add_metric([*lb, "all"], r.goroutines)
        for state, n in sorted((r.goroutines_by_state or {}).items()):
            gor.add_metric([*lb, state], n)
        if r.latency is not None:
            h = r.latency
            buckets = [(_le(le), float(c)) for le, c in zip(LATENCY_LE_NS, h.le_counts,
                                                             strict=True)]
            buckets.append(("+Inf", float(h.count)))
            lat.add_metric(lb, buckets, sum_value=h.sum_s)
        for family, value in ((sysc, r.syscalls_total), (hand, r.handoffs_total),
                              (stw, r.gc_stw_seconds_total), (mutex, r.mutex_wait_seconds_total),
                              (runq, r.kernel_runq_delay_seconds_total),
                              (cpu, r.oncpu_seconds_total)):
            if value is not None:  # not read: no series (never a 0)
                family.add_metric(lb, value)
        for (p, state), s in sorted((r.p_state_seconds or {}).items()):
            pst.add_metric([*lb, str(p), state], s)
        for fid, sev in r.findings or ():
            fnd.add_metric([*lb, fid, sev], 1.0)
        if r.gc is not None:
            gcf.add(lb, r.gc)
    yield up
    yield procs
    yield gor
    yield lat
    yield sysc
    yield hand
    yield stw
    yield mutex
    yield runq
    yield cpu
    yield pst
    yield fnd
    yield from gcf.all()
    errs = CounterMetricFamily(
        "gmpmon_scrape_errors", "Reads of a target that failed (it exited mid-read, or its "
        "memory did not validate)",
    )
    errs.add_metric([], scrape_errors)
    yield errs


MAX_INT64 = (1 << 63) - 1
GC_SOURCE = "read from the runtime's memory (no probe)"


class _GcFamilies:
    """The GC and heap (gmpmon.model.gcheap): gauges as the runtime holds them, counters
    since gmpmon started watching; a value the Go version lacks has no series."""

    def __init__(self) -> None:
        self.live = GaugeMetricFamily(
            "gmpmon_gc_heap_live_bytes", "Heap marked live by the last GC cycle "
            f"(gcController.heapMarked, /gc/heap/live:bytes), {GC_SOURCE}", labels=LABELS)
        self.goal = GaugeMetricFamily(
            "gmpmon_gc_heap_goal_bytes", "Heap size the next GC cycle aims at, from GOGC "
            f"(/gc/heap/goal:bytes; no series with GOGC=off), {GC_SOURCE}", labels=LABELS)
        self.gogc = GaugeMetricFamily(
            "gmpmon_gc_gogc_percent", f"GOGC (/gc/gogc:percent; -1 = off), {GC_SOURCE}",
            labels=LABELS)
        self.limit = GaugeMetricFamily(
            "gmpmon_gc_memory_limit_bytes", "GOMEMLIMIT (/gc/gomemlimit:bytes; "
            f"9223372036854775807 = no limit), {GC_SOURCE}", labels=LABELS)
        self.cycles = CounterMetricFamily(
            "gmpmon_gc_cycles", "GC cycles completed (memstats.numgc) since gmpmon started "
            f"watching, {GC_SOURCE}", labels=LABELS)
        self.pause = CounterMetricFamily(
            "gmpmon_gc_pause_seconds", "Stop-the-world time of GC cycles (memstats."
            f"pause_total_ns) since gmpmon started watching, {GC_SOURCE}", labels=LABELS)
        self.cpu = CounterMetricFamily(
            "gmpmon_gc_cpu_seconds", "GC CPU time by class (work.cpuStats, "
            "/cpu/classes/gc/*:cpu-seconds; Go 1.20+) since gmpmon started watching, "
            f"{GC_SOURCE}", labels=[*LABELS, "class"])

    def add(self, lb: list[str], gc: GcView) -> None:
        self.live.add_metric(lb, gc.heap_live_bytes)
        if gc.heap_goal_bytes is not None:
            self.goal.add_metric(lb, gc.heap_goal_bytes)
        self.gogc.add_metric(lb, gc.gogc)
        self.limit.add_metric(lb, gc.memory_limit_bytes or MAX_INT64)
        self.cycles.add_metric(lb, gc.cycles)
        self.pause.add_metric(lb, gc.pause_ns / 1e9)
        for cls, ns in (("mark_assist", gc.assist_cpu_ns), ("mark_dedicated",
                        gc.dedicated_cpu_ns), ("mark_idle", gc.idle_cpu_ns),
                        ("pause", gc.pause_cpu_ns)):
            if ns is not None:
                self.cpu.add_metric([*lb, cls], ns / 1e9)

    def all(self) -> Iterator[Metric]:
        yield from (self.live, self.goal, self.gogc, self.limit, self.cycles, self.pause,
                    self.cpu)


def _le(ns: int) -> str:
    return repr(ns / 1e9)
