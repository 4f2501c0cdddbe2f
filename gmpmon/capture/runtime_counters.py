"""The runtime's own counters, read from the target's memory: no probe, no trap.

``runtime.sched`` holds what runtime/metrics reports: ``timeToRun`` (the scheduling-latency
histogram behind ``/sched/latencies:seconds``; the runtime times about 1 transition in 8,
``gTrackingPeriod``), the stop-the-world histograms (``stwTotalTimeGC``... behind
``/sched/pauses/*``, Go 1.22+), ``totalMutexWaitTime`` (1.21+), ``totalRuntimeLockWaitTime``
(1.22+), and the gauges ``npidle``/``nmspinning``/``gcwaiting``/the global runq size. With
``allglen``, ``ngsys`` and the free lists it gives what ``gcount()`` (``NumGoroutine``) computes.
Every P in ``allp`` has ``schedtick`` and ``syscalltick``: their deltas are goroutines
scheduled and syscalls made on that P.

One pread covers the part of ``runtime.sched`` that is read, one more ``allp``, one each P.
Histograms are sent as bucket deltas (RT_HISTS, four to an event), cumulative totals as
deltas (RT_TOTAL), so a recording adds up to the same numbers. The first read is the
baseline: numbers are "since attach". Layouts: ``runtime/histogram.go`` at each tag (1.19:
45x16 buckets and an underflow; 1.21+: 40x4 buckets, underflow and overflow); offsets from
DWARF or the per-version table.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from itertools import compress
from operator import gt

from gmpmon.binary.info import BinaryInfo
from gmpmon.capture.targetmem import (
    MAX_ALLP,
    MAX_GOROUTINES,
    Skips,
    TargetMemory,
    allp_pointers,
    check_count,
)
from gmpmon.errors import TargetMemoryError
from gmpmon.events import NO_P, EventTuple, Kind, RtFeature, RtHist, RtTotal
from gmpmon.histpack import pack_hist

_I = struct.Struct("<I")
_i = struct.Struct("<i")
_Q = struct.Struct("<Q")
_q = struct.Struct("<q")
MAX_PROCS = 1024

_HISTS: tuple[tuple[RtHist, str], ...] = (
    (RtHist.TIME_TO_RUN, "timeToRun"),
    (RtHist.STW_STOPPING_GC, "stwStoppingTimeGC"),
    (RtHist.STW_STOPPING_OTHER, "stwStoppingTimeOther"),
    (RtHist.STW_TOTAL_GC, "stwTotalTimeGC"),
    (RtHist.STW_TOTAL_OTHER, "stwTotalTimeOther"),
)
_TOTALS: tuple[tuple[RtTotal, str, RtFeature], ...] = (
    (RtTotal.MUTEX_WAIT, "totalMutexWaitTime", RtFeature.MUTEX_WAIT),
    (RtTotal.RUNTIME_LOCK_WAIT, "totalRuntimeLockWaitTime", RtFeature.RUNTIME_LOCK_WAIT),
)


def global_addr(info: BinaryInfo, name: str) -> int | None:
    """Runtime address of a runtime global (BinaryInfo.globals: found on stripped binaries
    too, where the loader can), or None."""
    addr = info.globals.get(name)
    return None if addr is None else addr + info.load_bias


def absent(info: BinaryInfo, name: str) -> str:
    """Why a global is not there to read: not found, or its layout check failed."""
    return f"{name}: {info.globals_missing.get(name, 'not found')}"


@dataclass(frozen=True, slots=True)
class _Hist:
    kind: int
    off: int  # counts[0], relative to the start of the sched read
    n: int  # counting buckets
    overflow: bool


class RuntimeCounters:
    """RT_* events from one target's memory. ``read()`` at 10-100 Hz."""

    def __init__(self, info: BinaryInfo, mem: TargetMemory) -> None:
        self.mem = mem
        o = info.offsets
        self.missing: dict[RtFeature, str] = {}
        self.sched = global_addr(info, "runtime.sched")
        self.allp = global_addr(info, "runtime.allp")
        self.allglen = global_addr(info, "runtime.allglen")
        # totalRuntimeLockWaitTime gets each M's waits only when the M exits; the metric
        # (debug.go:totalMutexWaitTimeNanos) adds every live M's mLockProfile.waitTime.
        self.allm = global_addr(info, "runtime.allm")
        self.m_alllink = o.get("runtime.m.alllink")
        self.m_lockwait = o.get("runtime.m.mLockProfile.waitTime")
        if self.sched is None:
            for f in (RtFeature.LATENCY, RtFeature.SCHED, RtFeature.MUTEX_WAIT, RtFeature.STW):
                self.missing[f] = absent(info, "runtime.sched")
            self.missing[RtFeature.RUNTIME_LOCK_WAIT] = absent(info, "runtime.sched")
        if self.allp is None:
            self.missing[RtFeature.P_TICKS] = absent(info, "runtime.allp")

        fields: dict[str, int] = {}

        def want(name: str) -> int | None:
            v = o.get(f"runtime.schedt.{name}")
            if v is not None and self.sched is not None:
                fields[name] = v
            return v

        for name in ("npidle", "nmspinning", "runqsize", "gcwaiting", "ngsys"):
            want(name)
        ttr = want("timeToRun")
        under = want("timeToRun.underflow")
        over = want("timeToRun.overflow")
        hists: list[tuple[RtHist, int]] = []
        self.hist_n = 0
        if ttr is not None and under is not None and self.sched is not None:
            self.hist_n = (under - ttr) // 8
            for kind, name in _HISTS:
                off = want(name)
                if off is not None:
                    hists.append((kind, off))
                elif kind == RtHist.STW_TOTAL_GC:
                    self.missing[RtFeature.STW] = (
                        f"{info.go_version} has no sched.stwTotalTimeGC (Go 1.22+)"
                    )
        elif self.sched is not None:
            self.missing[RtFeature.LATENCY] = "no sched.timeToRun offset"
        self.hist_overflow = over is not None
        self.hist_size = 8 * (self.hist_n + 1 + (1 if self.hist_overflow else 0))
        totals: list[tuple[RtTotal, int]] = []
        for tkind, name, feature in _TOTALS:
            off = want(name)
            if off is not None:
                totals.append((tkind, off))
            elif self.sched is not None:
                self.missing[feature] = f"{info.go_version} has no sched.{name}"
        if o.get("runtime.schedt.gFree.n") is not None:
            want("gFree.n")
        else:
            want("gFree.stack.size")
            want("gFree.noStack.size")
        self.p_gfree = o.get("runtime.p.gFree.n", o.get("runtime.p.gFree.size"))
        has_free = "gFree.n" in fields or "gFree.stack.size" in fields
        if self.allglen is None:
            self.missing[RtFeature.GOROUTINES] = absent(info, "runtime.allglen")
        elif not has_free or self.p_gfree is None or "ngsys" not in fields:
            self.missing[RtFeature.GOROUTINES] = "no offsets for gcount's free lists"
        for name in ("npidle", "nmspinning", "runqsize"):
            if name not in fields and self.sched is not None:
                self.missing[RtFeature.SCHED] = f"no sched.{name} offset"

        # One read of sched from the lowest field to the end of the highest one.
        ends = [off + 8 for off in fields.values()]
        ends += [off + self.hist_size for _, off in hists]
        self.s_lo = min(fields.values(), default=0)
        self.s_size = max(ends, default=0) - self.s_lo
        rel = {k: v - self.s_lo for k, v in fields.items()}
        self._f = rel
        self._hists = tuple(_Hist(int(k), off - self.s_lo, self.hist_n, self.hist_overflow)
                            for k, off in hists)
        self._totals = tuple((int(k), off - self.s_lo) for k, off in totals)
        self._hist_fmt = struct.Struct(f"<{self.hist_size // 8}Q")

        self.p_id = o["runtime.p.id"]
        self.p_status = o["runtime.p.status"]
        self.p_tick = o["runtime.p.schedtick"]
        self.p_systick = o["runtime.p.syscalltick"]
        p_fields = [self.p_id, self.p_status, self.p_tick, self.p_systick]
        if self.p_gfree is not None:
            p_fields.append(self.p_gfree)
        self.p_span = max(p_fields) + 4

        self._last_hist: dict[int, tuple[int, ...]] = {}
        self._last_raw: dict[int, bytes] = {}
        self._last_total: dict[int, int] = {}
        self._last_tick: dict[int, tuple[int, int]] = {}
        # allp's array (as capture/sampler.py reads it): re-read when (ptr, len) changes.
        self._allp_at: tuple[int, int] = (0, 0)
        self._ptrs: tuple[int, ...] = ()
        self.reads = 0
        # Since attach: timeToRun samples and syscalls (syscalltick) counted, for the hot-hit
        # rate the budget plans with before and between windows (budget.prior_hits_per_s).
        self.tracked = 0
        self.syscalls = 0
        self.busy_ps = 0  # GOMAXPROCS - npidle at the last read
        self._announced = False
        # A bad pointer in one P (allp[i]) or in the allm list costs that read, not the rest.
        self.skips = Skips()
        self.m_skips = Skips()
        # Values that stopped a part only (an implausible allglen: no goroutine count; allp:
        # no per-P ticks either; the histograms and gauges read on): (what, its features,
        # why), for RuntimeSources to say. ``missing`` has the features.
        self.stopped: list[tuple[str, tuple[RtFeature, ...], TargetMemoryError]] = []

    def missing_events(self, now: int) -> list[EventTuple]:
        return [(now, Kind.RT_MISSING, NO_P, 0, 0, int(f), 0) for f in sorted(self.missing)]

    def read(self, now: int, out: list[EventTuple]) -> None:
        """Append this tick's RT_* events. Raises OSError when the target is gone."""
        if not self._announced:
            out.extend(self.missing_events(now))
            self._announced = True
        mem = self.mem
        p_free = 0
        nprocs = 0
        if self.allp is not None:
            try:
                p_free, nprocs = self._read_procs(now, out)
            except TargetMemoryError as e:  # allp itself: no per-P part from here on
                self.allp = None
                self._stop("per-P ticks", (RtFeature.P_TICKS, RtFeature.GOROUTINES), e)
        if self.sched is None or self.s_size <= 0:
            return
        s = mem.read(self.sched + self.s_lo, self.s_size)
        f = self._f
        self._read_hists(now, s, out)
        for kind, off in self._totals:
            v = _q.unpack_from(s, off)[0]
            if kind == RtTotal.RUNTIME_LOCK_WAIT:
                v += self._m_lock_wait()
            prev_v = self._last_total.get(kind)
            self._last_total[kind] = v
            if prev_v is not None and v > prev_v:
                out.append((now, Kind.RT_TOTAL, NO_P, 0, kind, 0, v - prev_v))
        gcount = 0
        allglen = 0
        if RtFeature.GOROUTINES not in self.missing and self.allglen is not None:
            try:
                allglen = check_count("allglen", mem.u64(self.allglen), MAX_GOROUTINES)
            except TargetMemoryError as e:
                self._stop("goroutine count", (RtFeature.GOROUTINES,), e)
        if allglen:
            free = (
                _i.unpack_from(s, f["gFree.n"])[0]
                if "gFree.n" in f
                else _i.unpack_from(s, f["gFree.stack.size"])[0]
                + _i.unpack_from(s, f["gFree.noStack.size"])[0]
            )
            gcount = max(allglen - free - _i.unpack_from(s, f["ngsys"])[0] - p_free, 1)
        npidle = _i.unpack_from(s, f["npidle"])[0] if "npidle" in f else 0
        nmspin = _i.unpack_from(s, f["nmspinning"])[0] if "nmspinning" in f else 0
        runq = _i.unpack_from(s, f["runqsize"])[0] if "runqsize" in f else 0
        gcw = s[f["gcwaiting"]] & 1 if "gcwaiting" in f else 0
        a0 = (allglen & 0xFFFFFFFF) | (max(runq, 0) & 0xFFFFFFFF) << 32
        a1 = (
            (max(npidle, 0) & 0xFFFF)
            | (max(nmspin, 0) & 0xFFFF) << 16
            | gcw << 32
            | (nprocs & 0xFFFF) << 40
        )
        out.append((now, Kind.RT_SCHED, NO_P, 0, gcount, a0, a1))
        self.busy_ps = max(nprocs - max(npidle, 0), 0)
        self.reads += 1

    def _read_procs(self, now: int, out: list[EventTuple]) -> tuple[int, int]:
        """Each P's ticks (RT_PTICK); (free Gs on the Ps, len(allp))."""
        mem = self.mem
        p_free = 0
        ptr, n = struct.unpack("<QQ", mem.read(self.allp or 0, 16))
        n = min(check_count("len(allp)", n, MAX_ALLP), MAX_PROCS)
        if (ptr, n) != self._allp_at:  # the array changes only with its header
            self._ptrs = allp_pointers(mem.read, mem.pid, ptr, n)
            self._allp_at = (ptr, n)
        last = self._last_tick
        for i, pp in enumerate(self._ptrs):
            if not pp:
                continue
            try:
                b = mem.read(pp, self.p_span)
            except (OSError, TargetMemoryError) as e:
                self._skip(self.skips, f"allp[{i}] = {pp:#x}", e)
                continue
            pid = _i.unpack_from(b, self.p_id)[0]
            tick = _I.unpack_from(b, self.p_tick)[0]
            systick = _I.unpack_from(b, self.p_systick)[0]
            if self.p_gfree is not None:
                p_free += _i.unpack_from(b, self.p_gfree)[0]
            prev = last.get(pid)
            last[pid] = (tick, systick)
            if prev is not None:
                dt = (tick - prev[0]) & 0xFFFFFFFF
                ds = (systick - prev[1]) & 0xFFFFFFFF
                if dt or ds:
                    out.append((now, Kind.RT_PTICK, pid, 0, 0, dt, ds))
                    self.syscalls += ds
        return p_free, n

    def _stop(self, what: str, features: tuple[RtFeature, ...], e: TargetMemoryError) -> None:
        features = tuple(f for f in features if f not in self.missing)  # lacked: not stopped
        for f in features:
            self.missing[f] = e.one_line()
        if features:
            self.stopped.append((what, features, e))

    def _m_lock_wait(self) -> int:
        if self.allm is None or self.m_alllink is None or self.m_lockwait is None:
            return 0
        total = 0
        mp = self.mem.u64(self.allm)
        lo = min(self.m_alllink, self.m_lockwait)
        span = max(self.m_alllink, self.m_lockwait) + 8 - lo
        for i in range(4096):  # allm is a short list; the bound only guards a torn read
            if not mp:
                break
            try:
                b = self.mem.read(mp + lo, span)
            except (OSError, TargetMemoryError) as e:  # the Ms before it are counted
                self._skip(self.m_skips, f"allm's M #{i} at {mp:#x}", e)
                break
            total += _q.unpack_from(b, self.m_lockwait - lo)[0]
            mp = _Q.unpack_from(b, self.m_alllink - lo)[0]
        return total

    def _skip(self, skips: Skips, what: str, e: OSError | TargetMemoryError) -> None:
        skips.failed(self.mem.pid, what, e)  # OSError re-raised when the target is gone

    def lifetime_hist(self, kind: int) -> tuple[int, ...] | None:
        """The histogram as the runtime holds it at the last read (counts since the process
        started, not since attach), in metrics order: underflow, n buckets, overflow (0 where
        the layout has none). None before the first read or for a histogram not read."""
        vals = self._last_hist.get(kind)
        if vals is None:
            return None
        hh = next(h for h in self._hists if h.kind == kind)
        return vals if hh.overflow else (*vals, 0)

    def _read_hists(self, now: int, s: bytes, out: list[EventTuple]) -> None:
        size = self.hist_size
        for hh in self._hists:
            raw = s[hh.off : hh.off + size]
            if self._last_raw.get(hh.kind) == raw:
                continue
            self._last_raw[hh.kind] = raw
            counts = self._hist_fmt.unpack(raw)
            # counts..., underflow[, overflow] -> metrics order: underflow, counts, overflow
            vals = (counts[hh.n], *counts[: hh.n], *(counts[hh.n + 1 :] if hh.overflow else ()))
            prev = self._last_hist.get(hh.kind)
            self._last_hist[hh.kind] = vals
            if prev is None:
                continue
            # The buckets that grew, found by a C-level scan: 722 buckets on Go 1.19, read
            # ten times a second, of which a few dozen move.
            grew = list(compress(range(len(vals)), map(gt, vals, prev)))
            if not grew:
                continue
            deltas = [vals[i] - prev[i] for i in grew]
            pack_hist(now, hh.n, hh.kind, grew, deltas, out)  # four to an event
            if hh.kind == RtHist.TIME_TO_RUN:
                self.tracked += sum(deltas)
