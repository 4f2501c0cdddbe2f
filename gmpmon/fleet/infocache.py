"""BinaryInfo per executable, shared by every reader of a host's Go processes (ps, serve):
kept apart from the watches so that `gmpmon ps` imports no exporter, model or session."""

from __future__ import annotations

import dataclasses

from gmpmon.binary import BinaryInfo, load_pid
from gmpmon.fleet.discover import ExeKey, GoProcess


class InfoCache:
    """BinaryInfo per executable (device, inode, size, mtime), shared by every watch: a host
    running fifty copies of one server parses its binary once."""

    def __init__(self, *, readers_only: bool = False) -> None:
        self._by_key: dict[ExeKey, BinaryInfo] = {}
        self.readers_only = readers_only  # no probe sites (see binary.load.load_elf)

    def get(self, proc: GoProcess) -> BinaryInfo:
        info = self._by_key.get(proc.exe_key)
        if info is None or info.pie:
            # load_pid also finds the load bias, which differs per process for a PIE.
            info = load_pid(proc.pid, readers_only=self.readers_only)
            self._by_key[proc.exe_key] = info
        elif info.pid != proc.pid:
            info = dataclasses.replace(info, pid=proc.pid)
        return info
