"""Pure renderers for what the kernel sources saw (``Snapshot.kernel``): the sampled per-P
timeline's source line, the Ms (OS threads) table, syscalls per P and the on-CPU goroutines.

Each panel says its source first: "perf samples" (cpu-clock samples, 99 Hz by default:
statistical, one sample stands for one sampling period of CPU), "tracepoints"
(sched_switch/sched_wakeup, sys_enter/sys_exit: exact counts and times) or "runtime counters"
(the runtime's own ticks, read from its memory); and when a source was off, how to turn it on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from rich.console import Group
from rich.table import Table
from rich.text import Text

from gmpmon.model.kernelview import KernelView, ProcSyscalls, ThreadView
from gmpmon.model.snapshot import Snapshot, Span
from gmpmon.tui.render import WINDOW_MARK, fmt_count, fmt_ns, fmt_q, panel_table

TOP_THREADS = 12
TOP_GOROUTINES = 8
TOP_NAMES = 3  # syscall names per P row
TOP_PROCS = 16  # syscall rows (Ps) at most: beyond, the Ps with most syscalls
INLINE_PS = 8  # per-P figures on one line at most (the busiest)
DIM = "dim"
# What to type to turn an opt-in source on (docs/modes.md "Kernel sources": their cost).
SCHED_ON = "--kernel samples,sched"
SYSCALLS_ON = "--kernel samples,sched,syscalls"
SAMPLE_SOURCE = "perf samples"
SCHED_SOURCE = "tracepoints sched_switch/sched_wakeup"
SYSCALL_SOURCE = "tracepoints sys_enter/sys_exit"


def sample_hz(k: KernelView) -> str:
    """The sampling rate as users say it: 999 Hz is "1 kHz"."""
    p = k.samples.period_ns
    hz = round(1e9 / p) if p > 0 else 0
    return "1 kHz" if 990 <= hz <= 1010 else f"{hz} Hz"


def samples_ran(k: KernelView | None) -> bool:
    return k is not None and k.sources.get("samples") == "samples" and not k.samples.off


def sampled_timeline(snap: Snapshot) -> dict[int, tuple[Span, ...]] | None:
    """The perf samples' per-P timeline, when the Procs strip is drawn from it where no probe
    saw the P: sample mode, and default mode between its windows, with the sampler on.
    None: draw the P timeline as it is (full mode: the probes see every transition)."""
    k = snap.kernel
    if snap.window not in ("sampled", "windows") or k is None or not samples_ran(k):
        return None
    return k.timeline


def timeline_label(snap: Snapshot) -> str:
    """The strip header's prefix: what the cells are drawn from ("" = probe events)."""
    if snap.window != "sampled":
        return ""
    k = snap.kernel
    if k is not None and samples_ran(k):
        return "sampled: "
    return "sampled: "


def timeline_source(snap: Snapshot) -> Text:
    """One line under the legend: where each glyph of the strip came from."""
    out = Text(style=DIM)
    k = snap.kernel
    if snap.window == "sampled":
        if k is not None and samples_ran(k):
            out.append(f"timeline sampled ({sample_hz(k)} {SAMPLE_SOURCE}): running and "
                       f"searching where a sample saw the P's M on a CPU; idle, syscall, GC "
                       f"stop from 50 Hz P status reads; blank: neither (the P's M off a "
                       f"CPU, e.g. in the kernel's run queue, or it ran < 1 ms)")
        else:
            why = k.samples.off if k is not None and k.samples.off else \
                "perf samples off (--kernel none)"
            out.append(f"timeline sampled (50 Hz P status reads of the runtime's memory); "
                       f"{why}")
    elif snap.window == "windows":
        out.append(f"timeline: probe events inside default mode's windows ({WINDOW_MARK} on "
                   f"the probes line); between them sampled: ")
        if k is not None and samples_ran(k):
            out.append(f"running/searching from {sample_hz(k)} {SAMPLE_SOURCE}, idle/syscall/"
                       f"GC from 50 Hz P status reads, blank: neither")
        else:
            out.append("50 Hz P status reads")
    else:
        out.append("timeline: probe events (every transition)")
    return out


def _m_to_p(snap: Snapshot) -> dict[int, int]:
    return {p.m: p.id for p in snap.procs if p.m}


def _seconds(snap: Snapshot) -> float:
    return max(snap.now - snap.start, 1) / 1e9


def threads_panel(snap: Snapshot, width: int = 80) -> Group | Text | None:
    """Ms: each OS thread's on-CPU time, off-CPU time and kernel run-queue delay (sched
    tracepoints), busiest waiter first; with only the perf samples, their CPU estimate."""
    k = snap.kernel
    if k is None:
        return None
    src = k.sources.get("threads")
    if not k.threads:
        return Text("no thread of the target seen yet", style=DIM)
    ps = _m_to_p(snap)
    if src == "tracepoints":
        return _threads_sched(snap, k, ps, width)
    return _threads_samples(snap, k, ps)


