"""Snapshot -> the summary JSON (docs/summary-schema.md), the text report, interval lines.

Pure: strings and dicts out, the caller prints or writes them. The text report keeps the
bcc manners: under 80 columns, a latency histogram drawn as bars, top-N tables.
"""

from __future__ import annotations

from typing import Any

from gmpmon.findings.render import attribution_json, findings_json
from gmpmon.findings.render import text_lines as findings_text
from gmpmon.kernelreport import kernel_summary, kernel_text
from gmpmon.model.hist import upper_edge
from gmpmon.model.snapshot import LatencyStats, PState, Snapshot
from gmpmon.report_runtime import block_sources, census_summary, runtime_lines, runtime_summary

SCHEMA_VERSION = 3
WIDTH = 80


def _lat(ls: LatencyStats, *, histogram: bool = True) -> dict[str, Any]:
    d: dict[str, Any] = {
        "count": ls.count,
        "p50": ls.p50,
        "p90": ls.p90,
        "p99": ls.p99,
        "max": ls.max,
        "sum": ls.sum,
    }
    if histogram:
        d["histogram"] = [[lo, n] for lo, n in ls.histogram]
    return d


def _cost(snap: Snapshot) -> dict[str, Any] | None:
    c = snap.cost
    if c is None:
        return None
    return {"estimated_pct": round(c.estimated_pct, 4), "budget_pct": c.budget_pct,
            "windows": snap.windows, "covered_s": round(snap.windows_covered_ns / 1e9, 6),
            "cost_ns": c.cost_ns, "target_cpu_ns": c.target_cpu_ns, "overstays": c.overstays,
            "bursts": c.bursts, "cut_short": c.cut_short, "triggers": len(snap.triggers)}


def summary(snap: Snapshot, *, top: int = 10) -> dict[str, Any]:
    """The versioned --summary-json document. Same Snapshot -> same dict (sorted, no clock)."""
    return {
        "schema_version": SCHEMA_VERSION,
        "target": {
            "pid": snap.pid,
            "exe": snap.exe,
            "go_version": snap.go_version,
            "gomaxprocs": snap.gomaxprocs,
        },
        "mode": snap.mode,
        "window": snap.window,
        "windows": {"count": snap.windows, "covered_ns": snap.windows_covered_ns},
        "cost": _cost(snap),
        "duration_s": round(max(0, snap.now - snap.start) / 1e9, 6),
        "events": {"total": snap.events_total, "lost": snap.events_lost, "late": snap.late_events,
                   "dropped": dict(snap.dropped)},
        "illegal_transitions": snap.illegal_transitions,
        "procs": [
            {
                "id": p.id,
                "running_ns": p.running_ns,
                "idle_ns": p.idle_ns,
                "spinning_ns": p.spinning_ns,
                "syscall_ns": p.syscall_ns,
                "gcstop_ns": p.gcstop_ns,
                "executes": p.executes,
                "steals_in": p.steals_in,
                "steals_out": p.steals_out,
                "sched_latency_ns": _lat(p.latency, histogram=False),
            }
            for p in snap.procs
        ],
        "steals": {
            "attempts": snap.steals.attempts,
            "count": snap.steals.count,
            "goroutines": snap.steals.goroutines,
            "matrix": [
                {"thief": t, "victim": v, "attempts": a, "count": c, "goroutines": g}
                for (t, v), (a, c, g) in sorted(snap.steals.matrix.items())
            ],
        },
        "park_reasons": {
            r.reason: {"count": r.count, "wait_ns": r.wait_ns} for r in snap.park_reasons
        },
        "sched_latency_ns": _lat(snap.sched_latency),
        "sched_latency_by_reason_ns": {
            name: _lat(ls, histogram=False) for name, ls in sorted(snap.latency_by_reason.items())
        },
        "syscalls": {
            "count": snap.syscalls,
            "blocking": snap.syscalls_blocking,
            "handoffs": snap.handoffs,
        },
        "preemptions": {
            "requested": snap.preempt_requested,
            "preempted": snap.preempted,
            "gosched": snap.gosched,
        },
        "gc_stw": {
            "count": snap.stw_count,
            "total_ns": snap.stw_total_ns,
            "max_ns": snap.stw_max_ns,
            "by_reason": {k: {"count": c, "total_ns": t} for k, (c, t) in snap.stw_reasons.items()},
        },
        "goroutines": {
            "created": snap.goroutines_created,
            "exited": snap.goroutines_exited,
            "live": snap.goroutines_live,
            "states": dict(snap.g_state_counts),
            "wakes_without_ready": snap.unseen_wakes,
        },
        "mutex": {
            "contentions": snap.mutex_contentions,
            "wait_ns": snap.mutex_wait_ns,
            "top": [
                {"stack": list(s.stack), "count": s.count, "wait_ns": s.wait_ns}
                for s in snap.mutex_stacks[:top]
            ],
            "by_addr": [
                {"addr": f"0x{a:x}", "count": c, "wait_ns": w}
                for a, (c, w) in sorted(
                    snap.mutex_by_addr.items(), key=lambda kv: (-kv[1][1], kv[0])
                )[:top]
            ],
        },
        # Every blocking wait gmpmon measured, by what it waited for (sync.Mutex included;
        # RWMutex, WaitGroup and other semaphores from semacquire1).
        "waits_by_kind": {
            k: {"count": c, "wait_ns": w} for k, (c, w) in snap.waits_by_kind.items()
        },
        "waits_top": [
            {"kind": s.kind, "stack": list(s.stack), "count": s.count, "wait_ns": s.wait_ns}
            for s in snap.wait_stacks[:top]
        ],
        "sources": dict(sorted(snap.sources.items())),
        # schema v2: where each block's numbers come from, and the trap-free blocks.
        "block_sources": block_sources(snap),
        "runtime": runtime_summary(snap.runtime),
        "census": census_summary(snap.runtime.census if snap.runtime else None),
        "findings": findings_json(snap),  # gmpmon.findings, most severe first
        "latency_attribution": attribution_json(snap.latency_attribution),
        **({"kernel": kernel_summary(snap.kernel, top=top)} if snap.kernel else {}),
    }


