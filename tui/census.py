"""Pure renderers for the runtime-counter and census panel of the Goroutines view.

They read only ``Snapshot.runtime`` and say their source on the first line, so a number from
the runtime's own counters or the census never passes for a probe's.
"""

from __future__ import annotations

from rich.text import Text

from gmpmon.model.runtime import RuntimeView
from gmpmon.tui.render import fmt_count, fmt_ns


def goroutine_count(rv: RuntimeView | None) -> str | None:
    """The header's goroutine count from the runtime (what NumGoroutine says), if read."""
    if rv is None or not rv.reads:
        return None
    return f"{fmt_count(rv.goroutines)} (runtime)"


def census_text(rv: RuntimeView | None, *, rows: int = 8, sites: int = 5,
                lines: int | None = None) -> Text:
    """The panel's text. ``lines`` caps its height: the wait-state rows and creation sites
    share what the counters and the census line leave (states first, at least one of each
    where there is room), so that on a small terminal the goroutine table below keeps rows."""
    out = Text(no_wrap=True, overflow="ellipsis")
    if rv is None:
        out.append("no runtime counters or census in this capture", style="dim")
        return out
    lat = rv.latency
    out.append("runtime counters", style="bold")
    out.append(f"  goroutines {fmt_count(rv.goroutines)}  idle Ps {rv.npidle}  "
               f"spinning {rv.nmspinning}  global runq {rv.global_runq}")
    out.append(f"\n  latency p50 {fmt_ns(lat.p50)} p90 {fmt_ns(lat.p90)} p99 {fmt_ns(lat.p99)} "
               f"max {fmt_ns(lat.max)}  ")
    out.append(f"({rv.latency_note})", style="dim")
    if rv.stw_gc is not None:
        out.append(f"\n  GC STW {rv.stw_gc.count} pauses ~{fmt_ns(rv.stw_gc.sum)}"
                   f" max>={fmt_ns(rv.stw_gc.max)}")
    if rv.mutex_wait_ns is not None:
        out.append(f"  mutex wait {fmt_ns(rv.mutex_wait_ns)}")
    c = rv.census
    if c is None:
        return out
    out.append(f"\ncensus #{c.seq}", style="bold")
    out.append(f"  {fmt_count(c.goroutines)} goroutines + {c.system} runtime, "
               f"walked {fmt_count(c.walked)} in {fmt_ns(c.duration_ns)}")
    if c.cut:
        out.append(f"  cut short: {', '.join(c.cut)}", style="bold #d29922")
    states = [r for r in c.rows if not r.system][:rows]
    top = c.sites[:sites]
    if lines is not None:
        room = max(0, lines - (out.plain.count("\n") + 1))
        n_sites = min(len(top), max(room - len(states), min(1, room // 2)))
        states, top = states[:room - n_sites], top[:n_sites]
    for r in states:
        what = f"{r.state} ({r.reason})" if r.reason else r.state
        out.append(f"\n  {fmt_count(r.count):>7} {what}")
        if r.waited:
            out.append(f"  waited max {fmt_ns(r.wait_max_ns)}", style="dim")
    for s in top:
        out.append(f"\n  {fmt_count(s.count):>7} {s.start}", style="#58a6ff")
        out.append(f" <- {s.creator}", style="dim")
    return out
