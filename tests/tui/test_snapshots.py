"""SVG snapshot tests of each view (pytest-textual-snapshot; Textual pinned in pyproject).

Fed from the committed recordings of real workloads (tests/data/*.gmp) through the real
ReplaySource, paused at a fixed position: the app shows only what the Snapshot holds (uptime
is snapshot time, not the wall clock), so the pictures are deterministic. After an intended
change: ``pytest tests/tui --snapshot-update`` and look at the report.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gmpmon.replay import ReplaySource
from gmpmon.tui.app import make_app

DATA = Path(__file__).resolve().parents[1] / "data"


def replay(name: str, at: float) -> ReplaySource:
    src = ReplaySource(str(DATA / f"{name}.gmp"), autostart=False, paused=True)
    src.seek(at)
    return src


@pytest.mark.parametrize(
    ("recording", "at", "key"),
    [
        ("syscall", 0.7, "1"),  # syscalls on one P while the other spins
        ("gc", 0.9, "1"),  # stop-the-world stripes across every P
        ("fanout", 1.0, "2"),  # steals between the two Ps
        ("mutex", 1.0, "3"),  # one contended sync.Mutex in main.contend
        ("spawn", 0.5, "4"),  # goroutines created and exiting
    ],
    ids=["procs-syscall", "procs-gc", "sched-fanout", "contention-mutex", "goroutines-spawn"],
)
def test_view_80x24(snap_compare: Any, recording: str, at: float, key: str) -> None:
    assert snap_compare(make_app(replay(recording, at)), press=[key], terminal_size=(80, 24))


def test_procs_wide_shows_m_and_busy_columns(snap_compare: Any) -> None:
    assert snap_compare(make_app(replay("syscall", 0.7)), terminal_size=(160, 30))


def test_sched_wide_uses_two_columns(snap_compare: Any) -> None:
    assert snap_compare(make_app(replay("fanout", 1.0)), press=["2"], terminal_size=(160, 40))


def test_help(snap_compare: Any) -> None:
    assert snap_compare(make_app(replay("sleeper", 1.0)), press=["question_mark"],
                        terminal_size=(80, 24))
