"""Issue #17 item 4 / item 10: each goroutine's start function and creation site, in the
Goroutines table (a `start` column that takes a wide terminal's extra width) and its details.

Fed from tests/data/demo-sites.gmp, a real `demo` (Go 1.27) watched in default mode: the
census names every live goroutine's go site, the duty-cycle windows' GO_CREATE the others.
The expected names and lines are read from the workload's own source, not from the file.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import DataTable

from gmpmon.replay import ReplaySource
from gmpmon.tui.app import make_app
from gmpmon.tui.widgets.goroutines import COLUMNS, START
from tests.tui.screen import screen_text

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
DEMO = ROOT / "scripts" / "targets" / "demo" / "main.go"


def go_line(statement: str) -> int:
    """The line of a `go` statement in demo's main.go."""
    for n, line in enumerate(DEMO.read_text().splitlines(), 1):
        if line.strip().startswith(statement):
            return n
    raise AssertionError(f"no {statement!r} in {DEMO}")


def replay() -> ReplaySource:
    src = ReplaySource(str(DATA / "demo-sites.gmp"), autostart=False, paused=True)
    src.seek(10.0)  # the end: every census is in
    return src


def table_rows(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if re.match(r"^  \d+ +[a-z]+ ", ln)]


async def test_goroutines_show_their_start_function_and_creation_site() -> None:
    worker = f"main.main demo/main.go:{go_line('go worker(')}"
    app = make_app(replay())
    async with app.run_test(size=(200, 50)) as pilot:
        await pilot.pause()
        await pilot.press("4")
        await pilot.pause()
        text = screen_text(app)
        assert re.search(r"\bparent +start\b", text), text
        rows = table_rows(text)
        workers = [r for r in rows if " main.worker " in r]
        # demo starts 4 workers with one `go worker(...)`: the start function is the one the
        # statement calls, not Go's main.main.gowrapN wrapper around it.
        assert len(workers) == 4, text
        assert all(r.rstrip().endswith(f"< {worker}") for r in workers), workers
        assert any(" main.producer " in r for r in rows), text
        assert not any(" time.Sleep " in r for r in rows)  # an inlined f is not its callee
        table = app.query_one("#g-table", DataTable)
        goid = next(r.split()[0] for r in workers)
        table.move_cursor(row=table.get_row_index(goid))
        await pilot.press("enter")
        await pilot.pause()
        detail = screen_text(app)
        assert re.search(r"start function +main\.worker", detail), detail
        assert re.search(rf"created at +{re.escape(worker)}", detail), detail


async def test_slash_finds_goroutines_by_start_function() -> None:
    app = make_app(replay())
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause()
        await pilot.press("4", "slash", *"main.auditor", "enter")
        await pilot.pause()
        rows = table_rows(screen_text(app))
        assert len(rows) == 2 and all(" main.auditor " in r for r in rows), rows


@pytest.mark.parametrize("width", [100, 200])
async def test_the_start_column_takes_the_width_left(width: int) -> None:
    """Item 10: the table fills the terminal; the start column gets what the others leave,
    and the creation site is shown where there is room for it."""
    app = make_app(replay())
    async with app.run_test(size=(width, 50)) as pilot:
        await pilot.pause()
        await pilot.press("4")
        await pilot.pause()
        table = app.query_one("#g-table", DataTable)
        cols = list(table.columns.values())
        assert [c.label.plain for c in cols] == [label for label, _, _ in COLUMNS]
        used = sum(c.get_render_width(table) for c in cols)
        rows = table_rows(screen_text(app))
        with_site = [r for r in rows if " < main.main demo/main.go:" in r]
        snap = app.query_one("GoroutinesView").snapshot  # type: ignore[attr-defined]
        longest = max(len(g.start) for g in snap.goroutines)
        if width == 200:  # the table fills the terminal, the start column takes the rest
            assert table.size.width - 3 <= used <= table.size.width, (used, table.size.width)
            assert cols[START].width == max(c.width for c in cols) > longest
            assert len(with_site) >= 6, rows
        else:  # 100 columns: the table still fits; the longest names lose their front
            assert table.size.width - 3 <= used <= table.size.width, (used, table.size.width)
            assert cols[START].width < longest
            assert not with_site and any(r.rstrip().endswith(" main.worker") for r in rows)
            assert any(re.search(r" …\S*persistConn\)\.readLoop$", r) for r in rows), rows


def test_goroutines_wide_start_and_site(snap_compare: Any) -> None:
    def check(t: str) -> None:
        if not re.search(r"main\.worker +< main\.main demo/main\.go:\d+", t):
            raise AssertionError(f"the screen contradicts the facts:\n{t}")

    async def run_before(pilot: Any) -> None:
        await pilot.pause()
        await pilot.press("4")
        await pilot.pause()
        check(screen_text(pilot.app))

    assert snap_compare(make_app(replay()), terminal_size=(200, 45), run_before=run_before)
