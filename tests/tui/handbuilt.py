"""Hand-built Snapshots: deterministic values for TUI tests while no committed recording
exists. Only plain data from the Snapshot contract; no Textual, no clock."""

from __future__ import annotations

from gmpmon.events import Header
from gmpmon.model.snapshot import (
    GoroutineView,
    GState,
    LatencyStats,
    MutexStack,
    ParkReason,
    ProcView,
    PState,
    Snapshot,
    Span,
    StealStats,
)

S = 1_000_000_000
MS = 1_000_000
START = 1_000 * S

HEADER = Header(
    pid=4242,
    exe="/srv/bin/demo",
    go_version="go1.27.3",
    gomaxprocs=4,
    mode="default",
    start_ns=START,
    wall_start=1_767_000_000.0,
    wait_reasons=("", "chan receive", "sync.Mutex.Lock", "sleep", "select"),
    duty_window_ms=200,
    duty_period_ms=1000,
)

_CYCLE = (PState.RUNNING, PState.SEARCHING, PState.RUNNING, PState.IDLE, PState.SYSCALL)


def _timeline(p: int, now: int) -> tuple[Span, ...]:
    spans = []
    t = now - 6 * S
    i = p
    while t < now:
        state = _CYCLE[i % len(_CYCLE)]
        length = (37 + 53 * ((i * 7 + p) % 11)) * MS
        end = min(t + length, now)
        spans.append(Span(t, end, state, 100 + (i % 6) if state is PState.RUNNING else 0))
        t, i = end, i + 1
    return tuple(spans)


def _lat(scale: int, n: int) -> LatencyStats:
    hist = tuple((lo, max(n // (1 + abs(k - 4) * 3), 1)) for k, lo in
                 enumerate(scale << j for j in range(10)))
    return LatencyStats(count=n, p50=scale * 12, p90=scale * 60, p99=scale * 300,
                        max=scale * 2000, sum=scale * 20 * n, histogram=hist)


def snapshot(tick: int = 0) -> Snapshot:
    """The ``tick``-th snapshot of a steady fake run, 250 ms apart: numbers grow with tick."""
    now = START + 10 * S + tick * 250 * MS
    states = (PState.RUNNING, PState.SEARCHING, PState.IDLE, PState.SYSCALL)
    procs = tuple(
        ProcView(
            id=p, state=states[(p + tick) % 4], goid=100 + p if states[(p + tick) % 4]
            is PState.RUNNING else 0, m=5000 + p, runq=(3 * p + tick) % 9,
            running_ns=(6 + p) * S, idle_ns=(4 - p) * S, spinning_ns=S // 2,
            syscall_ns=S // 4, gcstop_ns=MS, executes=1000 * (p + 1) + 37 * tick,
            steals_in=10 * p + tick, steals_out=12 - 3 * p + tick,
            latency=_lat(1000 * (p + 1), 500 + 40 * tick), timeline=_timeline(p, now),
        )
        for p in range(4)
    )
    gs = tuple(
        GoroutineView(
            goid=g, state=(GState.RUNNING, GState.WAITING, GState.RUNNABLE, GState.WAITING,
                           GState.SYSCALL)[g % 5],
            p=g % 4 if g % 5 != 1 else -1,
            wait_reason=("", "chan receive", "", "sync.Mutex.Lock", "")[g % 5],
            since=now - (g * 13 % 97) * MS, parent=1 if g > 1 else 0,
            executes=g * 3 + tick, wait_ns=(g * 7919 % 1000) * MS,
        )
        for g in range(1, 41)
    )
    return Snapshot(
        now=now, start=START, pid=HEADER.pid, exe=HEADER.exe, go_version=HEADER.go_version,
        gomaxprocs=4, mode="default", window="exact",
        events_total=120_000 + 3_000 * tick, events_lost=0 if tick < 2 else 17,
        event_rate=12_345.0 + tick, procs=procs, global_runq=2 + tick % 3, npidle=1,
        nmspinning=1, goroutines=gs, goroutines_live=40, goroutines_created=52 + tick,
        goroutines_exited=12,
        g_state_counts={"running": 8, "runnable": 8, "waiting": 16, "syscall": 8},
        sched_latency=_lat(1000, 2000 + 100 * tick),
        latency_by_reason={"chan receive": _lat(800, 900)},
        park_reasons=(ParkReason("chan receive", 900 + tick, 3 * S),
                      ParkReason("sync.Mutex.Lock", 300, 800 * MS),
                      ParkReason("sleep", 40, 4 * S)),
        steals=StealStats(attempts=400 + tick, count=120, goroutines=180, matrix={
            (0, 1): (50, 20, 30), (1, 0): (40, 10, 12), (2, 3): (30, 25, 40),
            (3, 0): (10, 1, 1)}),
        syscalls=321 + tick, syscalls_blocking=12, handoffs=7, preempt_requested=55,
        preempted=42, stw_count=3, stw_total_ns=900_000, stw_max_ns=400_000,
        stw_spans=((now - 2 * S, now - 2 * S + 40 * MS),),
        mutex_contentions=300, mutex_wait_ns=800 * MS,
        mutex_stacks=(
            MutexStack(("runtime.goexit", "main.worker", "main.(*Cache).Get",
                        "sync.(*Mutex).Lock", "internal/sync.(*Mutex).lockSlow"), 200, 600 * MS),
            MutexStack(("runtime.goexit", "main.flusher", "sync.(*RWMutex).Lock"), 100, 200 * MS),
        ),
        mutex_by_addr={0xc000012345: (250, 700 * MS), 0xc000099999: (50, 100 * MS)},
        illegal_transitions=0,
    )
