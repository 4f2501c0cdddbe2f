"""Pilot tests: the live TUI after its target exits stays up, says so plainly, and q quits."""

from __future__ import annotations

import asyncio

from gmpmon.tui.app import GmpmonApp, make_app
from gmpmon.tui.widgets.status import StatusHeader
from tests.tui.scenario import HEADER, snapshots
from tests.tui.sources import ListSource

FAST_HZ = 50.0


class ExitingSource(ListSource):
    """A live source whose target exits when the test says so (as LiveSession reports it)."""

    def __init__(self) -> None:
        super().__init__(HEADER, snapshots(3))
        self.target_exited = False

    def status(self) -> str:
        return "target exited" if self.target_exited else "attached"


def second_line(app: GmpmonApp) -> tuple[str, set[str]]:
    """Text of the header's second line and the styles used on the exit notice."""
    text = app.query_one(StatusHeader).render()
    plain = text.plain.split("\n")[1]
    styles = {str(s.style) for s in text.spans if "q to quit" in text.plain[s.start : s.end]}
    return plain, styles


async def settle(pilot: object, polls: int = 6) -> None:
    await asyncio.sleep(polls / FAST_HZ)
    await pilot.pause()  # type: ignore[attr-defined]


async def test_header_says_target_exited_and_q_quits() -> None:
    source = ExitingSource()
    app = make_app(source, refresh_hz=FAST_HZ)
    async with app.run_test(size=(80, 24)) as pilot:
        line, _ = second_line(app)
        assert "q to quit" not in line and "attached" in line
        source.target_exited = True
        await settle(pilot)
        line, styles = second_line(app)
        # First on the line, so 80 columns never cut it off; highlighted, not the dim status.
        assert line.lstrip().startswith("target exited - q to quit"), line
        assert any("on #da3633" in s for s in styles), styles
        await pilot.press("q")
        await pilot.pause()
    assert source.closed == 1


async def test_exit_shows_even_while_paused() -> None:
    source = ExitingSource()
    app = make_app(source, refresh_hz=FAST_HZ)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("space")
        await settle(pilot)
        frozen = app.snapshot
        source.advance()
        source.target_exited = True
        await settle(pilot)
        assert app.snapshot is frozen  # the numbers stay paused ...
        assert "target exited - q to quit" in second_line(app)[0]  # ... the news does not
