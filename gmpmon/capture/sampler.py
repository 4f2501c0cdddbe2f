"""Reads the scheduler's state straight from the target's memory: no probe at all.

``allp`` (a slice: ptr, len, cap) gives every P: status, runqhead/tail/runnext, schedtick and
its M; the M gives its TID (procid) and current G; the G its goid and status. ``runtime.sched``
gives npidle, nmspinning and the global runq length. Each read is a pread of
/proc/PID/mem: a few syscalls per P, cheap at 50 Hz, and the target never stops.

The reads are racy (the target keeps running): a P's fields may be from slightly different
instants. That is fine for a sampled picture; nothing here is used for exact counts.

Nothing is read through an address or offset that :func:`validate_layout` has not checked on
this very process first (stripped builds find their globals by disassembly, table offsets may
be another version's): when a check fails the Sampler is not made, and the error names it.
"""

from __future__ import annotations

import contextlib
import os
import struct
import time

from gmpmon.binary.info import BinaryInfo
from gmpmon.binary.table import GSCAN
from gmpmon.binary.validate import GROUPS, Layout, trusted, validate_layout
from gmpmon.capture.targetmem import (
    MAX_ALLP,
    Skips,
    allp_pointers,
    check_count,
    read_fd,
    running,
)
from gmpmon.errors import TargetError, TargetMemoryError, UnsupportedError
from gmpmon.events import EventTuple, Kind

_Q = struct.Struct("<Q")
_I = struct.Struct("<I")
_i = struct.Struct("<i")
MAX_PROCS = 1024
# `gmpmon run` opens the sampler right after exec, before the runtime has made its Ps:
# the layout checks are retried that long before they count as failed.
STARTING_S = 2.0
SAMPLER_GROUPS = ("procs", "sched")
SAMPLER_GLOBALS = ("runtime.allp", "runtime.sched", "runtime.gomaxprocs")


def check_layout(
    info: BinaryInfo,
    pid: int,
    groups: tuple[str, ...] = SAMPLER_GROUPS,
    *,
    starting: bool = False,
) -> Layout:
    """validate_layout() on /proc/PID/mem. ``starting``: the process has just exec'd;
    wait (up to STARTING_S) for its runtime to have set the layout up."""
    fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY)
    try:
        deadline = time.monotonic() + (STARTING_S if starting else 0)
        while True:
            layout = validate_layout(
                info, lambda a, n: read_fd(fd, a, n), groups=groups,
                tids=lambda: _tids(pid),
            )
            if layout.ok(*groups) or time.monotonic() >= deadline:
                return layout
            time.sleep(0.05)
    finally:
        os.close(fd)


def read_gomaxprocs(info: BinaryInfo, pid: int) -> int:
    """runtime.gomaxprocs from the target's memory, once validated; else what Go would pick
    (GOMAXPROCS from the environment, else the CPUs the process may run on)."""
    if "runtime.gomaxprocs" in info.globals:
        with contextlib.suppress(OSError):
            layout = check_layout(info, pid, ("procs",))  # never a number from unchecked reads
            if layout.gomaxprocs:
                return layout.gomaxprocs
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            for kv in f.read().split(b"\0"):
                if kv.startswith(b"GOMAXPROCS="):  # the target's: Go refuses > 1024 Ps
                    return min(max(int(kv[11:]), 1), MAX_PROCS)
    except (OSError, ValueError):
        pass
    try:
        return len(os.sched_getaffinity(pid))
    except OSError:
        return os.cpu_count() or 1


