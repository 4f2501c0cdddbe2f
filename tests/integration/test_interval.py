"""Headless `--interval S` (issue #17 item 12): each line counts the last S seconds only, says
so (`last 0.5s:`, the time since the previous line), and the report counts the whole capture.

A steady workload (sleeper: one goroutine, a 1 ms time.Sleep after another, so parks at a
constant rate) under `gmpmon attach --mode full --no-tui --interval 0.5`: every full line
says how long it covers, its park rate stays level (a cumulative count would grow line
after line), and the lines' parks add up to no more than the summary's "sleep" parks (the whole
capture), nor to much less (the lines cover all of it but the tail after the last one).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests import gotargets

GM = [sys.executable, "-m", "gmpmon"]
LINE = re.compile(r"^ +[\d.]+s .* grq=\d+ \| last (?P<span>[\d.]+)s: steal=\d+ park=(?P<park>\d+)"
                  r" p99=\S+ lost=\d+$")


@pytest.mark.bpf
def test_interval_lines_count_the_last_interval_and_the_report_the_whole_capture(
    tmp_path: Path,
) -> None:
    exe = tmp_path / "sleeper"
    shutil.copy(gotargets.build("sleeper", go="1.27"), exe)  # private inode for uprobes
    target = subprocess.Popen([str(exe), "-n", "100000", "-d", "1ms"], stdout=subprocess.PIPE,
                              text=True, env={"GOMAXPROCS": "2", "PATH": "/usr/bin:/bin"})
    try:
        assert target.stdout is not None and target.stdout.readline().strip() == "ready"
        gm = subprocess.run(
            [*GM, "attach", str(target.pid), "--mode", "full", "--no-tui", "--interval", "0.5",
             "--duration", "4", "--summary-json", str(tmp_path / "s.json")],
            capture_output=True, text=True, timeout=120,
        )
    finally:
        target.kill()
        target.wait()
    assert gm.returncode == 0, gm.stderr[-2000:]
    out = gm.stdout.splitlines()
    assert "the last 0.5s only" in out[1] and "counts the whole capture" in out[2], out[:4]
    lines = [m for m in map(LINE.match, out) if m]
    assert len(lines) >= 5, out
    parks = [int(m["park"]) for m in lines]
    spans = [float(m["span"]) for m in lines]
    # A line's span is the time since the previous line's snapshot: 0.5 s, less when a
    # snapshot came late (never the time since the start, but for the first line).
    assert all(0 < sp <= 0.8 for sp in spans[1:]), [m[0] for m in lines]
    assert sum(sp == 0.5 for sp in spans[1:]) >= len(spans[1:]) // 2, spans
    rates = [p / sp for p, sp in zip(parks[1:], spans[1:], strict=True) if sp >= 0.3]
    assert min(rates) > 200, (parks, spans)  # ~900 sleeps a second
    assert max(rates) < 2 * min(rates), (parks, spans)  # level, not growing: recent only
    total = json.loads((tmp_path / "s.json").read_text())["park_reasons"]["sleep"]["count"]
    assert sum(parks) <= total <= sum(parks) + 2 * max(parks), (parks, total)
    assert any(ln.startswith("events ") and "counts the whole capture" in ln for ln in out), out
    assert not any("illegal" in ln for ln in out[:12])


@pytest.mark.bpf
def test_a_headless_session_makes_a_snapshot_only_when_asked(tmp_path: Path) -> None:
    """Headless asks for one snapshot per line (LiveSession.fresh); the model thread makes
    none unasked (4 a second otherwise: a third of gmpmon's own CPU on net/http)."""
    import time

    from gmpmon.binary import load_pid
    from gmpmon.session import LiveSession

    exe = tmp_path / "sleeper"
    shutil.copy(gotargets.build("sleeper", go="1.27"), exe)
    target = subprocess.Popen([str(exe), "-n", "100000", "-d", "1ms"], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert target.stdout is not None and target.stdout.readline().strip() == "ready"
        session = LiveSession(load_pid(target.pid), target.pid, mode="sample", gomaxprocs=2)
        session.snapshots_on_request()
        session.start()
        try:
            time.sleep(1.5)
            assert session.snapshots_made == 0 and session.latest() is None
            first = session.fresh(timeout=5)
            assert first is not None and session.snapshots_made == 1
            time.sleep(0.6)
            assert session.snapshots_made == 1  # none unasked in between
            second = session.fresh(timeout=5)
            assert second is not None and second is not first
            assert second.now - first.now >= 500_000_000
        finally:
            session.close()
        assert session.latest() is not None and session.latest() is not second  # close()'s
    finally:
        target.kill()
        target.wait()
