"""The TUI on a real server under load (issue 27): Prometheus 2.42 (Debian, go1.19.8) under
``wrk -t2 -c16``, default mode, 4 s (tests/data/prometheus-wrk-default.gmp, remade by
``scripts/record-fixtures prometheus-wrk-default``). It stops the world ~25 times a second.

Each SVG snapshot comes with what the screen must say, checked before the picture is taken
(a snapshot alone cannot fail on its first run): the timeline reads (the Ps' work, not one
mark per pause), the Goroutines table is filled from the census, and at 80x24 the header keeps
what watching costs and the key bar keeps every key. The goroutine table (`w`) lists the
census's goroutines in the census's states.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

from textual.pilot import Pilot
from textual.widgets import DataTable

from gmpmon.replay import ReplaySource
from gmpmon.tui.app import make_app
from gmpmon.tui.render import SPARK, STW_COLOUR, STW_LABEL
from gmpmon.tui.widgets.keybar import key_items
from tests.tui.screen import proc_rows, screen_colours, screen_text
from tests.tui.sources import ListSource
from tests.tui.test_snapshots import _procs_rows

REC = Path(__file__).resolve().parents[1] / "data" / "prometheus-wrk-default.gmp"
AT = 0.9
BARS = set(SPARK.strip())


def replay(at: float = AT) -> ReplaySource:
    src = ReplaySource(str(REC), autostart=False, paused=True)
    src.seek(at)
    return src


def test_the_recording_is_a_gc_heavy_server_under_load() -> None:
    """What makes the views hard: many short stop-the-world pauses, Ps busy throughout."""
    snap = replay().latest()
    assert snap is not None and snap.mode == "default" and "prometheus" in snap.exe
    seconds = (snap.now - snap.start) / 1e9
    assert len(snap.stw_spans) / seconds >= 10, (len(snap.stw_spans), seconds)
    stopped = sum(b - a for a, b in snap.stw_spans) / (snap.now - snap.start)
    assert stopped < 0.1  # short pauses: the Ps mostly work between them
    assert snap.cost is not None and snap.runtime is not None and snap.runtime.census


def timeline_facts(pilot: Pilot[Any]) -> None:
    """The timeline reads: each P's strip shows its work as bars of several heights, a cell
    shows STW only when the world was stopped for half of it (here: almost never), the STW
    line above gives the pauses' density, and the labels stand where they belong."""
    app = pilot.app
    text = screen_text(app)
    rows = _procs_rows(text)
    lines = text.splitlines()
    colours = screen_colours(app)
    head = next(i for i, ln in enumerate(lines) if "/cell, last" in ln)
    assert lines[head].rstrip().endswith("now") and " P state " in lines[head], lines[head]
    band = next(i for i, ln in enumerate(lines) if STW_LABEL in ln)
    assert head < band < lines.index(rows[0]), text  # between the header and the Ps
    strip_at = lines[band].index(STW_LABEL) + len(STW_LABEL) + 1
    end = len(lines[head].rstrip())  # the strip ends under "now" (a scrollbar may follow)
    stw = lines[band][strip_at:end].rstrip()
    assert stw and set(stw.strip()) <= BARS, stw  # heights only, no other glyph
    assert {h for c, h in colours[band][strip_at:end] if c.strip()} == {STW_COLOUR}
    for row in rows:
        i = lines.index(row)
        strip = row[strip_at:end]
        seen = [c for c in strip if c != " "]
        glyphs = Counter(seen)
        runs = sum(n for c, n in glyphs.items() if c in BARS)
        assert len(seen) >= 20, row  # the P was observed over most of the strip
        assert runs >= len(seen) * 3 // 4, row  # mostly its work
        assert glyphs["▚"] <= len(seen) // 10, row  # not a mark per pause
        assert len({c for c in seen if c in BARS}) >= 3, row  # busy and less busy cells
        hues = Counter(h for c, h in colours[i][strip_at:end] if c.strip())
        assert len(hues) >= 2 and hues[STW_COLOUR] <= len(seen) // 10, (row, hues)
    legend = next(ln for ln in lines if "running" in ln and "syscall" in ln)
    assert legend.lstrip().startswith("▁▄█ running") and "▚ STW" in legend, legend


async def _timeline(pilot: Pilot[Any]) -> None:
    await pilot.pause()
    await pilot.press("1")
    await pilot.pause()
    timeline_facts(pilot)


def test_procs_timeline_reads_on_a_gc_heavy_server(snap_compare: Any) -> None:
    assert snap_compare(make_app(replay()), terminal_size=(120, 30), run_before=_timeline)