def gate_layout(info: BinaryInfo, pid: int, *, starting: bool = False) -> BinaryInfo:
    """Run every layout check on the process before anything reads it; return ``info``
    without the globals that failed theirs (so the memory readers and the BPF programs
    leave them alone).

    Offsets from a table (no DWARF) are what the probes read through as well: when the
    "procs" checks fail with them, refuse to trace the process (UnsupportedError, one line).
    A table of an older Go (the binary is newer than the table) must pass them; the table
    of the binary's own version is also accepted when the globals to check it with were not
    found (the test matrix checks those tables against DWARF), unless the version was read
    without build info (then the checks must run and hold)."""
    # A process that exits while it is checked (a short-lived program under `gmpmon run`)
    # fails every read: that is no verdict on the table, and nothing is left to protect.
    # Its memory goes before it turns zombie, so look again a moment later.
    try:
        layout = check_layout(info, pid, GROUPS, starting=starting)
    except OSError as e:
        if not _still_running(pid):
            return info
        raise TargetError(f"process {pid}: cannot read its memory ({e.strerror})") from e
    if info.offsets_source == "table" and not layout.ok("procs"):
        newer = info.offsets_table != f"1.{info.go_minor}"
        # a version read without build info (gmpmon.binary.goversion) is no better than a
        # guess until the layout it implies holds on the process: unchecked is not enough
        guessed = info.go_version_source != "build info"
        if (newer or guessed or "procs" not in layout.unchecked) and _still_running(pid):
            what = (
                f"{info.go_version} is newer than gmpmon's offsets table and "
                f"go{info.offsets_table}'s layout does not fit it"
                if newer
                else f"the go{info.offsets_table} offsets table does not fit this process"
            )
            raise UnsupportedError(
                f"process {pid}: {what}: {layout.why('procs')}",
                hint="rebuild it without -ldflags=-w (DWARF), or update gmpmon's offsets table",
            )
    return trusted(info, layout)


def _still_running(pid: int) -> bool:
    time.sleep(0.05)
    return running(pid)


def _tids(pid: int) -> frozenset[int] | None:
    try:
        return frozenset(int(t) for t in os.listdir(f"/proc/{pid}/task"))
    except (OSError, ValueError):
        return None


class LayoutError(ValueError):
    """validate_layout failed: the message is the one line naming the check."""

    def __init__(self, layout: Layout, groups: tuple[str, ...]) -> None:
        super().__init__(layout.why(*groups))
        self.layout = layout