def _runq_share(t: ThreadView) -> float:
    want = t.oncpu_ns + t.runq_ns
    return t.runq_ns / want if want else 0.0


def _threads_sched(snap: Snapshot, k: KernelView, ps: dict[int, int], width: int) -> Group:
    ts = sorted(k.threads, key=lambda t: (-t.runq_ns, -t.oncpu_ns, t.tid))
    on = sum(t.oncpu_ns for t in ts)
    rq = sum(t.runq_ns for t in ts)
    waits = sum(t.runq_waits for t in ts)
    head = Text(no_wrap=True, overflow="ellipsis")
    head.append(f"{len(ts)} Ms", style="bold")
    head.append(f"  on CPU {fmt_ns(on)} ({on / 1e9 / _seconds(snap):.2f} CPUs)"
                f"  kernel run-queue wait {fmt_ns(rq)} in {fmt_count(waits)} waits")
    src = Text(f"source: {SCHED_SOURCE} (exact); CPU~: {SAMPLE_SOURCE}", style=DIM)
    parts: list[Text | Table] = [head]
    lat = k.runq_latency
    if lat is not None and lat.count:
        line = Text()
        line.append("run-queue delay ", style="bold")
        line.append(f"p50 {fmt_q(lat.p50, lat)}  p90 {fmt_q(lat.p90, lat)}  "
                    f"p99 {fmt_q(lat.p99, lat)}  max {fmt_q(lat.max, lat)}")
        line.append("  (runnable -> on a CPU)", style=DIM)
        parts.append(line)
    t = panel_table()
    wide = width >= 96
    cols = ["M", "P", "on CPU", "runq wait", "runq%", "waits", "off CPU"]
    if wide:
        cols += ["preempted", "blocked", "CPU~"]
    for i, c in enumerate(cols):
        t.add_column(c, justify="left" if i < 2 else "right", no_wrap=True)
    period = k.samples.period_ns
    for th in ts[:TOP_THREADS]:
        row = [str(th.tid), f"P{ps[th.tid]}" if th.tid in ps else "-",
               fmt_ns(th.oncpu_ns), fmt_ns(th.runq_ns), f"{100 * _runq_share(th):.0f}%",
               fmt_count(th.runq_waits), fmt_ns(th.offcpu_ns)]
        if wide:
            row += [fmt_count(th.involuntary), fmt_count(th.voluntary),
                    fmt_ns(th.samples * period) if th.samples else "-"]
        t.add_row(*row)
    parts.append(t)
    if len(ts) > TOP_THREADS:
        parts.append(Text(f"+{len(ts) - TOP_THREADS} more threads (less run-queue wait)",
                          style=DIM))
    parts.append(Text("runq wait: runnable, waiting for a CPU (CPU contention the Go "
                      "runtime cannot see); runq%: of the time it wanted a CPU; P: the P "
                      "it holds now" + ("; preempted/blocked: switches out" if wide else ""),
                      style=DIM))
    parts.append(src)
    return Group(*parts)


def _threads_samples(snap: Snapshot, k: KernelView, ps: dict[int, int]) -> Group | Text:
    if not samples_ran(k):
        return Text(k.samples.off or "no kernel source about threads ran", style=DIM)
    ts = sorted(k.threads, key=lambda t: (-t.samples, t.tid))
    period = k.samples.period_ns
    head = Text(no_wrap=True, overflow="ellipsis")
    head.append(f"{len(ts)} Ms sampled", style="bold")
    head.append(f"  CPU~ {fmt_ns(sum(t.samples for t in ts) * period)} "
                f"({sum(t.samples for t in ts)} samples)")
    t = panel_table()
    for i, c in enumerate(("M", "P", "CPU~", "samples")):
        t.add_column(c, justify="left" if i < 2 else "right", no_wrap=True)
    for th in ts[:TOP_THREADS]:
        t.add_row(str(th.tid), f"P{ps[th.tid]}" if th.tid in ps else "-",
                  fmt_ns(th.samples * period), fmt_count(th.samples))
    parts: list[Text | Table] = [head, t]
    if len(ts) > TOP_THREADS:
        parts.append(Text(f"+{len(ts) - TOP_THREADS} more threads", style=DIM))
    parts.append(Text(f"source: {sample_hz(k)} {SAMPLE_SOURCE} (CPU~: samples x "
                      f"{fmt_ns(period)})", style=DIM))
    parts.append(Text(f"off-CPU time and kernel run-queue delay: not measured (the sched "
                      f"tracepoints are off; {SCHED_ON} turns them on, opt-in: ~1% of the "
                      f"target's CPU, docs/modes.md)", style=DIM))
    return Group(*parts)


