"""The kernel sources' numbers since an earlier Snapshot (gmpmon.model.delta for KernelView).

Exact where the view keeps whole tables (per thread, per P, per syscall name, samples by
outcome and by P, the run-queue histogram); the bounded top lists (a P's top syscalls, the
most sampled goroutines) subtract the earlier list's row when it had one: a row that entered
a top list after ``base`` counts from attach. The run-queue histogram is delta.py's
(latency_delta). The timeline, long runs and the profile are states and histories, the newer
view's unchanged.
"""

from __future__ import annotations

import dataclasses

from gmpmon.model.kernelview import (
    GoroutineCpu,
    KernelView,
    ProcSyscalls,
    SyscallStat,
    ThreadView,
)

_THREAD_FIELDS = tuple(f.name for f in dataclasses.fields(ThreadView) if f.name != "tid")
_SAMPLE_FIELDS = ("total", "go", "g0", "not_go", "kernel", "records")


def _names(cur: tuple[SyscallStat, ...], base: tuple[SyscallStat, ...]
           ) -> tuple[SyscallStat, ...]:
    before = {s.nr: s for s in base}
    out = []
    for s in cur:
        b = before.get(s.nr)
        n = s.count - (b.count if b else 0)
        if n > 0:
            out.append(dataclasses.replace(s, count=n, ns=max(s.ns - (b.ns if b else 0), 0)))
    out.sort(key=lambda s: (-s.count, s.nr))
    return tuple(out)


def kernel_delta(cur: KernelView | None, base: KernelView | None) -> KernelView | None:
    if cur is None or base is None:
        return cur
    s, bs = cur.samples, base.samples
    samples = dataclasses.replace(
        s, **{f: max(getattr(s, f) - getattr(bs, f), 0) for f in _SAMPLE_FIELDS})
    bt = {t.tid: t for t in base.threads}
    threads = tuple(
        t if t.tid not in bt else dataclasses.replace(
            t, **{f: max(getattr(t, f) - getattr(bt[t.tid], f), 0) for f in _THREAD_FIELDS})
        for t in cur.threads)
    bp = {p.p: p for p in base.syscalls_by_p}
    by_p = []
    for p in cur.syscalls_by_p:
        b = bp.get(p.p)
        if b is None:
            by_p.append(p)
        elif p.count > b.count:
            by_p.append(ProcSyscalls(p.p, p.count - b.count, max(p.ns - b.ns, 0),
                                     _names(p.top, b.top)))
    bg = {g.goid: g for g in base.cpu_by_goroutine}
    gs = []
    for g in cur.cpu_by_goroutine:
        b0 = bg.get(g.goid)
        n = g.samples - (b0.samples if b0 else 0)
        if n > 0:
            gs.append(GoroutineCpu(g.goid, n, n * s.period_ns, g.function, g.procs))
    gs.sort(key=lambda g: (-g.samples, g.goid))
    bsg = {g: (n, ns) for g, n, ns in base.syscalls_by_g}
    per_g = sorted(((g, n - bsg.get(g, (0, 0))[0], max(ns - bsg.get(g, (0, 0))[1], 0))
                    for g, n, ns in cur.syscalls_by_g if n > bsg.get(g, (0, 0))[0]),
                   key=lambda r: (-r[1], r[0]))
    return dataclasses.replace(
        cur,
        samples=samples,
        cpu_by_p={p: n - base.cpu_by_p.get(p, 0) for p, n in cur.cpu_by_p.items()
                  if n > base.cpu_by_p.get(p, 0)},
        cpu_by_goroutine=tuple(gs),
        threads=threads,
        syscalls=max(cur.syscalls - base.syscalls, 0),
        syscall_ns=max(cur.syscall_ns - base.syscall_ns, 0),
        syscalls_by_name=_names(cur.syscalls_by_name, base.syscalls_by_name),
        syscalls_by_p=tuple(by_p),
        syscalls_by_g=tuple(per_g),
    )