# ---------------------------------------------------------------- text


def fmt_ns(ns: float) -> str:
    """Short human duration: 950ns, 12.3µs, 4.5ms, 1.20s."""
    if ns < 1_000:
        return f"{int(ns)}ns"
    if ns < 1_000_000:
        return f"{ns / 1e3:.1f}µs"  # as in the TUI; say() falls back to "us" where needed
    if ns < 1_000_000_000:
        return f"{ns / 1e6:.1f}ms"
    return f"{ns / 1e9:.2f}s"


def _pct(part: int, whole: int) -> str:
    return f"{100.0 * part / whole:5.1f}%" if whole > 0 else "    -"


def _fit(s: str, width: int) -> str:
    return s if len(s) <= width else s[: width - 3] + "..."


def _frame(name: str) -> str:
    # Full import paths, as the TUI and the folded/pprof exports name them (net/http, not http).
    return name


def _hot_note(snap: Snapshot) -> str:
    """What the hot-probe numbers cover when they are not totals (see docs/tui.md)."""
    if snap.window == "windows":
        dur = max(snap.now - snap.start, 1)
        return f"counted in {100 * snap.windows_covered_ns / dur:.0f}% of the time, not totals"
    if snap.window == "sampled":
        return "not measured in sample mode: no hot probes"
    return ""


def _n(n: int, snap: Snapshot) -> str:
    """A hot-probe count: '-' when not measured (sample mode), never 0."""
    return "-" if snap.window == "sampled" else str(n)


def _q(ns: int, ls: LatencyStats) -> str:
    """A percentile from histogram buckets, no more precise than it is: <next edge."""
    edge = upper_edge(ns) if ls.count else None
    return f"<{fmt_ns(edge)}" if edge is not None else fmt_ns(ns)


def latency_bars(ls: LatencyStats, width: int = WIDTH) -> list[str]:
    """runqlat-style power-of-two histogram (bucket pairs merged to powers of two)."""
    if not ls.count:
        return ["  (no scheduling-latency samples)"]
    pow2: dict[int, int] = {}
    for lo, n in ls.histogram:
        k = max(lo, 1).bit_length() - 1
        pow2[k] = pow2.get(k, 0) + n
    lo_k, hi_k = min(pow2), max(pow2)
    peak = max(pow2.values())
    bar_w = width - 44
    out = [f"{'latency':>21} : {'count':<9} distribution"]
    for k in range(lo_k, hi_k + 1):
        n = pow2.get(k, 0)
        rng = f"{fmt_ns(1 << k) if k else '0'} -> {fmt_ns((1 << (k + 1)) - 1)}"
        bar = "*" * (round(bar_w * n / peak) if peak else 0)
        out.append(f"{rng:>21} : {n:<9} |{bar:<{bar_w}}|")
    return out


