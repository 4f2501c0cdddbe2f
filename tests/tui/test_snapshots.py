"""SVG snapshot tests of each view (pytest-textual-snapshot; Textual pinned in pyproject).

The app shows only what the Snapshot holds (uptime is snapshot time, not the wall clock), and
the source never changes here, so the pictures are deterministic. Update them after an
intended change with ``pytest tests/tui --snapshot-update`` and look at the report.
"""

from __future__ import annotations

from typing import Any

import pytest

from gmpmon.tui.app import make_app
from tests.tui.scenario import HEADER, snapshots
from tests.tui.sources import ListSource, SeekListSource


def _source() -> ListSource:
    return ListSource(HEADER, snapshots(1))


@pytest.mark.parametrize("key", ["1", "2", "3", "4"], ids=["procs", "sched", "contention",
                                                          "goroutines"])
def test_view_80x24(snap_compare: Any, key: str) -> None:
    assert snap_compare(make_app(_source()), press=[key], terminal_size=(80, 24))


def test_procs_wide(snap_compare: Any) -> None:
    assert snap_compare(make_app(_source()), terminal_size=(160, 30))


def test_sched_wide_uses_two_columns(snap_compare: Any) -> None:
    assert snap_compare(make_app(_source()), press=["2"], terminal_size=(160, 40))


def test_help(snap_compare: Any) -> None:
    assert snap_compare(make_app(_source()), press=["question_mark"], terminal_size=(80, 24))


def test_replay_paused(snap_compare: Any) -> None:
    src = SeekListSource(HEADER, snapshots(3))
    assert snap_compare(make_app(src), press=["right"], terminal_size=(80, 24))
