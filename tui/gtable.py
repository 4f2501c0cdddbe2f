"""Pure renderers for the Goroutines view's goroutine table: one row per goroutine, its
summary line, and the sort order of each column.

The rows come from ``Snapshot.census_goroutines`` when the census told each goroutine's state
(every mode): state and wait reason as of the newest census, the probes' numbers (P, wait
time, in state, runs, parent) where they saw the goroutine and "–" where they did not. A
recording made before the census told states has only the probes' goroutines
(``Snapshot.goroutines``): the summary says so.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from rich.text import Text

from gmpmon.model.snapshot import GoroutineView, GState, Snapshot
from gmpmon.tui.measure import NOT_MEASURED, coverage
from gmpmon.tui.render import GSTATE_WORD, fmt_count, fmt_ns
from gmpmon.tui.widgets.details import in_state

SortKey = Callable[[GoroutineView, int], tuple[object, ...]]


def state_word(g: GoroutineView) -> str:
    """The census's word for its state (Go's own: `preempted`, `copystack` too), else the
    model's."""
    return g.census_state or GSTATE_WORD.get(g.state, "?")


def _measured(g: GoroutineView, value: int) -> int:
    return value if g.probed else -1  # not measured sorts below any measured value


# (column label, sort key, descending by default). ``now`` is passed so that "in state" sorts
# by the same number it shows.
COLUMNS: tuple[tuple[str, SortKey, bool], ...] = (
    ("G", lambda g, now: (g.goid,), False),
    ("state", lambda g, now: (state_word(g), g.wait_reason, g.goid), False),
    ("P", lambda g, now: (g.p, g.goid), False),
    ("wait reason", lambda g, now: (g.wait_reason, g.goid), False),
    ("wait time", lambda g, now: (_measured(g, g.wait_ns), g.goid), True),
    ("in state", lambda g, now: (now - g.since if g.since and g.state else -1, g.goid), True),
    ("runs", lambda g, now: (_measured(g, g.executes), g.goid), True),
    ("parent", lambda g, now: (g.parent, g.goid), False),
    ("start", lambda g, now: (g.start, g.goid), False),
)
START = len(COLUMNS) - 1  # the last column takes the terminal's extra width
STATE_COLOUR = {"running": "#3fb950", "runnable": "#d29922", "waiting": "#6e7681",
                "syscall": "#a371f7", "dead": "#484f58", "unknown": "#6e7681"}
DIM = "#6e7681"


def pool(snap: Snapshot) -> tuple[GoroutineView, ...]:
    """The goroutines the table lists: the census's when it told their states."""
    if snap.census_goroutines is not None:
        return snap.census_goroutines
    return snap.goroutines


def g_row(g: GoroutineView, snap: Snapshot) -> list[Text]:
    """One goroutine's cells, in COLUMNS' order. "–": not measured (the probes never saw it,
    or saw no parent); never a 0 that was not counted."""
    word = state_word(g)
    dead = g.state is GState.DEAD
    dim = DIM if dead else ""
    seen = g.probed
    return [
        Text(str(g.goid), style=dim),
        Text(word, style=STATE_COLOUR.get(word, "")),
        Text(str(g.p) if g.p >= 0 else ("-" if seen else NOT_MEASURED), style=dim),
        Text("" if dead else g.wait_reason or ""),  # a dead goroutine waits for nothing
        Text(fmt_ns(g.wait_ns) if seen and g.wait_ns else ("" if seen else NOT_MEASURED),
             style=dim),
        Text(in_state(g, snap), style=dim),
        Text(fmt_count(g.executes) if seen else NOT_MEASURED, style=dim),
        Text(str(g.parent) if g.parent else NOT_MEASURED, style=dim),
        Text(g.start or NOT_MEASURED, style=dim or ("" if g.start else DIM)),
    ]


def summary(snap: Snapshot, shown: str, filter_text: str, sort: str) -> Text:
    """The line above the table: what it lists, from where, and the counts by state."""
    out = Text(no_wrap=True, overflow="ellipsis")
    rows = snap.census_goroutines
    c = snap.runtime.census if snap.runtime is not None else None
    cov = coverage(snap)
    if rows is not None and c is not None:
        out.append(f"census #{c.seq}: {fmt_count(c.goroutines)} goroutines", style="bold")
        if len(rows) < c.goroutines:
            out.append(f" ({fmt_count(len(rows))} listed)", style="bold #d29922")
        counts = Counter(state_word(g) for g in rows)
        out.append("  " + "  ".join(f"{k} {fmt_count(v)}" for k, v in counts.most_common()))
        if cov.hot:  # the runs, waits and parents the probes measured, and where
            probed = sum(1 for g in rows if g.probed)
            note = f" ({cov.note()})" if cov.note() else ""
            out.append(f"  probes saw {fmt_count(probed)}{note}", style="dim")
        else:
            out.append(f"  probes: {cov.note()}", style="dim")
    elif cov.hot:
        counts_ = "  ".join(f"{k} {fmt_count(v)}" for k, v in sorted(snap.g_state_counts.items()))
        out.append(f"seen {fmt_count(snap.goroutines_live)}", style="bold")
        out.append(f"  created {fmt_count(snap.goroutines_created)}"
                   f"  exited {fmt_count(snap.goroutines_exited)}")
        if not cov.exact:
            out.append(f" ({cov.note()})", style="dim")
        out.append(f"  {counts_}")
    else:
        out.append(f"goroutines seen by probes: {cov.note()}", style="dim")
    if filter_text:
        out.append(f"  filter '{filter_text}': {shown}", style="bold #d29922")
    out.append(f"   by {sort} (s; enter: details; /: filter; w: wait stacks)", style="dim")
    if rows is None and c is not None:
        out.append("  the census told no goroutine's state in this capture", style="dim")
    return out
