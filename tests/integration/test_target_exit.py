"""A live session whose target exits finishes its recording at once, not when the TUI quits."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from gmpmon.binary import load_pid
from gmpmon.events import Kind
from gmpmon.record import read_recording
from gmpmon.session import LiveSession
from tests.gotargets import build


@pytest.mark.bpf
def test_recording_is_complete_when_the_target_exits(tmp_path: Path) -> None:
    exe = tmp_path / "sleeper"  # a private copy: uprobes live on the inode (HACKING.md)
    shutil.copy(build("sleeper", "1.27"), exe)
    rec = tmp_path / "s.gmp"
    p = subprocess.Popen([str(exe), "-n", "20", "-d", "5ms", "-wait-stdin"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        session = LiveSession(load_pid(p.pid), p.pid, mode="full", record=str(rec),
                              gomaxprocs=2)
        session.start()
        try:
            assert p.stdin is not None
            p.stdin.write("\n")
            p.stdin.flush()
            assert p.wait(timeout=30) == 0
            assert session.finished.wait(timeout=30)
            assert session.status() == "target exited"
            # Still "in the TUI": close() has not run, yet the file is whole and replays.
            assert session.recording_path() is None
            r = read_recording(str(rec))
            sleep = r.header.wait_reasons.index("sleep")
            parks = sum(1 for b in r for e in b.events if e[1] == Kind.PARK and e[5] == sleep)
            snap = session.latest()
            assert snap is not None
            assert any(pr.reason == "sleep" and pr.count == 20 for pr in snap.park_reasons)
            assert parks == 20  # the tail too: the last sleep is just before the exit
        finally:
            session.close()
    finally:
        if p.poll() is None:
            p.kill()
        p.wait()
