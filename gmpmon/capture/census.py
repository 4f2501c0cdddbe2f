"""The goroutine census: a walk of ``runtime.allgs`` in the target's memory, at <= 1 Hz.

A goroutine profile without the target's help: every G's status and wait reason, how long it
has waited (``g.waitsince``: the runtime sets it at the GC's first stack scan after the park,
so only goroutines parked across a GC have one), and where it was created (``g.gopc``, the
``go`` statement, and ``g.startpc``, its function; symbolized with the binary's pclntab).

Bounded: at most ``max_goroutines`` visited and ``budget_s`` of this thread's CPU time spent
per walk (and ``wall_s`` of wall time); the G structs are read in chunks of nearby addresses
(they come from the same size-class spans), a few preads for thousands of goroutines. The
budget is CPU time, not wall time: beside 64 busy target threads on 2 CPUs a 1-s wall budget
cut the walk at ~81k of 100k goroutines while it had used 0.2 s of CPU; the walks are spaced
so that their CPU stays under the census duty (capture/runtime_sources.py), and a walk runs
at nice -15: at nice 0 beside the scale workload at 1M goroutines (load 70 on 2 CPUs) it got
0.44 s of CPU in 63 s. A walk cut short says why (CENSUS_END flags) and keeps what it
counted, also when the target exits mid-walk. System goroutines (start function in
``runtime.``, as ``isSystemGoroutine`` decides) are counted apart, as NumGoroutine does.

Per goroutine, only news: a CENSUS_G names the go site (capture/gosites.py) and the state
(status, wait reason) of each goroutine not told before or whose state changed since (at most
``MAX_TOLD`` tracked), and says which ones left since the last complete walk, so a steady
program costs the recording nothing after its first census; the model keeps each goroutine's
state as of the newest walk (the Goroutines table's rows).
"""

from __future__ import annotations

import struct
import time

from gmpmon.binary.info import BinaryInfo
from gmpmon.binary.table import GSCAN
from gmpmon.capture.censusstacks import Shape, Unwind, WaitStacks
from gmpmon.capture.gosites import GoSites
from gmpmon.capture.runtime_counters import absent, global_addr
from gmpmon.capture.targetmem import (
    MAX_GOROUTINES,
    Skips,
    TargetMemory,
    check_count,
    running,
    unreadable,
    why_span,
)
from gmpmon.errors import GmpmonError, TargetMemoryError
from gmpmon.events import (
    CENSUS_G_STATE,
    CENSUS_SITE_BASE,
    MAX_STACK_GROUPS,
    NO_P,
    UNKNOWN_FRAME,
    CensusCut,
    EventTuple,
    Kind,
    RtFeature,
    unknown_frame,
)

CHUNK = 64 * 1024
MAX_SITES = 200
MAX_TOLD = 100_000  # goroutines whose site and state the model is told (it keeps as many)
G_DEAD = 6
# isSystemGoroutine: runtime.* start functions, except these user-facing ones.
_USER_RUNTIME = frozenset({"runtime.main", "runtime.corostart", "runtime.handleAsyncEvent"})

Key = tuple[int, int, int]  # (status, wait reason, system)
# Parked goroutines by (wait reason, startpc, sched.pc, stack.hi - sched.sp,
# stack.hi - sched.bp, gopc): one tuple and one dict lookup per G; the stack of each shape is
# found (cached, or unwound) once per group at the end of the walk.
GroupKey = tuple[int, int, int, int, int, int]
# [n, waited, wait sum, wait max, and one G of the group: gp, sched pc, sp, bp, stack lo, hi,
# then what CENSUS_G tells of each of its goroutines: the code told (-1: not yet made this
# walk), gopc, startpc, state key]
Group = list[int]
G_TOLD = 10
STATE_MASK = (1 << 33) - 1  # of a told code: the state key (the go site above it)
G_WAITING = 4
G_STACK = 0  # g.stack{lo, hi}: g's first field in every Go version ("offset known to cgo")


