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
    # list. Before P_IDLE, full mode counted that time as spinning (searching): spinning was
    # about as large as the whole sleep. Slack: whatever state a P is in when the target
    # exits lasts until capture notices the exit (checked every 100 ms), up to ~0.1 s.
    n, d_ms = 60, 10
    p, s = gm_run(tmp_path, build("sleeper", go, build_mode), "-n", str(n), "-d", f"{d_ms}ms")
    assert f"done {n}" in p.stdout
    procs = s["procs"]
    assert len(procs) == 2
    for pv in procs:
        assert pv["idle_ns"] > 2 * pv["spinning_ns"], pv
        assert pv["spinning_ns"] < 0.15e9, pv
        assert pv["idle_ns"] > 0.5 * n * d_ms * 1e6, pv  # most of the sleeping
    assert s["illegal_transitions"] == 0
    assert s["events"]["lost"] == 0
