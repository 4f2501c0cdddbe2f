"""Check the globals and struct offsets against a live process before reading through them.

An address found in stripped code, an offsets table for another Go version, a table that is
simply wrong: each reads *something* from a live process. These checks read the scheduler's
own invariants and say which one failed, so that a reader turns its feature off instead of
showing numbers read through wrong offsets.

    layout = validate_layout(info, read)        # read(addr, n) -> bytes, runtime addresses
    if not layout.ok("procs", "sched"):
        print(f"gmpmon: {layout.why('procs', 'sched')}")   # one line; feature off

Groups (a reader names the ones it depends on):
- ``procs``: gomaxprocs, allp and the p/m/g offsets the sampler and the probes use;
- ``sched``: runtime.sched and the schedt offsets;
- ``allgs``: allgs/allglen and the g status/goid offsets (the goroutine census);
- ``allm``: allm and m.g0/g.m;
- ``gc``: memstats, gcController and work (the GC panel); not in the default ``GROUPS``: only
  the readers that use them ask.

Pure: memory comes through ``read``; an OSError or a short read fails the check that made it.
The target keeps running while it is read, so each group gets a few attempts and passes if
all its checks hold in one of them; a wrong layout fails every time.
"""

from __future__ import annotations

import dataclasses
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from gmpmon.binary.info import BinaryInfo
from gmpmon.binary.table import GSCAN
from gmpmon.errors import TargetMemoryError

Read = Callable[[int, int], bytes]
Tids = frozenset[int] | Callable[[], frozenset[int] | None] | None
GROUPS: tuple[str, ...] = ("procs", "sched", "allgs", "allm")
GC_GROUP = "gc"
MAX_GOGC = 1 << 30  # GOGC is an int32 percentage; -1 is "off"
MAX_PROCS = 1024
MAX_GS = 1 << 24
SAMPLE_GS = 256  # goroutines looked at in allgs (from the start: the oldest)
P_STATUS_MAX = 4  # _Pdead
SCHEDT_GOIDGEN = 0  # schedt's first field in 1.19-1.27 (runtime2.go; DWARF-checked in tests)
ATTEMPTS = 20  # a busy target's P states move under the reads: retry, a wrong layout never holds
# The pause between attempts doubles up to this (~0.7 s in all): on an overloaded host an M
# the kernel holds between pidleget and acquirep keeps an idle-status P out of sched.npidle
# for tens of ms (Prometheus under wrk beside 4 busy loops on 2 CPUs: 1 in ~500 checks failed
# 20 attempts 1 ms apart, and that capture ran without runtime counters).
MAX_PAUSE_S = 0.05
PER_P_TRIES = 5  # and each P on its own within an attempt (64 busy Ps are never all still)
PAUSE_S = 0.001


class Failed(Exception):
    """One check did not hold; the message names it."""


class Missing(Failed):
    """A global the checks need was not found: nothing could be checked."""


class Moving(Failed):
    """A running P's M or curg read in the middle of a hand-off (dropg clears g.m before
    m.curg; an M releases its P before the P's m). Such a P proves nothing either way."""


@dataclass(frozen=True, slots=True)
class Layout:
    """Which groups of globals/offsets hold on the live process, and the first failed check
    of each group that does not."""

    failed: dict[str, str] = field(default_factory=dict)  # group -> check that failed
    unchecked: frozenset[str] = frozenset()  # failed groups whose globals were not found
    gomaxprocs: int | None = None  # read and checked (procs group passed)
    source: str = ""  # where the offsets came from, for the message

    def ok(self, *groups: str) -> bool:
        return not any(g in self.failed for g in (groups or GROUPS))

    def why(self, *groups: str) -> str:
        """One line naming the failed check, "" when every group asked for holds."""
        for g in groups or GROUPS:
            if g in self.failed:
                return f"{FAILED_PREFIX}{self.failed[g]} [{self.source}]"
        return ""


class _Mem:
    def __init__(self, read: Read) -> None:
        self._read = read

    def bytes(self, addr: int, n: int, what: str) -> bytes:
        if not 0 < addr < 1 << 48:
            raise Failed(f"{what} is not a user address ({addr:#x})")
        try:
            b = self._read(addr, n)
        except TargetMemoryError as e:
            raise Failed(f"{what} at {addr:#x} cannot be read ({e})") from None
        except OSError as e:
            raise Failed(f"{what} at {addr:#x} cannot be read ({e.strerror or e})") from None
        if len(b) < n:
            raise Failed(f"{what} at {addr:#x} cannot be read (short read)")
        return b

    def u64(self, addr: int, what: str) -> int:
        v: int = struct.unpack("<Q", self.bytes(addr, 8, what))[0]
        return v

    def u32(self, addr: int, what: str) -> int:
        v: int = struct.unpack("<I", self.bytes(addr, 4, what))[0]
        return v

    def i32(self, addr: int, what: str) -> int:
        v: int = struct.unpack("<i", self.bytes(addr, 4, what))[0]
        return v


