"""Pilot tests: drive the real app with keys and check what it shows and what it asks of the
source."""

from __future__ import annotations

import asyncio
import dataclasses
import re
import stat
from pathlib import Path

from textual.widgets import DataTable, TabbedContent

from gmpmon.errors import GmpmonError
from gmpmon.export.folded import LINE_RE
from gmpmon.tui.app import GmpmonApp, make_app
from gmpmon.tui.widgets.goroutines import COLUMNS, GoroutinesView
from gmpmon.tui.widgets.help import HelpScreen
from gmpmon.tui.widgets.procs import ProcTable
from gmpmon.tui.widgets.status import StatusHeader
from tests.tui.sources import ListSource, SeekListSource

FAST_HZ = 50.0  # polls every 20 ms so that waiting a few polls keeps the tests quick


def rendered(app: GmpmonApp, widget_type: type) -> str:
    return str(app.query_one(widget_type).render())


def numbers(status_text: str) -> str:
    """The snapshot-derived part of the status header (not PAUSED nor the source status)."""
    return status_text.split("❚❚")[0].replace("attached", "").strip()


async def settle(pilot: object, polls: int = 5) -> None:
    await asyncio.sleep(polls / FAST_HZ)
    await pilot.pause()  # type: ignore[attr-defined]


async def test_number_keys_tab_and_clicks_switch_views(live_source: ListSource) -> None:
    app = make_app(live_source, refresh_hz=FAST_HZ)
    async with app.run_test(size=(80, 24)) as pilot:
        tabs = app.query_one(TabbedContent)
        assert tabs.active == "procs"
        for key, view in (("2", "sched"), ("3", "contention"), ("4", "goroutines"),
                          ("5", "findings"), ("1", "procs")):
            await pilot.press(key)
            assert tabs.active == view
        await pilot.press("tab")
        assert tabs.active == "sched"
        await pilot.press("shift+tab", "shift+tab")
        assert tabs.active == "findings"
        await pilot.click("#--content-tab-contention")
        assert tabs.active == "contention"


async def test_views_show_the_snapshot_they_are_switched_to(live_source: ListSource) -> None:
    app = make_app(live_source, refresh_hz=FAST_HZ)
    async with app.run_test(size=(80, 24)) as pilot:
        snap = live_source.latest()
        assert snap is not None
        table_text = rendered(app, ProcTable)
        assert len([ln for ln in table_text.splitlines() if re.match(r"^ +\d+ ", ln)]) == len(
            snap.procs)
        await pilot.press("4")
        await pilot.pause()
        table = app.query_one(DataTable)
        assert table.row_count == len(snap.goroutines)


async def test_pause_freezes_numbers_and_resume_catches_up(live_source: ListSource) -> None:
    app = make_app(live_source, refresh_hz=FAST_HZ)
    async with app.run_test(size=(80, 24)) as pilot:
        first = live_source.latest()
        assert app.snapshot is first
        live_source.advance()
        await settle(pilot)
        second = live_source.latest()
        assert app.snapshot is second  # not paused: the new snapshot is shown
        shown = rendered(app, StatusHeader)

        await pilot.press("p")
        assert "PAUSED" in rendered(app, StatusHeader)
        live_source.advance()
        live_source.advance()
        await settle(pilot)
        assert app.snapshot is second
        assert numbers(rendered(app, StatusHeader)) == numbers(shown)
        assert live_source.closed == 0

        await pilot.press("space")
        await settle(pilot)
        assert app.snapshot is live_source.latest()
        assert "PAUSED" not in rendered(app, StatusHeader)


