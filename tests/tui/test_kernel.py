"""Issue #11, what users see: the kernel sources (perf samples, sched and syscall
tracepoints) and the runtime's own counters on screen, in sample mode and under default.

Recordings of the demo captured by gmpmon (tests/data/README.md): demo-sample-kernel.gmp in
sample mode with every kernel source on, demo-default-kernel.gmp in default mode with the
perf samples only (the default). Every number asserted is the one the Snapshot of the same
recording holds, formatted as the screen formats it.
"""

from __future__ import annotations

import re
from pathlib import Path

from gmpmon.model.delta import since
from gmpmon.model.snapshot import PState, Snapshot
from gmpmon.replay import ReplaySource
from gmpmon.tui.app import make_app
from gmpmon.tui.render import SPARK, fmt_count, fmt_ns, fmt_q
from gmpmon.tui.widgets.procs import ProcTable
from gmpmon.tui.widgets.sched import runtime_edges
from tests.tui.screen import proc_rows, screen_text

DATA = Path(__file__).resolve().parents[1] / "data"
SAMPLE = "demo-sample-kernel"
DEFAULT = "demo-default-kernel"
ON_CPU_GLYPHS = set(SPARK[1:]) | {"─"}  # running (a bar) or searching


def replay(name: str, at: float = 1.0) -> ReplaySource:
    src = ReplaySource(str(DATA / f"{name}.gmp"), autostart=False, paused=True)
    src.seek(at)
    return src


def latest(src: ReplaySource) -> Snapshot:
    snap = src.latest()
    assert snap is not None
    return snap


def flat(text: str) -> str:
    """The screen's words in one line: panel borders out, wrapped notes joined."""
    return " ".join(text.replace("│", " ").split())


def _line(text: str, pattern: str) -> str:
    found = [ln for ln in text.splitlines() if re.search(pattern, ln)]
    assert found, (pattern, text)
    return found[0]


async def test_sample_mode_strip_is_the_perf_samples_timeline() -> None:
    src = replay(SAMPLE)
    snap = latest(src)
    k = snap.kernel
    assert snap.window == "sampled" and k is not None and k.timeline
    app = make_app(src)
    async with app.run_test(size=(120, 60)) as pilot:
        await pilot.pause()
        text = screen_text(app)
        table = app.query_one(ProcTable)
        cell_ns, width = table.cell_ns, table.strip_width
    assert "sampled: " in _line(text, r"/cell")
    assert "timeline sampled (1 kHz perf samples)" in text
    checked, only_samples = check_sampled_cells(snap, text, cell_ns, width)
    assert checked > 20
    # The 50 Hz P status reads alone would have left these cells without a run.
    assert only_samples > 0


def _overlaps(a: int, b: int, lo: int, hi: int) -> bool:
    return a < hi and b > lo


def strip_column(text: str) -> int:
    """Where the timeline strip starts: its header's label sits on its first cell."""
    m = re.search(r"(sampled: )?[\d.]+[µm]?s/cell", _line(text, r"/cell"))
    assert m, text
    return m.start()


def check_sampled_cells(snap: Snapshot, text: str, cell_ns: int, width: int
                        ) -> tuple[int, int]:
    """Every strip cell that no stop-the-world and no probe window touches shows the P on a
    CPU (a bar or searching) exactly where a perf sample saw it there. Returns the cells
    checked and those where the P status reads said nothing of a run."""
    k = snap.kernel
    assert k is not None
    rows = proc_rows(text)
    assert len(rows) == snap.gomaxprocs
    col = strip_column(text)
    last = snap.now // cell_ns
    checked = only_samples = 0
    for row in rows:
        p = int(row.split()[0])
        cells = row[col:].ljust(width)
        first = last - width + 1
        status = next(x for x in snap.procs if x.id == p).timeline
        for i, ch in enumerate(cells):
            lo, hi = (first + i) * cell_ns, (first + i + 1) * cell_ns
            if any(_overlaps(a, b, lo, hi) for a, b in (*snap.stw_spans, *snap.window_spans)):
                continue  # a stop-the-world marks every P; windows are the probes'
            sampled = any(_overlaps(s.start, s.end, lo, hi) for s in k.timeline.get(p, ()))
            assert (ch in ON_CPU_GLYPHS) == sampled, (p, i, ch, row)
            checked += 1
            only_samples += sampled and not any(
                _overlaps(s.start, s.end, lo, hi) and s.state is PState.RUNNING for s in status)
    return checked, only_samples


