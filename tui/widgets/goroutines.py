"""Goroutines view: a sortable table of the goroutines the model has seen."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.reactive import reactive
from textual.widgets import DataTable, Static

from gmpmon.model.snapshot import GoroutineView, Snapshot
from gmpmon.tui.census import census_text
from gmpmon.tui.render import GSTATE_WORD, fmt_count, fmt_ns

SortKey = Callable[[GoroutineView, int], tuple[object, ...]]

# (column label, sort key, descending by default). ``now`` is passed so that "in state" sorts
# by the same number it shows.
COLUMNS: tuple[tuple[str, SortKey, bool], ...] = (
    ("G", lambda g, now: (g.goid,), False),
    ("state", lambda g, now: (GSTATE_WORD.get(g.state, "?"), g.goid), False),
    ("P", lambda g, now: (g.p, g.goid), False),
    ("wait reason", lambda g, now: (g.wait_reason, g.goid), False),
    ("wait time", lambda g, now: (g.wait_ns, g.goid), True),
    ("in state", lambda g, now: (now - g.since if g.since else -1, g.goid), True),
    ("runs", lambda g, now: (g.executes, g.goid), True),
    ("parent", lambda g, now: (g.parent, g.goid), False),
)
# Rebuilding a few hundred rows costs ~10 ms: the table follows the snapshot at most this often
# (snapshot time, so a replay behaves the same), and at once when the sort order changes.
TABLE_EVERY_NS = 1_000_000_000
STATE_COLOUR = {"running": "#3fb950", "runnable": "#d29922", "waiting": "#6e7681",
                "syscall": "#a371f7", "dead": "#484f58"}


class GoroutinesView(Vertical):
    snapshot: reactive[Snapshot | None] = reactive(None, always_update=True)
    sort_column: reactive[int] = reactive(4)
    sort_reverse: reactive[bool] = reactive(True)

    _table_now: int | None = None

    BINDINGS: ClassVar[list[BindingType]] = [Binding("s", "cycle_sort", "Sort", show=True)]

    def compose(self) -> ComposeResult:
        yield Static(id="g-summary")
        yield Static(id="g-census")  # the runtime's own counters and the census
        table: DataTable[str | Text] = DataTable(id="g-table", cursor_type="row",
                                                 zebra_stripes=True)
        yield table

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        for label, _, _ in COLUMNS:
            table.add_column(label, key=label)

    def invalidate(self) -> None:
        """Rebuild the table on the next snapshot, however close in time (a replay step)."""
        self._table_now = None

    def action_cycle_sort(self) -> None:
        self._sort_by((self.sort_column + 1) % len(COLUMNS))

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        self._sort_by(event.column_index)

    def _sort_by(self, column: int) -> None:
        if column == self.sort_column:
            self.sort_reverse = not self.sort_reverse
        else:
            self.sort_column = column
            self.sort_reverse = COLUMNS[column][2]
        self._table_now = None
        self.snapshot = self.snapshot  # re-render with the new order

    def watch_snapshot(self, snap: Snapshot | None) -> None:
        if snap is None:
            return
        counts = "  ".join(f"{k} {fmt_count(v)}" for k, v in sorted(snap.g_state_counts.items()))
        label, _, _ = COLUMNS[self.sort_column]
        summary = Text(no_wrap=True, overflow="ellipsis")
        summary.append(f"live {fmt_count(snap.goroutines_live)}", style="bold")
        summary.append(f"  created {fmt_count(snap.goroutines_created)}"
                       f"  exited {fmt_count(snap.goroutines_exited)}  {counts}")
        summary.append(f"   sorted by {label} {'↓' if self.sort_reverse else '↑'} (s / click)",
                       style="dim")
        self.query_one("#g-summary", Static).update(summary)
        census = self.query_one("#g-census", Static)
        census.display = snap.runtime is not None
        if snap.runtime is not None:
            census.update(census_text(snap.runtime))

        if self._table_now is not None and abs(snap.now - self._table_now) < TABLE_EVERY_NS:
            return
        self._table_now = snap.now
        table: DataTable[str | Text] = self.query_one(DataTable)
        keep = None
        if table.row_count and table.cursor_row >= 0:
            try:
                keep = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
            except Exception:  # cursor past the end after the table shrank
                keep = None
        key = COLUMNS[self.sort_column][1]
        now = snap.now
        gs = sorted(snap.goroutines, key=lambda g: key(g, now), reverse=self.sort_reverse)
        table.clear()
        for g in gs:
            state = GSTATE_WORD.get(g.state, "?")
            table.add_row(
                str(g.goid),
                Text(state, style=STATE_COLOUR.get(state, "")),
                str(g.p) if g.p >= 0 else "-",
                g.wait_reason or "",
                fmt_ns(g.wait_ns) if g.wait_ns else "",
                fmt_ns(now - g.since) if g.since else "",
                fmt_count(g.executes),
                str(g.parent) if g.parent else "",
                key=str(g.goid),
            )
        if keep is not None and keep in table.rows:
            table.move_cursor(row=table.get_row_index(keep), animate=False)
