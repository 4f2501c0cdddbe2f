"""Drill-down screens: one goroutine's details (Enter in Goroutines), the contended stacks in
full (Enter in Contention), and the `/` filter prompt."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Input, Static

from gmpmon.model.snapshot import GoroutineView, GState, MutexStack, Snapshot
from gmpmon.tui.render import GSTATE_WORD, fmt_count, fmt_ns

# What each state in the Goroutines view means (the help and docs/tui.md say the same).
GSTATE_MEANING: dict[GState, str] = {
    GState.UNKNOWN: "not observed since attaching or since default mode's last window "
                    "(the probes were off): it may be doing anything",
    GState.RUNNABLE: "in a run queue, waiting for a P",
    GState.RUNNING: "running on a P",
    GState.WAITING: "parked (gopark), see the wait reason",
    GState.SYSCALL: "in a system call",
    GState.DEAD: "exited; kept a while so the table can show how it ended",
}

# Go's rarer states, as the census words them (a census row's state is UNKNOWN to the model).
CENSUS_MEANING: dict[str, str] = {
    "preempted": "stopped to be preempted or scanned; runnable again next",
    "copystack": "its stack is being moved",
}

# States seen per goroutine at each refresh, newest last: (ts, state, reason, P).
History = tuple[tuple[int, GState, str, int], ...]


def goroutine_text(g: GoroutineView, snap: Snapshot, history: History = ()) -> Text:
    by_id = {x.goid: x for x in snap.goroutines}
    t = Text()
    word = g.census_state or GSTATE_WORD.get(g.state, "?")
    t.append(f"G{g.goid}  ", style="bold")
    t.append(word, style="bold")
    meaning = CENSUS_MEANING.get(g.census_state) or GSTATE_MEANING.get(g.state, "")
    t.append(f"  ({meaning})\n", style="dim")
    c = snap.runtime.census if snap.runtime is not None else None
    if g.census_state and c is not None:
        t.append(f"state and wait reason as of census #{c.seq}, "
                 f"{fmt_ns(max(snap.now - c.ts, 0))} ago\n", style="dim")
    seen = g.probed  # else the probes measured none of P, waits, runs, parent
    rows = [
        ("P", str(g.p) if g.p >= 0 else "-" if seen else "– not seen by the probes"),
        ("wait reason", "" if g.state is GState.DEAD else g.wait_reason or "-"),
        ("total wait", fmt_ns(g.wait_ns) if seen and g.wait_ns else "-" if seen else "–"),
        ("in this state", in_state(g, snap)),
        ("runs", fmt_count(g.executes) if seen else "–"),
    ]
    chain: list[str] = []
    parent = g.parent
    while parent and len(chain) < 8:
        chain.append(f"G{parent}")
        up = by_id.get(parent)
        parent = up.parent if up is not None else 0
    rows.append(("created by", " < ".join(chain) if chain else "- (before attaching)"))
    children = sum(1 for x in snap.goroutines if x.parent == g.goid)
    rows.append(("children seen", str(children)))
    rows.append(("start function", g.start or "– not known: created before attaching and "
                                              "not yet walked by the census"))
    rows.append(("created at", g.created_at or "–"))
    rows.append(("stack", "– not captured (gmpmon takes stacks at contended lock waits: "
                          "Contention view)"))
    for k, v in rows:
        t.append(f"{k:<15}", style="bold dim")
        t.append(f"{v}\n")
    t.append("\nhistory", style="bold")
    t.append("  (state at each TUI refresh while shown, newest last)\n", style="dim")
    if not history:
        t.append("  none yet\n", style="dim")
    for ts, state, reason, p in history[-16:]:
        when = fmt_ns(max(snap.now - ts, 0))
        extra = f" ({reason})" if reason and state is GState.WAITING else ""
        on = f" on P{p}" if p >= 0 and state in (GState.RUNNING, GState.SYSCALL) else ""
        t.append(f"  {when + ' ago':>12}  {GSTATE_WORD.get(state, '?')}{extra}{on}\n")
    return t


def in_state(g: GoroutineView, snap: Snapshot) -> str:
    """Time in the current state: `>X` when it has not changed since the first event (it
    started before the capture did), `–` when the state itself is not known."""
    if g.state is GState.UNKNOWN or not g.since:
        return "–"
    d = fmt_ns(max(snap.now - g.since, 0))
    return f">{d}" if g.since <= snap.start else d


def stacks_text(stacks: tuple[MutexStack, ...], what: str) -> Text:
    """Every stack in full, leaf first, one frame a line: two stacks never look the same."""
    t = Text()
    if not stacks:
        t.append(f"no {what} yet", style="dim")
    for i, ms in enumerate(stacks, 1):
        avg = fmt_ns(ms.wait_ns / ms.count) if ms.count else "-"
        t.append(f"#{i}  ", style="bold")
        t.append(f"{fmt_ns(ms.wait_ns)} waited, {fmt_count(ms.count)} times, avg {avg}"
                 f"  ({ms.kind})\n", style="bold")
        for frame in reversed(ms.stack):
            t.append(f"    {frame}\n")
        t.append("\n")
    return t


class DetailScreen(ModalScreen[None]):
    """A scrollable text over the app, closed by esc / q / enter."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q,enter", "dismiss", "Close"),
        Binding("j", "scroll('down')", show=False),
        Binding("k", "scroll('up')", show=False),
    ]

    def __init__(self, title: str, body: Text) -> None:
        super().__init__()
        self.title_text = title
        self.body = body

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="detail-box"):
            yield Static(self.body, id="detail-body")

    def on_mount(self) -> None:
        box = self.query_one("#detail-box")
        box.border_title = f"{self.title_text} (esc to close)"
        box.focus()

    def action_scroll(self, where: str) -> None:
        box = self.query_one("#detail-box", VerticalScroll)
        if where == "down":
            box.scroll_down()
        else:
            box.scroll_up()


class FilterScreen(ModalScreen[str | None]):
    """`/`: a one-line prompt; enter applies the text (empty clears), esc leaves it."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, current: str) -> None:
        super().__init__()
        self.current = current

    def compose(self) -> ComposeResult:
        yield Input(value=self.current, placeholder="filter goroutines and stacks (empty: all)",
                    id="filter-input")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value.strip())

    def action_cancel(self) -> None:
        self.dismiss(None)


def goroutine_matches(g: GoroutineView, text: str) -> bool:
    """`/` filter: the text in the goroutine's id, state, wait reason, parent, start
    function or creation site."""
    if not text:
        return True
    needle = text.lower()
    hay = (f"g{g.goid} {g.goid} {g.census_state or GSTATE_WORD.get(g.state, '?')} "
           f"{g.wait_reason} "
           f"parent {g.parent} p{g.p} {g.start} {g.created_at}").lower()
    return needle in hay


def stack_matches(ms: MutexStack, text: str) -> bool:
    """`/` filter: the text in any frame of the stack (or its kind)."""
    if not text:
        return True
    needle = text.lower()
    return needle in ms.kind.lower() or any(needle in f.lower() for f in ms.stack)