async def test_sample_mode_m_table_is_the_sched_tracepoints() -> None:
    src = replay(SAMPLE)
    snap = latest(src)
    k = snap.kernel
    assert k is not None and k.sources["threads"] == "tracepoints" and k.runq_latency
    app = make_app(src)
    async with app.run_test(size=(120, 80)) as pilot:
        await pilot.pause()
        text = screen_text(app)
    assert "source: tracepoints sched_switch/sched_wakeup (exact)" in text
    by_runq = sorted(k.threads, key=lambda t: (-t.runq_ns, -t.oncpu_ns, t.tid))
    rows = [ln for ln in text.splitlines() if re.match(r"^ *│ \d+ +(P\d+|-) ", ln)]
    assert [int(r.split()[1]) for r in rows] == [t.tid for t in by_runq][: len(rows)]
    for r, t in zip(rows, by_runq, strict=False):
        cols = r.strip("│ ").split()
        assert cols[2:7] == [fmt_ns(t.oncpu_ns), fmt_ns(t.runq_ns),
                             f"{100 * t.runq_ns / (t.oncpu_ns + t.runq_ns):.0f}%",
                             fmt_count(t.runq_waits), fmt_ns(t.offcpu_ns)], r
    lat = k.runq_latency
    assert (f"run-queue delay p50 {fmt_q(lat.p50, lat)}  p90 {fmt_q(lat.p90, lat)}  "
            f"p99 {fmt_q(lat.p99, lat)}  max {fmt_q(lat.max, lat)}") in text
    on = sum(t.oncpu_ns for t in k.threads)
    assert f"{len(k.threads)} Ms  on CPU {fmt_ns(on)}" in text


async def test_sample_mode_syscalls_per_p_are_the_syscall_tracepoints() -> None:
    src = replay(SAMPLE)
    snap = latest(src)
    k = snap.kernel
    assert k is not None and k.sources["syscalls"] == "tracepoints" and k.syscalls_by_p
    app = make_app(src)
    async with app.run_test(size=(120, 80)) as pilot:
        await pilot.pause()
        text = screen_text(app)
    assert "source: tracepoints sys_enter/sys_exit (exact)" in text
    assert f"{fmt_count(k.syscalls)} syscalls  {fmt_ns(k.syscall_ns)} in them" in text
    for row in k.syscalls_by_p:
        name = "no P" if row.p < 0 else f"P{row.p}"
        line = _line(text, rf"^ *│ {name} +\d")
        assert f" {fmt_count(row.count)} " in line and f" {fmt_ns(row.ns)} " in line, line
        top = row.top[0]
        assert line.split(name, 1)[1].split()[4:6] == [top.name, fmt_count(top.count) + ","]


async def test_sample_mode_sched_view_shows_the_runtime_histogram() -> None:
    src = replay(SAMPLE)
    snap = latest(src)
    rv = snap.runtime
    assert rv is not None and rv.latency.count > 0
    lat, edges = rv.latency, runtime_edges(snap.go_version)
    app = make_app(src)
    async with app.run_test(size=(120, 60)) as pilot:
        await pilot.pause()
        await pilot.press("2")
        await pilot.pause()
        text = screen_text(app)
    assert (f"n={fmt_count(lat.count)}  p50 {fmt_q(lat.p50, lat, edges)}  "
            f"p90 {fmt_q(lat.p90, lat, edges)}  p99 {fmt_q(lat.p99, lat, edges)}  "
            f"max {fmt_q(lat.max, lat, edges)}") in text
    assert "source: runtime counters (~1 in 8 transitions): sched.timeToRun" in flat(text)
    assert "probed run latency: not measured in sample mode" in text
    ticks = "  ".join(f"P{x.p} {fmt_count(x.schedules)}" for x in rv.procs)
    assert f"scheduled (runtime counters, schedtick): {ticks}" in text
    k = snap.kernel
    assert k is not None
    assert f"syscalls: {fmt_count(k.syscalls)} (tracepoints)" in text
    assert rv.stw_gc is not None
    assert re.search(rf"GC \(runtime counters\) +{rv.stw_gc.count} ", text)


