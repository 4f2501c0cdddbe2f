"""Which processes on this host are Go programs: /proc and each executable's build info.

No probe and no agent in the target (like ``gops``, without its agent): a process is a Go
program when its executable has a ``.go.buildinfo`` section (present even in ``-s -w``
builds), or else a ``.gopclntab`` (a Go program built without build info, like npm's
esbuild: its version is read from runtime.buildVersion, gmpmon.binary.goversion). Only
the ELF section headers and those sections are read, through an mmap of
``/proc/PID/exe``, and the answer is cached by the executable's identity (device, inode,
size, mtime, ctime), so a host with a hundred copies of one server reads its binary once.

``/proc/PID/exe`` opens the mapped file whatever mount namespace the process lives in, and
``NSpid`` in ``/proc/PID/status`` gives its pid inside its own pid namespace: processes in
containers are listed like any other.

Every read can race with the process exiting: such a process is simply not listed.
"""

from __future__ import annotations

import mmap
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass

from gmpmon.binary.buildinfo import read_buildinfo_version
from gmpmon.binary.elf import Elf
from gmpmon.binary.goversion import GoVersion, go_version
from gmpmon.binary.symindex import PclntabIndex
from gmpmon.capture.cgroup import parse_proc_cgroup
from gmpmon.errors import GmpmonError

_CLK_TCK = os.sysconf("SC_CLK_TCK")
ExeKey = tuple[int, int, int, int, int]


@dataclass(frozen=True, slots=True)
class GoProcess:
    pid: int
    ns_pid: int  # the pid inside the process's own (innermost) pid namespace
    exe: str  # what /proc/PID/exe points to (a path in the process's mount namespace)
    go_version: str  # "go1.27.3"
    container: str  # the process's cgroup path ("" for the root cgroup)
    uptime_s: float
    # (st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns) of the executable: ctime, which
    # no program can set, tells a file rewritten in place with its old mtime restored.
    exe_key: ExeKey

    @property
    def exe_name(self) -> str:
        return os.path.basename(self.exe.removesuffix(" (deleted)"))


class Discovery:
    """Lists Go processes; remembers which executables are Go (and which are not)."""

    def __init__(self) -> None:
        self._versions: dict[ExeKey, str | None] = {}

    def scan(self, match: re.Pattern[str] | None = None) -> list[GoProcess]:
        """Every Go process on the host (optionally only those whose exe path or command
        line matches ``match``), by pid."""
        out = []
        for pid in _pids():
            if pid == os.getpid():
                continue
            gp = self.probe(pid)
            if gp is None:
                continue
            if match is not None and not (
                match.search(gp.exe) or match.search(_cmdline(pid))
            ):
                continue
            out.append(gp)
        return out

    def probe(self, pid: int) -> GoProcess | None:
        """The Go process `pid`, or None (not Go, gone, a kernel thread, unreadable)."""
        exe = f"/proc/{pid}/exe"
        try:
            link = os.readlink(exe)
            st = os.stat(exe)
        except OSError:
            return None
        key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        if key in self._versions:
            version = self._versions[key]
        else:
            version = go_version_of(exe)
            if version is not None or exists(pid):
                # Cache a "not Go" only while the process still exists: a read that failed
                # because it exited says nothing about the file.
                self._versions[key] = version
        if version is None:
            return None
        uptime = process_uptime(pid)
        if uptime is None:
            return None
        return GoProcess(
            pid=pid,
            ns_pid=ns_pid(pid),
            exe=link,
            go_version=version,
            container=cgroup_path(pid),
            uptime_s=uptime,
            exe_key=key,
        )


UNKNOWN_VERSION = "?"


def go_version_of(path: str) -> str | None:
    """The Go version in the executable's build info, else the one its runtime.buildVersion
    says (checked, gmpmon.binary.goversion); "?" for a Go program whose version cannot be
    told; None if it is not a Go program (or cannot be read)."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size < 64:
                return None
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
                if m[:4] != b"\x7fELF":
                    return None
                # Elf reads by slicing and struct.unpack_from: an mmap serves both, so only
                # the pages of the headers and .go.buildinfo are ever read from disk.
                elf = Elf(m, path)  # type: ignore[arg-type]
                if elf.section(".go.buildinfo") is not None:
                    return read_buildinfo_version(elf)
                if elf.section(".gopclntab") is None:
                    return None
                # Go without build info (npm's esbuild): the version from the binary itself.
                # One that cannot be told is still listed; ps's note says why.
                try:
                    return binary_go_version(elf).version
                except GmpmonError:
                    return UNKNOWN_VERSION
    except (OSError, ValueError, GmpmonError):
        return None


def binary_go_version(elf: Elf) -> GoVersion:
    """gmpmon.binary.goversion on a binary with no build info, by its pclntab alone."""
    index = PclntabIndex(elf)
    return go_version(elf, {}, lambda name: bool(index.functions(name)))


def _pids() -> Iterator[int]:
    try:
        names = os.listdir("/proc")
    except OSError:
        return
    for n in names:
        if n.isdigit():
            yield int(n)


def exists(pid: int) -> bool:
    """/proc/PID is there (a zombie counts: it exists until reaped)."""
    return os.path.exists(f"/proc/{pid}")


def _read(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", "replace")
    except OSError:
        return None


def _cmdline(pid: int) -> str:
    return (_read(f"/proc/{pid}/cmdline") or "").replace("\0", " ").strip()


def ns_pid(pid: int) -> int:
    status = _read(f"/proc/{pid}/status") or ""
    for line in status.splitlines():
        if line.startswith("NSpid:"):
            fields = line.split()[1:]
            if fields:
                return int(fields[-1])
    return pid


def cgroup_path(pid: int) -> str:
    """The cgroup v2 path, else the v1 cpu controller's path; "" for the root cgroup."""
    return parse_cgroup(_read(f"/proc/{pid}/cgroup") or "")


def parse_cgroup(text: str) -> str:
    """The path from /proc/PID/cgroup text (cgroups(7)): the v2 path when it names a
    cgroup, else the v1 cpu controller's; "" for the root cgroup."""
    v1_cpu, v2 = parse_proc_cgroup(text)
    for path in (v2, v1_cpu):
        if path not in (None, "", "/"):
            return path or ""
    return ""


def process_uptime(pid: int) -> float | None:
    """Seconds since the process started, or None if it is gone."""
    stat = _read(f"/proc/{pid}/stat")
    up = _read("/proc/uptime")
    if not stat or not up:
        return None
    try:
        # comm may hold spaces and parentheses: fields start after the last ')'.
        fields = stat[stat.rindex(")") + 2 :].split()
        start_ticks = int(fields[19])  # field 22 of stat(5), counted from field 3
        return max(float(up.split()[0]) - start_ticks / _CLK_TCK, 0.0)
    except (ValueError, IndexError):
        return None
