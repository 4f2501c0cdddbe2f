"""Per-P schedtick deltas (runtime counters, no probe) against full mode's execute events.

``execute`` increments ``pp.schedtick`` unless the goroutine inherits the time slice
(proc.go:execute), so on the same run the RT_PTICK deltas of each P must equal the EXECUTE
events with inheritTime = 0 on that P between the counters' first and last read: within 2%
(the reads are not atomic with the probes).
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gmpmon.events import Kind
from gmpmon.record import read_recording
from tests import gotargets

GM = [sys.executable, "-m", "gmpmon"]


@pytest.mark.bpf
@pytest.mark.parametrize("version", ["1.19", "1.27"])
def test_schedtick_deltas_match_full_mode_executes(tmp_path: Path, version: str) -> None:
    exe = tmp_path / "rtcounters"
    shutil.copy(gotargets.build("rtcounters", go=version), exe)  # private inode for uprobes
    target = subprocess.Popen(
        [str(exe)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env={"GOMAXPROCS": "2", "PATH": "/usr/bin:/bin"},
    )
    rec = tmp_path / "full.gmp"
    gm: subprocess.Popen[str] | None = None
    try:
        assert target.stdout is not None and target.stdin is not None
        assert target.stdout.readline().strip() == "ready"
        gm = subprocess.Popen(
            [*GM, "attach", str(target.pid), "--mode", "full", "--no-tui", "--record", str(rec),
             "--summary-json", str(tmp_path / "s.json")],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        assert gm.stdout is not None
        for line in gm.stdout:
            if line.startswith("Tracing Go scheduler"):
                break
        else:
            pytest.fail(f"gmpmon did not attach: {gm.stderr.read() if gm.stderr else ''}")
        # Light on events (full mode's pipeline must not drop any), rich in fresh slices.
        target.stdin.write("gosched 1.5\n")
        target.stdin.flush()
        while not target.stdout.readline().startswith("gosched "):
            pass
        # The target is quiet now: let the model catch up, so that stopping cuts nothing
        # (a full-mode backlog still queued at the stop is dropped and counted).
        time.sleep(3)
        gm.send_signal(signal.SIGINT)
        _out, err = gm.communicate(timeout=60)
        assert gm.returncode == 0, err[-2000:]
    finally:
        if gm is not None and gm.poll() is None:
            gm.kill()
            gm.wait()
        target.kill()
        target.wait()

    assert not json.loads((tmp_path / "s.json").read_text())["events"].get("dropped")
    # Compare over the span the counters cover: from their baseline read (the first
    # RT_SCHED) to their last read, so that executes between attaching the hot probes and the
    # baseline (or after the last read, while detaching) count on neither side.
    events = [e for batch in read_recording(str(rec)) for e in batch.events]
    reads = [e[0] for e in events if e[1] == Kind.RT_SCHED]
    t0, t1 = reads[0], reads[-1]
    executes: dict[int, int] = {}
    ticks: dict[int, int] = {}
    for e in events:
        if e[1] == Kind.EXECUTE and e[5] == 0 and t0 < e[0] <= t1:
            executes[e[2]] = executes.get(e[2], 0) + 1
        elif e[1] == Kind.RT_PTICK and e[0] <= t1:
            ticks[e[2]] = ticks.get(e[2], 0) + e[5]
    assert sorted(ticks) == [0, 1]
    assert sum(executes.values()) >= 1000, (executes, ticks)
    for p in (0, 1):
        assert executes.get(p, 0) >= 100, (executes, ticks)
        assert abs(ticks[p] - executes[p]) <= 0.02 * executes[p], (p, ticks, executes)
