"""A P that goes idle is shown idle, not spinning: the pidleput probe on real Go programs."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.gotargets import build
from tests.integration.test_capture import gm_run, matrix


@pytest.mark.bpf
@pytest.mark.parametrize(("go", "build_mode"), matrix(stripped=True))
def test_sleeper_ps_are_idle_not_spinning(tmp_path: Path, go: str, build_mode: str) -> None:
    # One goroutine sleeping 10 ms at a time: both Ps spend nearly all their time on the idle
    # list. Before P_IDLE, full mode counted that time as spinning (searching).
    p, s = gm_run(tmp_path, build("sleeper", go, build_mode), "-n", "30", "-d", "10ms")
    assert "done 30" in p.stdout
    procs = s["procs"]
    assert len(procs) == 2
    for pv in procs:
        assert pv["idle_ns"] > 5 * pv["spinning_ns"], pv
        assert pv["idle_ns"] > 100_000_000, pv  # most of the ~300 ms of sleeping
    assert s["illegal_transitions"] == 0
    assert s["events"]["lost"] == 0