def _need(cond: bool, check: str) -> None:
    if not cond:
        raise Failed(check)


def _moving(cond: bool, check: str) -> None:
    if not cond:
        raise Moving(check)


class _Checks:
    def __init__(self, info: BinaryInfo, read: Read, tids: Tids) -> None:
        self.info = info
        self._list_tids = tids if callable(tids) else None
        self.tids = tids() if callable(tids) else tids
        self.m = _Mem(read)
        self.o = info.offsets
        self.gomaxprocs: int | None = None
        self.goidgen: int | None = None

    def addr(self, name: str) -> int:
        a = self.info.globals.get(name)
        if a is None:
            why = self.info.globals_missing.get(name, "")
            if why.startswith(FAILED_PREFIX):  # dropped by trusted(): it failed this check
                raise Failed(why.removeprefix(FAILED_PREFIX))
            raise Missing(f"{name} was not found in the binary")
        return a + self.info.load_bias

    def off(self, key: str) -> int:
        v = self.o.get(key)
        if v is None:
            raise Failed(f"no offset for {key}")
        return v

    def procs(self) -> None:
        m = self.m
        n = m.i32(self.addr("runtime.gomaxprocs"), "gomaxprocs")
        _need(1 <= n <= MAX_PROCS, f"1 <= gomaxprocs <= {MAX_PROCS} (read {n})")
        ptr = m.u64(self.addr("runtime.allp"), "allp")
        ln = m.u64(self.addr("runtime.allp") + 8, "len(allp)")
        cap = m.u64(self.addr("runtime.allp") + 16, "cap(allp)")
        _need(ln == n, f"len(allp) == gomaxprocs (read {ln} and {n})")
        _need(cap >= ln, f"cap(allp) >= len(allp) (read {cap} < {ln})")
        ps = struct.unpack(f"<{n}Q", m.bytes(ptr, 8 * n, "allp's array"))
        held = 0  # running Ps whose M and curg links all held
        moving: list[Moving] = []
        for i, pp in enumerate(ps):
            # A busy P moves between the reads of one pass (its curg just descheduled, its M
            # just handed off): each P gets a few passes of its own, so that 64 busy Ps do not
            # need one instant when all of them read consistent. On 2 CPUs most of 64 Ms are
            # off-CPU, each frozen where the kernel stopped it, and one of them can be frozen
            # mid-hand-off for all the passes (CI: "m.curg.m == m for allp[37]'s M (read
            # 0x0)"): such a P is set aside, and the pass holds if most running Ps held. A
            # wrong offset fails every running P, so it never holds.
            for k in range(PER_P_TRIES):
                try:
                    held += self._one_p(i, pp)
                    break
                except Moving as e:
                    if k + 1 == PER_P_TRIES:
                        moving.append(e)
                except Failed:
                    if k + 1 == PER_P_TRIES:
                        raise
        if moving and held <= len(moving):
            raise moving[0]
        self.gomaxprocs = n

    def _one_p(self, i: int, pp: int) -> bool:
        """Check allp[i]; True if it is a running P whose M and curg links were checked."""
        m, o = self.m, self.off
        _need(pp != 0, f"allp[{i}] != nil")
        pid = m.i32(pp + o("runtime.p.id"), f"allp[{i}].id")
        _need(pid == i, f"allp[{i}].id == {i} (read {pid})")
        st = m.u32(pp + o("runtime.p.status"), f"allp[{i}].status")
        _need(st <= P_STATUS_MAX, f"allp[{i}].status in 0..{P_STATUS_MAX} (read {st})")
        head = m.u32(pp + o("runtime.p.runqhead"), f"allp[{i}].runqhead")
        tail = m.u32(pp + o("runtime.p.runqtail"), f"allp[{i}].runqtail")
        runq = (tail - head) & 0xFFFFFFFF
        _need(runq <= 256, f"allp[{i}] runqtail - runqhead <= 256 (read {runq})")
        mp = m.u64(pp + o("runtime.p.m"), f"allp[{i}].m")
        if st == 0:
            _need(mp == 0, f"an idle P has no M (allp[{i}].m read {mp:#x})")
        if st != 1 or mp == 0:
            return False
        self._thread(mp, f"allp[{i}].m")
        back = m.u64(mp + o("runtime.m.p"), f"allp[{i}].m.p")
        _moving(back == pp, f"a running P's m.p points back to it (allp[{i}]: read {back:#x})")
        g0 = m.u64(mp + o("runtime.m.g0"), f"allp[{i}].m.g0")
        _need(g0 != 0, f"allp[{i}].m.g0 != nil")
        g0m = m.u64(g0 + o("runtime.g.m"), f"allp[{i}].m.g0.m")
        _need(g0m == mp, f"g0.m.g0 == g0 for allp[{i}]'s M (g0.m read {g0m:#x})")
        gp = m.u64(mp + o("runtime.m.curg"), f"allp[{i}].m.curg")
        if gp:
            gm = m.u64(gp + o("runtime.g.m"), f"allp[{i}].m.curg.m")
            _moving(gm == mp, f"m.curg.m == m for allp[{i}]'s M (read {gm:#x})")
            gst = m.u32(gp + o("runtime.g.atomicstatus"), "curg.atomicstatus") & ~GSCAN
            if gst in (1, 4):
                # runnable or waiting with m.curg still set: goschedImpl / park_m between
                # casgstatus and dropg. On a loaded host the kernel can hold the M there for
                # every pass (Prometheus and Caddy under wrk at load 70 on 2 CPUs): its links
                # held; its curg's status is neither for nor against the layout.
                return False
            # running, or in a syscall (1.26+ keeps the P running through one)
            _moving(gst in (2, 3), f"a running P's curg is running (allp[{i}]: read {gst})")
        return True

    def _thread(self, mp: int, what: str, *, new_ok: bool = False) -> None:
        """m.procid is one of the process's threads. The list is read again when a tid is
        not in it (a busy runtime starts threads while it is checked). ``new_ok``: an M
        linked into allm before its thread ran minit has procid 0 for a moment."""
        known = self.tids
        if known is None:
            return
        tid = self.m.u64(mp + self.off("runtime.m.procid"), f"{what}.procid")
        if new_ok and tid == 0:
            return
        if tid not in known and self._list_tids is not None:
            known = self.tids = self._list_tids() or known
        _need(tid in known, f"{what}.procid is a thread of the process (read {tid})")

    def sched(self) -> None:
        m, o = self.m, self.off
        base = self.addr("runtime.sched")
        goidgen = m.u64(base + SCHEDT_GOIDGEN, "sched.goidgen")
        _need(0 < goidgen < 1 << 48, f"0 < sched.goidgen < 2^48 (read {goidgen})")
        npidle = m.i32(base + o("runtime.schedt.npidle"), "sched.npidle")
        nms = m.i32(base + o("runtime.schedt.nmspinning"), "sched.nmspinning")
        limit = self.gomaxprocs or MAX_PROCS
        _need(0 <= npidle <= limit, f"0 <= sched.npidle <= {limit} (read {npidle})")
        _need(0 <= nms <= limit, f"0 <= sched.nmspinning <= {limit} (read {nms})")
        rq = self.o.get("runtime.schedt.runqsize")
        if rq is not None:
            size = m.i32(base + rq, "sched.runqsize")
            _need(0 <= size < MAX_GS, f"0 <= sched runq size < 2^24 (read {size})")
        if self.gomaxprocs is not None:
            # npidle moves while allp is counted: it must equal the count read just before or
            # just after it, in one of a few tries.
            for k in range(PER_P_TRIES):
                idle = self._idle_ps()
                again = m.i32(base + o("runtime.schedt.npidle"), "sched.npidle")
                if idle in (npidle, again):
                    break
                _need(k + 1 < PER_P_TRIES,
                      f"sched.npidle == the number of idle Ps (read {npidle}, {idle})")
                npidle = again
        self.goidgen = goidgen

    def _idle_ps(self) -> int:
        m, o = self.m, self.off
        ptr = m.u64(self.addr("runtime.allp"), "allp")
        n = self.gomaxprocs or 0
        ps = struct.unpack(f"<{n}Q", m.bytes(ptr, 8 * n, "allp's array"))
        return sum(1 for pp in ps if m.u32(pp + o("runtime.p.status"), "p.status") == 0)

    def allgs(self) -> None:
        m, o = self.m, self.off
        ptr = m.u64(self.addr("runtime.allgs"), "allgs")
        ln = m.u64(self.addr("runtime.allgs") + 8, "len(allgs)")
        cap = m.u64(self.addr("runtime.allgs") + 16, "cap(allgs)")
        glen = m.u64(self.addr("runtime.allglen"), "allglen")
        _need(1 <= glen <= MAX_GS, f"1 <= allglen <= 2^24 (read {glen})")
        _need(glen <= ln <= cap, f"allglen <= len(allgs) <= cap(allgs) (read {glen}, {ln}, {cap})")
        k = min(glen, SAMPLE_GS)
        gs = struct.unpack(f"<{k}Q", m.bytes(ptr, 8 * k, "allgs' array"))
        dead = self.info.g_status.index("dead") if "dead" in self.info.g_status else 6
        alive = 0
        # allgs[0] is the main goroutine (the first newproc1 after schedinit), goid 1, and
        # alive while the process is: runnable, running, in a syscall or waiting.
        main_goid = m.u64(gs[0] + o("runtime.g.goid"), "allgs[0].goid")
        _need(main_goid == 1, f"allgs[0].goid == 1, the main goroutine (read {main_goid})")
        main_st = m.u32(gs[0] + o("runtime.g.atomicstatus"), "allgs[0].atomicstatus") & ~GSCAN
        _need(1 <= main_st <= 4, f"the main goroutine's status in 1..4 (read {main_st})")
        for i, gp in enumerate(gs):
            _need(gp != 0, f"allgs[{i}] != nil")
            st = m.u32(gp + o("runtime.g.atomicstatus"), f"allgs[{i}].atomicstatus") & ~GSCAN
            _need(st < len(self.info.g_status), f"allgs[{i}]'s status in range (read {st})")
            goid = m.u64(gp + o("runtime.g.goid"), f"allgs[{i}].goid")
            if self.goidgen is not None and goid > self.goidgen:
                # a P took a new batch of goids since goidgen was read (one in ~50 checks
                # of Prometheus under wrk): the goid must be under goidgen read after it
                self.goidgen = m.u64(self.addr("runtime.sched") + SCHEDT_GOIDGEN,
                                     "sched.goidgen")
                _need(goid <= self.goidgen, f"allgs[{i}].goid <= sched.goidgen (read {goid})")
            alive += st != dead
        _need(alive >= 1, "at least one goroutine in allgs is not dead")

    def allm(self) -> None:
        m, o = self.m, self.off
        mp = m.u64(self.addr("runtime.allm"), "allm")
        _need(mp != 0, "allm != nil")
        g0 = m.u64(mp + o("runtime.m.g0"), "allm.g0")
        _need(g0 != 0, "allm.g0 != nil")
        g0m = m.u64(g0 + o("runtime.g.m"), "allm.g0.m")
        _need(g0m == mp, f"g0.m.g0 == g0 for allm (g0.m read {g0m:#x}, allm {mp:#x})")
        self._thread(mp, "allm", new_ok=True)
        pp = m.u64(mp + o("runtime.m.p"), "allm.p")
        if pp:
            back = m.u64(pp + o("runtime.p.m"), "allm.p.m")
            _need(back == mp, f"allm.p.m == allm (read {back:#x})")
        gp = m.u64(mp + o("runtime.m.curg"), "allm.curg")
        if gp:
            gm = m.u64(gp + o("runtime.g.m"), "allm.curg.m")
            _need(gm in (mp, 0), f"allm.curg.m == allm (read {gm:#x})")

    def gc(self) -> None:
        """numgc (memstats) and cycles (work) count the same cycles: a cycle is counted in
        work.cycles at gcStart and in numgc at mark termination, so 0 <= cycles - numgc <= 1
        (read numgc on both sides of cycles: a cycle may end in between). GOGC is -1 or a
        percentage, GOMEMLIMIT positive, the GOGC goal at least the marked heap."""
        m, o = self.m, self.off
        ms = self.addr("runtime.memstats")
        gc = self.addr("runtime.gcController")
        work = self.addr("runtime.work")
        numgc_at = ms + o("runtime.mstats.numgc")
        n0 = m.u32(numgc_at, "memstats.numgc")
        cycles = m.u32(work + o("runtime.workType.cycles"), "work.cycles")
        n1 = m.u32(numgc_at, "memstats.numgc")
        _need(any(0 <= cycles - n <= 1 for n in (n0, n1)),
              f"memstats.numgc <= work.cycles <= numgc + 1 (read {n0}, {cycles})")
        pct = m.i32(gc + o("runtime.gcControllerState.gcPercent"), "gcController.gcPercent")
        _need(-1 <= pct < MAX_GOGC, f"gcController.gcPercent (GOGC) >= -1 (read {pct})")
        lim = struct.unpack("<q", m.bytes(
            gc + o("runtime.gcControllerState.memoryLimit"), 8, "gcController.memoryLimit"))[0]
        _need(lim > 0, f"gcController.memoryLimit (GOMEMLIMIT) > 0 (read {lim})")
        marked = m.u64(gc + o("runtime.gcControllerState.heapMarked"), "gcController.heapMarked")
        goal = m.u64(gc + o("runtime.gcControllerState.gcPercentHeapGoal"),
                     "gcController.gcPercentHeapGoal")
        _need(marked < 1 << 48, f"gcController.heapMarked < 2^48 (read {marked})")
        if pct >= 0 and n1:
            _need(goal >= marked, f"gcPercentHeapGoal >= heapMarked (read {goal}, {marked})")


