"""The Goroutines view's wait stacks (the census's groups of parked goroutines), on a recording
of the demo workload in sample mode (tests/data/demo-stacks.gmp, scripts/record-fixtures)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from textual.pilot import Pilot
from textual.widgets import DataTable

from gmpmon.model.runtime import CensusView
from gmpmon.record import read_recording
from gmpmon.replay import ReplaySource, replay_all
from gmpmon.tui.app import make_app
from gmpmon.tui.waits import GROUP_COLUMNS
from tests.tui.screen import screen_text

DATA = Path(__file__).resolve().parents[1] / "data"
REC = "demo-stacks"


def replay(at: float = 1.0) -> ReplaySource:
    src = ReplaySource(str(DATA / f"{REC}.gmp"), autostart=False, paused=True)
    src.seek(at)
    return src


def final_census() -> CensusView:
    snap = replay_all(read_recording(str(DATA / f"{REC}.gmp")))
    assert snap.runtime is not None and snap.runtime.census is not None
    assert snap.runtime.census.stacks is not None
    return snap.runtime.census


def rows(app: Any) -> list[list[str]]:
    table = app.query_one("#g-table", DataTable)
    return [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]


def check_groups(t: str) -> None:
    """What the census says is what the table shows: its number, the groups' total against
    the waiting goroutines, the largest group first (the demo's 4 workers on their jobs
    channel)."""
    c = final_census()
    groups = [w for w in c.stacks or () if not w.system]
    waiting = sum(r.count for r in c.rows if not r.system and r.state == "waiting")
    head = f"census #{c.seq} wait stacks  {sum(w.count for w in groups)} of {waiting} waiting"
    if head not in t or "main.worker" not in t or "chan receive" not in t:
        raise AssertionError(f"the screen contradicts the census:\n{t}")


async def _groups(pilot: Pilot[Any]) -> None:
    await pilot.pause()
    await pilot.press("4")
    await pilot.pause()
    check_groups(screen_text(pilot.app))


async def _open_first(pilot: Pilot[Any]) -> None:
    await _groups(pilot)
    await pilot.press("enter")
    await pilot.pause()
    t = screen_text(pilot.app)
    first = next(w for w in final_census().stacks or () if not w.system)
    if not ("wait stack #1" in t and f"{first.count} goroutines [chan receive]" in t
            and "created by main.main" in t):
        raise AssertionError(f"the stack screen contradicts the census:\n{t}")


def test_snapshot_goroutines_view_groups_wait_stacks(snap_compare: Any) -> None:
    assert snap_compare(make_app(replay()), terminal_size=(100, 30), run_before=_groups)


def test_snapshot_enter_shows_the_stack_of_a_group(snap_compare: Any) -> None:
    assert snap_compare(make_app(replay()), terminal_size=(100, 30), run_before=_open_first)


async def test_groups_follow_the_census_and_the_keys() -> None:
    c = final_census()
    groups = [w for w in c.stacks or () if not w.system]
    app = make_app(replay())
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.pause()
        await pilot.press("4")
        await pilot.pause()
        table = app.query_one("#g-table", DataTable)
        assert [col.label.plain for col in table.columns.values()] == list(GROUP_COLUMNS)
        got = rows(app)
        assert [int(r[1]) for r in got] == [w.count for w in groups]
        assert [r[2] for r in got] == [w.reason for w in groups]
        # j/k move the cursor as in the other tables
        await pilot.press("j", "j")
        assert table.cursor_row == 2
        await pilot.press("k")
        assert table.cursor_row == 1
        # `/` by package: only the groups with a net/http frame, the census's ranks kept
        await pilot.press("slash", *"net/http", "enter")
        await pilot.pause()
        got = rows(app)
        want = [i for i, w in enumerate(groups, 1) if any("net/http" in f for f in w.frames)]
        assert want and [int(r[0]) for r in got] == want
        assert "filter 'net/http'" in screen_text(app)
        # `w`: the goroutine table, and back
        await pilot.press("w")
        await pilot.pause()
        assert "by wait time" in screen_text(app)
        await pilot.press("w")
        await pilot.pause()
        assert re.search(r"census #\d+ wait stacks", screen_text(app))
