"""Goroutines view: a sortable table of the goroutines, each in its state as of the newest
census with what the probes measured of it (tui/gtable.py), or (``w``) the census's wait
stacks: the parked goroutines grouped by state, wait reason, stack and creation site, largest
first."""

from __future__ import annotations

import heapq
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.reactive import reactive
from textual.widgets import DataTable, Static

from gmpmon.model.snapshot import Snapshot
from gmpmon.tui.census import census_text
from gmpmon.tui.gtable import COLUMNS, START, g_row, pool, summary
from gmpmon.tui.waits import (
    GROUP_COLUMNS,
    WHERE,
    group_row,
    group_text,
    groups_summary,
    user_groups,
)
from gmpmon.tui.widgets.details import DetailScreen, goroutine_matches, goroutine_text

START_MIN = 16
# Rebuilding a few hundred rows costs ~10 ms: the table follows the snapshot at most this often
# (snapshot time, so a replay behaves the same), and at once when the sort order changes.
TABLE_EVERY_NS = 1_000_000_000
TABLE_ROWS = 2000  # rows kept in the table at most (the model's list is bounded too)


class GoroutinesView(Vertical):
    snapshot: reactive[Snapshot | None] = reactive(None, always_update=True)
    sort_column: reactive[int] = reactive(4)
    sort_reverse: reactive[bool] = reactive(True)

    _table_now: int | None = None
    filter_text = ""
    _shown = ""

    # None: the wait stacks when the census has them, else the goroutines; `w` chooses.
    by_stacks: bool | None = None
    _groups_key: tuple[object, ...] | None = None
    _groups_by_wait = False  # `s` in the wait stacks: longest wait first instead of count

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("s", "cycle_sort", "Sort", show=True),
        Binding("w", "toggle_stacks", "Stacks/Gs", show=True),
        Binding("j", "cursor(1)", "Down", show=False),
        Binding("k", "cursor(-1)", "Up", show=False),
        Binding("g", "cursor_to(0)", "Top", show=False),
        Binding("G", "cursor_to(-1)", "Bottom", show=False),
        Binding("ctrl+f", "page(1)", "Page down", show=False),
        Binding("ctrl+b", "page(-1)", "Page up", show=False),
    ]

    def action_cursor(self, step: int) -> None:
        """j/k move the table's cursor, as the arrows do (and scroll the other views)."""
        table: DataTable[str | Text] = self.query_one(DataTable)
        if step > 0:
            table.action_cursor_down()
        else:
            table.action_cursor_up()

    def action_cursor_to(self, row: int) -> None:
        """g/G: the first row, the last (as less, htop and the other views have them)."""
        table: DataTable[str | Text] = self.query_one(DataTable)
        if table.row_count:
            table.move_cursor(row=row if row >= 0 else table.row_count - 1, animate=False)

    def action_page(self, step: int) -> None:
        table: DataTable[str | Text] = self.query_one(DataTable)
        if step > 0:
            table.action_page_down()
        else:
            table.action_page_up()

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

    def on_resize(self) -> None:
        self.invalidate()  # the start column's width follows the terminal's
        self.snapshot = self.snapshot

    def invalidate(self) -> None:
        """Rebuild the table on the next snapshot, however close in time (a replay step)."""
        self._table_now = None
        self._groups_key = None

    def showing_stacks(self, snap: Snapshot | None = None) -> bool:
        snap = snap or self.snapshot
        if self.by_stacks is not None:
            return self.by_stacks
        c = snap.runtime.census if snap is not None and snap.runtime is not None else None
        # The census's groups; without its stacks, its states, when there is no goroutine to
        # list (a recording whose census told no states, and no probe saw any): a list, never
        # an empty table.
        return c is not None and snap is not None and (c.stacks is not None or not pool(snap))

    def action_toggle_stacks(self) -> None:
        self.by_stacks = not self.showing_stacks()
        self.invalidate()
        self.snapshot = self.snapshot

    def action_cycle_sort(self) -> None:
        if self.showing_stacks():
            self._groups_by_wait = not self._groups_by_wait
            self.invalidate()
            self.snapshot = self.snapshot
            return
        self._sort_by((self.sort_column + 1) % len(COLUMNS))

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        if self.showing_stacks():
            self.action_cycle_sort()
            return
        self._sort_by(event.column_index)

    def _sort_by(self, column: int) -> None:
        if column == self.sort_column:
            self.sort_reverse = not self.sort_reverse
        else:
            self.sort_column = column
            self.sort_reverse = COLUMNS[column][2]
        self._table_now = None
        self.snapshot = self.snapshot  # re-render with the new order

    def set_filter(self, text: str) -> None:
        self.filter_text = text
        self.invalidate()
        self.snapshot = self.snapshot

    def watch_snapshot(self, snap: Snapshot | None) -> None:
        if snap is None:
            return
        self._census_panel(snap)
        if self.showing_stacks(snap):
            self._show_groups(snap)
            return
        self._groups_key = None
        if self._table_now is None or abs(snap.now - self._table_now) >= TABLE_EVERY_NS:
            self._table(snap)
        label, _, _ = COLUMNS[self.sort_column]
        sort = f"{label} {'↓' if self.sort_reverse else '↑'}"
        self.query_one("#g-summary", Static).update(summary(snap, self._shown, self.filter_text,
                                                            sort))

    def _table(self, snap: Snapshot) -> None:
        """The goroutine table (rebuilt at most once a TABLE_EVERY_NS of snapshot time)."""
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
        every = pool(snap)
        matching = [g for g in every if goroutine_matches(g, self.filter_text)]
        # At most TABLE_ROWS rows, whatever the snapshot holds: the top of the sort order
        # (heapq: O(n log k)); the table itself draws only the rows on screen.
        pick = heapq.nlargest if self.sort_reverse else heapq.nsmallest
        gs = pick(TABLE_ROWS, matching, key=lambda g: key(g, now))
        self._shown = (f"{len(gs)} of {len(every)}" if len(gs) < len(matching) or
                       self.filter_text else f"{len(gs)}")
        rows = [g_row(g, snap) for g in gs]
        room = self._start_room(table, rows)
        table.clear(columns=True)
        for i, (label, _, _) in enumerate(COLUMNS):
            table.add_column(label, key=label, width=room if i == START else None)
        for g, row in zip(gs, rows, strict=True):
            if row[START].cell_len > room:  # narrow: keep the end (`(*T).method`); Enter
                cut = row[START].plain[-(room - 1):]  # shows it whole
                row[START] = Text("…" + cut, style=row[START].style)
            elif g.created_at and room - row[START].cell_len >= len(g.created_at) + 4:
                # Wide terminals: the creation site too, where it fits whole (item 10).
                row[START].append(f"  < {g.created_at}", style="#6e7681")
            table.add_row(*row, key=str(g.goid))
        if keep is not None and keep in table.rows:
            table.move_cursor(row=table.get_row_index(keep), animate=False)

    def _census_panel(self, snap: Snapshot) -> None:
        census = self.query_one("#g-census", Static)
        census.display = snap.runtime is not None
        if snap.runtime is not None:
            # At most ~40% of the view: below 24 rows the table would otherwise lose them all.
            lines = max(3, (self.size.height or self.app.size.height) * 2 // 5)
            census.update(census_text(snap.runtime, lines=lines))

    def _show_groups(self, snap: Snapshot) -> None:
        """The census's wait-stack groups, one a row (rebuilt when a new census arrives)."""
        c = snap.runtime.census if snap.runtime is not None else None
        groups = user_groups(c, self.filter_text)
        if self._groups_by_wait:
            groups.sort(key=lambda rw: (-rw[1].wait_max_ns, rw[0]))
        shown = f"{len(groups)}"
        self.query_one("#g-summary", Static).update(groups_summary(c, len(groups),
                                                                   self.filter_text))
        table: DataTable[str | Text] = self.query_one(DataTable)
        key = (c.seq if c is not None else -1, self.filter_text, self._groups_by_wait,
               table.size.width)
        if key == self._groups_key:
            return
        self._groups_key = key
        self._shown = shown
        keep = None
        if table.row_count and table.cursor_row >= 0:
            try:
                keep = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
            except Exception:  # cursor past the end after the table shrank
                keep = None
        rows = [group_row(rank, w) for rank, w in groups[:TABLE_ROWS]]
        table.clear(columns=True)
        for i, label in enumerate(GROUP_COLUMNS):
            table.add_column(label, key=label, width=self._where_room(table, rows) if i == WHERE
                             else None)
        for (rank, _w), row in zip(groups, rows, strict=False):
            table.add_row(*row, key=f"s{rank}")
        if keep is not None and keep in table.rows:
            table.move_cursor(row=table.get_row_index(keep), animate=False)

    def _where_room(self, table: DataTable[str | Text], rows: list[list[Text]]) -> int | None:
        """The stack column takes what the others leave (its end is cut: enter shows it)."""
        pad = 2 * table.cell_padding
        widths = [len(label) for label in GROUP_COLUMNS]
        for row in rows:
            for i, cell in enumerate(row):
                widths[i] = max(widths[i], cell.cell_len)
        width = table.size.width or self.app.size.width
        room = width - sum(w + pad for i, w in enumerate(widths) if i != WHERE) - pad - 2
        return max(room, START_MIN) if room < widths[WHERE] else None

    def _start_room(self, table: DataTable[str | Text], rows: list[list[Text]]) -> int:
        """Width of the start column: what the other columns leave of the table's width
        (names longer than that lose their front), at least START_MIN (the table scrolls
        sideways below that)."""
        pad = 2 * table.cell_padding
        widths = [len(label) for label, _, _ in COLUMNS]
        for row in rows:
            for i, cell in enumerate(row):
                widths[i] = max(widths[i], cell.cell_len)
        width = table.size.width or self.app.size.width
        room = width - sum(w + pad for w in widths[:START]) - pad - 2  # 2: the scrollbar
        return max(room, min(widths[START], START_MIN))

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        snap = self.snapshot
        if snap is None or event.row_key.value is None:
            return
        if event.row_key.value.startswith("s"):
            c = snap.runtime.census if snap.runtime is not None else None
            rank = int(event.row_key.value[1:])
            group = next((w for r, w in user_groups(c) if r == rank), None)
            if c is None or group is None:
                self.app.notify("that group is no longer in the census", severity="warning")
                return
            self.app.push_screen(DetailScreen(f"wait stack #{rank}", group_text(rank, group, c)))
            return
        goid = int(event.row_key.value)
        g = next((x for x in pool(snap) if x.goid == goid), None)
        if g is None:
            self.app.notify(f"G{goid} is no longer in the table", severity="warning")
            return
        history = getattr(self.app, "history", None)
        hist = history.of(goid) if history is not None else ()
        self.app.push_screen(DetailScreen(f"goroutine G{goid}", goroutine_text(g, snap, hist)))
