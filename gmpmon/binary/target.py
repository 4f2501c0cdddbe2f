"""From a pid to its executable and load bias (/proc). The one place gmpmon.binary reads /proc.

The executable is read from the path /proc/PID/exe links to when that is the same file here,
else from /proc/PID/root/<that path> (another mount namespace: a container): both are paths
BCC can attach uprobes to. Otherwise (the binary was replaced or deleted) /proc/PID/exe
itself, which still opens the mapped file.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

from gmpmon.binary.elf import ET_DYN, PT_LOAD, Elf
from gmpmon.binary.info import BinaryInfo
from gmpmon.binary.load import load_elf, read_file_stat
from gmpmon.errors import PermissionDenied, TargetError

# (file offset, link-time address, bytes in the file) of each PT_LOAD segment.
LoadSegments = tuple[tuple[int, int, int], ...]


def _proc(pid: int, *parts: str) -> str:
    return os.path.join(f"/proc/{pid}", *parts)


def _denied(pid: int, what: str) -> PermissionDenied:
    # As root, EACCES on /proc/PID comes from a security module, a ptrace restriction or a
    # sandbox's own process: saying "run as root" there would send the user in circles.
    hint = (
        "refused even to root: a security module, ptrace scope or sandbox protects it"
        if os.geteuid() == 0
        else "run as root"
    )
    return PermissionDenied(f"cannot read /proc/{pid}/{what}", hint=hint)


def exe_path(pid: int) -> str:
    if pid <= 0:
        raise TargetError(f"no such process: {pid}")
    exe = _proc(pid, "exe")
    try:
        link = os.readlink(exe)
        st = os.stat(exe)
    except FileNotFoundError as e:
        if not os.path.exists(_proc(pid)):
            raise TargetError(f"no such process: {pid}") from e
        raise TargetError(f"process {pid} has no executable (a kernel thread or zombie)") from e
    except PermissionError as e:
        raise _denied(pid, "exe") from e
    if link.endswith(" (deleted)"):
        return exe
    # The plain path when it names the same file here (same mount namespace), else the
    # path through the target's root (a container), else the magic link itself.
    for candidate in (link, _proc(pid, "root", link.lstrip("/"))):
        try:
            st2 = os.stat(candidate)
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == (st2.st_dev, st2.st_ino):
            return candidate
    return exe


def load_segments(elf: Elf) -> LoadSegments:
    return tuple((s.offset, s.vaddr, s.filesz) for s in elf.segments if s.type == PT_LOAD)


def load_bias(pid: int, elf: Elf, path: str) -> int:
    """Runtime address minus link address of the executable's mapping (0 unless PIE)."""
    if elf.etype != ET_DYN:
        return 0
    return pie_bias(pid, load_segments(elf), path)


def pie_bias(pid: int, loads: LoadSegments, path: str) -> int:
    """load_bias of a PIE from its PT_LOAD segments and /proc/PID/maps."""
    try:
        st = os.stat(path)
        with open(_proc(pid, "maps")) as f:
            lines = f.read().splitlines()
    except FileNotFoundError as e:
        raise TargetError(f"process {pid} went away") from e
    except PermissionError as e:
        raise _denied(pid, "maps") from e
    for line in lines:
        fields = line.split(maxsplit=5)
        if len(fields) < 5:
            continue
        start = int(fields[0].split("-")[0], 16)
        offset = int(fields[2], 16)
        inode = int(fields[4])
        if inode != st.st_ino:
            continue
        for seg_off, vaddr, filesz in loads:
            if seg_off <= offset < seg_off + max(filesz, 1):
                return start - (vaddr + offset - seg_off)
    raise TargetError(f"process {pid}: its executable is not mapped (cannot find load bias)")


@dataclass(frozen=True, slots=True)
class Loaded:
    """A process's BinaryInfo with what a cache of it needs: the identity of the bytes read
    (None when the file changed while it was read) and its PT_LOAD segments (a PIE's bias)."""

    info: BinaryInfo
    stat: os.stat_result | None
    segments: LoadSegments


def load_pid(pid: int, *, readers_only: bool = False) -> BinaryInfo:
    """BinaryInfo of a running process's executable, with `pid` and `load_bias` set
    (``readers_only``: see load_elf)."""
    return load_pid_file(pid, readers_only=readers_only).info


def load_pid_file(pid: int, *, readers_only: bool = False, functab: bool = True,
                  gc: bool = True) -> Loaded:
    """:func:`load_pid`, and what was read (``functab``, ``gc``: see load_elf)."""
    path = exe_path(pid)
    data, st = read_file_stat(path)
    info = load_elf(data, path, readers_only=readers_only, functab=functab, gc=gc)
    elf = Elf(data, path)
    bias = load_bias(pid, elf, path)
    return Loaded(dataclasses.replace(info, pid=pid, load_bias=bias), st, load_segments(elf))
