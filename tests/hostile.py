"""Shared by the hostile-input tests (tests/unit/test_hostile_*.py,
tests/integration/test_hostile_*.py): run gmpmon on a hostile input and measure what it cost.

Each hostile case must end in <= LIMIT_S seconds and <= LIMIT_MB of peak RSS, with one
`gmpmon: ...` line on stderr, a documented exit code and no traceback (issue 31)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LIMIT_S = 5.0
LIMIT_MB = 300
TIME = "/usr/bin/time"  # GNU time (Debian package "time")


@dataclass
class Measured:
    argv: list[str]
    code: int
    out: str
    err: str
    seconds: float
    max_rss_mb: float

    def lines(self) -> list[str]:
        return [ln for ln in self.err.splitlines() if ln.strip()]

    def one_line(self) -> str:
        """The one `gmpmon: ...` line on stderr (and no traceback anywhere)."""
        assert "Traceback" not in self.out + self.err, self.err[-3000:]
        lines = self.lines()
        assert len(lines) == 1, f"want one stderr line, got {len(lines)}:\n{self.err[-3000:]}"
        assert lines[0].startswith("gmpmon: "), lines[0]
        return lines[0]

    def within_limits(self) -> None:
        assert self.seconds <= LIMIT_S, f"{self.seconds:.1f} s: {self.argv}"
        assert self.max_rss_mb <= LIMIT_MB, f"{self.max_rss_mb:.0f} MB: {self.argv}"

    def figure(self) -> str:
        cmd = " ".join("python" if a == sys.executable else a for a in self.argv)
        return f"{self.seconds:.2f} s, {self.max_rss_mb:.0f} MB peak RSS, exit {self.code}: {cmd}"


def gmpmon(*args: str, timeout: float = 60, prefix: tuple[str, ...] = ()) -> Measured:
    """Run `python -m gmpmon args` (under ``prefix``, e.g. prlimit); its wall time and peak
    RSS from wait4 (this child only)."""
    argv = [*prefix, sys.executable, "-m", "gmpmon", *args]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err, \
            tempfile.NamedTemporaryFile("w+") as rss:
        t0 = time.monotonic()
        # Peak RSS by GNU time, which forks gmpmon from its own small process: a child
        # forked from pytest would carry pytest's RSS into its ru_maxrss (Linux keeps the
        # pre-exec high-water mark).
        p = subprocess.Popen([TIME, "-q", "-f", "%M", "-o", rss.name, *argv], stdout=out,
                             stderr=err, stdin=subprocess.DEVNULL, cwd=REPO, env=env)
        deadline = t0 + timeout
        while True:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                p.kill()
                pid, status, ru = os.wait4(p.pid, 0)
                break
            time.sleep(0.01)
        took = time.monotonic() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        kb = [ln for ln in Path(rss.name).read_text().split() if ln.isdigit()]
        max_rss = int(kb[-1]) / 1024 if kb else ru.ru_maxrss / 1024
        return Measured(argv, p.returncode, out.read(), err.read(), took, max_rss)