def text_report(snap: Snapshot, *, top: int = 5) -> str:
    dur = max(0, snap.now - snap.start)
    lines: list[str] = []
    add = lines.append
    add(
        _fit(
            f"gmpmon: pid {snap.pid} {snap.go_version} GOMAXPROCS={snap.gomaxprocs} "
            f"mode={snap.mode} ({snap.window}) {fmt_ns(dur)}",
            WIDTH,
        )
    )
    lost = f", {snap.events_lost} LOST" if snap.events_lost else ""
    add(f"events {snap.events_total}{lost}, illegal transitions {snap.illegal_transitions}")
    if snap.events_lost:
        add("  (lost events: try --mode default, or a bigger ring buffer)")
    if snap.window == "windows":
        add(
            f"  timeline numbers come from {snap.windows} duty-cycle windows "
            f"({fmt_ns(snap.windows_covered_ns)} covered)"
        )
    elif snap.window == "sampled":
        add("  P state times are approximate (sampled)")
    add("")
    add("P    now        running  search    idle syscall   execs  stole stolen  lat p99")
    for p in snap.procs:
        tot = p.running_ns + p.spinning_ns + p.idle_ns + p.syscall_ns + p.gcstop_ns
        add(
            f"P{p.id:<3} {PState(p.state).name.lower():<9} {_pct(p.running_ns, tot):>7} "
            f"{_pct(p.spinning_ns, tot):>7} {_pct(p.idle_ns, tot):>7} "
            f"{_pct(p.syscall_ns, tot):>7} {p.executes:>7} {p.steals_in:>6} "
            f"{p.steals_out:>6} {_q(p.latency.p99, p.latency):>8}"
        )
    add("")
    ls = snap.sched_latency
    add(f"Scheduling latency (runnable -> running): {ls.count} samples")
    add(
        f"  p50 {_q(ls.p50, ls)}  p90 {_q(ls.p90, ls)}  p99 {_q(ls.p99, ls)}  "
        f"max {fmt_ns(ls.max)}  avg {fmt_ns(ls.sum / ls.count) if ls.count else '-'}"
    )
    lines.extend(latency_bars(ls))
    if snap.latency_by_reason:
        add("")
        add(f"{'by wake reason':<28} {'count':>9} {'p50':>9} {'p99':>9} {'max':>9}")
        ranked = sorted(snap.latency_by_reason.items(), key=lambda kv: (-kv[1].count, kv[0]))
        for name, rl in ranked[:top]:
            add(
                f"{_fit(name, 28):<28} {rl.count:>9} {_q(rl.p50, rl):>9} "
                f"{_q(rl.p99, rl):>9} {_q(rl.max, rl):>9}"
            )
    add("")
    hot = _hot_note(snap)
    add(f"{'Top park reasons':<34} {'count':>10} {'total wait':>12} {'avg wait':>10}")
    if hot:
        add(f"  ({hot})")
    elif not snap.park_reasons:
        add("  (none)")
    for r in snap.park_reasons[:top]:
        avg = fmt_ns(r.wait_ns / r.count) if r.count else "-"
        add(f"{_fit(r.reason, 34):<34} {r.count:>10} {fmt_ns(r.wait_ns):>12} {avg:>10}")
    add("")
    st = snap.steals
    add(
        f"Work stealing: {st.attempts} attempts, {st.count} successful, "
        f"{st.goroutines} goroutines taken"
    )
    ids = sorted({k[0] for k in st.matrix} | {k[1] for k in st.matrix})
    if not st.goroutines:
        ids = []  # only failed attempts: nothing to draw
    if ids and len(ids) <= 12:
        add("  goroutines taken, thief (row) from victim (column):")
        add("  " + "thief".ljust(6) + "".join(f"{'P' + str(v):>6}" for v in ids))
        for t in ids:
            cells = "".join(f"{st.matrix.get((t, v), (0, 0, 0))[2] or '.':>6}" for v in ids)
            add(_fit(f"  {'P' + str(t):<6}{cells}", WIDTH))
    elif ids:
        add(f"  ({len(ids)} Ps: matrix omitted, see --summary-json)")
    add("")
    if hot:
        add(f"  (work stealing, syscalls, preemptions done, goroutines: {hot})")
    add(
        f"Syscalls {_n(snap.syscalls, snap)} (blocking {snap.syscalls_blocking}), "
        f"handoffs {snap.handoffs}; preemptions requested {snap.preempt_requested}, "
        f"done {_n(snap.preempted, snap)}"[:WIDTH]
    )
    add(
        f"GC stop-the-world: {snap.stw_count} pauses, total {fmt_ns(snap.stw_total_ns)}, "
        f"max {fmt_ns(snap.stw_max_ns)}"
    )
    add(
        f"Goroutines: {_n(snap.goroutines_created, snap)} created, "
        f"{_n(snap.goroutines_exited, snap)} exited, {_n(snap.goroutines_live, snap)} live (seen)"
    )
    add("")
    add(f"Mutex contention: {snap.mutex_contentions} waits, {fmt_ns(snap.mutex_wait_ns)} total")
    for s in snap.mutex_stacks[:top]:
        add(f"  {fmt_ns(s.wait_ns):>9} {s.count:>8}x")
        frames = [_frame(f) for f in s.stack]
        for f in list(reversed(frames))[:6]:
            add(_fit(f"      {f}", WIDTH))
        if len(frames) > 6:
            add(f"      ... {len(frames) - 6} more frames")
    others = [(k, c, w) for k, (c, w) in snap.waits_by_kind.items() if k != "sync.Mutex"]
    if others:
        add("Other blocking waits: " + ", ".join(
            f"{k} {c}x {fmt_ns(w)}" for k, c, w in sorted(others, key=lambda r: -r[2])))
    lines.extend(runtime_lines(snap.runtime, top=top))
    if snap.kernel is not None:
        lines += kernel_text(snap.kernel, fmt_ns, top=top)
    add("")
    lines.extend(findings_text(snap, width=WIDTH))
    return "\n".join(line.rstrip()[:WIDTH] for line in lines) + "\n"


