"""Scheduling view: run latency, park reasons, the steal matrix, the event counters and the
GC and heap panel (gmpmon/tui/gcpanel.py)."""

from __future__ import annotations

from typing import Literal

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Grid
from textual.reactive import reactive
from textual.widgets import Static

from gmpmon.model.runtime import bucket_bounds
from gmpmon.model.snapshot import Snapshot
from gmpmon.tui.gcpanel import gc_panel, gc_shown
from gmpmon.tui.kernel import inline_per_p
from gmpmon.tui.measure import (
    NOT_MEASURED,
    Coverage,
    count_header,
    coverage,
    hot_count,
    hot_rate,
    rate_header,
)
from gmpmon.tui.render import (
    BUCKET_NOTE,
    NS_PER_S,
    fmt_count,
    fmt_ns,
    fmt_q,
    latency_line,
    latency_spark,
    panel_table,
)
from gmpmon.tui.widgets.findings import attribution_panel
from gmpmon.tui.widgets.scroll import KeyScroll

MATRIX_MAX_PS = 12  # above this the matrix is too wide for 80 columns: list the top pairs
TOP_PAIRS = 10


def _table(*columns: str) -> Table:
    t = panel_table()
    for i, c in enumerate(columns):
        t.add_column(c, justify="left" if i == 0 else "right", no_wrap=True)
    return t


def _not_measured(cov: Coverage, what: str) -> Text:
    return Text(f"{what}: {cov.note()} (no hot probes)", style="dim")


def runtime_latency(snap: Snapshot) -> Text | None:
    """The runtime's own run-latency histogram (sched.timeToRun: every goroutine, no trap,
    every mode), when the capture read it: exact counts where the probes see a part."""
    rv = snap.runtime
    if rv is None or not rv.reads or rv.latency.count == 0:
        return None
    lat = rv.latency
    edges = runtime_edges(snap.go_version)
    text = Text("runtime: ", style="bold")
    text.append(f"p50 {fmt_q(lat.p50, lat, edges)}  p90 {fmt_q(lat.p90, lat, edges)}  "
                f"p99 {fmt_q(lat.p99, lat, edges)}  max {fmt_q(lat.max, lat, edges)}")
    text.append(f"  ({rv.latency_note}, no probes)", style="dim")
    return text


def runtime_edges(go_version: str) -> tuple[int, ...]:
    """Bucket edges of the runtime's timeHistogram: 16 sub-buckets before go1.21, 4 after."""
    try:
        minor = int(go_version.removeprefix("go").split(".")[1])
    except (IndexError, ValueError):
        minor = 99
    return bucket_bounds(720 if minor < 21 else 160)


RUNTIME_SOURCE = ("source: runtime counters (~1 in 8 transitions): sched.timeToRun, the "
                  "runtime's own histogram behind /sched/latencies:seconds")


def runtime_latency_panel(snap: Snapshot) -> Group | None:
    """Sample mode's run latency: the runtime's own histogram, drawn as the probes' is."""
    rv = snap.runtime
    if rv is None or not rv.reads:
        return None
    lat = rv.latency
    if lat.count == 0:
        return Group(Text("runtime counters: no goroutine transition timed yet", style="dim"),
                     Text(RUNTIME_SOURCE, style="dim"))
    edges = runtime_edges(snap.go_version)
    head = Text(f"n={fmt_count(lat.count)}  p50 {fmt_q(lat.p50, lat, edges)}  "
                f"p90 {fmt_q(lat.p90, lat, edges)}  p99 {fmt_q(lat.p99, lat, edges)}  "
                f"max {fmt_q(lat.max, lat, edges)}")
    spark, axis = latency_spark(lat)
    return Group(head, spark, axis, Text(RUNTIME_SOURCE, style="dim"),
                 Text(BUCKET_NOTE, style="dim"))


def latency_panel(snap: Snapshot) -> Group | Text:
    cov = coverage(snap)
    rt = runtime_latency(snap)
    if not cov.hot:
        missing = _not_measured(cov, "probed run latency")
        panel = runtime_latency_panel(snap)
        return Group(panel, missing) if panel is not None else missing
    stats = snap.sched_latency
    spark, axis = latency_spark(stats)
    parts: list[Text] = [Text(latency_line(stats)), spark, axis]
    if rt is not None:
        parts.append(rt)
    note = cov.note()
    parts.append(Text(BUCKET_NOTE + (f"; probes {note}" if note else ""), style="dim"))
    return Group(*parts)


