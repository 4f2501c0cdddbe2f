"""Pure renderers for the Goroutines view's wait stacks: the census's groups of parked
goroutines (state, wait reason, stack, creation site) as table rows, and one group in full.

They read only ``CensusView.stacks``, so the counts are the census's own.
"""

from __future__ import annotations

from rich.text import Text

from gmpmon.model.runtime import CensusView
from gmpmon.model.waitstacks import CensusStack, top_frames
from gmpmon.tui.render import fmt_count, fmt_ns

GROUP_COLUMNS: tuple[str, ...] = ("#", "count", "state", "waited max", "created by",
                                  "where (leaf < callers)")
WHERE = 5  # the column that takes the terminal's extra width
CREATOR_WIDTH = 20  # the creation site keeps its end (`…(*Transport).dialConn`)


def group_matches(w: CensusStack, text: str) -> bool:
    """`/` filter: the text in a frame (function or package), the creation site, the state
    or the wait reason."""
    if not text:
        return True
    needle = text.lower()
    return (needle in w.reason.lower() or needle in w.state.lower()
            or needle in w.creator.lower() or needle in w.start.lower()
            or any(needle in f.lower() for f in w.frames))


NO_STACKS = "[no wait stacks in this capture]"


def census_groups(c: CensusView) -> tuple[CensusStack, ...]:
    """The census's wait-stack groups or, in a capture that took no stacks, one row per state
    and wait reason of every goroutine (running and runnable too), so that the table is never
    empty where the census counted goroutines (issue 27: default mode with no window open
    had no probe-seen goroutine to list)."""
    if c.stacks is not None:
        return c.stacks
    return tuple(CensusStack(-1 - i, r.state, r.reason, r.system, (NO_STACKS,), "", "",
                             r.count, r.waited, r.wait_sum_ns, r.wait_max_ns)
                 for i, r in enumerate(c.rows))


def user_groups(c: CensusView | None, text: str = "") -> list[tuple[int, CensusStack]]:
    """The user goroutines' groups, numbered as the census ranks them, filtered."""
    if c is None:
        return []
    return [(i, w) for i, w in enumerate((w for w in census_groups(c) if not w.system), 1)
            if group_matches(w, text)]


def group_row(rank: int, w: CensusStack) -> list[Text]:
    waited = fmt_ns(w.wait_max_ns) if w.waited else "–"
    created = w.creator or "–"
    if len(created) > CREATOR_WIDTH:
        created = "…" + created[-(CREATOR_WIDTH - 1):]
    return [
        Text(str(rank), style="dim"),
        Text(fmt_count(w.count), style="bold"),
        Text(w.reason or w.state),  # as Go's dump heads a goroutine: [chan receive]
        Text(waited, style="dim"),
        Text(created, style="#6e7681"),
        Text(top_frames(w.frames)),
    ]


def groups_summary(c: CensusView | None, shown: int, text: str) -> Text:
    out = Text(no_wrap=True, overflow="ellipsis")
    if c is None:
        out.append("wait stacks: no census yet", style="dim")
        return out
    if c.stacks is None:
        rows = [w for w in census_groups(c) if not w.system]
        out.append(f"census #{c.seq} by state", style="bold")
        out.append(f"  {fmt_count(sum(w.count for w in rows))} goroutines in {len(rows)} "
                   "states (wait stacks: not taken in this capture)")
        if text:
            out.append(f"  filter '{text}': {shown}", style="bold #d29922")
        out.append("   (/: filter; w: goroutines)", style="dim")
        return out
    groups = [w for w in c.stacks if not w.system]
    parked = sum(w.count for w in groups)
    waiting = sum(r.count for r in c.rows if not r.system and r.state == "waiting")
    out.append(f"census #{c.seq} wait stacks", style="bold")
    out.append(f"  {fmt_count(parked)} of {fmt_count(waiting)} waiting goroutines in "
               f"{len(groups)} groups")
    if text:
        out.append(f"  filter '{text}': {shown}", style="bold #d29922")
    out.append("   (enter: the stack; /: filter; w: goroutines)", style="dim")
    return out


def group_text(rank: int, w: CensusStack, c: CensusView) -> Text:
    """One group in full: its numbers, then the stack leaf first, one frame a line (as Go's
    goroutine dumps print it), then where the goroutines were created."""
    t = Text()
    t.append(f"{fmt_count(w.count)} goroutines ", style="bold")
    t.append(f"[{w.reason or w.state}", style="bold")
    if w.waited:
        t.append(f", waited up to {fmt_ns(w.wait_max_ns)}", style="bold")
    t.append("]\n", style="bold")
    t.append(f"census #{c.seq}: group #{rank} of "
             f"{len([x for x in census_groups(c) if not x.system])}"
             "\n", style="dim")
    if w.waited:
        t.append(f"{fmt_count(w.waited)} of them have g.waitsince (parked across a GC): avg "
                 f"{fmt_ns(w.wait_sum_ns / w.waited)}, max {fmt_ns(w.wait_max_ns)}\n", style="dim")
    else:
        t.append("wait time: not known (g.waitsince is set by the GC's first stack scan after "
                 "the park)\n", style="dim")
    t.append("\n")
    for f in w.leaf_first:
        t.append(f"  {f}\n")
    if w.creator:
        t.append(f"created by {w.creator}", style="bold")
        t.append(f"  (go {w.start})\n")
    return t