async def test_default_mode_keeps_the_probe_strip_and_says_how_to_turn_tracepoints_on() -> None:
    src = replay(DEFAULT)
    snap = latest(src)
    k = snap.kernel
    assert snap.window == "windows" and k is not None
    assert "syscalls" not in k.sources and k.sources["threads"] == "samples"
    assert snap.window_spans
    app = make_app(src)
    async with app.run_test(size=(120, 80)) as pilot:
        await pilot.pause()
        text = screen_text(app)
        cell_ns, width = app.query_one(ProcTable).cell_ns, app.query_one(ProcTable).strip_width
    assert "sampled: " not in _line(text, r"/cell")
    assert "timeline: probe events inside default mode's windows (━ on the probes line); " \
        "between them sampled: running/searching from 1 kHz perf samples" in flat(text)
    # The probes line marks exactly the cells a duty-cycle window touches...
    strip = _line(text, r"^ +probes ")[strip_column(text):].ljust(width)
    assert len(strip) == width and "━" in strip
    first = snap.now // cell_ns - width + 1
    for i, ch in enumerate(strip):
        lo, hi = (first + i) * cell_ns, (first + i + 1) * cell_ns
        assert (ch == "━") == any(_overlaps(a, b, lo, hi) for a, b in snap.window_spans)
    # ...and between windows the cells are the perf samples'.
    checked, _ = check_sampled_cells(snap, text, cell_ns, width)
    assert checked > 20
    words = flat(text)
    assert "the sched tracepoints are off; --kernel samples,sched turns them on" in words
    assert "sys_enter/sys_exit tracepoints are off); --kernel samples,sched,syscalls" in words
    rv = snap.runtime
    assert rv is not None
    assert "per P: " + "  ".join(f"P{t.p} {fmt_count(t.syscalls)}" for t in rv.procs) in text
    top = max(k.threads, key=lambda t: (t.samples, -t.tid))
    line = _line(text, rf"^ *│ {top.tid} ")
    assert line.split()[3:5] == [fmt_ns(top.samples * k.samples.period_ns),
                                 fmt_count(top.samples)], line
    g = k.cpu_by_goroutine[0]
    assert re.search(rf"G{g.goid} +{re.escape(fmt_ns(g.cpu_ns))} ", text)


async def test_reset_counts_the_kernel_panels_from_the_reset() -> None:
    """`z` then later: the Ms, syscalls and samples are the differences of the two
    Snapshots (exact per thread and per P), as every other count."""
    base, cur = latest(replay(SAMPLE, 0.5)), latest(replay(SAMPLE, 1.0))
    bk, ck = base.kernel, cur.kernel
    assert bk is not None and ck is not None and ck.syscalls > bk.syscalls
    d = since(cur, base).kernel
    assert d is not None
    before = {t.tid: t for t in bk.threads}
    for t in d.threads:
        c = next(x for x in ck.threads if x.tid == t.tid)
        b = before.get(t.tid)
        assert t.oncpu_ns == c.oncpu_ns - (b.oncpu_ns if b else 0)
        assert t.runq_ns == c.runq_ns - (b.runq_ns if b else 0)
    assert d.syscalls == ck.syscalls - bk.syscalls == sum(p.count for p in d.syscalls_by_p)
    assert d.samples.total == ck.samples.total - bk.samples.total
    assert d.runq_latency is not None and ck.runq_latency is not None
    assert d.runq_latency.count == ck.runq_latency.count - (
        bk.runq_latency.count if bk.runq_latency else 0)
    src = replay(SAMPLE, 0.5)
    app = make_app(src)
    async with app.run_test(size=(120, 80)) as pilot:
        await pilot.pause()
        await pilot.press("z")
        await pilot.press("end")
        await pilot.pause(0.3)
        text = screen_text(app)
    on = sum(t.oncpu_ns for t in d.threads)
    assert f"{len(d.threads)} Ms  on CPU {fmt_ns(on)}" in text
    assert f"{fmt_count(d.syscalls)} syscalls  {fmt_ns(d.syscall_ns)} in them" in text
    assert f"{fmt_count(d.samples.total)} samples" in text


