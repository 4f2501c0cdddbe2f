"""The GC part, its outputs and ps's sorting, on hand-made RT_GC events (pure; the numbers
themselves are checked against runtime/metrics in tests/integration/test_gcheap.py)."""

from __future__ import annotations

import dataclasses

from rich.console import Console

from gmpmon.capture.gcstats import NO_GOAL, heap_goal, memory_limit_goal
from gmpmon.commands.ps import PsRow, sort_rows
from gmpmon.events import NO_P, EventTuple, GcField, Kind, RtFeature
from gmpmon.export.json import gc_summary
from gmpmon.fleet.discover import GoProcess
from gmpmon.fleet.lifetime import LifetimeStats
from gmpmon.fleet.metrics import ProcessReading, families
from gmpmon.model import Model
from gmpmon.model.gcheap import GcPart
from gmpmon.report import gc_lines
from gmpmon.tui.gcpanel import gc_panel, gc_shown
from tests.unit.test_model_scenarios import header


def gc_ev(ts: int, field: GcField, v: int) -> EventTuple:
    return (ts, Kind.RT_GC, NO_P, 0, int(field), 0, v)


def fold(events: list[EventTuple]) -> GcPart:
    part = GcPart()
    table = dict(part.handlers())
    for e in events:
        table[e[1]](e)
    return part


def test_heap_goal_follows_heap_goal_internal() -> None:
    assert heap_goal(100, 0, NO_GOAL) == 100  # GOGC's goal
    assert heap_goal(100, 150, NO_GOAL) == 150  # the sweep distance raises it
    assert heap_goal(100, 0, 90) == 90 + (64 << 10)  # at least 64 KiB past the trigger
    assert heap_goal(100, 150, NO_GOAL, limit_goal=80) == 80  # a lower memory-limit goal
    assert heap_goal(100, 150, NO_GOAL, limit_goal=120) == 150


