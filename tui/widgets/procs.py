"""Procs view: one row per P with its state now and a scrolling timeline strip."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.reactive import reactive
from textual.widget import Widget
from textual.widgets import Static

from gmpmon.model.snapshot import ProcView, PState, Snapshot, Span
from gmpmon.tui.kernel import (
    oncpu_panel,
    sampled_timeline,
    syscalls_panel,
    threads_panel,
    timeline_label,
    timeline_source,
)
from gmpmon.tui.measure import NOT_MEASURED, coverage, hot_count
from gmpmon.tui.render import (
    NS_PER_S,
    STATE_STYLE,
    STATE_WORD,
    STW_LABEL,
    TimelineGrid,
    bar,
    busy_share,
    fmt_count,
    fmt_ns,
    heat_strip,
    history_start,
    id_ranges,
    last_known_state,
    legend,
    stw_band,
    timeline_text,
    trigger_marks,
    window_marks,
)
from gmpmon.tui.widgets.scroll import KeyScroll

# Auto zoom: the strip shows the last 5 s, or less when there is less history (just after
# attaching, in a short recording; a busy P's older spans are in its history buckets): the
# smallest of these spans that holds the history, so the cell size changes rarely. `+`/`-`
# pick a fixed time per cell instead; the header always says the time per cell.
TIMELINE_CHOICES_NS = tuple(int(f * NS_PER_S) for f in (0.1, 0.25, 0.5, 1, 2, 5))
TIMELINE_NS = TIMELINE_CHOICES_NS[-1]
CELL_CHOICES_NS = tuple(int(f * 1_000_000) for f in (0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100,
                                                     200, 500, 1000))
RUNQ_BAR = 6
WIDE = 110  # from this width on, the M and busy% columns are shown too
MANY_PS = 8  # above this: busy Ps first, idle Ps on one line, a heat strip of every P
STATE_W = 10  # "searching?"
# Perf samples reach the model in batches (50 ms) behind the other sources: a sampled cell
# this close to ``now`` may still fill, so it is not kept as final.
SAMPLED_SETTLE_NS = 250_000_000
PANELS_EVERY_NS = 1_000_000_000


class ProcTable(Widget):
    """The per-P rows. Rendered as one Text so the timeline takes exactly the width left."""

    snapshot: reactive[Snapshot | None] = reactive(None, always_update=True, layout=True)
    zoom_index: reactive[int | None] = reactive(None)  # CELL_CHOICES_NS index; None: auto
    busy_first: reactive[bool | None] = reactive(None)  # None: only when there are many Ps

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.grid = TimelineGrid()
        self.cell_ns = 0  # time per cell of the last render (for zooming from auto)
        self.strip_width = 0  # timeline cells per row of the last render
        self.collapsed: tuple[int, ...] = ()  # P ids folded into the idle line last render
        self.sampled: dict[int, tuple[Span, ...]] | None = None  # the last render's strip

    def zoom(self, delta: int) -> None:
        """delta -1: smaller cells (zoom in), +1: bigger cells."""
        i = self.zoom_index
        if i is None:
            i = min(range(len(CELL_CHOICES_NS)),
                    key=lambda k: abs(CELL_CHOICES_NS[k] - max(self.cell_ns, 1)))
        self.zoom_index = min(max(i + delta, 0), len(CELL_CHOICES_NS) - 1)

    def ordered_busy_first(self, snap: Snapshot) -> bool:
        return self.busy_first if self.busy_first is not None else len(snap.procs) > MANY_PS

    def render(self) -> Text:
        snap = self.snapshot
        if snap is None:
            return Text("waiting for the first events…", style="dim")
        width = self.size.width
        wide = width >= WIDE
        fixed = 3 + 1 + STATE_W + 1 + 8 + 1 + 4 + 1 + RUNQ_BAR + 1 + 12 + 1
        if wide:
            fixed += 8 + 1 + 5 + 1
        tl_w = max(width - fixed, 0)
        t1 = snap.now
        if self.zoom_index is not None:
            cell_ns = CELL_CHOICES_NS[self.zoom_index]
        else:
            first = min((s for p in snap.procs if (s := history_start(p)) is not None),
                        default=t1)
            span_ns = next((c for c in TIMELINE_CHOICES_NS if c >= t1 - first), TIMELINE_NS)
            cell_ns = -(-span_ns // tl_w) if tl_w else 1
        self.cell_ns = cell_ns
        self.strip_width = tl_w
        runq_full = max(8, *(p.runq for p in snap.procs)) if snap.procs else 8
        lo = t1 - cell_ns * max(tl_w, 1)
        # Where no probe saw the Ps (sample mode; default mode between windows) the strip is
        # drawn from the perf samples.
        self.sampled = sampled = sampled_timeline(snap)
        by_samples = sampled is not None and snap.window == "sampled"
        shares = {p.id: busy_share(sampled.get(p.id, ()), lo, t1) if sampled is not None
                  and by_samples else busy_share(p.timeline, lo, t1, p.history)
                  for p in snap.procs}

        head = Text(style="bold dim", no_wrap=True)
        head.append(f"{'P':>3} {'state':<{STATE_W}} {'G':>8} {'runq':>4} {'':<{RUNQ_BAR}} ")
        head.append("steal in/out ")
        if wide:
            head.append(f"{'M':>8} {'busy':>5} ")
        if tl_w >= 12:
            cell, span, pre = fmt_ns(cell_ns), fmt_ns(cell_ns * tl_w), timeline_label(snap)
            if cell_ns * tl_w > snap.window_ns > 0:  # the model keeps no more: say so
                span += f" ({fmt_ns(snap.window_ns)} kept)"
            # The sampled strip says so first, dropping its span rather than that word.
            label = next((c for c in (f"{pre}{cell}/cell, last {span}", f"{pre}{cell}/cell")
                          if len(c) <= tl_w - 4), f"{cell}/cell, last {span}")
            head.append(label[: tl_w - 4].ljust(tl_w - 3) + "now")
        lines = [head]
        marks = trigger_marks(snap.triggers, lo, cell_ns, tl_w) if tl_w >= 12 else None
        if marks is not None:  # where a --trigger fired (a dump and a burst of hot probes)
            row = Text(no_wrap=True, overflow="crop")
            row.append("trigger".rjust(fixed - 1)[: fixed - 1] + " ", style="dim")
            row.append_text(marks)
            lines.append(row)
        grid_lo = (t1 // cell_ns - tl_w + 1) * cell_ns  # the rows' fixed grid
        windows = (window_marks(snap.window_spans, grid_lo, cell_ns, tl_w) if tl_w >= 12
                   else None)
        if windows is not None:  # default mode: where the cells are the probes'
            row = Text(no_wrap=True, overflow="crop")
            row.append("probes".rjust(fixed - 1)[: fixed - 1] + " ", style="dim")
            row.append_text(windows)
            lines.append(row)
        stw = stw_band(snap.stw_spans, grid_lo, cell_ns, tl_w) if tl_w >= 12 else None
        if stw is not None:  # how much of each cell the world was stopped, on every P
            row = Text(no_wrap=True, overflow="crop")
            row.append(STW_LABEL.rjust(fixed - 1)[: fixed - 1] + " ", style="dim")
            row.append_text(stw)
            lines.append(row)
        procs = list(snap.procs)
        many = len(procs) > MANY_PS
        if self.ordered_busy_first(snap):
            procs.sort(key=lambda p: (-shares[p.id], p.id))
        idle = [p.id for p in procs if many and shares[p.id] == 0
                and last_known_state(p) is PState.IDLE and p.runq == 0]
        self.collapsed = tuple(idle) if len(idle) >= 2 else ()
        folded = set(self.collapsed)
        if many:
            strip = Text(no_wrap=True, overflow="crop")
            strip.append(f"{'':>3} busy by P 0-{len(procs) - 1}: ", style="dim")
            by_id = sorted(snap.procs, key=lambda p: p.id)
            room = max(width - len(strip), 1)
            strip.append_text(heat_strip([shares[p.id] for p in by_id][:room]))
            lines.insert(0, strip)
        for p in procs:
            if p.id in folded:
                continue
            lines.append(self._row(p, snap, wide, tl_w, cell_ns, runq_full))
        if folded:
            fold = Text(no_wrap=True, overflow="ellipsis")
            fold.append(f"{len(folded):>3} ", style="bold")
            fold.append(f"idle Ps, no run in the last {fmt_ns(t1 - lo)}: ", style="#6e7681")
            fold.append(id_ranges(folded))
            lines.append(fold)
        out = Text("\n", no_wrap=True, overflow="crop").join(lines)
        out.no_wrap = True
        return out

    def _row(self, p: ProcView, snap: Snapshot, wide: bool, tl_w: int, cell_ns: int,
             runq_full: int) -> Text:
        row = Text(no_wrap=True, overflow="crop")
        shown = last_known_state(p)
        _, colour = STATE_STYLE.get(shown, STATE_STYLE[PState.UNKNOWN])
        row.append(f"{p.id:>3} ")
        word = STATE_WORD.get(shown, "?")
        if p.state is PState.UNKNOWN and shown is not PState.UNKNOWN:
            word += "?"  # last seen so; not observed since (between windows, end of a replay)
        row.append(f"{word:<{STATE_W}} ", style=colour or "dim")
        g = f"G{p.goid}" if p.goid else "-"
        row.append(f"{g:>8} ")
        row.append(f"{p.runq:>4} ")
        row.append(bar(p.runq, runq_full, RUNQ_BAR), style="#58a6ff")
        row.append(" ")
        if coverage(snap).hot:
            row.append(f"{fmt_count(p.steals_in):>6}/{fmt_count(p.steals_out):<5} ")
        else:
            row.append(f"{NOT_MEASURED:>6}/{NOT_MEASURED:<5} ")
        if wide:
            total = p.running_ns + p.idle_ns + p.searching_ns + p.syscall_ns + p.gcstop_ns
            busy = f"{100 * p.running_ns / total:.0f}%" if total else "-"
            row.append(f"{p.m or '-':>8} {busy:>5} ")
        if tl_w > 0:
            sampled = None if self.sampled is None else self.sampled.get(p.id, ())
            cells = self.grid.row(p.id, p.timeline, snap.stw_spans, snap.now, cell_ns, tl_w,
                                  sampled=sampled, probed=snap.window_spans,
                                  settle_ns=SAMPLED_SETTLE_NS if sampled is not None else 0,
                                  history=p.history)
            row.append_text(timeline_text(cells))
        return row


class ProcsView(KeyScroll):
    snapshot: reactive[Snapshot | None] = reactive(None, always_update=True)
    _panels_at: tuple[int, int] | None = None  # (now, start) of the panels' snapshot
    _source_line = ""

    def invalidate(self) -> None:
        """Redraw the panels at the next snapshot, however close in time (a replay step)."""
        self._panels_at = None

    def on_resize(self) -> None:
        self.invalidate()
        if self.snapshot is not None:
            self.snapshot = self.snapshot

    def compose(self) -> ComposeResult:
        yield Static(id="procs-summary")
        yield ProcTable(id="procs-table")
        yield Static(legend(), id="procs-legend")
        yield Static(id="procs-source")
        yield Static(id="procs-threads", classes="panel")
        yield Static(id="procs-syscalls", classes="panel")
        yield Static(id="procs-oncpu", classes="panel")

    def on_mount(self) -> None:
        titles = {
            "procs-threads": "Ms: OS threads (kernel)",
            "procs-syscalls": "syscalls per P",
            "procs-oncpu": "on CPU: goroutines (perf samples)",
        }
        for wid, title in titles.items():
            self.query_one(f"#{wid}", Static).border_title = title

    def watch_snapshot(self, snap: Snapshot | None) -> None:
        if snap is None:
            return
        self.query_one(ProcTable).snapshot = snap
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append(f"global runq {snap.global_runq}", style="bold")
        if snap.window == "exact":
            # Full mode reads no runtime.sched samples (npidle/nmspinning stay 0): count the
            # rows, so the header agrees with the states shown below it. A searching P's M is
            # in findRunnable, spinning (m.spinning) or not: these are Ps, not nmspinning.
            idle = sum(1 for p in snap.procs if p.state is PState.IDLE)
            searching = sum(1 for p in snap.procs if p.state is PState.SEARCHING)
            text.append(f"  idle Ps {idle}  searching Ps {searching}")
        else:
            text.append(f"  idle Ps {snap.npidle}  spinning Ms {snap.nmspinning}")
        text.append(f"  STW {snap.stw_count}")
        if snap.stw_count:
            text.append(f" (max {fmt_ns(snap.stw_max_ns)}, total {fmt_ns(snap.stw_total_ns)})")
        cov = coverage(snap)
        text.append(f"  steals {hot_count(snap.steals.count, cov)}")
        if cov.hot and not cov.exact:
            text.append(f" {cov.note()}", style="dim")
        self.query_one("#procs-summary", Static).update(text)
        source = self.query_one("#procs-source", Static)
        source.display = snap.window != "exact"  # full mode: probe events, as everywhere
        line = timeline_source(snap)
        if line.plain != self._source_line:  # a new text re-lays the view out
            self._source_line = line.plain
            source.update(line)
        self._update_panels(snap)

    def _update_panels(self, snap: Snapshot) -> None:
        """The kernel panels, at most once a second of snapshot time (and at once after a
        jump in time): their Rich tables are most of this view's drawing cost, and
        cumulative numbers read no better at 4 Hz."""
        last = self._panels_at
        if (last is not None and last[1] == snap.start
                and 0 <= snap.now - last[0] < PANELS_EVERY_NS):
            return
        self._panels_at = (snap.now, snap.start)  # start: what the counts count from (z, t)
        width = self.size.width or self.app.size.width
        for wid, panel in (("procs-threads", threads_panel(snap, width)),
                           ("procs-syscalls", syscalls_panel(snap)),
                           ("procs-oncpu", oncpu_panel(snap))):
            box = self.query_one(f"#{wid}", Static)
            box.display = panel is not None
            if panel is not None:
                box.update(panel)

    def zoom(self, delta: int) -> None:
        self.query_one(ProcTable).zoom(delta)

    def toggle_order(self) -> None:
        table = self.query_one(ProcTable)
        snap = table.snapshot
        now = table.ordered_busy_first(snap) if snap is not None else False
        table.busy_first = not now
        self.app.notify("Ps ordered " + ("busy first" if not now else "by id"), timeout=2)
