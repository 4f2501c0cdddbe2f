"""The liveness check's pidfd (targetmem.ExitWatch): it says "may have exited" only once the
whole process is gone (a zombie included), stays quiet across an exec, and gone() still tells
an exec from an exit with it. Real child processes (no root needed for one's own child)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable

from gmpmon.capture.targetmem import ExitWatch, exe_id, gone


def _until(cond: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_a_running_process_is_not_maybe_gone_and_its_zombie_is() -> None:
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    w = ExitWatch(p.pid)
    try:
        exe = exe_id(p.pid)
        assert not w.maybe()
        assert gone(p.pid, exe, w) == ""
        os.kill(p.pid, signal.SIGKILL)  # not reaped yet: a zombie, as a target is to gmpmon
        assert _until(w.maybe)
        assert gone(p.pid, exe, w) == "exited"
    finally:
        p.kill()
        p.wait()
        w.close()
    assert w.maybe()  # closed: the caller looks at /proc/PID/stat as without a pidfd


def test_an_exec_keeps_the_pidfd_quiet_and_is_said_as_an_exec() -> None:
    p = subprocess.Popen(["/bin/sh", "-c", "read x; exec sleep 60"], stdin=subprocess.PIPE)
    w = ExitWatch(p.pid)
    try:
        exe = exe_id(p.pid)
        assert exe is not None and gone(p.pid, exe, w) == ""
        assert p.stdin is not None
        p.stdin.write(b"go\n")
        p.stdin.flush()
        assert _until(lambda: exe_id(p.pid) not in (exe, None))
        assert not w.maybe()  # the same process, another program
        assert gone(p.pid, exe, w) == "exec'd another program"
    finally:
        p.kill()
        p.wait()
        w.close()
