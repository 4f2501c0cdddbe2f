"""`gmpmon attach --dump-dir` into a directory someone else has planted names in: symlinks
(to a file, and dangling) at every millisecond's name the first SIGUSR1 dump may take. That
dump is skipped with one line on stderr while the capture goes on; the symlinks and their
targets are untouched; the next trigger's dump is written and replays. One planted symlink
used to end the whole capture."""

from __future__ import annotations

import calendar
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.integration.test_attach import copy_target
from tests.integration.test_capture import GM, TIMEOUT

pytestmark = pytest.mark.bpf

SKIPPED = re.compile(r"^gmpmon: trigger sigusr1 fired; dump (\S+) already exists: skipped "
                     r"\(not overwritten\)$")
COOLDOWN_S = 10.0  # gmpmon/capture/triggers.py: a trigger fires at most once per 10 s


def plant(dump_dir: Path, pid: int, t0: float, t1: float, victim: Path, absent: Path) -> int:
    """A symlink at the dump name of every millisecond in [t0, t1) (wall clock; names as
    gmpmon/dumps.py:dump_name makes them), alternately to ``victim`` and to ``absent``."""
    n = 0
    for ms in range(int(t0 * 1000), int(t1 * 1000)):
        wall = ms / 1000
        stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(wall)) + f".{ms % 1000:03d}"
        (dump_dir / f"gmpmon-{pid}-{stamp}-sigusr1.gmp").symlink_to(absent if ms % 2 else victim)
        n += 1
    return n


def wait_for(path: Path, pattern: re.Pattern[str], proc: subprocess.Popen[str],
             timeout: float) -> re.Match[str]:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for ln in path.read_text().splitlines():
            m = pattern.match(ln)
            if m:
                return m
        assert proc.poll() is None, f"gmpmon ended: {path.read_text()}"
        time.sleep(0.05)
    raise AssertionError(f"no line like {pattern.pattern}: {path.read_text()}")


def test_a_planted_symlink_skips_that_dump_and_the_capture_goes_on(tmp_path: Path) -> None:
    exe = copy_target(tmp_path, "sleeper")
    dump_dir = tmp_path / "dumps"
    dump_dir.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("not gmpmon's")
    victim_mtime = victim.stat().st_mtime_ns
    absent = tmp_path / "made-through-a-link"
    target = subprocess.Popen([str(exe), "-n", "100000", "-d", "1ms"], stdout=subprocess.PIPE,
                              stdin=subprocess.DEVNULL, text=True)
    out, err = tmp_path / "gm.out", tmp_path / "gm.err"
    gm: subprocess.Popen[str] | None = None
    try:
        assert target.stdout is not None and target.stdout.readline().startswith("ready")
        with out.open("w") as o, err.open("w") as e:
            gm = subprocess.Popen([*GM, "attach", str(target.pid), "--no-tui", "--interval", "1",
                                   "--trigger", "sigusr1", "--burst", "200", "--dump-dir",
                                   str(dump_dir), "--duration", "14"],
                                  stdout=o, stderr=e, stdin=subprocess.DEVNULL, text=True)
        wait_for(out, re.compile(r"^Tracing Go scheduler"), gm, 60)
        now = time.time()
        planted = plant(dump_dir, target.pid, now - 0.5, now + 3.5, victim, absent)
        os.kill(gm.pid, signal.SIGUSR1)
        skipped = wait_for(err, SKIPPED, gm, 3)  # said while the capture runs
        lines_at_skip = len(out.read_text().splitlines())
        # The first trigger's time, from its dump's name: the next may fire 10 s after it.
        stamp = re.search(r"-(\d{8}-\d{6})\.(\d{3})-sigusr1\.gmp$", skipped[1])
        assert stamp is not None, skipped[1]
        fired = calendar.timegm(time.strptime(stamp[1], "%Y%m%d-%H%M%S")) + int(stamp[2]) / 1000
        time.sleep(max(0.0, fired + COOLDOWN_S + 0.5 - time.time()))
        os.kill(gm.pid, signal.SIGUSR1)
        written = wait_for(err, re.compile(r"^gmpmon: trigger sigusr1 fired; dump (\S+)$"), gm, 3)
        assert gm.wait(TIMEOUT) == 0, err.read_text()
    finally:
        if gm is not None and gm.poll() is None:
            gm.kill()
            gm.wait()
        target.kill()
        target.wait()
    text = err.read_text()
    print(f"\n{planted} symlinks planted; gmpmon's stderr:\n{text}")
    assert "Traceback" not in text, text
    # The capture went on: interval lines after the skip, and the summary at the end.
    assert len(out.read_text().splitlines()) > lines_at_skip + 5, out.read_text()
    # One line for the skip, one for the dump, and the tally at the end.
    assert [ln for ln in text.splitlines() if "already exists" in ln] == [skipped[0]], text
    assert text.splitlines().count(f"gmpmon: dumps in {dump_dir}: 1 written, 1 skipped") == 1
    # Nothing written through a link: the file is as it was, the dangling links' target is
    # still absent, every planted name is still the symlink it was.
    assert victim.read_text() == "not gmpmon's" and victim.stat().st_mtime_ns == victim_mtime
    assert not absent.exists()
    links = [p for p in dump_dir.iterdir() if p.is_symlink()]
    assert len(links) == planted, (len(links), planted)
    files = [p for p in dump_dir.iterdir() if not p.is_symlink()]
    assert files == [Path(written[1])], files
    assert files[0].stat().st_mode & 0o777 == 0o600
    r = subprocess.run([*GM, "replay", str(files[0]), "--no-tui"], capture_output=True,
                       text=True, timeout=TIMEOUT)
    assert r.returncode == 0 and "sleep" in r.stdout, r.stderr