def goroutine_facts(pilot: Pilot[Any]) -> None:
    """Default mode: the table lists the census's wait-stack groups, rows > 0, their counts
    adding up to the census's waiting goroutines, each row a state the census has."""
    app = pilot.app
    snap = app.snapshot
    assert snap is not None and snap.mode == "default" and snap.runtime is not None
    census = snap.runtime.census
    assert census is not None and census.stacks is not None
    text = screen_text(app)
    m = re.search(r"census #(\d+) wait stacks +(\d+) of (\d+) waiting goroutines in (\d+) "
                  r"groups", text)
    assert m is not None, text
    waiting = sum(r.count for r in census.rows if not r.system and r.state == "waiting")
    assert int(m[1]) == census.seq and int(m[3]) == waiting > 0, text
    table: DataTable[Any] = app.query_one("#g-table", DataTable)
    assert table.row_count == int(m[4]) > 0, text
    cells = [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]
    assert sum(int(r[1]) for r in cells) == int(m[2]) == waiting, cells
    reasons = {r.reason for r in census.rows if r.state == "waiting"}
    assert all(r[2] in reasons for r in cells), (cells, reasons)
    assert any(re.search(r"prometheus|net/http|oklog", r[-1] + r[-2]) for r in cells), cells


async def _goroutines(pilot: Pilot[Any]) -> None:
    await pilot.pause()
    await pilot.press("4")
    await pilot.pause()
    goroutine_facts(pilot)
    table: DataTable[Any] = pilot.app.query_one("#g-table", DataTable)
    assert table.cursor_row == 0
    await pilot.press("j", "j")  # keyboard navigable, like the other views
    assert table.cursor_row == 2
    await pilot.press("k")
    assert table.cursor_row == 1


def test_goroutines_table_is_filled_from_the_census_in_default_mode(snap_compare: Any) -> None:
    assert snap_compare(make_app(replay()), terminal_size=(120, 36), run_before=_goroutines)


def goroutine_table_facts(pilot: Pilot[Any]) -> list[list[str]]:
    """`w`: the goroutine table. One row per user goroutine of the newest census, each in the
    census's state and wait reason (their counts are the census's, and the summary says
    them); what the probes measured (runs, wait time) where they saw it, "–" where not."""
    app = pilot.app
    snap = app.snapshot
    assert snap is not None and snap.runtime is not None and snap.mode == "default"
    census = snap.runtime.census
    assert census is not None and snap.census_goroutines is not None
    table: DataTable[Any] = app.query_one("#g-table", DataTable)
    cells = [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]
    by_census = Counter({(r.state, r.reason): r.count for r in census.rows if not r.system})
    assert table.row_count == census.goroutines == sum(by_census.values()) > 0, cells
    assert Counter((r[1], r[3]) for r in cells) == by_census, cells
    text = screen_text(app)
    line = next(ln for ln in text.splitlines() if f"census #{census.seq}: " in ln)
    assert f"census #{census.seq}: {census.goroutines} goroutines" in line, line
    for state, n in Counter(r[1] for r in cells).items():
        assert f"  {state} {n}  " in line, (state, n, line)
    probed = {g.goid for g in snap.census_goroutines if g.probed}
    assert 0 < len(probed) < len(cells), probed  # default mode: the windows saw a few
    assert f"probes saw {len(probed)} " in line, line
    for r in cells:
        if int(r[0]) in probed:
            assert r[6].isdigit() and r[2].isdigit(), r  # runs, the P it ran on
        else:
            assert r[2] == r[4] == r[6] == "–", r  # not measured, never 0
    return cells


async def _goroutine_table(pilot: Pilot[Any]) -> None:
    await pilot.pause()
    await pilot.press("4", "w")
    await pilot.pause()
    cells = goroutine_table_facts(pilot)
    table: DataTable[Any] = pilot.app.query_one("#g-table", DataTable)
    assert table.cursor_row == 0
    await pilot.press("j", "j", "down")
    assert table.cursor_row == 3
    await pilot.press("k", "up")
    assert table.cursor_row == 1
    await pilot.press("G")
    assert table.cursor_row == len(cells) - 1
    await pilot.press("g")
    assert table.cursor_row == 0
    await pilot.press("j", "enter")
    await pilot.pause()
    detail = screen_text(pilot.app)
    goid, state = cells[1][0], cells[1][1]
    assert re.search(rf"G{goid} +{state} ", detail), detail
    assert re.search(r"state and wait reason as of census #\d+", detail), detail
    await pilot.press("escape")
    await pilot.pause()


def test_goroutine_table_is_the_census_in_default_mode(snap_compare: Any) -> None:
    assert snap_compare(make_app(replay()), terminal_size=(120, 36),
                        run_before=_goroutine_table)