_LETTER = {
    PState.UNKNOWN: "?",
    PState.RUNNING: "R",
    PState.SEARCHING: "S",
    PState.IDLE: "I",
    PState.SYSCALL: "Y",
    PState.GCSTOP: "G",
}


def interval_line(snap: Snapshot, prev: Snapshot | None) -> str:
    """One schedtrace-like line for the interval since ``prev``.

    ``12.0s P0:R3 P1:S0 grq=4 steals=12 parks=340 lat99=45us lost=0`` — per P its state
    letter (R running, S searching, I idle, Y syscall, G GC stop, ? unknown) and local runq.
    """
    t = (snap.now - snap.start) / 1e9
    steals = snap.steals.count - (prev.steals.count if prev else 0)
    parks = sum(r.count for r in snap.park_reasons) - (
        sum(r.count for r in prev.park_reasons) if prev else 0
    )
    lost = snap.events_lost - (prev.events_lost if prev else 0)
    lat99 = _interval_p99(snap.sched_latency, prev.sched_latency if prev else None)
    head = f"{t:7.1f}s "
    tail = f" grq={snap.global_runq} steal={steals} park={parks} p99={lat99} lost={lost}"
    room = WIDTH - len(head) - len(tail)
    cells = [f"{_LETTER[PState(p.state)]}{p.runq}" for p in snap.procs]
    ps = " ".join(f"P{p.id}:{c}" for p, c in zip(snap.procs, cells, strict=True))
    if len(ps) > room:
        ps = "[" + " ".join(cells) + "]"
    if len(ps) > room:
        ps = "[" + "".join(_LETTER[PState(p.state)] for p in snap.procs) + "]"
    if len(ps) > room:
        ps = ps[: max(room - 4, 0)] + "...]"
    return head + ps + tail


def _interval_p99(cur: LatencyStats, prev: LatencyStats | None) -> str:
    before = dict(prev.histogram) if prev else {}
    delta = [(lo, n - before.get(lo, 0)) for lo, n in cur.histogram]
    delta = [(lo, n) for lo, n in delta if n > 0]
    total = sum(n for _, n in delta)
    if not total:
        return "-"
    rank = -(-99 * total // 100)
    acc = 0
    for lo, n in delta:
        acc += n
        if acc >= rank:
            return _q(lo, cur)
    return "-"
