"""BinaryInfo per executable, shared by every reader of a host's Go processes (ps, serve):
kept apart from the watches so that `gmpmon ps` imports no exporter, model or session."""

from __future__ import annotations

import dataclasses

from gmpmon.binary.info import BinaryInfo
from gmpmon.binary.target import LoadSegments, exe_path, load_pid_file, pie_bias
from gmpmon.fleet.discover import ExeKey, GoProcess
from gmpmon.fleet.layoutcache import LayoutCache, file_id


@dataclasses.dataclass(frozen=True, slots=True)
class _Known:
    info: BinaryInfo
    segments: LoadSegments
    from_disk: bool


class InfoCache:
    """BinaryInfo per executable (device, inode, size, mtime, ctime), shared by every
    watch: a host running fifty copies of one server parses its binary once. A PIE's load
    bias is found again for each process, from its maps.

    ``functab=False``: loaded without the function table, ``gc=False``: without the GC
    panel's globals (see binary.load.load_elf);
    ``disk``: also kept across runs (fleet.layoutcache; readers-only loads only)."""

    def __init__(self, *, readers_only: bool = False, functab: bool = True,
                 gc: bool = True, disk: LayoutCache | None = None) -> None:
        self._by_key: dict[ExeKey, _Known] = {}
        self.readers_only = readers_only  # no probe sites (see binary.load.load_elf)
        self.functab = functab
        self.gc = gc  # the GC panel's globals looked for (see binary.load.load_elf)
        self.disk = disk if disk is not None and disk.enabled and readers_only else None

    def get(self, proc: GoProcess) -> BinaryInfo:
        known = self._by_key.get(proc.exe_key)
        if known is None:
            known = self._from_disk(proc) or self._from_file(proc)
        if known.info.pie or known.info.pid is None:
            bias = pie_bias(proc.pid, known.segments, known.info.path) if known.info.pie else 0
            return dataclasses.replace(known.info, pid=proc.pid, load_bias=bias)
        if known.info.pid != proc.pid:
            return dataclasses.replace(known.info, pid=proc.pid)
        return known.info

    def from_disk(self, proc: GoProcess) -> bool:
        """Did this process's BinaryInfo come from the on-disk cache (not from its file)?"""
        known = self._by_key.get(proc.exe_key)
        return known is not None and known.from_disk

    def reread(self, proc: GoProcess) -> BinaryInfo:
        """Read the executable again (a cached layout that failed on the live process:
        whatever made the entry wrong, the file decides), replacing the entry."""
        self._from_file(proc)
        return self.get(proc)

    def _from_disk(self, proc: GoProcess) -> _Known | None:
        if self.disk is None:
            return None
        entry = self.disk.get(proc.exe_key)
        if entry is None:
            return None
        info = dataclasses.replace(entry.info, path=exe_path(proc.pid))
        known = _Known(info, entry.segments, True)
        self._by_key[proc.exe_key] = known
        return known

    def _from_file(self, proc: GoProcess) -> _Known:
        loaded = load_pid_file(proc.pid, readers_only=self.readers_only, functab=self.functab,
                               gc=self.gc)
        known = _Known(loaded.info, loaded.segments, False)
        self._by_key[proc.exe_key] = known
        # Kept only when the bytes read are the very file the process was listed with.
        if self.disk is not None and loaded.stat is not None and (
            file_id(loaded.stat) == proc.exe_key
        ):
            self.disk.put(proc.exe_key, loaded.info, loaded.segments)
        return known
