"""The `T` target picker of `gmpmon attach PID PID...`: pilot tests on two sources."""

from __future__ import annotations

import asyncio
import dataclasses

from textual.widgets import OptionList

from gmpmon.tui.app import make_app
from gmpmon.tui.widgets.status import StatusHeader
from gmpmon.tui.widgets.targets import TargetPicker
from tests.tui.conftest import HEADER, snapshots
from tests.tui.sources import ListSource

FAST_HZ = 50.0


def _two() -> tuple[ListSource, ListSource]:
    a = ListSource(HEADER, snapshots(3))
    b = ListSource(dataclasses.replace(HEADER, pid=HEADER.pid + 1, exe="/srv/other"),
                   snapshots(3))
    return a, b


async def test_T_lists_every_target_and_enter_switches() -> None:
    a, b = _two()
    app = make_app(a, refresh_hz=FAST_HZ, targets=(a, b))
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("T")
        await pilot.pause()
        assert isinstance(app.screen, TargetPicker)
        opts = app.screen.query_one(OptionList)
        labels = [str(opts.get_option_at_index(i).prompt) for i in range(opts.option_count)]
        assert len(labels) == 2
        assert f"pid {a.header.pid}" in labels[0] and labels[0].startswith("*")
        assert f"pid {b.header.pid}" in labels[1] and "other" in labels[1]
        await pilot.press("down", "enter")
        await pilot.pause()
    assert app.switch_to == 1
    assert a.closed == 0 and b.closed == 0  # switching detaches nothing


async def test_T_escape_keeps_the_target_and_one_target_says_so() -> None:
    a, b = _two()
    app = make_app(b, refresh_hz=FAST_HZ, targets=(a, b))
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("T")
        await pilot.pause()
        assert isinstance(app.screen, TargetPicker)
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, TargetPicker)
        assert str(b.header.pid) in str(app.query_one(StatusHeader).render())
    assert app.switch_to is None
    solo = make_app(a, refresh_hz=FAST_HZ)
    async with solo.run_test(size=(100, 30)) as pilot:
        await pilot.press("T")
        await asyncio.sleep(0.05)
        await pilot.pause()
        assert not isinstance(solo.screen, TargetPicker)