def test_many_ps_keep_the_syscall_panel_bounded() -> None:
    """64 Ps must not make a 65-row panel: the Ps with most syscalls, and how many are left."""
    import dataclasses

    from rich.console import Console

    from gmpmon.model.kernelview import ProcSyscalls
    from gmpmon.tui.kernel import TOP_PROCS, inline_per_p, syscalls_panel

    snap = latest(replay(SAMPLE))
    k = snap.kernel
    assert k is not None
    top = k.syscalls_by_p[0].top
    rows = tuple(ProcSyscalls(p, 100 + p, 1000 * p, top) for p in range(64))
    wide = dataclasses.replace(snap, kernel=dataclasses.replace(k, syscalls_by_p=rows))
    console = Console(width=100, record=True)
    console.print(syscalls_panel(wide))
    out = console.export_text()
    shown = [int(m) for m in re.findall(r"^P(\d+) ", out, re.M)]
    assert shown == list(range(64 - TOP_PROCS, 64))
    assert f"+{64 - TOP_PROCS} Ps with fewer syscalls" in out
    line = inline_per_p((p, p) for p in range(64))
    assert line.startswith("P56 56  P57 57") and line.endswith("(+56 Ps)")


async def test_sampler_off_says_so_and_the_strip_falls_back_to_the_status_reads() -> None:
    """The sampler turned itself off (R14 failed validation): no panel shows sample
    numbers, the strip is the P status reads and says why (the model side of SAMPLER_OFF is
    tests/unit/test_kernel_model.py's)."""
    import dataclasses

    from tests.tui.sources import ListSource

    src = replay(SAMPLE)
    snap = latest(src)
    k = snap.kernel
    assert k is not None
    why = "perf samples off: R14 was a goroutine of its thread in 0 of 400 user-mode samples"
    off = dataclasses.replace(snap, kernel=dataclasses.replace(
        k, samples=dataclasses.replace(k.samples, off=why), timeline={}, cpu_by_goroutine=()))
    app = make_app(ListSource(src.header, [off]))
    async with app.run_test(size=(120, 80)) as pilot:
        await pilot.pause()
        text = screen_text(app)
        cell_ns, width = app.query_one(ProcTable).cell_ns, app.query_one(ProcTable).strip_width
    words = flat(text)
    assert f"timeline sampled (50 Hz P status reads of the runtime's memory); {why}" in words
    assert why in text.split("on CPU: goroutines")[1]
    # The strip is the status reads': a run glyph wherever they say running.
    col = strip_column(text)
    last = off.now // cell_ns
    for row in proc_rows(text):
        p = next(x for x in off.procs if x.id == int(row.split()[0]))
        for i, ch in enumerate(row[col:].ljust(width)):
            lo, hi = (last - width + 1 + i) * cell_ns, (last - width + 2 + i) * cell_ns
            if any(_overlaps(a, b, lo, hi) for a, b in off.stw_spans):
                continue
            running = any(_overlaps(s.start, s.end, lo, hi) and s.state is PState.RUNNING
                          for s in p.timeline)
            assert (ch in SPARK[1:]) == running, (p.id, i, ch, row)
