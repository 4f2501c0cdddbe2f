"""A Snapshot's numbers since an earlier Snapshot of the same run: "recent" instead of "since
attach" (the TUI's last-N-seconds view and its reset key).

Pure and exact for counters (they only grow): counts, times, waits, histograms are the
differences. Percentiles are recomputed from the difference of the histograms (bucket lower
edges, as the model computes them), and a max becomes the top bucket's edge: an exact max of
part of the run was never recorded. What is a state now (P states, run queues, goroutines,
timeline spans) is the newer Snapshot's, unchanged. The kernel sources' block:
model/kerneldelta.py.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Iterable
from typing import TypeVar

from gmpmon.model.gcheap import gc_delta
from gmpmon.model.kerneldelta import kernel_delta
from gmpmon.model.snapshot import (
    LatencyStats,
    MutexStack,
    ParkReason,
    ProcView,
    Snapshot,
    StealStats,
)


def latency_delta(cur: LatencyStats, base: LatencyStats | None) -> LatencyStats:
    if base is None or base.count == 0:
        return cur
    before = dict(base.histogram)
    pairs = [(lo, n - before.get(lo, 0)) for lo, n in cur.histogram]
    pairs = [(lo, n) for lo, n in pairs if n > 0]
    count = sum(n for _, n in pairs)
    if count <= 0:
        return LatencyStats()

    def q(f: float) -> int:
        rank = max(1, -(-round(f * 1000) * count // 1000))
        acc = 0
        for lo, n in pairs:
            acc += n
            if acc >= rank:
                return lo
        return pairs[-1][0]

    return LatencyStats(count=count, p50=q(0.5), p90=q(0.9), p99=q(0.99), max=pairs[-1][0],
                        sum=max(cur.sum - base.sum, 0), histogram=tuple(pairs))


K = TypeVar("K", bound=Hashable)


def _sub_pairs(cur: dict[K, tuple[int, int]],
               base: dict[K, tuple[int, int]]) -> dict[K, tuple[int, int]]:
    """(count, total) pairs counted from ``base`` on; keys whose count did not grow go."""
    out = {}
    for k, (c, w) in cur.items():
        bc, bw = base.get(k, (0, 0))
        if c - bc > 0:
            out[k] = (c - bc, max(w - bw, 0))
    return out


def _stacks(cur: Iterable[MutexStack], base: Iterable[MutexStack]) -> tuple[MutexStack, ...]:
    before = {(s.kind, s.stack): s for s in base}
    out = []
    for s in cur:
        b = before.get((s.kind, s.stack))
        n = s.count - (b.count if b else 0)
        if n > 0:
            out.append(dataclasses.replace(s, count=n, wait_ns=s.wait_ns - (b.wait_ns if b else 0)))
    out.sort(key=lambda s: (-s.wait_ns, -s.count, s.kind, s.stack))
    return tuple(out)


def _proc(p: ProcView, b: ProcView | None) -> ProcView:
    if b is None:
        return p
    return dataclasses.replace(
        p,
        running_ns=p.running_ns - b.running_ns,
        idle_ns=p.idle_ns - b.idle_ns,
        searching_ns=p.searching_ns - b.searching_ns,
        syscall_ns=p.syscall_ns - b.syscall_ns,
        gcstop_ns=p.gcstop_ns - b.gcstop_ns,
        executes=p.executes - b.executes,
        steals_in=p.steals_in - b.steals_in,
        steals_out=p.steals_out - b.steals_out,
        latency=latency_delta(p.latency, b.latency),
    )


def since(cur: Snapshot, base: Snapshot | None) -> Snapshot:
    """``cur``'s numbers counted from ``base`` on (``base`` older, same run)."""
    if base is None or base is cur or base.now > cur.now:
        return cur
    bprocs = {p.id: p for p in base.procs}
    bparks = {r.reason: r for r in base.park_reasons}
    parks = []
    for r in cur.park_reasons:
        b = bparks.get(r.reason)
        n = r.count - (b.count if b else 0)
        if n > 0:
            parks.append(ParkReason(r.reason, n, max(r.wait_ns - (b.wait_ns if b else 0), 0)))
    parks.sort(key=lambda r: (-r.count, r.reason))
    matrix = {}
    for k, (a, c, g) in cur.steals.matrix.items():
        ba, bc, bg = base.steals.matrix.get(k, (0, 0, 0))
        if a - ba > 0 or g - bg > 0:
            matrix[k] = (a - ba, c - bc, g - bg)
    st, bst = cur.steals, base.steals
    stw_count = cur.stw_count - base.stw_count
    stw_max = max((e - s for s, e in cur.stw_spans if s >= base.now), default=0)
    lbr = {k: latency_delta(v, base.latency_by_reason.get(k))
           for k, v in cur.latency_by_reason.items()}
    kernel = kernel_delta(cur.kernel, base.kernel)
    if kernel is not None and kernel.runq_latency is not None and base.kernel is not None:
        kernel = dataclasses.replace(kernel, runq_latency=latency_delta(
            kernel.runq_latency, base.kernel.runq_latency))
    runtime = cur.runtime
    if runtime is not None and base.runtime is not None:
        brt = base.runtime
        bticks = {t.p: t for t in brt.procs}
        runtime = dataclasses.replace(
            runtime, latency=latency_delta(runtime.latency, brt.latency),
            procs=tuple(t if t.p not in bticks else dataclasses.replace(
                t, schedules=max(t.schedules - bticks[t.p].schedules, 0),
                syscalls=max(t.syscalls - bticks[t.p].syscalls, 0)) for t in runtime.procs),
            stw_gc=(latency_delta(runtime.stw_gc, brt.stw_gc)
                    if runtime.stw_gc is not None else None),
            mutex_wait_ns=(max(runtime.mutex_wait_ns - (brt.mutex_wait_ns or 0), 0)
                           if runtime.mutex_wait_ns is not None else None))
    return dataclasses.replace(
        cur,
        start=base.now,
        events_total=cur.events_total - base.events_total,
        events_lost=cur.events_lost - base.events_lost,
        procs=tuple(_proc(p, bprocs.get(p.id)) for p in cur.procs),
        goroutines_created=cur.goroutines_created - base.goroutines_created,
        goroutines_exited=cur.goroutines_exited - base.goroutines_exited,
        sched_latency=latency_delta(cur.sched_latency, base.sched_latency),
        latency_by_reason={k: v for k, v in lbr.items() if v.count},
        latency_by_reason_proc=_sub_pairs(cur.latency_by_reason_proc,
                                          base.latency_by_reason_proc),
        park_reasons=tuple(parks),
        steals=StealStats(st.attempts - bst.attempts, st.count - bst.count,
                          st.goroutines - bst.goroutines, matrix),
        syscalls=cur.syscalls - base.syscalls,
        syscalls_blocking=cur.syscalls_blocking - base.syscalls_blocking,
        syscall_exits=cur.syscall_exits - base.syscall_exits,
        handoffs=cur.handoffs - base.handoffs,
        preempt_requested=cur.preempt_requested - base.preempt_requested,
        preempted=cur.preempted - base.preempted,
        gosched=cur.gosched - base.gosched,
        stw_count=stw_count,
        stw_total_ns=cur.stw_total_ns - base.stw_total_ns,
        stw_max_ns=stw_max if stw_count else 0,
        stw_reasons=_sub_pairs(cur.stw_reasons, base.stw_reasons),
        mutex_contentions=cur.mutex_contentions - base.mutex_contentions,
        mutex_wait_ns=cur.mutex_wait_ns - base.mutex_wait_ns,
        mutex_stacks=_stacks(cur.mutex_stacks, base.mutex_stacks),
        mutex_by_addr=_sub_pairs(cur.mutex_by_addr, base.mutex_by_addr),
        waits_by_kind=_sub_pairs(cur.waits_by_kind, base.waits_by_kind),
        wait_stacks=_stacks(cur.wait_stacks, base.wait_stacks),
        mutex_sampling=(cur.mutex_sampling[0] - base.mutex_sampling[0],
                        cur.mutex_sampling[1]),
        illegal_transitions=cur.illegal_transitions - base.illegal_transitions,
        late_events=cur.late_events - base.late_events,
        unseen_wakes=cur.unseen_wakes - base.unseen_wakes,
        windows=cur.windows - base.windows,
        windows_covered_ns=max(cur.windows_covered_ns - base.windows_covered_ns, 0),
        runtime=runtime,
        gc=gc_delta(cur.gc, base.gc),
        kernel=kernel,
    )
