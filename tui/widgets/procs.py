"""Procs view: one row per P with its state now and a scrolling timeline strip."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.reactive import reactive
from textual.widget import Widget
from textual.widgets import Static

from gmpmon.model.snapshot import PState, Snapshot
from gmpmon.tui.render import (
    NS_PER_S,
    STATE_STYLE,
    TimelineGrid,
    bar,
    fmt_count,
    fmt_ns,
    legend,
    proc_state_label,
    timeline_text,
)

# The strip shows the last 5 s, or less when there is less history (just after attaching, in
# a short recording, or when the model keeps fewer spans of a very busy P): the smallest of
# these spans that holds the history, so the cell size changes rarely.
TIMELINE_CHOICES_NS = tuple(int(f * NS_PER_S) for f in (0.1, 0.25, 0.5, 1, 2, 5))
TIMELINE_NS = TIMELINE_CHOICES_NS[-1]
RUNQ_BAR = 6
WIDE = 110  # from this width on, the M and busy% columns are shown too


class ProcTable(Widget):
    """The per-P rows. Rendered as one Text so the timeline takes exactly the width left."""

    snapshot: reactive[Snapshot | None] = reactive(None, always_update=True, layout=True)

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.grid = TimelineGrid()

    def render(self) -> Text:
        snap = self.snapshot
        if snap is None:
            return Text("waiting for the first events…", style="dim")
        width = self.size.width
        wide = width >= WIDE
        fixed = 3 + 1 + 8 + 1 + 8 + 1 + 4 + 1 + RUNQ_BAR + 1 + 12 + 1
        if wide:
            fixed += 8 + 1 + 5 + 1
        tl_w = max(width - fixed, 0)
        t1 = snap.now
        first = min((p.timeline[0].start for p in snap.procs if p.timeline), default=t1)
        span_ns = next((c for c in TIMELINE_CHOICES_NS if c >= t1 - first), TIMELINE_NS)
        cell_ns = -(-span_ns // tl_w) if tl_w else 1
        runq_full = max(8, *(p.runq for p in snap.procs)) if snap.procs else 8

        head = Text(style="bold dim", no_wrap=True)
        head.append(f"{'P':>3} {'state':<8} {'G':>8} {'runq':>4} {'':<{RUNQ_BAR}} ")
        head.append("steal in/out ")
        if wide:
            head.append(f"{'M':>8} {'busy':>5} ")
        if tl_w >= 12:
            label = f"last {fmt_ns(cell_ns * tl_w)}"
            head.append(label.ljust(tl_w - 3) + "now")
        lines = [head]
        for p in snap.procs:
            row = Text(no_wrap=True, overflow="crop")
            _, colour = STATE_STYLE.get(p.state, STATE_STYLE[PState.UNKNOWN])
            row.append(f"{p.id:>3} ")
            row.append(f"{proc_state_label(p):<8} ", style=colour or "dim")
            g = f"G{p.goid}" if p.goid else "-"
            row.append(f"{g:>8} ")
            row.append(f"{p.runq:>4} ")
            row.append(bar(p.runq, runq_full, RUNQ_BAR), style="#58a6ff")
            row.append(" ")
            row.append(f"{fmt_count(p.steals_in):>6}/{fmt_count(p.steals_out):<5} ")
            if wide:
                total = p.running_ns + p.idle_ns + p.spinning_ns + p.syscall_ns + p.gcstop_ns
                busy = f"{100 * p.running_ns / total:.0f}%" if total else "-"
                row.append(f"{p.m or '-':>8} {busy:>5} ")
            if tl_w > 0:
                cells = self.grid.row(p.id, p.timeline, snap.stw_spans, t1, cell_ns, tl_w)
                row.append_text(timeline_text(cells))
            lines.append(row)
        out = Text("\n", no_wrap=True, overflow="crop").join(lines)
        out.no_wrap = True
        return out


class ProcsView(VerticalScroll):
    snapshot: reactive[Snapshot | None] = reactive(None, always_update=True)

    def compose(self) -> ComposeResult:
        yield Static(id="procs-summary")
        yield ProcTable(id="procs-table")
        yield Static(legend(), id="procs-legend")

    def watch_snapshot(self, snap: Snapshot | None) -> None:
        if snap is None:
            return
        self.query_one(ProcTable).snapshot = snap
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append(f"global runq {snap.global_runq}", style="bold")
        if snap.window == "exact":
            # Full mode reads no runtime.sched samples (npidle/nmspinning stay 0): count the
            # rows, so the header agrees with the states shown below it.
            idle = sum(1 for p in snap.procs if p.state is PState.IDLE)
            searching = sum(1 for p in snap.procs if p.state is PState.SEARCHING)
            text.append(f"  idle Ps {idle}  searching Ps {searching}")
        else:
            text.append(f"  idle Ps {snap.npidle}  spinning Ms {snap.nmspinning}")
        text.append(f"  STW {snap.stw_count}")
        if snap.stw_count:
            text.append(f" (max {fmt_ns(snap.stw_max_ns)}, total {fmt_ns(snap.stw_total_ns)})")
        text.append(f"  steals {fmt_count(snap.steals.count)}")
        self.query_one("#procs-summary", Static).update(text)