class Census:
    """CENSUS_* events from one target's memory. ``walk()`` every second or so."""

    def __init__(
        self,
        info: BinaryInfo,
        mem: TargetMemory,
        *,
        max_goroutines: int = 4_000_000,
        budget_s: float = 5.0,
        wall_s: float = 60.0,
        sites: GoSites | None = None,
        unwind: Unwind | None = None,
    ) -> None:
        self.info = info
        self.sites = sites
        self._told: dict[int, int] = {}  # goid -> go site << 33 | state key, as told
        self.mem = mem
        self.max_goroutines = max_goroutines
        self.budget_s = budget_s
        self.wall_s = wall_s
        self.missing: dict[RtFeature, str] = {}
        self.allgs = global_addr(info, "runtime.allgs")
        if self.allgs is None:
            self.missing[RtFeature.CENSUS] = absent(info, "runtime.allgs")
        o = info.offsets
        fields = {
            "goid": ("Q", o["runtime.g.goid"]),
            "status": ("I", o["runtime.g.atomicstatus"]),
            "reason": ("B", o["runtime.g.waitreason"]),
        }
        for name, key, fmt in (
            ("since", "runtime.g.waitsince", "q"),
            ("gopc", "runtime.g.gopc", "Q"),
            ("startpc", "runtime.g.startpc", "Q"),
        ):
            if key in o:
                fields[name] = (fmt, o[key])
        if "since" not in fields:
            self.missing[RtFeature.CENSUS_WAIT] = "no g.waitsince offset"
        if "gopc" not in fields or "startpc" not in fields:
            self.missing[RtFeature.CENSUS_SITES] = "no g.gopc/startpc offsets"
        # Wait stacks: g.sched's saved registers and the stack bounds, unwound by ``unwind``.
        self.wait_stacks: WaitStacks | None = None
        sched = ("runtime.g.sched.pc", "runtime.g.sched.sp", "runtime.g.sched.bp")
        if unwind is None:
            self.missing[RtFeature.CENSUS_STACKS] = "no stack unwinder for this binary"
        elif not all(k in o for k in sched) or "startpc" not in fields:
            self.missing[RtFeature.CENSUS_STACKS] = "no g.sched offsets"
        else:
            self.wait_stacks = WaitStacks(unwind)
            fields["stack_lo"] = ("Q", G_STACK)
            fields["stack_hi"] = ("Q", G_STACK + 8)
            fields["spc"] = ("Q", o["runtime.g.sched.pc"])
            fields["ssp"] = ("Q", o["runtime.g.sched.sp"])
            fields["sbp"] = ("Q", o["runtime.g.sched.bp"])
        order = sorted(fields.items(), key=lambda kv: kv[1][1])
        fmt, pos = "<", order[0][1][1]
        self.g_lo = pos
        for _name, (code, off) in order:
            fmt += f"{off - pos}x{code}" if off > pos else code
            pos = off + struct.calcsize("<" + code)
        self._g = struct.Struct(fmt)
        self.g_span = pos - self.g_lo
        self._names = [name for name, _ in order]
        self.seq = 0
        self._site_ids: dict[tuple[str, str], int] = {}
        self._func_cache: dict[int, str] = {}
        self.last_duration_s = 0.0
        self.target_gone = False  # the last walk found the target gone
        self.last_cpu_s = 0.0  # CPU time of the last walk (the wall time includes waits)
        self._announced = False
        self._walked = 0  # G structs read in this walk (dead ones included)
        self._scanned = 0  # allgs entries done
        # allgs entries whose G could not be read (outside user space, no mapped page): the
        # walk goes on without them; counted per walk (CENSUS_END m) and for the report.
        self.skips = Skips()
        self._skipped = 0

    def missing_events(self, now: int) -> list[EventTuple]:
        return [(now, Kind.RT_MISSING, NO_P, 0, 0, int(f), 0) for f in sorted(self.missing)]

    def walk(self, out: list[EventTuple], stacks: dict[int, tuple[str, ...]]) -> None:
        """Append one census (CENSUS_BEGIN ... CENSUS_END); new creation-site names go into
        ``stacks``. Never raises for a target that exits mid-walk: the END says so.
        Raises TargetMemoryError for an implausible pointer or length in the target."""
        if self.wait_stacks is not None:
            self.wait_stacks.prepare()
        t0 = time.monotonic_ns()
        cpu0 = time.thread_time()
        if not self._announced:
            out.extend(self.missing_events(t0))
            self._announced = True
        if self.allgs is None:
            return
        self.seq += 1
        deadline = (time.thread_time() + self.budget_s, time.monotonic() + self.wall_s)
        counts: dict[Key, int] = {}
        waits: dict[Key, list[int]] = {}  # [n, sum, max]
        sites: dict[tuple[int, int], int] = {}
        per_g: dict[int, tuple[int, int]] = {}  # goid -> (gopc, startpc), live ones
        keys: dict[int, Key] = {}  # goid -> (status, reason, system), the same ones
        grouped: dict[int, Group] = {}  # goid -> its group: parked user goroutines
        groups: dict[GroupKey, Group] = {}
        if self.wait_stacks is not None:
            self.wait_stacks.begin()
        cut = 0
        self._walked = self._skipped = 0
        try:
            ptr, n = struct.unpack("<QQ", self.mem.read(self.allgs, 16))
        except OSError:
            ptr, n, cut = 0, 0, CensusCut.TARGET_GONE
        check_count("len(allgs)", n, MAX_GOROUTINES)  # else the census stops, and says why
        out.append((t0, Kind.CENSUS_BEGIN, NO_P, 0, 0, self.seq, n))
        if n > self.max_goroutines:
            cut |= CensusCut.LIMIT
            n = self.max_goroutines
        if not cut & CensusCut.TARGET_GONE:
            try:
                gps = self._pointers(ptr, n)
                self._scan(gps, t0, deadline, counts, waits, sites, (per_g, keys, grouped),
                           groups)
                if self._scanned < len(gps):
                    cut |= CensusCut.TIME
            except OSError:
                cut |= CensusCut.TARGET_GONE
        self._fold_groups(groups, counts, waits, sites)
        walked = self._walked
        t1 = time.monotonic_ns()
        self._emit(t1, counts, waits, sites, out, stacks)
        self._emit_groups(t1, groups, out, stacks)
        self._tell(t1, per_g, keys, grouped, bool(cut), out)
        out.append((t1, Kind.CENSUS_END, NO_P, self._skipped, t1 - t0, walked, int(cut)))
        self.last_duration_s = (t1 - t0) / 1e9
        self.last_cpu_s = time.thread_time() - cpu0
        self.target_gone = bool(cut & CensusCut.TARGET_GONE)

    def _pointers(self, ptr: int, n: int) -> list[int]:
        gps: list[int] = []
        step = CHUNK // 8
        for i in range(0, n, step):
            k = min(step, n - i)
            try:
                gps.extend(struct.unpack(f"<{k}Q", self.mem.read(ptr + 8 * i, 8 * k)))
            except OSError as e:  # allgs' array is unmapped: nothing to walk (or gone)
                raise unreadable(self.mem.pid, f"allgs' array at {ptr:#x}", e) from e
        return gps

    def _singles(self, gps: list[int], order: list[int], j: int, k: int) -> list[bytes | None]:
        """G structs order[j..k] one by one (their chunk could not be read whole): the ones
        that cannot be read are skipped and said. OSError when the target is gone."""
        lo, span = self.g_lo, self.g_span
        spans = [(gps[order[i]] + lo, span) for i in range(j, k + 1)]
        got = self.mem.readv(spans)
        if all(b is None for b in got) and not running(self.mem.pid):
            raise ProcessLookupError(f"process {self.mem.pid} is gone")
        for i, b in zip(range(j, k + 1), got, strict=True):
            if b is None and gps[order[i]]:
                self._skipped += 1
                self.skips.add(f"allgs[{order[i]}] = {gps[order[i]]:#x}", why_span(*spans[i - j]))
        return got

    def _scan(
        self,
        gps: list[int],
        now: int,
        deadline: tuple[float, float],
        counts: dict[Key, int],
        waits: dict[Key, list[int]],
        sites: dict[tuple[int, int], int],
        told: tuple[dict[int, tuple[int, int]], dict[int, Key], dict[int, Group]],
        groups: dict[GroupKey, Group],
    ) -> None:
        unpack = self._g.unpack_from
        per_g, keys, grouped = told
        i_goid = self._names.index("goid")
        tell = self.sites is not None
        names = self._names
        i_status = names.index("status")
        i_reason = names.index("reason")
        # Go 1.26+: _Gdeadextra, the idle g of a cgo program's extra M (kept for callbacks
        # from C threads): dead to the runtime (gcount leaves it out), not a goroutine.
        st = self.info.g_status
        extra = "waiting for cgo callback"
        dead_extra = st.index(extra) if extra in st else -1
        i_since = names.index("since") if "since" in names else -1
        i_gopc = names.index("gopc") if "gopc" in names else -1
        i_start = names.index("startpc") if "startpc" in names else -1
        lo, span = self.g_lo, self.g_span
        ws = self.wait_stacks
        if ws is not None:
            i_slo, i_shi = names.index("stack_lo"), names.index("stack_hi")
            i_spc, i_ssp, i_sbp = names.index("spc"), names.index("ssp"), names.index("sbp")
        order = sorted(range(len(gps)), key=gps.__getitem__)
        self._scanned = 0
        j = 0
        system_of: dict[int, int] = {}
        cpu_end, wall_end = deadline
        while j < len(order):
            if time.thread_time() > cpu_end or time.monotonic() > wall_end:
                break
            first = gps[order[j]]
            k = j
            while k + 1 < len(order) and gps[order[k + 1]] + lo + span - (first + lo) <= CHUNK:
                k += 1
            if not first:
                j = k + 1
                self._scanned = j
                continue
            singles = None
            try:
                buf = self.mem.read(first + lo, gps[order[k]] - first + span)
            except (OSError, TargetMemoryError):  # a hostile G pointer among them, or gone
                buf, singles = b"", self._singles(gps, order, j, k)
            for idx in range(j, k + 1):
                gp = gps[order[idx]]
                if not gp:
                    continue
                if singles is None:
                    row = unpack(buf, gp - first)
                else:
                    one = singles[idx - j]
                    if one is None:
                        continue
                    row = unpack(one, 0)
                self._walked += 1
                status = row[i_status] & ~GSCAN
                if status in (G_DEAD, dead_extra):
                    continue
                startpc = row[i_start] if i_start >= 0 else 0
                system = system_of.get(startpc)
                if system is None:
                    name = self._func(startpc)
                    system = int(name.startswith("runtime.") and name not in _USER_RUNTIME)
                    system_of[startpc] = system
                reason = row[i_reason] if status == 4 else 0
                if ws is not None and status == G_WAITING and not system:
                    # A parked user goroutine: its group counts it for the states, waits and
                    # sites too (folded in by _fold_groups), one dict update instead of four.
                    hi, spc, ssp, sbp = row[i_shi], row[i_spc], row[i_ssp], row[i_sbp]
                    gopc = row[i_gopc] if i_gopc >= 0 else 0
                    gkey = (reason, startpc, spc, hi - ssp, hi - sbp, gopc)
                    acc = groups.get(gkey)
                    if acc is None:
                        acc = groups[gkey] = [0, 0, 0, 0, gp, spc, ssp, sbp, row[i_slo], hi,
                                              -1, gopc, startpc, G_WAITING | reason << 16]
                    acc[0] += 1
                    if i_since >= 0 and row[i_since] > 0:
                        w = max(now - row[i_since], 0)
                        acc[1] += 1
                        acc[2] += w
                        if w > acc[3]:
                            acc[3] = w
                    if tell and i_gopc >= 0 and len(per_g) + len(grouped) < MAX_TOLD:
                        grouped[row[i_goid]] = acc  # its site and state are the group's
                    continue
                key = (status, reason, system)
                counts[key] = counts.get(key, 0) + 1
                if i_since >= 0 and row[i_since] > 0:
                    w = max(now - row[i_since], 0)
                    acc = waits.get(key)
                    if acc is None:
                        waits[key] = [1, w, w]
                    else:
                        acc[0] += 1
                        acc[1] += w
                        if w > acc[2]:
                            acc[2] = w
                if i_gopc >= 0:
                    site = (row[i_gopc], startpc)
                    if not system:
                        sites[site] = sites.get(site, 0) + 1
                    if tell and len(per_g) + len(grouped) < MAX_TOLD:
                        per_g[row[i_goid]] = site
                        keys[row[i_goid]] = key
            j = k + 1
            self._scanned = j

    def _func(self, pc: int) -> str:
        name = self._func_cache.get(pc)
        if name is None:
            found = self.info.functab.lookup(pc - self.info.load_bias) if pc else None
            name = found or unknown_frame(pc)
            self._func_cache[pc] = name
        return name

    def _emit(
        self,
        ts: int,
        counts: dict[Key, int],
        waits: dict[Key, list[int]],
        sites: dict[tuple[int, int], int],
        out: list[EventTuple],
        stacks: dict[int, tuple[str, ...]],
    ) -> None:
        for key in sorted(counts):
            status, reason, system = key
            a0 = status | reason << 16 | system << 32
            out.append((ts, Kind.CENSUS_STATE, NO_P, 0, 0, a0, counts[key]))
            acc = waits.get(key)
            if acc is not None:
                out.append((ts, Kind.CENSUS_WAIT, NO_P, acc[0], acc[1], a0, acc[2]))
        by_name: dict[tuple[str, str], int] = {}
        for (gopc, startpc), c in sites.items():
            # gopc is the return address of the call in the go statement: stay inside it.
            name = self._site_name(gopc, startpc)
            by_name[name] = by_name.get(name, 0) + c
        top = sorted(by_name.items(), key=lambda kv: (-kv[1], kv[0]))[:MAX_SITES]
        for name, c in top:
            out.append((ts, Kind.CENSUS_SITE, NO_P, 0, 0, self._site_id(name, stacks), c))

    def _site_id(self, name: tuple[str, str], stacks: dict[int, tuple[str, ...]]) -> int:
        sid = self._site_ids.get(name)
        if sid is None:
            sid = CENSUS_SITE_BASE + len(self._site_ids) + 1
            self._site_ids[name] = sid
            stacks[sid] = name
        return sid

    def _site_name(self, gopc: int, startpc: int) -> tuple[str, str]:
        if self.sites is not None:  # the function a `go f(x)` wrapper calls, f
            start, creator, _where = self.sites.names(gopc, startpc)
            return (creator, start)
        return (self._func(gopc - 1) if gopc else UNKNOWN_FRAME, self._func(startpc))

    def _fold_groups(self, groups: dict[GroupKey, Group], counts: dict[Key, int],
                     waits: dict[Key, list[int]], sites: dict[tuple[int, int], int]) -> None:
        """The parked user goroutines the scan counted only in their groups, into the
        states, waits and creation sites."""
        has_sites = "gopc" in self._names
        for (reason, startpc, _pc, _dsp, _dbp, gopc), acc in groups.items():
            key = (G_WAITING, reason, 0)
            counts[key] = counts.get(key, 0) + acc[0]
            if acc[1]:
                w = waits.get(key)
                if w is None:
                    waits[key] = [acc[1], acc[2], acc[3]]
                else:
                    w[0] += acc[1]
                    w[1] += acc[2]
                    w[2] = max(w[2], acc[3])
            if has_sites:
                site = (gopc, startpc)
                sites[site] = sites.get(site, 0) + acc[0]

    def _stack_of(self, ws: WaitStacks, shape: Shape, g: Group) -> int:
        """A shape's stack id: cached, or unwound from one G of the group (read again after
        its stack: a G that moved meanwhile does not name the shape's stack)."""
        sid = ws.shapes.get(shape)
        if sid is not None:
            return sid
        gp, pc, sp, bp, lo, hi = g[4:10]
        sid = ws.stack_id(shape, pc, sp, bp, lo, hi)
        try:
            again = self._g.unpack(self.mem.read(gp + self.g_lo, self.g_span))
        except (OSError, GmpmonError):
            return ws.moved(shape)
        names = self._names
        if ((again[names.index("status")] & ~GSCAN) != G_WAITING
                or (again[names.index("spc")], again[names.index("ssp")]) != (pc, sp)):
            return ws.moved(shape)
        return sid

    def _emit_groups(self, ts: int, groups: dict[GroupKey, Group],
                     out: list[EventTuple], stacks: dict[int, tuple[str, ...]]) -> None:
        """CENSUS_STACK (+ CENSUS_STACK_WAIT) for the largest groups of parked goroutines."""
        ws = self.wait_stacks
        if ws is None:
            return
        merged: dict[tuple[Key, int, int], list[int]] = {}  # by stack and creation-site name
        # The largest groups first: the unwinds a walk may do go to them.
        for gkey, acc in sorted(groups.items(), key=lambda kv: -kv[1][0]):
            reason, startpc, spc, dsp, dbp, gopc = gkey
            key = (G_WAITING, reason, 0)
            sid = self._stack_of(ws, (startpc, spc, dsp, dbp), acc)
            name = self._site_name(gopc, startpc) if gopc else None
            # The main goroutine has no go statement (Go's dump prints no "created by").
            site = self._site_id(name, stacks) if name and name[1] != "runtime.main" else 0
            m = merged.get((key, sid, site))
            if m is None:
                merged[(key, sid, site)] = acc[:4]
            else:
                m[0] += acc[0]
                m[1] += acc[1]
                m[2] += acc[2]
                m[3] = max(m[3], acc[3])
        stacks.update(ws.take())
        top = sorted(merged.items(), key=lambda kv: (-kv[1][0], kv[0]))[:MAX_STACK_GROUPS]
        for ((status, reason, system), sid, site), (n, waited, wsum, wmax) in top:
            a0 = status | reason << 16 | system << 32
            rel = site - CENSUS_SITE_BASE if site else 0
            out.append((ts, Kind.CENSUS_STACK, NO_P, rel, sid, a0, n))
            if waited:
                out.append((ts, Kind.CENSUS_STACK_WAIT, NO_P, waited, wsum, 0, wmax))

    def _tell(self, ts: int, per_g: dict[int, tuple[int, int]], keys: dict[int, Key],
              grouped: dict[int, Group], cut: bool, out: list[EventTuple]) -> None:
        """CENSUS_G for goroutines new since the last walk (or whose site or state changed),
        and for those gone since (only after a complete walk: a cut one did not see them all)."""
        if self.sites is None:
            return
        told = self._told
        now: dict[int, int] = {}
        by_pair: dict[tuple[int, int], dict[Key, int]] = {}
        sid_of = self.sites.sid
        # One int per goroutine, its site and state, made once per site and state (per group
        # for the parked ones): a new tuple or int per goroutine cost the walk 20-40% more CPU
        # at 100k goroutines.
        for goid, pair in per_g.items():
            codes = by_pair.get(pair)
            if codes is None:
                codes = by_pair[pair] = {}
            key = keys[goid]
            was = codes.get(key)
            if was is None:
                was = codes[key] = sid_of(*pair) << 33 | key[0] | key[1] << 16 | key[2] << 32
            now[goid] = was
            if told.get(goid) != was:
                out.append((ts, Kind.CENSUS_G, NO_P, 0, goid, was >> 33,
                            was & STATE_MASK | CENSUS_G_STATE))
        for goid, acc in grouped.items():
            was = acc[G_TOLD]
            if was < 0:
                was = acc[G_TOLD] = sid_of(acc[G_TOLD + 1], acc[G_TOLD + 2]) << 33 | acc[-1]
            now[goid] = was
            if told.get(goid) != was:
                out.append((ts, Kind.CENSUS_G, NO_P, 0, goid, was >> 33,
                            was & STATE_MASK | CENSUS_G_STATE))
        if cut:
            told.update(now)
            if len(told) > 2 * MAX_TOLD:  # cut walk after cut walk: start telling afresh
                self._told = now
            return
        out.extend((ts, Kind.CENSUS_G, NO_P, 0, goid, 0, 0) for goid in told.keys() - now.keys())
        self._told = now