def inline_per_p(pairs: Iterable[tuple[int, int]], fmt: Callable[[int], str] = fmt_count) -> str:
    """``P0 12  P1 7``: by P id, or, with more than INLINE_PS Ps, the largest ones."""
    items = list(pairs)
    shown = items
    if len(items) > INLINE_PS:
        shown = sorted(sorted(items, key=lambda kv: (-kv[1], kv[0]))[:INLINE_PS])
    text = "  ".join(f"P{p} {fmt(n)}" for p, n in shown)
    return text + (f"  (+{len(items) - len(shown)} Ps)" if len(shown) < len(items) else "")


def _names(row: ProcSyscalls, n: int = TOP_NAMES) -> str:
    return ", ".join(f"{s.name} {fmt_count(s.count)}" for s in row.top[:n])


def syscalls_panel(snap: Snapshot) -> Group | Text | None:
    """Syscalls per P (count, time, top names) from the sys_enter/sys_exit tracepoints; when
    they were off, the runtime's per-P syscall ticks and how to turn them on."""
    k, rv = snap.kernel, snap.runtime
    if k is None and rv is None:
        return None
    if k is not None and k.sources.get("syscalls") == "tracepoints":
        head = Text(no_wrap=True, overflow="ellipsis")
        head.append(f"{fmt_count(k.syscalls)} syscalls", style="bold")
        head.append(f"  {fmt_ns(k.syscall_ns)} in them (summed over threads)")
        if k.syscalls_by_name:
            head.append("  top: " + ", ".join(
                f"{s.name} {fmt_count(s.count)}" for s in k.syscalls_by_name[:4]))
        t = panel_table()
        for i, c in enumerate(("P", "count", "/s", "time", "avg", "top syscalls")):
            t.add_column(c, justify="left" if i in (0, 5) else "right", no_wrap=True)
        secs = _seconds(snap)
        rows = list(k.syscalls_by_p)
        if len(rows) > TOP_PROCS:  # many Ps: those that made the most
            rows = sorted(rows, key=lambda r: (-r.count, r.p))[:TOP_PROCS]
        for row in sorted(rows, key=lambda r: (r.p < 0, r.p)):
            t.add_row("no P" if row.p < 0 else f"P{row.p}", fmt_count(row.count),
                      fmt_count(row.count / secs), fmt_ns(row.ns),
                      fmt_ns(row.ns / row.count) if row.count else "-", _names(row))
        more = len(k.syscalls_by_p) - len(rows)
        extra = [Text(f"+{more} Ps with fewer syscalls", style=DIM)] if more > 0 else []
        return Group(head, t, *extra, Text(
            "no P: made by an M without a P (sysmon, an M whose P was handed off, cgo); "
            "time: entry to exit, blocked time included", style=DIM),
            Text(f"source: {SYSCALL_SOURCE} (exact)", style=DIM))
    parts: list[Text | Table] = []
    if rv is not None and rv.reads and rv.procs:
        line = Text()
        line.append("per P: ", style="bold")
        line.append(inline_per_p((t.p, t.syscalls) for t in rv.procs))
        parts.append(line)
        parts.append(Text("source: runtime counters (p.syscalltick: syscalls through Go's "
                          "entersyscall; no time, no names)", style=DIM))
    parts.append(Text(f"by name and time: not measured (the sys_enter/sys_exit tracepoints "
                      f"are off); {SYSCALLS_ON} turns them on (opt-in: it costs every "
                      f"syscall of the machine while attached, docs/modes.md)", style=DIM))
    return Group(*parts)


def oncpu_panel(snap: Snapshot) -> Group | Text | None:
    """The goroutines most often on a CPU, from the perf samples."""
    k = snap.kernel
    if k is None or k.sources.get("samples") != "samples":
        return None
    s = k.samples
    if s.off:
        return Text(s.off, style="bold #d29922")
    head = Text(no_wrap=True, overflow="ellipsis")
    head.append(f"{fmt_count(s.total)} samples", style="bold")
    head.append(f"  Go {fmt_count(s.go)}  runtime g0 {fmt_count(s.g0)}  kernel "
                f"{fmt_count(s.kernel)}  not in Go {fmt_count(s.not_go)}")
    if k.cpu_by_p:
        head.append("  per P: " + inline_per_p(k.cpu_by_p.items(),
                                          lambda n: fmt_ns(n * s.period_ns)))
    t = panel_table()
    for i, c in enumerate(("G", "CPU~", "share", "Ps", "where")):
        t.add_column(c, justify="right" if i in (1, 2) else "left", no_wrap=True)
    total = max(s.total, 1)
    for g in k.cpu_by_goroutine[:TOP_GOROUTINES]:
        t.add_row(f"G{g.goid}", fmt_ns(g.cpu_ns), f"{100 * g.samples / total:.0f}%",
                  " ".join(str(p) for p in g.procs), g.function)
    return Group(head, t, Text(f"source: {sample_hz(k)} {SAMPLE_SOURCE} (CPU~: samples x "
                               f"{fmt_ns(s.period_ns)}; statistical)", style=DIM))