def test_memory_limit_goal_follows_memory_limit_heap_goal() -> None:
    mib = 1 << 20
    # 100 MiB limit, 10 MiB not heap (mapped - free - alloc), 3% headroom on 1.21+
    assert memory_limit_goal(100 * mib, 5 * mib, 20 * mib, 35 * mib, 8 * mib, 27) == (
        90 * mib - 90 * mib // 100 * 3)
    assert memory_limit_goal(100 * mib, 5 * mib, 20 * mib, 35 * mib, 8 * mib, 19) == 89 * mib
    # over the limit: the overage comes off too; at or past it: heapMarked
    assert memory_limit_goal(30 * mib, 0, 20 * mib, 40 * mib, 8 * mib, 27) == 8 * mib
    assert memory_limit_goal(100 * mib, 50 * mib, 60 * mib, 100 * mib, 8 * mib, 27) is None


def test_view_deltas_gauges_and_not_measured() -> None:
    base = [gc_ev(1_000_000_000, f, v) for f, v in (
        (GcField.CYCLES, 10), (GcField.PAUSE_TOTAL, 1000), (GcField.HEAP_MARKED, 4 << 20),
        (GcField.HEAP_LIVE, 5 << 20), (GcField.HEAP_GOAL, 8 << 20), (GcField.GOGC, 100),
        (GcField.MEMORY_LIMIT, (1 << 63) - 1))]
    later = [gc_ev(3_000_000_000, GcField.CYCLES, 14), gc_ev(3_000_000_000,
                                                             GcField.PAUSE_TOTAL, 5000)]
    missing = [(0, Kind.RT_MISSING, NO_P, 0, 0, int(RtFeature.GC_CPU), 0)]
    v = fold(missing + base + later).view()
    assert v is not None
    assert (v.cycles, v.cycles_total, v.cycles_per_s) == (4, 14, 2.0)
    assert (v.pause_ns, v.pause_per_cycle_ns) == (4000, 1000)
    assert v.memory_limit_bytes is None and v.gogc == 100 and v.heap_goal_bytes == 8 << 20
    assert v.assist_cpu_ns is None and v.cpu_total_ns is None  # not measured, never 0
    doc = gc_summary(v)
    assert doc is not None and doc["mark_assist_cpu_ns"] is None
    assert doc["missing"] == ["GC CPU time (work.cpuStats, Go 1.20+)"]
    text = "\n".join(gc_lines(v))
    assert "GOGC 100, GOMEMLIMIT none" in text and "not measured: GC CPU" in text


def test_gogc_off_and_a_memory_limit() -> None:
    v = fold([gc_ev(1, GcField.CYCLES, 0), gc_ev(1, GcField.GOGC, 0xFFFFFFFF),
              gc_ev(1, GcField.HEAP_GOAL, NO_GOAL), gc_ev(1, GcField.MEMORY_LIMIT, 1 << 30)]
             ).view()
    assert v is not None
    assert v.gogc == -1 and v.heap_goal_bytes is None and v.memory_limit_bytes == 1 << 30
    assert v.goal_note == ""  # the limit's goal was read whole
    assert v.cycles_per_s is None  # one read: no rate
    assert "goal off (GOGC=off)" in "\n".join(gc_lines(v))


def test_panel_and_metrics_show_it() -> None:
    v = fold([gc_ev(1, GcField.CYCLES, 3), gc_ev(1, GcField.HEAP_MARKED, 3 << 20),
              gc_ev(1, GcField.ASSIST_CPU, 5), gc_ev(1, GcField.DEDICATED_CPU, 6),
              gc_ev(1, GcField.IDLE_CPU, 7), gc_ev(1, GcField.PAUSE_CPU, 8)]).view()
    assert v is not None
    empty = Model(header(gomaxprocs=2)).snapshot()
    snap = dataclasses.replace(empty, gc=v)
    assert gc_shown(snap) and not gc_shown(empty)
    c = Console(width=80, record=True)
    c.print(gc_panel(snap))
    out = c.export_text()
    assert "heap live" in out and "3.0MiB" in out and "runtime memory" in out
    proc = GoProcess(1, 1, "/x", "go1.27.3", "", 1.0, (0, 0, 0, 0, 0))
    fams = {f.name: f for f in families([ProcessReading(proc, True, gc=v)])}
    assert fams["gmpmon_gc_heap_live_bytes"].samples[0].value == 3 << 20
    cpu = {s.labels["class"]: s.value for s in fams["gmpmon_gc_cpu_seconds"].samples}
    assert cpu == {"mark_assist": 0.0, "mark_dedicated": 0.0, "mark_idle": 0.0, "pause": 0.0}
    assert "gmpmon_gc_heap_goal_bytes" in fams and not fams["gmpmon_gc_heap_goal_bytes"].samples


def test_ps_sort_puts_not_measured_last() -> None:
    def row(pid: int, cpu: float | None, gs: int | None, version: str = "go1.27.3") -> PsRow:
        proc = GoProcess(pid, pid, f"/bin/p{pid}", version, "", float(pid), (pid, 0, 0, 0, 0))
        return PsRow(LifetimeStats(proc, 2, gs, None, None), cpu, 100 * pid, None, 0.5)

    rows = [row(1, 5.0, 3), row(2, None, 9), row(3, 50.0, None, "go1.19.8"), row(4, 5.0, 1)]
    assert [r.st.proc.pid for r in sort_rows(rows, "cpu")] == [3, 1, 4, 2]
    assert [r.st.proc.pid for r in sort_rows(rows, "goroutines")] == [2, 1, 4, 3]
    assert [r.st.proc.pid for r in sort_rows(rows, "go")] == [1, 2, 4, 3]
    assert [r.st.proc.pid for r in sort_rows(rows, "exe")] == [1, 2, 3, 4]
    assert [r.st.proc.pid for r in sort_rows(rows, "mem")] == [4, 3, 2, 1]
    blocked = PsRow(rows[0].st, 1.0, 1, "needs root (CAP_SYS_ADMIN or CAP_BPF+CAP_PERFMON)",
                    0.5)
    assert blocked.cells()[11] == "no" and blocked.to_json()["attachable"] is False
    assert blocked.cells()[12].startswith("needs root")


def test_delta_counts_from_the_base() -> None:
    from gmpmon.model.gcheap import gc_delta

    evs = [gc_ev(1_000_000_000, GcField.CYCLES, 10), gc_ev(1_000_000_000, GcField.PAUSE_TOTAL, 0),
           gc_ev(1_000_000_000, GcField.ASSIST_CPU, 0)]
    part = fold(evs)
    table = dict(part.handlers())
    base = part.view()
    for e in (gc_ev(3_000_000_000, GcField.CYCLES, 16), gc_ev(3_000_000_000,
              GcField.PAUSE_TOTAL, 600), gc_ev(3_000_000_000, GcField.ASSIST_CPU, 90)):
        table[e[1]](e)
    cur = part.view()
    d = gc_delta(cur, base)
    assert d is not None and cur is not None
    assert (d.cycles, d.cycles_per_s, d.pause_ns, d.pause_per_cycle_ns) == (6, 3.0, 600, 100)
    assert d.assist_cpu_ns == 90 and d.idle_cpu_ns is None and d.heap_live_bytes == 0
    assert gc_delta(cur, None) is cur