async def test_slash_filters_the_census_goroutines_by_wait_reason() -> None:
    app = make_app(replay())
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.pause()
        await pilot.press("4", "w", "slash", *"IO wait", "enter")
        await pilot.pause()
        snap = app.snapshot
        assert snap is not None and snap.runtime is not None and snap.runtime.census
        want = sum(r.count for r in snap.runtime.census.rows
                   if not r.system and r.reason == "IO wait")
        table: DataTable[Any] = app.query_one("#g-table", DataTable)
        cells = [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]
        assert len(cells) == want > 0 and all(r[3] == "IO wait" for r in cells), cells


def header_and_keys_facts(pilot: Pilot[Any]) -> None:
    """80x24: the second header line keeps the cost and budget; the key bar, every key."""
    app = pilot.app
    snap = app.snapshot
    assert snap is not None and snap.cost is not None
    lines = screen_text(app).splitlines()
    cost = f"cost ~{snap.cost.estimated_pct:.1f}% (budget {snap.cost.budget_pct:g}%)"
    assert cost in lines[1], lines[1]
    bar = "\n".join(lines[-2:])
    items = key_items(app.screen)
    assert len(items) >= 10, items
    for key, desc in items:
        assert f"{key} {desc}" in bar, (key, desc, bar)
    for key in ("q Quit", "? Help", "12345", "←→", "[]", "t Recent", "z Reset"):
        assert key in bar, (key, bar)


def _at_80x24(view: str) -> Any:
    async def run(pilot: Pilot[Any]) -> None:
        await pilot.pause()
        await pilot.press(view)
        await pilot.pause()
        header_and_keys_facts(pilot)

    return run


def test_80x24_keeps_the_cost_and_every_key(snap_compare: Any) -> None:
    assert snap_compare(make_app(replay()), terminal_size=(80, 24), run_before=_at_80x24("1"))


async def test_80x24_keeps_the_cost_and_keys_in_every_view() -> None:
    app = make_app(replay())
    async with app.run_test(size=(80, 24)) as pilot:
        for view in "12345":
            await _at_80x24(view)(pilot)


class CostedLive(ListSource):
    """A live source whose status is the budget controller's line (gmpmon.session)."""

    def status(self) -> str:
        return ("cost ~0.7% (budget 1%); mutex contention: sampled 1 in 64 while over budget; "
                "linked 11% of the time; 2.1s sampled (scaled)")


async def test_80x24_live_keeps_the_cost_before_the_cut_back_detail() -> None:
    src = replay()
    snap = src.latest()
    assert snap is not None
    app = make_app(CostedLive(src.header, [snap]))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.pause(0.3)
        lines = screen_text(app).splitlines()
        assert re.match(r" up \S+  cost ~0\.7% \(budget 1%\)  ", lines[1]), lines[1]
        assert proc_rows("\n".join(lines))
        bar = "\n".join(lines[-2:])
        for key in ("q Quit", "p Pause", "r Record", "t Recent", "! Trigger", "z Reset"):
            assert key in bar, (key, bar)
    async with make_app(CostedLive(src.header, [snap])).run_test(size=(200, 24)) as pilot:
        await pilot.pause()
        await pilot.pause(0.3)
        line = screen_text(pilot.app).splitlines()[1]
        assert "mutex contention: sampled 1 in 64" in line  # the detail, where there is room


async def test_goroutines_table_without_stacks_or_windows_lists_the_census_states() -> None:
    """Caddy under wrk, default mode, no window ever opened and no wait stacks taken
    (tests/data/caddy-wrk-default.gmp): the probes saw no goroutine, and the table was
    empty. It lists the census's states, their counts adding up to its goroutines."""
    src = ReplaySource(str(REC.with_name("caddy-wrk-default.gmp")), autostart=False,
                       paused=True)
    src.seek(AT)
    snap = src.latest()
    assert snap is not None and snap.runtime is not None and not snap.goroutines
    census = snap.runtime.census
    assert census is not None and census.stacks is None
    app = make_app(src)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        await pilot.press("4")
        await pilot.pause()
        text = screen_text(app)
        table: DataTable[Any] = app.query_one("#g-table", DataTable)
        user = [r for r in census.rows if not r.system]
        assert table.row_count == len(user) > 0, text
        cells = [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]
        assert sum(int(r[1]) for r in cells) == census.goroutines, cells
        assert [r[2] for r in cells] == [r.reason or r.state for r in user], cells
        assert f"census #{census.seq} by state  {census.goroutines} goroutines" in text, text
        await pilot.press("j")
        assert table.cursor_row == 1
