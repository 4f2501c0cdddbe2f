"""Scheduling view: run latency, park reasons, the steal matrix and the event counters."""

from __future__ import annotations

from typing import Literal

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Grid, VerticalScroll
from textual.reactive import reactive
from textual.widgets import Static

from gmpmon.model.snapshot import Snapshot
from gmpmon.tui.render import (
    NS_PER_S,
    fmt_count,
    fmt_ns,
    latency_line,
    latency_spark,
    panel_table,
)

MATRIX_MAX_PS = 12  # above this the matrix is too wide for 80 columns: list the top pairs
TOP_PAIRS = 10


def _table(*columns: str) -> Table:
    t = panel_table()
    for i, c in enumerate(columns):
        t.add_column(c, justify="left" if i == 0 else "right", no_wrap=True)
    return t


def latency_panel(snap: Snapshot) -> Group:
    stats = snap.sched_latency
    spark, axis = latency_spark(stats)
    return Group(Text(latency_line(stats)), spark, axis)


def per_p_table(snap: Snapshot) -> Table:
    t = _table("P", "n", "p50", "p90", "p99", "max", "run%", "spin%", "idle%", "sys%")
    for p in snap.procs:
        total = p.running_ns + p.idle_ns + p.spinning_ns + p.syscall_ns + p.gcstop_ns
        pct = [f"{100 * v / total:.0f}" if total else "-"
               for v in (p.running_ns, p.spinning_ns, p.idle_ns, p.syscall_ns)]
        lat = p.latency
        t.add_row(str(p.id), fmt_count(lat.count), fmt_ns(lat.p50), fmt_ns(lat.p90),
                  fmt_ns(lat.p99), fmt_ns(lat.max), *pct)
    return t


def park_table(snap: Snapshot) -> Table | Text:
    if not snap.park_reasons:
        return Text("no parks seen yet", style="dim")
    secs = max(snap.now - snap.start, 1) / NS_PER_S
    t = _table("reason", "count", "/s", "total wait", "avg")
    for r in snap.park_reasons:
        avg = fmt_ns(r.wait_ns / r.count) if r.count else "-"
        t.add_row(r.reason or "?", fmt_count(r.count), fmt_count(r.count / secs),
                  fmt_ns(r.wait_ns), avg)
    return t


def wake_table(snap: Snapshot) -> Table | Text:
    """Run latency split by why the goroutine became runnable (the reason it had parked with,
    or created / preempted / gosched): which wake-ups wait longest for a P."""
    if not snap.latency_by_reason:
        return Text("no wake-ups seen yet", style="dim")
    t = _table("woken from", "n", "p50", "p99", "max")
    rows = sorted(snap.latency_by_reason.items(), key=lambda kv: (-kv[1].p99, kv[0]))
    for reason, lat in rows:
        t.add_row(reason or "?", fmt_count(lat.count), fmt_ns(lat.p50), fmt_ns(lat.p99),
                  fmt_ns(lat.max))
    return t


def steal_panel(snap: Snapshot) -> Group:
    st = snap.steals
    ok = f" ({100 * st.count / st.attempts:.0f}% ok)" if st.attempts else ""
    head = Text(f"attempts {fmt_count(st.attempts)}  steals {fmt_count(st.count)}{ok}  "
                f"goroutines {fmt_count(st.goroutines)}")
    if not st.matrix:
        return Group(head)
    nprocs = max(len(snap.procs), 1 + max(max(k) for k in st.matrix))
    if nprocs <= MATRIX_MAX_PS:
        t = _table("thief\\victim", *(str(v) for v in range(nprocs)))
        for thief in range(nprocs):
            cells = []
            for victim in range(nprocs):
                got = st.matrix.get((thief, victim))
                cells.append(fmt_count(got[2]) if got and got[2] else "·")
            t.add_row(str(thief), *cells)
        return Group(head, Text("goroutines stolen, thief P (row) from victim P (column)",
                                style="dim"), t)
    t = _table("thief", "victim", "attempts", "ok", "goroutines")
    pairs = sorted(st.matrix.items(), key=lambda kv: (-kv[1][2], -kv[1][0], kv[0]))
    for (thief, victim), (att, succ, gs) in pairs[:TOP_PAIRS]:
        t.add_row(str(thief), str(victim), fmt_count(att), fmt_count(succ), fmt_count(gs))
    return Group(head, t)


def counters_table(snap: Snapshot) -> Table:
    secs = max(snap.now - snap.start, 1) / NS_PER_S
    t = Table(box=None, pad_edge=False, padding=(0, 1), show_header=False, show_edge=False)
    justify: Literal["left", "right"]
    for justify in ("left", "right", "right", "left", "right", "right"):
        t.add_column(justify=justify, no_wrap=True)
    t.add_row("", Text("count", style="bold dim"), Text("/s", style="bold dim"),
              "", Text("count", style="bold dim"), Text("/s", style="bold dim"))
    rows = [
        ("preempt requests", snap.preempt_requested, "syscalls", snap.syscalls),
        ("preempted", snap.preempted, "  blocking", snap.syscalls_blocking),
        ("Gosched", snap.gosched, "P hand-offs", snap.handoffs),
        ("Gs created", snap.goroutines_created, "stop-the-world", snap.stw_count),
        ("Gs exited", snap.goroutines_exited, "", None),
    ]
    for n1, v1, n2, v2 in rows:
        right = (n2, fmt_count(v2), fmt_count(v2 / secs)) if v2 is not None else ("", "", "")
        t.add_row(n1, fmt_count(v1), fmt_count(v1 / secs), *right)
    t.add_row("", "", "", "STW total/max", fmt_ns(snap.stw_total_ns), fmt_ns(snap.stw_max_ns))
    for reason, (count, ns) in sorted(snap.stw_reasons.items(), key=lambda kv: -kv[1][1]):
        t.add_row("", "", "", Text(f"  {reason}", style="dim"), fmt_count(count), fmt_ns(ns))
    if snap.illegal_transitions:
        t.add_row(Text("illegal transitions", style="#f85149"),
                  fmt_count(snap.illegal_transitions), "", "", "", "")
    return t


class SchedView(VerticalScroll):
    snapshot: reactive[Snapshot | None] = reactive(None, always_update=True)

    def compose(self) -> ComposeResult:
        with Grid(id="sched-grid"):
            yield Static(id="sched-latency", classes="panel")
            yield Static(id="sched-parks", classes="panel")
            yield Static(id="sched-wakes", classes="panel")
            yield Static(id="sched-perp", classes="panel")
            yield Static(id="sched-steals", classes="panel")
            yield Static(id="sched-counters", classes="panel")

    def on_mount(self) -> None:
        titles = {
            "sched-latency": "runnable → running latency",
            "sched-counters": "preemption · syscalls · GC",
            "sched-perp": "per P",
            "sched-parks": "park reasons",
            "sched-wakes": "latency by wake-up",
            "sched-steals": "work stealing",
        }
        for wid, title in titles.items():
            self.query_one(f"#{wid}", Static).border_title = title

    def watch_snapshot(self, snap: Snapshot | None) -> None:
        if snap is None:
            return
        self.query_one("#sched-latency", Static).update(latency_panel(snap))
        self.query_one("#sched-counters", Static).update(counters_table(snap))
        self.query_one("#sched-perp", Static).update(per_p_table(snap))
        self.query_one("#sched-parks", Static).update(park_table(snap))
        self.query_one("#sched-wakes", Static).update(wake_table(snap))
        self.query_one("#sched-steals", Static).update(steal_panel(snap))
