"""Fixtures for the TUI tests: Snapshot sources the app cannot tell from real ones."""

from __future__ import annotations

import asyncio
import inspect

import pytest

from tests.tui.scenario import HEADER, snapshots
from tests.tui.sources import ListSource, SeekListSource


@pytest.fixture
def live_source() -> ListSource:
    return ListSource(HEADER, snapshots(6))


@pytest.fixture
def replay_source() -> SeekListSource:
    return SeekListSource(HEADER, snapshots(11))


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """Run ``async def`` tests in a fresh event loop (no asyncio plugin in the dev deps)."""
    if not inspect.iscoroutinefunction(pyfuncitem.obj):
        return None
    names = pyfuncitem._fixtureinfo.argnames
    asyncio.run(pyfuncitem.obj(**{n: pyfuncitem.funcargs[n] for n in names}))
    return True
