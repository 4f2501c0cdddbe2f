"""Live summary == replay summary: the same batches, recorded, give the same model answer.

A real workload runs under ``gmpmon run`` with both ``--record`` and ``--summary-json``; then
``gmpmon replay --summary-json`` reads the recording back. The two JSON documents must be
identical, in every capture mode.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.gotargets import build

GM = [sys.executable, "-m", "gmpmon"]


@pytest.mark.bpf
@pytest.mark.parametrize(
    ("workload", "args", "mode"),
    [
        ("mutex", ("-g", "4", "-n", "100"), "full"),
        ("syscall", ("-n", "30"), "full"),
        ("gc", ("-n", "5"), "default"),
        ("sleeper", ("-n", "30", "-d", "5ms"), "sample"),
    ],
)
def test_live_summary_equals_replay_summary(
    tmp_path: Path, workload: str, args: tuple[str, ...], mode: str
) -> None:
    exe = build(workload, "1.27")
    rec, live, replayed = tmp_path / "r.gmp", tmp_path / "live.json", tmp_path / "replay.json"
    p = subprocess.run(
        [
            *GM,
            "run",
            "--mode",
            mode,
            "--no-tui",
            "--record",
            str(rec),
            "--summary-json",
            str(live),
            "--",
            str(exe),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, GOMAXPROCS="2"),
    )
    assert p.returncode == 0, p.stderr[-2000:]
    assert stat.S_IMODE(os.stat(rec).st_mode) == 0o600
    r = subprocess.run(
        [*GM, "replay", str(rec), "--summary-json", str(replayed)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0 and r.stderr == "", r.stderr
    live_doc = json.loads(live.read_text())
    assert live_doc["events"]["total"] > 0 and live_doc["mode"] == mode
    assert json.loads(replayed.read_text()) == live_doc