def per_p_table(snap: Snapshot) -> Table | Group:
    cov = coverage(snap)
    t = _table("P", "n", "p50", "p90", "p99", "max", "run%", "search%", "idle%", "sys%")
    for p in snap.procs:
        total = p.running_ns + p.idle_ns + p.searching_ns + p.syscall_ns + p.gcstop_ns
        pct = [f"{100 * v / total:.0f}" if total else "-"
               for v in (p.running_ns, p.searching_ns, p.idle_ns, p.syscall_ns)]
        lat = p.latency
        if cov.hot:
            cells = [fmt_count(lat.count), *(fmt_q(v, lat) for v in (lat.p50, lat.p90,
                                                                       lat.p99, lat.max))]
        else:
            cells = [NOT_MEASURED] * 5
        t.add_row(str(p.id), *cells, *pct)
    if cov.hot:
        return t
    notes = [Text("run% .. sys%: from 50 Hz P status reads (sampled)", style="dim")]
    rv = snap.runtime
    if rv is not None and rv.reads and rv.procs:
        notes.insert(0, Text("scheduled (runtime counters, schedtick): " + inline_per_p(
            (x.p, x.schedules) for x in rv.procs)))
    return Group(t, *notes)


def park_table(snap: Snapshot) -> Table | Text | Group:
    cov = coverage(snap)
    if not cov.hot:
        return _not_measured(cov, "parks")
    if not snap.park_reasons:
        return Text("no parks seen yet" + (f" ({cov.note()})" if cov.note() else ""),
                    style="dim")
    t = _table("reason", count_header(cov), rate_header(cov), "total wait", "avg wait")
    unmeasured = False
    for r in snap.park_reasons:
        if r.wait_ns:
            total, avg = fmt_ns(r.wait_ns), fmt_ns(r.wait_ns / r.count) if r.count else "-"
        else:
            # Woken without a ready (GC workers, injectglist): no wait was measured.
            total = avg = NOT_MEASURED
            unmeasured = True
        t.add_row(r.reason or "?", fmt_count(r.count), hot_rate(r.count, cov), total, avg)
    notes = []
    if not cov.exact:
        notes.append(f"counts {cov.note()}; ~/s: rate over that time")
    if unmeasured:
        notes.append("–: woken with no ready seen (GC workers, netpoll), wait not measured")
    if notes:
        return Group(t, *(Text(n, style="dim") for n in notes))
    return t


def wake_table(snap: Snapshot) -> Table | Text:
    """Run latency split by why the goroutine became runnable (the reason it had parked with,
    or created / preempted / gosched): which wake-ups wait longest for a P."""
    cov = coverage(snap)
    if not cov.hot:
        return _not_measured(cov, "run latency by wake-up")
    if not snap.latency_by_reason:
        return Text("no wake-ups seen yet", style="dim")
    t = _table("woken from", "n", "p50", "p99", "max")
    rows = sorted(snap.latency_by_reason.items(), key=lambda kv: (-kv[1].p99, kv[0]))
    for reason, lat in rows:
        t.add_row(reason or "?", fmt_count(lat.count), fmt_q(lat.p50, lat), fmt_q(lat.p99, lat),
                  fmt_q(lat.max, lat))
    return t


def steal_panel(snap: Snapshot) -> Group | Text:
    cov = coverage(snap)
    if not cov.hot:
        return _not_measured(cov, "work stealing")
    st = snap.steals
    ok = f" ({100 * st.count / st.attempts:.0f}% ok)" if st.attempts else ""
    head = Text(f"attempts {fmt_count(st.attempts)}  steals {fmt_count(st.count)}{ok}  "
                f"goroutines {fmt_count(st.goroutines)}")
    if not cov.exact:
        head.append(f"  ({cov.note()})", style="dim")
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