class Sampler:
    """P_SAMPLE and SCHED_SAMPLE events from /proc/PID/mem."""

    def __init__(self, info: BinaryInfo, pid: int, *, starting: bool = False) -> None:
        self.pid = pid
        bias = info.load_bias
        allp = info.globals.get("runtime.allp")
        sched = info.globals.get("runtime.sched")
        if allp is None or sched is None or "runtime.gomaxprocs" not in info.globals:
            missing = [g for g in SAMPLER_GLOBALS if g not in info.globals]
            raise ValueError(
                f"no {', '.join(missing)}: "
                + "; ".join(dict.fromkeys(info.globals_missing.get(g, "?") for g in missing))
            )
        self.allp = allp + bias
        self.sched = sched + bias
        o = info.offsets
        self.p_status = o["runtime.p.status"]
        self.p_m = o["runtime.p.m"]
        self.p_head = o["runtime.p.runqhead"]
        self.p_tail = o["runtime.p.runqtail"]
        self.p_next = o["runtime.p.runnext"]
        self.p_tick = o["runtime.p.schedtick"]
        self.p_id = o["runtime.p.id"]
        self.m_procid = o["runtime.m.procid"]
        self.m_curg = o["runtime.m.curg"]
        self.g_goid = o["runtime.g.goid"]
        self.g_status = o["runtime.g.atomicstatus"]
        self.s_npidle = o["runtime.schedt.npidle"]
        self.s_nmspinning = o["runtime.schedt.nmspinning"]
        self.s_runqsize = o.get("runtime.schedt.runqsize")
        self.p_span = max(self.p_next + 8, self.p_tick + 4, self.p_m + 8, self.p_status + 4)
        # One pread per M (procid and curg, 128 bytes apart) and per G (goid and status):
        # a pread of /proc/PID/mem is ~2 µs of syscall, most of what a tick costs.
        self.m_lo = min(self.m_procid, self.m_curg)
        self.m_span = max(self.m_procid, self.m_curg) + 8 - self.m_lo
        self.g_lo = min(self.g_goid, self.g_status)
        self.g_span = max(self.g_goid + 8, self.g_status + 4) - self.g_lo
        # allp's array changes only with its (ptr, len) header: procresize reslices or
        # reallocates it, and never replaces a P below len (Ps are never freed).
        self._allp_at: tuple[int, int] = (0, 0)
        self._ptrs: tuple[int, ...] = ()
        self.s_span = max(self.s_npidle, self.s_nmspinning, self.s_runqsize or 0) + 4
        self.layout = check_layout(info, pid, starting=starting)
        if not self.layout.ok(*SAMPLER_GROUPS):
            raise LayoutError(self.layout, SAMPLER_GROUPS)
        self._fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY)
        self.skips = Skips()  # P, M and curg reads skipped: a bad pointer in one P's chain

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def _read(self, addr: int, size: int) -> bytes:
        # Checked (capture/targetmem.py): a pointer the target holds outside user space is
        # TargetMemoryError, not OverflowError; an exited target's short read is OSError.
        return read_fd(self._fd, addr, size)

    def _skip(self, what: str, e: OSError | TargetMemoryError) -> None:
        self.skips.failed(self.pid, what, e)  # OSError re-raised when the target is gone

    def sample(self, out: list[EventTuple]) -> None:
        """Append one P_SAMPLE per P and one SCHED_SAMPLE. Raises OSError when the target
        is gone, TargetMemoryError when allp itself is implausible; a bad pointer in one P's
        chain (the P, its M, the M's curg) costs that read only (``skips``)."""
        now = time.monotonic_ns()
        head = self._read(self.allp, 16)
        ptr, n = struct.unpack("<QQ", head)
        n = check_count("len(allp)", n, MAX_ALLP)
        n = min(n, MAX_PROCS)
        if (ptr, n) != self._allp_at:
            self._ptrs = allp_pointers(self._read, self.pid, ptr, n)
            self._allp_at = (ptr, n)
        ptrs = self._ptrs
        m_procid, m_curg = self.m_procid - self.m_lo, self.m_curg - self.m_lo
        g_goid, g_status = self.g_goid - self.g_lo, self.g_status - self.g_lo
        for i, pp in enumerate(ptrs):
            if not pp:
                continue
            try:
                b = self._read(pp, self.p_span)
            except (OSError, TargetMemoryError) as e:
                self._skip(f"allp[{i}] = {pp:#x}", e)
                continue
            pid = _i.unpack_from(b, self.p_id)[0]
            status = _I.unpack_from(b, self.p_status)[0]
            tick = _I.unpack_from(b, self.p_tick)[0]
            head, tail = _I.unpack_from(b, self.p_head)[0], _I.unpack_from(b, self.p_tail)[0]
            runq = (tail - head) & 0xFFFFFFFF
            if runq > 256:
                runq = 0  # read mid-update
            runq += 1 if _Q.unpack_from(b, self.p_next)[0] else 0
            mp = _Q.unpack_from(b, self.p_m)[0]
            tid = goid = gstatus = 0
            if mp:
                try:
                    m = self._read(mp + self.m_lo, self.m_span)
                except (OSError, TargetMemoryError) as e:
                    self._skip(f"allp[{i}].m = {mp:#x}", e)  # the P's own state still counts
                    m = b""
                gp = 0
                if m:
                    tid = _Q.unpack_from(m, m_procid)[0] & 0xFFFFFFFF
                    gp = _Q.unpack_from(m, m_curg)[0]
                if gp:
                    try:
                        g = self._read(gp + self.g_lo, self.g_span)
                        goid = _Q.unpack_from(g, g_goid)[0]
                        gstatus = _I.unpack_from(g, g_status)[0] & ~GSCAN
                    except (OSError, TargetMemoryError) as e:
                        self._skip(f"allp[{i}].m.curg = {gp:#x}", e)
            a0 = (status & 0xFF) | ((gstatus & 0xFF) << 8) | (runq << 16)
            out.append((now, Kind.P_SAMPLE, pid, tid, goid, a0, tick))
        s = self._read(self.sched, self.s_span)
        npidle = _I.unpack_from(s, self.s_npidle)[0]
        nmspinning = _I.unpack_from(s, self.s_nmspinning)[0]
        grq = _i.unpack_from(s, self.s_runqsize)[0] if self.s_runqsize is not None else -1
        out.append(
            (now, Kind.SCHED_SAMPLE, -1, 0, 0, npidle | (nmspinning << 32), grq & (2**64 - 1))
        )
