"""Findings view (key 5): the scheduler pathologies the findings engine named, most severe
first, each a collapsible row that expands to its evidence and what to try. Also the tail
latency attribution panel the Scheduling view shows.

The widget only lays out what Snapshot.findings holds (gmpmon.findings computes it); rows are
kept by finding id across snapshots so that an expanded finding stays expanded.
"""

from __future__ import annotations

from typing import Any, ClassVar

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.reactive import reactive
from textual.widgets import Collapsible, Static

from gmpmon.findings.render import CATEGORY_LABELS, evidence_lines
from gmpmon.model.findingtypes import ATTRIBUTION_CATEGORIES, Attribution, Finding, Severity
from gmpmon.model.snapshot import Snapshot
from gmpmon.tui.render import bar, fmt_count, fmt_ns, panel_table
from gmpmon.tui.widgets.scroll import KeyScroll

SEVERITY_STYLE = {
    Severity.CRITICAL: "bold #f85149",
    Severity.WARNING: "bold #d29922",
    Severity.INFO: "#58a6ff",
}
# ASCII only: ambiguous-width arrows take two cells in tmux (HACKING.md).
COLLAPSED, EXPANDED = "+", "-"


def finding_title(f: Finding) -> str:
    return f"{f.severity.label.upper():<8} {f.id}: {f.title}"


def finding_body(f: Finding) -> Group:
    lines = [Text(line, style="dim" if line.startswith(("sources:", "sampled:")) else "")
             for line in evidence_lines(f, width=200)]
    advice = Text("try: ", style="bold") + Text(f.advice)
    return Group(*lines, Text(""), advice)


def summary_line(snap: Snapshot) -> Text:
    if not snap.findings:
        t = Text("no scheduler pathology detected", style="#3fb950")
    else:
        counts = {s: sum(1 for f in snap.findings if f.severity == s) for s in Severity}
        parts = [f"{n} {s.label}" for s, n in sorted(counts.items(), reverse=True) if n]
        t = Text(", ".join(parts), style=SEVERITY_STYLE[max(f.severity for f in snap.findings)])
    t.append(f"   from {snap.mode} mode ({snap.window})", style="dim")
    t.append("   up/down, enter or click: evidence", style="dim")
    return t


def attribution_panel(att: Attribution | None, bar_width: int = 16) -> Table | Text:
    """What the Ps did while the slowest waits waited (the Scheduling view's panel)."""
    if att is None or not att.samples:
        why = att.note if att is not None and att.note else "no waits above the p99 yet"
        return Text(why, style="dim")
    t = panel_table()
    t.add_column(f"{fmt_count(att.samples)} waits >= {fmt_ns(att.threshold_ns)}", no_wrap=True)
    t.add_column("%", justify="right", no_wrap=True)
    t.add_column("", no_wrap=True, width=bar_width)
    t.add_column("time", justify="right", no_wrap=True)
    total = att.wait_ns or 1
    for cat in ATTRIBUTION_CATEGORIES:
        ns = att.breakdown.get(cat, 0)
        if not ns:
            continue
        t.add_row(CATEGORY_LABELS[cat], f"{100 * ns / total:.0f}",
                  Text(bar(ns, total, bar_width), style="#f0883e"), fmt_ns(ns))
    if att.note:
        t.add_row(Text(att.note, style="dim"), "", "", "")
    return t


class FindingsView(KeyScroll):
    """The view keeps the focus (the app gives it on switching); a cursor row, moved with
    up/down (j/k), is opened and closed with enter."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("down,j", "cursor(1)", "Next", show=False),
        Binding("up,k", "cursor(-1)", "Previous", show=False),
        Binding("enter", "open_finding", "Evidence", key_display="enter"),
    ]
    snapshot: reactive[Snapshot | None] = reactive(None, always_update=True)

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self._rows: dict[str, tuple[Collapsible, Static]] = {}
        self._order: tuple[str, ...] = ()
        self._cursor = 0

    def action_cursor(self, delta: int) -> None:
        if self._order:
            self._cursor = min(max(self._cursor + delta, 0), len(self._order) - 1)
            self._mark_cursor()

    def action_open_finding(self) -> None:
        if self._order:
            row = self._rows[self._order[self._cursor]][0]
            row.collapsed = not row.collapsed
            self.scroll_to_widget(row, animate=False)

    def _mark_cursor(self) -> None:
        for i, fid in enumerate(self._order):
            row = self._rows[fid][0]
            row.set_class(i == self._cursor, "-cursor")
            if i == self._cursor:
                self.scroll_to_widget(row, animate=False)

    def compose(self) -> ComposeResult:
        yield Static(id="findings-summary")
        yield Static(id="findings-empty")

    def watch_snapshot(self, snap: Snapshot | None) -> None:
        if snap is None:
            return
        self.query_one("#findings-summary", Static).update(summary_line(snap))
        self.query_one("#findings-empty", Static).display = not snap.findings
        order = tuple(f.id for f in snap.findings)
        if order != self._order:
            self._relayout(snap.findings)
        for f in snap.findings:
            row, body = self._rows[f.id]
            row.title = finding_title(f)
            row.set_class(f.severity == Severity.CRITICAL, "-critical")
            row.set_class(f.severity == Severity.WARNING, "-warning")
            body.update(finding_body(f))

    def _relayout(self, findings: tuple[Finding, ...]) -> None:
        keep = {f.id for f in findings}
        for fid in [k for k in self._rows if k not in keep]:
            row, _ = self._rows.pop(fid)
            row.remove()
        for f in findings:
            if f.id not in self._rows:
                body = Static(classes="finding-body")
                row = Collapsible(body, title=finding_title(f), collapsed=True,
                                  collapsed_symbol=COLLAPSED, expanded_symbol=EXPANDED,
                                  id=f"finding-{f.id}", classes="finding")
                self._rows[f.id] = (row, body)
        rows = [self._rows[f.id][0] for f in findings]
        for row in rows:
            if row.parent is None:
                self.mount(row)
        for i, row in enumerate(rows):
            after = rows[i - 1] if i else self.query_one("#findings-empty", Static)
            self.move_child(row, after=after)
        self._order = tuple(f.id for f in findings)
        self._cursor = min(self._cursor, max(len(self._order) - 1, 0))
        self._mark_cursor()
