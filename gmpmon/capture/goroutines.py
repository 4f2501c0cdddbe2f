"""Every goroutine's stack from outside: a walk of ``runtime.allgs`` and an unwind of each G's
saved registers with the binary's pclntab (gmpmon/binary/unwind.py). The target never stops.

Per goroutine, as the runtime's ``tracebackothers`` does: the G's status and wait reason;
where to start (``g.syscallpc``/``syscallsp`` when set, a G in a syscall; else ``g.sched``);
the stack bytes from sp up to ``g.stack.hi``. All reads are batched (``readv``: a few
process_vm_readv calls for thousands of goroutines). A parked G's stack can move (GC shrinks
it) or the G can run between the reads, so each G's header is read again after its stack:
a G whose status, sched or syscall sp/pc changed is read again (up to ``retries`` times) and
then marked ``changed``. Running goroutines (``_Grunning``) have no saved registers worth
unwinding; they are reported on their P.
"""

from __future__ import annotations

import gc
import operator
import struct
import time
from dataclasses import dataclass, field

from gmpmon.binary.info import BinaryInfo
from gmpmon.binary.table import GSCAN
from gmpmon.binary.unwind import Frame, Unwinder, visible
from gmpmon.capture.runtime_counters import global_addr
from gmpmon.capture.targetmem import (
    MAX_GOROUTINES,
    TargetMemory,
    check_count,
    unreadable,
    why_span,
)
from gmpmon.capture.targetmem import running as target_running
from gmpmon.errors import MissingSymbolsError

G_RUNNING, G_SYSCALL, G_WAITING, G_DEAD = 2, 3, 4, 6
SAMPLED = "sampled"  # Goroutine.unwind of a running G whose stack came from a perf sample
MAX_STACK_READ = 1 << 20  # bytes of one goroutine's stack read at most (deeper: truncated)
_USER_RUNTIME = frozenset({"runtime.main", "runtime.corostart", "runtime.handleAsyncEvent"})
_FIELDS = (  # name, offset key, struct code; optional ones may be absent
    ("lo", "runtime.g.stack.lo", "Q"),
    ("hi", "runtime.g.stack.hi", "Q"),
    ("m", "runtime.g.m", "Q"),
    ("sp", "runtime.g.sched.sp", "Q"),
    ("pc", "runtime.g.sched.pc", "Q"),
    ("syscallsp", "runtime.g.syscallsp", "Q"),
    ("syscallpc", "runtime.g.syscallpc", "Q"),
    ("status", "runtime.g.atomicstatus", "I"),
    ("goid", "runtime.g.goid", "Q"),
    ("since", "runtime.g.waitsince", "q"),
    ("reason", "runtime.g.waitreason", "B"),
    ("lockedm", "runtime.g.lockedm", "Q"),
    ("parent", "runtime.g.parentGoid", "Q"),
    ("gopc", "runtime.g.gopc", "Q"),
    ("startpc", "runtime.g.startpc", "Q"),
)
_REQUIRED = ("lo", "hi", "sp", "pc", "status", "goid", "reason", "syscallsp", "syscallpc")
_CONSISTENT = ("status", "sp", "pc", "syscallsp", "syscallpc")
Row = tuple[int, ...]  # one G's header fields, in the reader's struct order


@dataclass(slots=True)
class Goroutine:
    goid: int
    status: str  # "waiting", "running", ...; the wait reason is apart
    status_code: int
    scan: bool
    wait_reason: str  # "" unless waiting
    wait_ns: int | None  # now - g.waitsince; None when the runtime has not set it
    locked: bool
    system: bool
    frames: list[Frame]  # every logical frame, innermost first (runtime ones included)
    shown: list[Frame]  # those Go's traceback prints (GOTRACEBACK=single)
    unwind: str  # unwind.OK or why the stack is short; "running" for a running G
    changed: bool  # the G moved while its stack was read, on every try
    created_by: Frame | None  # the go statement (physical function, innermost file:line)
    creator: int  # the creating goroutine (1.21+), 0 when unknown
    p: int | None = None  # the P a running goroutine runs on

    @property
    def state(self) -> str:
        """The header's state as Go prints it: the wait reason for a waiting G."""
        return self.wait_reason if self.status_code == G_WAITING and self.wait_reason \
            else self.status


