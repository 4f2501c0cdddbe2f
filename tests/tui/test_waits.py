"""Contention view: RWMutex and semaphore waits shown apart from sync.Mutex, with their kind."""

from __future__ import annotations

import dataclasses

from rich.console import Console

from gmpmon.model.snapshot import MutexStack
from gmpmon.tui.app import make_app
from gmpmon.tui.widgets.contention import ContentionView, waits_table
from tests.tui.scenario import HEADER, snapshots
from tests.tui.sources import ListSource


def text_of(renderable: object, width: int = 100) -> str:
    console = Console(width=width, record=True, color_system=None)
    console.print(renderable)
    return console.export_text()


def with_waits() -> list:  # type: ignore[type-arg]
    base = snapshots(1)[0]
    waits = (
        MutexStack(("main.main", "main.reader", "sync.(*RWMutex).RLock"), 40, 3_000_000,
                   "sync.RWMutex.RLock"),
        MutexStack(("main.main", "sync.(*WaitGroup).Wait"), 1, 1_000_000, "semacquire"),
    )
    return [dataclasses.replace(
        base, wait_stacks=waits,
        waits_by_kind={**base.waits_by_kind, "sync.RWMutex.RLock": (40, 3_000_000),
                       "semacquire": (1, 1_000_000)})]


def test_waits_table_names_each_kind() -> None:
    out = text_of(waits_table(with_waits()[0]))
    lines = [ln for ln in out.splitlines() if "main." in ln]
    assert "RWMutex R" in lines[0] and "3.0ms" in lines[0] and "main.reader" in lines[0]
    assert lines[1].split()[:2] == ["sema", "1.0ms"] and "main.main" in lines[1]


async def test_contention_view_shows_other_waits_only_when_there_are_some() -> None:
    for snaps, shown in ((snapshots(1), False), (with_waits(), True)):
        app = make_app(ListSource(HEADER, snaps), refresh_hz=50.0)
        async with app.run_test(size=(100, 40)) as pilot:
            await pilot.press("3")
            await pilot.pause()
            view = app.query_one(ContentionView)
            assert view.query_one("#other-waits").display is shown
            summary = str(view.query_one("#mutex-summary").render())
            assert ("other waits 41" in summary) is shown, summary