FAILED_PREFIX = "layout check failed: "
# What reads each group's globals (for the one line that says what is off).
GROUP_READERS: dict[str, str] = {
    "procs": "memory sampler, runtime counters, GOMAXPROCS from memory",
    "sched": "memory sampler, runtime counters, global runq",
    "allgs": "goroutine census",
    "allm": "per-M lock waits",
    "gc": "GC and heap panel",
}
# The globals each group vouches for: a failed group makes them untrusted.
GROUP_GLOBALS: dict[str, tuple[str, ...]] = {
    "procs": ("runtime.allp", "runtime.gomaxprocs"),
    "sched": ("runtime.sched",),
    "allgs": ("runtime.allgs", "runtime.allglen"),
    "allm": ("runtime.allm",),
    "gc": ("runtime.memstats", "runtime.gcController", "runtime.work"),
}


def trusted(info: BinaryInfo, layout: Layout) -> BinaryInfo:
    """``info`` without the globals whose checks failed on the process (their readers then
    see them as absent, with the failed check in ``globals_missing``), and the first failure
    as ``missing_optional["layout"]``."""
    if layout.ok():
        return info
    globals_ = dict(info.globals)
    missing = dict(info.globals_missing)
    for group, why in layout.failed.items():
        for g in GROUP_GLOBALS.get(group, ()):
            if g in globals_:
                del globals_[g]
                missing[g] = FAILED_PREFIX + why
    return dataclasses.replace(
        info,
        globals=globals_,
        globals_missing=missing,
        missing_optional={
            **info.missing_optional,
            "layout": layout.why()
            + "; off: "
            + ", ".join(dict.fromkeys(
                r.strip() for g in layout.failed for r in GROUP_READERS[g].split(",")
            )),
        },
    )