@dataclass(slots=True)
class Dump:
    go_version: str
    goroutines: list[Goroutine] = field(default_factory=list)
    allglen: int = 0
    seconds: float = 0.0
    reads: int = 0
    retried: int = 0
    # allgs entries whose G could not be read (a pointer outside user space or to no mapped
    # page: the target's memory is not trusted); not listed. The first one's reason.
    skipped: int = 0
    skipped_why: str = ""


class GoroutineReader:
    """Reads dumps of one process. ``unwinder`` is built once per binary (its caches make a
    second dump of the same program cheap)."""

    def __init__(self, info: BinaryInfo, mem: TargetMemory, unwinder: Unwinder,
                 retries: int = 3) -> None:
        self.info, self.mem, self.uw, self.retries = info, mem, unwinder, retries
        self.bias = info.load_bias
        allgs = global_addr(info, "runtime.allgs")
        if allgs is None:
            raise MissingSymbolsError(
                f"{info.path}: runtime.allgs not found; cannot list goroutines")
        self.allgs = allgs
        o = info.offsets
        missing = [k for n, k, _c in _FIELDS if n in _REQUIRED and k not in o]
        if missing:
            raise MissingSymbolsError(
                f"{info.path}: no offset for {', '.join(missing)} ({info.go_version})")
        fields = sorted(((o[k], n, c) for n, k, c in _FIELDS if k in o))
        self.lo = fields[0][0]
        fmt, pos = "<", self.lo
        for off, _n, code in fields:
            fmt += (f"{off - pos}x" if off > pos else "") + code
            pos = off + struct.calcsize("<" + code)
        self._g = struct.Struct(fmt)
        self.span = pos - self.lo
        self._names = [n for _o, n, _c in fields]
        # Rows are the unpacked tuples (a dict per G cost ~10% of a 100k dump); when this
        # version lacks an optional field, each row ends with a 0 that stands for it.
        self._pad = len(fields) < len(_FIELDS)
        ix = {n: i for i, n in enumerate(self._names)}
        self._ix = {n: ix.get(n, len(fields)) for n, _k, _c in _FIELDS}
        self._pick = operator.itemgetter(*(self._ix[n] for n in (
            "status", "reason", "since", "startpc", "goid", "gopc", "lockedm", "parent")))
        self._same = operator.itemgetter(*(ix[k] for k in _CONSISTENT))
        (self._i_status, self._i_sp, self._i_pc, self._i_scsp, self._i_scpc, self._i_lo,
         self._i_hi) = (ix[k] for k in ("status", "sp", "pc", "syscallsp", "syscallpc", "lo",
                                         "hi"))
        self._funcs: dict[int, tuple[str, int]] = {}
        self._creators: dict[int, Frame | None] = {}
        self._shown_cache: dict[int, list[Frame]] = {}

    # -- reading ----------------------------------------------------------------------------

    def _rows(self, gps: list[int]) -> list[Row | None]:
        lo, span, unpack = self.lo, self.span, self._g.unpack
        bufs = self.mem.readv([(gp + lo, span) for gp in gps], views=True)
        if self._pad:
            return [None if b is None else (*unpack(b), 0) for b in bufs]
        return [None if b is None else unpack(b) for b in bufs]

    def _get(self, row: Row, name: str) -> int:
        return row[self._ix[name]]

    def _start(self, row: Row) -> tuple[int, int]:
        if row[self._i_scsp]:
            return row[self._i_scpc], row[self._i_scsp]
        return row[self._i_pc], row[self._i_sp]

    def _stacks(self, rows: list[Row | None]) -> list[bytes | None]:
        spans = []
        i_status, i_lo, i_hi = self._i_status, self._i_lo, self._i_hi
        for row in rows:
            if row is None or row[i_status] & ~GSCAN in (G_DEAD, G_RUNNING):
                spans.append((0, 0))
                continue
            _pc, sp = self._start(row)
            hi = row[i_hi]
            if not row[i_lo] <= sp < hi:
                spans.append((0, 0))
                continue
            spans.append((sp, min(hi - sp, MAX_STACK_READ)))
        return self.mem.readv(spans, cap=MAX_STACK_READ, views=True)

    def read(self, include_system: bool = False) -> Dump:
        """Every goroutine but the runtime's own; ``include_system``: those too, with every
        frame (runtime ones included), as GOTRACEBACK=system prints them."""
        # No cyclic GC meanwhile: the dump makes ~100k objects that live on, and each
        # collection they trigger walks them all again (~20% of a 100k dump's CPU).
        enabled = gc.isenabled()
        gc.disable()
        try:
            return self._read(include_system)
        finally:
            if enabled:
                gc.enable()

    def _read(self, include_system: bool) -> Dump:
        t0 = time.monotonic()
        reads0 = self.mem.reads
        dump = Dump(self.info.go_version)
        ptr, n = struct.unpack("<QQ", self.mem.read(self.allgs, 16))
        check_count("allglen", n, MAX_GOROUTINES)
        dump.allglen = n
        gps: list[int] = []
        step = 8192
        for i in range(0, n, step):
            k = min(step, n - i)
            try:
                gps.extend(struct.unpack(f"<{k}Q", self.mem.read(ptr + 8 * i, 8 * k)))
            except OSError as e:
                raise unreadable(self.mem.pid, f"allgs' array at {ptr:#x}", e) from e
        rows = self._rows(gps)
        bad = [i for i, row in enumerate(rows) if row is None and gps[i]]
        if bad and len(bad) == len(gps) and not target_running(self.mem.pid):
            raise ProcessLookupError(f"process {self.mem.pid} is gone")
        if bad:
            at = gps[bad[0]]
            dump.skipped = len(bad)
            dump.skipped_why = f"allgs[{bad[0]}] = {at:#x}: {why_span(at + self.lo, self.span)}"
        stacks = self._stacks(rows)
        todo = list(range(len(gps)))
        changed: set[int] = set()
        for attempt in range(self.retries + 1):
            after = self._rows([gps[i] for i in todo])
            same = self._same
            moved = []
            for i, row2 in zip(todo, after, strict=True):
                row = rows[i]
                if row is None or row2 is None:
                    continue
                if same(row) != same(row2):
                    moved.append(i)
                    rows[i] = row2
            if not moved:
                changed.clear()
                break
            changed = set(moved)
            if attempt == self.retries:
                break
            dump.retried += len(moved)
            fresh = self._stacks([rows[i] for i in moved])
            for i, b in zip(moved, fresh, strict=True):
                stacks[i] = b
            todo = moved
        now = time.monotonic_ns()
        i_status = self._i_status
        running = [i for i, r in enumerate(rows)
                   if r is not None and r[i_status] & ~GSCAN == G_RUNNING]
        ps = self._running_ps([rows[i] for i in running])  # type: ignore[misc]
        p_of = dict(zip(running, ps, strict=True))
        for i, row in enumerate(rows):
            if row is None or row[self._i_status] & ~GSCAN == G_DEAD:
                continue
            g = self._goroutine(row, stacks[i], now, i in changed, p_of.get(i), include_system)
            if g.system and not include_system:
                continue
            dump.goroutines.append(g)
        dump.seconds = time.monotonic() - t0
        dump.reads = self.mem.reads - reads0
        return dump

    def _running_ps(self, rows: list[Row]) -> list[int | None]:
        o = self.info.offsets
        if not rows or "runtime.m.p" not in o or "runtime.p.id" not in o:
            return [None] * len(rows)
        ms = [self._get(r, "m") for r in rows]
        mps = self.mem.readv([(m + o["runtime.m.p"], 8) if m else (0, 0) for m in ms])
        pps = [struct.unpack("<Q", b)[0] if b else 0 for b in mps]
        ids = self.mem.readv([(p + o["runtime.p.id"], 4) if p else (0, 0) for p in pps])
        return [struct.unpack("<i", b)[0] if b else None for b in ids]

    # -- one goroutine ----------------------------------------------------------------------

    def _func(self, pc: int) -> tuple[str, int]:
        """(name, funcID) of a runtime pc's function."""
        got = self._funcs.get(pc)
        if got is None:
            fo = self.uw.findfunc(pc - self.bias) if pc else None
            got = ("?", 0) if fo is None else (self.uw.name(fo), self.uw.func_id(fo))
            self._funcs[pc] = got
        return got

    def _goroutine(self, row: Row, stack: bytes | None, now: int, changed: bool,
                   p: int | None, every_frame: bool = False) -> Goroutine:
        info = self.info
        raw, wr, since, startpc, goid, gopc, lockedm, parent = self._pick(row)
        code = raw & ~GSCAN
        status = info.g_status[code] if code < len(info.g_status) else "???"
        reason = ""
        if code == G_WAITING and wr < len(info.wait_reasons):
            reason = info.wait_reasons[wr]
        wait_ns = now - since if since > 0 and code in (G_WAITING, G_SYSCALL) else None
        start_name = self._func(startpc)[0]
        system = start_name.startswith("runtime.") and start_name not in _USER_RUNTIME
        frames: list[Frame] = []
        why = "running" if code == G_RUNNING else "no stack"
        if code != G_RUNNING and stack is not None:
            pc, sp = self._start(row)
            frames, why, path = self.uw.unwind_path(pc - self.bias, sp, stack, sp, self.bias)
        else:
            path = 0
        shown = frames if every_frame else self._shown(frames, path)
        created = self._created(gopc) if goid != 1 else None
        # positional (Goroutine's field order): cheaper than 15 keywords, 100k times
        return Goroutine(goid, status, code, bool(raw & GSCAN), reason, wait_ns, bool(lockedm),
                         system, frames, shown, why, changed, created, parent, p)

    def _created(self, gopc: int) -> Frame | None:
        """printcreatedby: the go statement's function (physical), file:line at gopc - 1."""
        if gopc in self._creators:
            return self._creators[gopc]
        created = None
        link = gopc - self.bias
        fo = self.uw.findfunc(link) if gopc else None
        if fo is not None:
            entry = self.uw.entry(fo)
            file, line = self.uw.file_line(fo, link - 1 if link > entry else link)
            f = Frame(self.uw.name(fo), file, line, link,
                      link - entry if link > entry else None, False, self.uw.func_id(fo), entry)
            if visible(f, False, 0, self.uw.wrapper_id):
                created = f
        self._creators[gopc] = created
        return created

    def add_samples(self, dump: Dump, pcs_of: dict[int, list[int]]) -> int:
        """Frames for running goroutines from sampled user stacks ({goid: pcs, leaf first,
        runtime addresses}: capture/runstacks.py); the leaf trapped, the others are return
        addresses. Returns how many goroutines got a stack."""
        n = 0
        for g in dump.goroutines:
            pcs = pcs_of.get(g.goid)
            if g.status_code != G_RUNNING or not pcs:
                continue
            frames: list[Frame] = []
            for i, pc in enumerate(pcs):
                got = self.uw.physical(pc - self.bias, i == 0)
                if got is None:
                    break
                frames.extend(got[0])
            g.frames, g.shown, g.unwind = frames, self._filter(frames), SAMPLED
            n += 1
        return n

    def _shown(self, frames: list[Frame], path: int) -> list[Frame]:
        got = self._shown_cache.get(path)  # the unwinder's path number: same pcs, same frames
        if got is None:
            got = self._shown_cache[path] = self._filter(frames)
        return got

    def _filter(self, frames: list[Frame]) -> list[Frame]:
        wrapper = self.uw.wrapper_id
        out: list[Frame] = []
        callee = 0
        for f in frames:
            if visible(f, not out, callee, wrapper):
                out.append(f)
            callee = f.func_id
        return out
