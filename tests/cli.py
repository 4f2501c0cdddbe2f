"""`gmpmon inspect` run as a user runs it, in a subprocess, shared by the unit (file) and
integration (pid) inspect tests."""

from __future__ import annotations

import subprocess
import sys


def inspect(*args: str) -> subprocess.CompletedProcess[str]:
    # cwd "/": no relative path may resolve against the repository by accident.
    return subprocess.run(
        [sys.executable, "-m", "gmpmon", "inspect", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd="/",
    )