def describe_source(info: BinaryInfo) -> str:
    how = {info.global_how.get(g, "").split(" ")[0] for g in info.globals}
    where = "/".join(sorted(h for h in how if h)) or "nowhere"
    return f"globals: {where}; offsets: {offsets_origin(info)}"


def offsets_origin(info: BinaryInfo) -> str:
    """"dwarf", "table go1.22", or "table go1.27 (newest)" for a newer Go without DWARF."""
    if info.offsets_source == "dwarf":
        return "dwarf"
    t = info.offsets_table or f"1.{info.go_minor}"
    if t != f"1.{info.go_minor}":
        return f"table go{t} (newest)"
    return f"table go{t}"


def validate_layout(
    info: BinaryInfo,
    read: Read,
    *,
    groups: tuple[str, ...] = GROUPS,
    tids: Tids = None,
    attempts: int = ATTEMPTS,
    pause_s: float = PAUSE_S,
) -> Layout:
    """Run the checks of ``groups`` on the live process behind ``read`` (runtime addresses;
    link-time globals get ``info.load_bias`` added here). ``tids``: the process's thread ids
    (/proc/PID/task), or a function that lists them now, to check m.procid; None skips
    that check."""
    failed: dict[str, str] = {}
    unchecked: set[str] = set()
    gomaxprocs: int | None = None
    for group in groups:
        why = ""
        missing = False
        for attempt in range(attempts):
            c = _Checks(info, read, tids)
            try:
                if group != "procs":
                    # sched and allgs cross-check against P states / goidgen when they hold.
                    try:
                        c.procs()
                    except Failed:
                        c.gomaxprocs = None
                    if group == "allgs":
                        try:
                            c.sched()
                        except Failed:
                            c.goidgen = None
                getattr(c, group)()
            except Failed as e:
                why = str(e)
                missing = isinstance(e, Missing)
                if missing:
                    break
                if attempt + 1 < attempts:
                    time.sleep(min(pause_s * 2**attempt, MAX_PAUSE_S))
                continue
            why = ""
            if group == "procs":
                gomaxprocs = c.gomaxprocs
            break
        if why:
            failed[group] = why
            if missing:
                unchecked.add(group)
    return Layout(
        failed=failed,
        unchecked=frozenset(unchecked),
        gomaxprocs=gomaxprocs,
        source=describe_source(info),
    )
