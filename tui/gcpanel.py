"""The GC and heap panel (Scheduling view): the runtime's own memory, no trap, every mode."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from gmpmon.fmt import fmt_ns
from gmpmon.model.gcheap import GcView
from gmpmon.model.snapshot import Snapshot
from gmpmon.tui.measure import NOT_MEASURED

GC_SOURCE = ("source: runtime memory (memstats, gcController, work.cpuStats): what "
             "runtime/metrics /gc/* and /cpu/classes/gc/* read")


def fmt_bytes(n: int | None) -> str:
    if n is None:
        return NOT_MEASURED
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return f"{n}B"


def _ns(v: int | None) -> str:
    return NOT_MEASURED if v is None else fmt_ns(v)


def _why_missing(snap: Snapshot) -> str | None:
    rv = snap.runtime
    if rv is None:
        return None
    return next((m for m in rv.missing if m.startswith("GC and heap")), None)


def gc_shown(snap: Snapshot) -> bool:
    """Shown when the capture read the GC, or says why it could not (not for recordings
    made before gmpmon read it)."""
    return snap.gc is not None or _why_missing(snap) is not None


def gc_panel(snap: Snapshot) -> Group | Text:
    gc: GcView | None = snap.gc
    if gc is None:
        why = _why_missing(snap)
        return Text("GC and heap: not measured" + (f" ({why})" if why else ""), style="dim")
    t = Table(box=None, pad_edge=False, padding=(0, 1), show_header=False, show_edge=False)
    for justify in ("left", "right", "left", "right"):
        t.add_column(justify=justify, no_wrap=True)
    goal = "off" if gc.heap_goal_bytes is None else fmt_bytes(gc.heap_goal_bytes)
    rate = "-" if gc.cycles_per_s is None else f"{gc.cycles_per_s:.2f}/s"
    t.add_row("heap live", fmt_bytes(gc.heap_live_bytes), "GOGC",
              "off" if gc.gogc < 0 else str(gc.gogc))
    t.add_row("in use", fmt_bytes(gc.heap_in_use_bytes), "GOMEMLIMIT",
              "none" if gc.memory_limit_bytes is None else fmt_bytes(gc.memory_limit_bytes))
    t.add_row("goal", goal, "cycles", f"{gc.cycles} ({rate})")
    t.add_row("STW/cycle", _ns(gc.pause_per_cycle_ns), "STW total", fmt_ns(gc.pause_ns))
    t.add_row("mark assist", _ns(gc.assist_cpu_ns), "dedicated", _ns(gc.dedicated_cpu_ns))
    t.add_row("mark idle", _ns(gc.idle_cpu_ns), "pause CPU", _ns(gc.pause_cpu_ns))
    parts: list[Table | Text] = [t]
    if gc.goal_note:
        parts.append(Text(gc.goal_note, style="dim"))
    for m in gc.missing:
        parts.append(Text(f"{NOT_MEASURED}: {m}", style="dim"))
    parts.append(Text("since attach: cycles, STW, CPU; " + GC_SOURCE, style="dim"))
    return Group(*parts)