async def test_export_writes_a_valid_private_folded_file(live_source: ListSource,
                                                         tmp_path: Path) -> None:
    app = make_app(live_source, refresh_hz=FAST_HZ, export_dir=str(tmp_path))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("3", "e")
        await pilot.pause()
        files = list(tmp_path.glob("gmpmon-4242-mutex-*.folded"))
        assert len(files) == 1
        assert stat.S_IMODE(files[0].stat().st_mode) == 0o600
        lines = files[0].read_text().splitlines()
        snap = live_source.latest()
        assert snap is not None and len(lines) == len(snap.mutex_stacks) > 0
        assert all(LINE_RE.match(ln) for ln in lines), lines
        weights = {ln.rsplit(" ", 1)[0]: int(ln.rsplit(" ", 1)[1]) for ln in lines}
        assert weights == {";".join(ms.stack): ms.wait_ns for ms in snap.mutex_stacks}
        assert any(str(files[0]) in str(n.message) for n in app._notifications)
        await pilot.press("e")
        await pilot.pause()
        assert len(list(tmp_path.glob("*.folded"))) == 2  # a second export never overwrites


async def test_quit_closes_the_source_once(live_source: ListSource) -> None:
    app = make_app(live_source, refresh_hz=FAST_HZ)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("q")
        await pilot.pause()
    assert live_source.closed == 1
    assert app.source_closed


async def test_record_key_starts_and_stops_a_live_recording(live_source: ListSource,
                                                            tmp_path: Path) -> None:
    app = make_app(live_source, refresh_hz=FAST_HZ, export_dir=str(tmp_path))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("r")
        path = live_source.recording_path()
        assert path is not None and Path(path).parent == tmp_path and path.endswith(".gmp")
        assert "REC" in rendered(app, StatusHeader)
        await pilot.press("r")
        assert live_source.recording_path() is None
        assert live_source.recordings == [path]
        assert "REC" not in rendered(app, StatusHeader)


async def test_replay_keys_step_seek_and_pause_the_replay(replay_source: SeekListSource) -> None:
    app = make_app(replay_source, refresh_hz=FAST_HZ)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("p")
        assert replay_source.paused()
        await pilot.press("p")
        assert not replay_source.paused()
        await pilot.press("end")
        assert app.snapshot is replay_source.snapshots[-1]
        await pilot.press("home")
        assert app.snapshot is replay_source.snapshots[0]
        await pilot.press("right", "right")
        assert replay_source.paused() and app.paused
        assert app.snapshot is replay_source.snapshots[2]
        await pilot.press("left")
        assert app.snapshot is replay_source.snapshots[1]
        assert replay_source.steps[-1] < 0
        await pilot.press("right_square_bracket")
        assert app.snapshot is replay_source.snapshots[2]
        assert "replay" in rendered(app, StatusHeader)
        await pilot.press("r")  # no recording from a replay
        assert replay_source.recording_path() is None


async def test_replay_keys_do_nothing_on_a_live_source(live_source: ListSource) -> None:
    app = make_app(live_source, refresh_hz=FAST_HZ)
    async with app.run_test(size=(80, 24)) as pilot:
        before = app.snapshot
        await pilot.press("left", "right", "home", "end", "left_square_bracket")
        assert app.snapshot is before  # (arrows fall through to the tabs: they switch views)
        assert not app.paused


async def test_goroutine_table_sorts_by_key_and_header_click(live_source: ListSource) -> None:
    app = make_app(live_source, refresh_hz=FAST_HZ)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("4")
        await pilot.pause()
        view = app.query_one(GoroutinesView)
        table = app.query_one(DataTable)
        snap = live_source.latest()
        assert snap is not None

        def first_goid() -> int:
            return int(table.coordinate_to_cell_key((0, 0)).row_key.value or 0)

        # default: longest total wait first
        assert first_goid() == max(snap.goroutines, key=lambda g: g.wait_ns).goid
        await pilot.press("s")  # next column: "in state", longest first
        assert COLUMNS[view.sort_column][0] == "in state"
        assert first_goid() == max(snap.goroutines, key=lambda g: (snap.now - g.since, g.goid)).goid
        await pilot.click("#g-table", offset=(2, 0))  # header of the G column
        await pilot.pause()
        assert COLUMNS[view.sort_column][0] == "G"
        assert first_goid() == min(g.goid for g in snap.goroutines)


