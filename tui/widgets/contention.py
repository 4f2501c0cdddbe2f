"""Contention view: the mutex stacks that waited longest, flame-graph style, one per row;
then the other blocking waits (RWMutex, WaitGroup and other semaphores), each with its kind."""

from __future__ import annotations

from typing import ClassVar

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.reactive import reactive
from textual.widgets import Static

from gmpmon.model.snapshot import Snapshot
from gmpmon.tui.render import bar, fmt_count, fmt_ns, panel_table, short_stack
from gmpmon.tui.widgets.details import DetailScreen, stack_matches, stacks_text
from gmpmon.tui.widgets.scroll import KeyScroll

TOP_STACKS = 30
TOP_ADDRS = 8


def stacks_table(snap: Snapshot, bar_width: int = 10, filter_text: str = "") -> Table | Text:
    if not snap.mutex_stacks:
        return Text("no contended locks seen yet", style="dim")
    ranked = [(i, ms) for i, ms in enumerate(snap.mutex_stacks, 1)
              if stack_matches(ms, filter_text)]
    if not ranked:
        return Text(f"no contended stack matches '{filter_text}'", style="dim")
    total = snap.mutex_wait_ns or sum(s.wait_ns for s in snap.mutex_stacks) or 1
    top = snap.mutex_stacks[0].wait_ns or 1
    t = panel_table(expand=True)
    t.add_column("#", justify="right", no_wrap=True)
    t.add_column("wait", justify="right", no_wrap=True)
    t.add_column("%", justify="right", no_wrap=True)
    t.add_column("", no_wrap=True, width=bar_width)
    t.add_column("count", justify="right", no_wrap=True)
    t.add_column("avg", justify="right", no_wrap=True)
    t.add_column("stack (leaf < callers)", no_wrap=True, overflow="ellipsis", ratio=1)
    for rank, ms in ranked[:TOP_STACKS]:
        avg = fmt_ns(ms.wait_ns / ms.count) if ms.count else "-"
        t.add_row(str(rank), fmt_ns(ms.wait_ns), f"{100 * ms.wait_ns / total:.0f}",
                  Text(bar(ms.wait_ns, top, bar_width), style="#f0883e"),
                  fmt_count(ms.count), avg, short_stack(ms.stack))
    return t


def addr_table(snap: Snapshot) -> Table | Text:
    if not snap.mutex_by_addr:
        return Text("")
    t = panel_table()
    t.add_column("lock address", no_wrap=True)
    t.add_column("count", justify="right")
    t.add_column("wait", justify="right")
    top = sorted(snap.mutex_by_addr.items(), key=lambda kv: (-kv[1][1], kv[0]))[:TOP_ADDRS]
    for addr, (count, wait) in top:
        t.add_row(f"{addr:#x}", fmt_count(count), fmt_ns(wait))
    return t


KIND_SHORT = {
    "sync.RWMutex.RLock": "RWMutex R",
    "sync.RWMutex.Lock": "RWMutex W",
    "semacquire": "sema",
}


def waits_table(snap: Snapshot, bar_width: int = 10) -> Table | Text:
    """RWMutex and semaphore waits (semacquire1): kept out of the mutex numbers above."""
    if not snap.wait_stacks:
        return Text("")
    top = snap.wait_stacks[0].wait_ns or 1
    t = panel_table(expand=True)
    t.add_column("kind", no_wrap=True)
    t.add_column("wait", justify="right", no_wrap=True)
    t.add_column("", no_wrap=True, width=bar_width)
    t.add_column("count", justify="right", no_wrap=True)
    t.add_column("avg", justify="right", no_wrap=True)
    t.add_column("stack (leaf < callers)", no_wrap=True, overflow="ellipsis", ratio=1)
    for ws in snap.wait_stacks[:TOP_STACKS]:
        avg = fmt_ns(ws.wait_ns / ws.count) if ws.count else "-"
        t.add_row(KIND_SHORT.get(ws.kind, ws.kind), fmt_ns(ws.wait_ns),
                  Text(bar(ws.wait_ns, top, bar_width), style="#a371f7"),
                  fmt_count(ws.count), avg, short_stack(ws.stack))
    return t


class ContentionView(KeyScroll):
    snapshot: reactive[Snapshot | None] = reactive(None, always_update=True)
    filter_text = ""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "full_stacks", "Full stacks"),
    ]

    def set_filter(self, text: str) -> None:
        self.filter_text = text
        self.snapshot = self.snapshot

    def action_full_stacks(self) -> None:
        """Every contended stack (and other wait) in full: rows cut at the terminal's width
        can look alike; here each frame has its own line, numbered as in the table."""
        snap = self.snapshot
        if snap is None:
            return
        stacks = tuple(ms for ms in snap.mutex_stacks + snap.wait_stacks
                       if stack_matches(ms, self.filter_text))
        self.app.push_screen(DetailScreen("contended stacks, leaf first", stacks_text(
            stacks, "contended stacks" + (f" matching '{self.filter_text}'"
                                          if self.filter_text else ""))))

    def compose(self) -> ComposeResult:
        yield Static(id="mutex-summary")
        yield Static(id="mutex-stacks", classes="panel")
        yield Static(id="mutex-addrs", classes="panel")
        yield Static(id="other-waits", classes="panel")

    def on_mount(self) -> None:
        self.query_one("#mutex-stacks", Static).border_title = "contended stacks by wait time"
        self.query_one("#mutex-addrs", Static).border_title = "hottest locks"
        self.query_one("#other-waits", Static).border_title = (
            "other blocking waits (RWMutex, WaitGroup, semaphores)")

    def watch_snapshot(self, snap: Snapshot | None) -> None:
        if snap is None:
            return
        summary = Text(no_wrap=True, overflow="ellipsis")
        summary.append(f"contentions {fmt_count(snap.mutex_contentions)}", style="bold")
        summary.append(f"  total wait {fmt_ns(snap.mutex_wait_ns)}")
        summary.append(f"  stacks {len(snap.mutex_stacks)}")
        others = [(k, c, w) for k, (c, w) in snap.waits_by_kind.items() if k != "sync.Mutex"]
        if others:
            summary.append(f"  other waits {fmt_count(sum(c for _k, c, _w in others))}"
                           f" ({fmt_ns(sum(w for _k, _c, w in others))})")
        if self.filter_text:
            summary.append(f"  filter '{self.filter_text}'", style="bold #d29922")
        summary.append("   enter: full stacks  e: export", style="dim")
        self.query_one("#mutex-summary", Static).update(summary)
        self.query_one("#mutex-stacks", Static).update(
            stacks_table(snap, filter_text=self.filter_text))
        addrs = self.query_one("#mutex-addrs", Static)
        addrs.display = bool(snap.mutex_by_addr)
        addrs.update(addr_table(snap))
        waits = self.query_one("#other-waits", Static)
        waits.display = bool(snap.wait_stacks)
        waits.update(waits_table(snap))