def counters_table(snap: Snapshot) -> Group:
    """Event counters, hot (left: seen by the hot probes, so windowed in default mode and not
    measured in sample mode) and cold (right: totals in every mode); then stop-the-world."""
    cov = coverage(snap)
    secs = max(snap.now - snap.start, 1) / NS_PER_S
    t = Table(box=None, pad_edge=False, padding=(0, 1), show_header=False, show_edge=False)
    justify: Literal["left", "right"]
    for justify in ("left", "right", "right", "left", "right", "right"):
        t.add_column(justify=justify, no_wrap=True)
    head = "bold dim"
    t.add_row("", Text(count_header(cov), style=head), Text(rate_header(cov), style=head),
              "", Text("count", style=head), Text("/s", style=head))
    rows = [
        ("preempted", snap.preempted, "preempt requests", snap.preempt_requested),
        ("Gosched", snap.gosched, "blocking syscalls", snap.syscalls_blocking),
        ("syscalls", snap.syscalls, "P hand-offs", snap.handoffs),
        ("Gs created", snap.goroutines_created, "", None),
        ("Gs exited", snap.goroutines_exited, "", None),
    ]
    for n1, v1, n2, v2 in rows:
        right = (n2, fmt_count(v2), fmt_count(v2 / secs)) if v2 is not None else ("", "", "")
        t.add_row(n1, hot_count(v1, cov), hot_rate(v1, cov), *right)
    stw = Table(box=None, pad_edge=False, padding=(0, 1), show_edge=False,
                header_style=head)
    stw.add_column("stop-the-world", no_wrap=True)
    for c in ("count", "total", "max"):
        stw.add_column(c, justify="right", no_wrap=True)
    stw.add_row("all", fmt_count(snap.stw_count), fmt_ns(snap.stw_total_ns),
                fmt_ns(snap.stw_max_ns))
    for reason, (count, ns) in sorted(snap.stw_reasons.items(), key=lambda kv: -kv[1][1]):
        stw.add_row(Text(f"  {reason}", style="dim"), fmt_count(count), fmt_ns(ns), "")
    rv = snap.runtime
    if rv is not None and rv.reads and rv.stw_gc is not None:
        g = rv.stw_gc
        stw.add_row(Text("GC (runtime counters)", style="#58a6ff"), fmt_count(g.count),
                    f"~{fmt_ns(g.sum)}", f">={fmt_ns(g.max)}" if g.count else "-")
    parts: list[Table | Text] = [t]
    if not cov.exact:
        parts.append(Text(f"left: {cov.note()}" + ("; ~/s over that time" if cov.hot else ""),
                          style="dim"))
    if not cov.hot:
        parts.append(_syscalls_elsewhere(snap))
    parts.append(stw)
    if rv is not None and rv.reads and rv.stw_gc is not None:
        parts.append(Text("stop-the-world: cold probes (stopTheWorldWithSema to the restart);"
                          " GC (runtime counters): the runtime's stwTotalTimeGC since its "
                          "first read, total from bucket midpoints", style="dim"))
    return Group(*parts)


def _syscalls_elsewhere(snap: Snapshot) -> Text:
    """Sample mode: the syscalls other sources counted (the probes' count is "–")."""
    out = Text(style="dim")
    k, rv = snap.kernel, snap.runtime
    got = []
    if k is not None and k.sources.get("syscalls") == "tracepoints":
        got.append(f"{fmt_count(k.syscalls)} (tracepoints)")
    if rv is not None and rv.reads and rv.procs:
        got.append(f"{fmt_count(sum(x.syscalls for x in rv.procs))} (runtime syscalltick)")
    if got:
        out.append("syscalls: " + ", ".join(got) + "; per P and by name: view 1, Procs")
    else:
        out.append("syscalls: no other source counted them")
    return out


class SchedView(KeyScroll):
    snapshot: reactive[Snapshot | None] = reactive(None, always_update=True)

    def compose(self) -> ComposeResult:
        with Grid(id="sched-grid"):
            yield Static(id="sched-latency", classes="panel")
            yield Static(id="sched-parks", classes="panel")
            yield Static(id="sched-wakes", classes="panel")
            yield Static(id="sched-perp", classes="panel")
            yield Static(id="sched-steals", classes="panel")
            yield Static(id="sched-counters", classes="panel")
            yield Static(id="sched-gc", classes="panel")  # tui/gcpanel.py
            yield Static(id="sched-attrib", classes="panel")  # widgets/findings.py

    def on_mount(self) -> None:
        titles = {
            "sched-latency": "runnable → running latency",
            "sched-counters": "preemption · syscalls · GC",
            "sched-gc": "GC · heap (runtime memory)",
            "sched-perp": "per P",
            "sched-parks": "park reasons",
            "sched-wakes": "latency by wake-up",
            "sched-steals": "work stealing",
            "sched-attrib": "tail latency: what the Ps did",
        }
        for wid, title in titles.items():
            self.query_one(f"#{wid}", Static).border_title = title

    def watch_snapshot(self, snap: Snapshot | None) -> None:
        if snap is None:
            return
        self.query_one("#sched-latency", Static).update(latency_panel(snap))
        self.query_one("#sched-counters", Static).update(counters_table(snap))
        gc = self.query_one("#sched-gc", Static)
        gc.display = gc_shown(snap)
        if gc.display:
            gc.update(gc_panel(snap))
        self.query_one("#sched-perp", Static).update(per_p_table(snap))
        self.query_one("#sched-parks", Static).update(park_table(snap))
        self.query_one("#sched-wakes", Static).update(wake_table(snap))
        self.query_one("#sched-steals", Static).update(steal_panel(snap))
        self.query_one("#sched-attrib", Static).update(attribution_panel(snap.latency_attribution))