async def test_help_opens_and_closes(live_source: ListSource) -> None:
    app = make_app(live_source, refresh_hz=FAST_HZ)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)
        assert live_source.closed == 0


async def test_a_failing_source_is_reported_not_fatal(live_source: ListSource) -> None:
    app = make_app(live_source, refresh_hz=FAST_HZ)
    async with app.run_test(size=(80, 24)) as pilot:
        def boom() -> None:
            raise RuntimeError("target exited")

        live_source.latest = boom  # type: ignore[assignment,method-assign]
        await settle(pilot)
        assert any("target exited" in str(n.message) for n in app._notifications)
        assert app.snapshot is not None


async def test_lost_events_are_highlighted_only_when_some_were_lost(
        live_source: ListSource) -> None:
    snap = live_source.snapshots[0]
    lossy = dataclasses.replace(snap, events_lost=17)
    source = ListSource(live_source.header, [snap, lossy])
    app = make_app(source, refresh_hz=FAST_HZ)
    async with app.run_test(size=(80, 24)) as pilot:

        def lost_style() -> str:
            text = app.query_one(StatusHeader).render()
            start = text.plain.index("lost ")
            return " ".join(str(s.style) for s in text.spans if s.start <= start < s.end)

        assert "lost 0" in rendered(app, StatusHeader)
        assert "on" not in lost_style()
        source.advance()
        await settle(pilot)
        assert "lost 17" in rendered(app, StatusHeader)
        assert "on #da3633" in lost_style()


async def test_a_failing_close_still_quits_and_keeps_the_error(live_source: ListSource) -> None:
    def close() -> None:
        live_source.closed += 1
        raise GmpmonError("detach failed")

    live_source.close = close  # type: ignore[method-assign]
    app = make_app(live_source, refresh_hz=FAST_HZ)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("q")
        await pilot.pause()
    assert live_source.closed == 1
    assert isinstance(app.close_error, GmpmonError)


async def test_trigger_key_fires_the_key_trigger_and_says_what_happened(
        live_source: ListSource) -> None:
    app = make_app(live_source, refresh_hz=FAST_HZ)
    async with app.run_test(size=(100, 24)) as pilot:
        await pilot.press("exclamation_mark")
        await pilot.pause()
        assert live_source.fired == ["key"]
        assert any("--trigger key" in str(n.message) for n in app._notifications)
        live_source.armed = ("key",)
        await pilot.press("exclamation_mark")
        await pilot.pause()
        assert live_source.fired == ["key", "key"]
        assert any("trigger fired" in str(n.message) for n in app._notifications)


async def test_trigger_key_does_nothing_in_a_replay(replay_source: SeekListSource) -> None:
    app = make_app(replay_source, refresh_hz=FAST_HZ)
    async with app.run_test(size=(100, 24)) as pilot:
        await pilot.press("exclamation_mark")
        await pilot.pause()
        assert replay_source.fired == []


async def test_procs_timeline_marks_each_trigger_in_view(live_source: ListSource) -> None:
    snap = live_source.latest()
    assert snap is not None
    # One trigger 1 s before now, one long before the strip's 5 s (not in view).
    marked = dataclasses.replace(snap, triggers=((snap.now - 1_000_000_000, 0),
                                                 (snap.now - 60_000_000_000, 0)))
    live_source.snapshots = [marked]
    live_source.index = 0
    app = make_app(live_source, refresh_hz=FAST_HZ)
    async with app.run_test(size=(100, 24)) as pilot:
        await settle(pilot)
        table = app.query_one(ProcTable)
        text = str(table.render())
        lines = text.splitlines()
        row = next(ln for ln in lines if ln.lstrip().startswith("trigger"))
        assert row.count("▼") == 1, text
        # The mark sits in the timeline cell of its time: 1 s before "now" at the right.
        width = len(lines[0])
        cell_ns = table.cell_ns
        col = row.index("▼")
        assert abs((width - 1 - col) * cell_ns - 1_000_000_000) <= 2 * cell_ns, (col, width)
