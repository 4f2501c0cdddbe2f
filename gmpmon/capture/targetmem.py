"""Reads of the target's memory through /proc/PID/mem (pread: the target never stops)."""

from __future__ import annotations

import errno
import os
import struct

_Q = struct.Struct("<Q")


class TargetMemory:
    """One open /proc/PID/mem. Every read raises OSError when the target is gone: an exited
    process's memory reads as ``b""``, not as an error, so lengths are checked here."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY)
        self.reads = 0

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def read(self, addr: int, size: int) -> bytes:
        self.reads += 1
        b = os.pread(self._fd, size, addr)
        if len(b) < size:
            raise OSError(errno.EIO, f"short read of the target's memory at {addr:#x}")
        return b

    def u64(self, addr: int) -> int:
        v: int = _Q.unpack(self.read(addr, 8))[0]
        return v


def running(pid: int) -> bool:
    """The process exists and has not exited: a zombie's memory is already gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    state = stat.rfind(b")") + 2  # after "pid (comm) "; comm may hold ')'
    return stat[state : state + 1] not in (b"Z", b"X")
