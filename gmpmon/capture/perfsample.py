"""Source "samples": a software cpu-clock perf event (99 Hz by default) on every CPU, kept in
BPF only for the target's threads (probes/samples.bpf.c). Each sample says which goroutine ran on
which P (R14 = the current g, validated), on which M, and its user stack.

Cost: one timer interrupt per CPU per sampling period, whoever runs (see SAMPLE_HZ); the BPF
program returns at once for other processes. Nothing is paid per scheduler event.

Records (gmpmon.events.Kind.CPU_SAMPLE) leave here with their kernel stack id replaced by a
Batch stack id (symbolized frames, root first) at or above STACK_ID_BASE, so they never
collide with the uprobe capture's mutex stacks in the same Batch.stacks namespace.

A sampler whose validation never succeeds (wrong offsets, an unknown ABI) is turned off with
one line (``off_reason``) instead of reporting garbage: after VALIDATE_MIN user-mode samples,
fewer than VALIDATE_RATIO of them validated.
"""

from __future__ import annotations

import bisect
import ctypes as ct
import os
from typing import Any, BinaryIO

from gmpmon.binary.info import BinaryInfo
from gmpmon.capture.bpfsys import StackMap
from gmpmon.capture.kernelbpf import CounterReader, compile_program
from gmpmon.capture.ringbuf import RingBufReader
from gmpmon.capture.sites import BinaryText
from gmpmon.errors import UnsupportedError
from gmpmon.events import (
    SAMPLE_G0,
    SAMPLE_GO,
    SAMPLE_KERNEL,
    SAMPLE_NOT_GO,
    STACK_ID_BASE,
    Counter,
    EventTuple,
    Kind,
)
from gmpmon.model.validation import validation_counts, validation_failure

# 99 per CPU by default (--sample-hz), as continuous profilers do: each sample is a timer
# interrupt in whatever runs, and at 999 Hz net/http under wrk kept 90-92% of its requests
# per CPU-second (scripts/bench-kernel, 8 pairs, twice), at 99 Hz 95-101%, while the BPF
# program's own time was 0.3% (999) and 0.1% (99) of the target's CPU. Not a multiple of 10:
# it stays out of lockstep with the target's own timers.
SAMPLE_HZ = 99
RINGBUF_PAGES = 256  # 1 MiB: ~18k samples, ~9 s of 2 busy CPUs at 999 Hz
FLAG_A1_PC = 1  # probes/samples.bpf.c: no stack id, a1 is the user pc
CACHE_MAX = 65536  # entries per stack cache (the kernel map holds 16,384 stacks)
NAMES_MAX = 1 << 18  # memoized pc lookups (bounded by the program's text in practice)
ABOVE_MAX = 4096  # memoized callers' frames (~1.5 KB each at 30 frames: ~6 MB at most)
PERF_TYPE_SOFTWARE = 1
PERF_COUNT_SW_CPU_CLOCK = 0
_CPU_SAMPLE = int(Kind.CPU_SAMPLE)
_FIELDS = {
    "G_M": "runtime.g.m",
    "G_GOID": "runtime.g.goid",
    "M_G0": "runtime.m.g0",
    "M_CURG": "runtime.m.curg",
    "M_PROCID": "runtime.m.procid",
    "M_P": "runtime.m.p",
    "P_ID": "runtime.p.id",
    "P_STATUS": "runtime.p.status",
}


def sample_defs(info: BinaryInfo, tgid: int) -> dict[str, int]:
    defs = {"TGID": tgid, "RINGBUF_PAGES": RINGBUF_PAGES}
    for flag, key in _FIELDS.items():
        if key not in info.offsets:
            raise UnsupportedError(f"no offset for {key} in {info.path}: no perf samples")
        defs[flag] = info.offsets[key]
    return defs


class PerfSampler:
    """The perf-event sampler of one target. ``start()``, then ``poll()`` every ~10 ms."""

    def __init__(self, info: BinaryInfo, pid: int, hz: int = SAMPLE_HZ,
                 defs: dict[str, int] | None = None) -> None:
        self.info = info
        self.pid = pid
        self.hz = hz
        self.defs = sample_defs(info, pid) if defs is None else defs
        self.bpf: Any = None
        self.ring: RingBufReader | None = None
        self.counters: CounterReader | None = None
        self.off_reason = ""
        self.samples = 0
        self._outcomes: dict[int, int] = {}
        # (kernel stack id, [RSP]) -> (Batch stack id, leaf pc)
        self._stack_ids: dict[tuple[int, int], tuple[int, int]] = {}
        self._leaf_ids: dict[int, int] = {}  # leaf pc -> Batch stack id (no kernel stack)
        # A kernel stack id never names another stack (no BPF_F_REUSE_STACKID), so its pcs
        # are walked once; and one Batch stack id per symbolized stack: [RSP] is part of the
        # key above (a leaf with a frame sees many values) and many pc lists name the same
        # functions, so without these most samples made a new stack (7,121 ids for 646
        # distinct stacks in 40 s of the demo).
        self._pcs: dict[int, tuple[int, ...]] = {}  # kernel stack id -> its pcs
        self._plain: dict[int, int] = {}  # kernel stack id -> Batch id of its pcs as walked
        self._by_pcs: dict[tuple[int, ...], int] = {}  # pcs ([RSP] inserted) -> Batch id
        self._by_frames: dict[tuple[str, ...], int] = {}  # symbolized frames -> Batch id
        self._nstacks = 0
        # Memos of pure lookups (the binary does not change under a capture: an exec stops
        # it): a net/http server's samples bring ~120 new kernel stacks a second, each
        # walked, symbolized frame by frame and checked for a frameless leaf.
        self._names: dict[int, str | None] = {}  # looked-up address -> function name
        self._above: dict[tuple[int, ...], tuple[str, ...]] = {}  # callers' pcs -> frames
        self._calls: dict[tuple[int, int], bool] = {}  # (return address, leaf fn) -> CALL?
        self._smap: StackMap | None = None
        self._own = True
        self._bt: BinaryText | None = None
        self._exe: BinaryIO | None = None

    def start(self, bpf: Any = None) -> None:
        """Attach the perf events; ``bpf``: an already compiled object holding samples.bpf.c
        (gmpmon/capture/kernelsources.py), else samples.bpf.c is compiled here alone."""
        self._own = bpf is None
        self.bpf = compile_program("samples.bpf.c", self.defs) if bpf is None else bpf
        try:
            self.bpf.attach_perf_event(
                ev_type=PERF_TYPE_SOFTWARE, ev_config=PERF_COUNT_SW_CPU_CLOCK,
                fn_name=b"gmpmon_cpu_sample", sample_freq=self.hz,
            )
            fd = self.bpf[b"events"].map_fd
            self.ring = RingBufReader(fd, RINGBUF_PAGES * os.sysconf("SC_PAGESIZE"))
        except BaseException:
            self.close()
            raise
        if self._own:
            self.counters = CounterReader(self.bpf)

    @property
    def on(self) -> bool:
        return self.bpf is not None and not self.off_reason

    def stop_sampling(self) -> None:
        """Detach the perf events (maps stay readable until close())."""
        if self.bpf is not None and self.bpf.open_perf_events:
            self.bpf.detach_perf_event(ev_type=PERF_TYPE_SOFTWARE,
                                       ev_config=PERF_COUNT_SW_CPU_CLOCK)

    def close(self) -> None:
        if self._exe is not None:
            self._exe.close()
            self._exe = None
        if self.ring is not None:
            self.ring.close()
            self.ring = None
        if self.bpf is not None:
            self.stop_sampling()
            if self._own:
                self.bpf.cleanup()
            self.bpf = None

    def poll(self, out: list[EventTuple], stacks: dict[int, tuple[str, ...]]) -> int:
        """Append the samples read since the last poll to ``out`` (stack ids rewritten; new
        stacks added to ``stacks``). Nothing once the sampler is off."""
        if self.ring is None or self.off_reason:
            return 0
        raw: list[EventTuple] = []
        n = self.ring.read(raw)
        for e in raw:
            if e[1] != _CPU_SAMPLE:
                continue
            a0 = e[5]
            if a0 & (FLAG_A1_PC << 16):
                sid, leaf = self._leaf_stack(e[6], stacks), e[6]
            else:
                sid, leaf = self._stack_id(a0 >> 32, e[6], stacks)
            out.append((e[0], e[1], e[2], e[3], e[4], (a0 & 0xFFFF) | (sid << 32), leaf))
        self.samples += n
        return n

    def read_counters(self, now: int, out: list[EventTuple]) -> None:
        """COUNTER deltas (sample outcomes) and LOST of this sampler's own object."""
        if self.counters is not None:
            self.observe(now, self.counters.emit(now, out), out)

    def observe(self, now: int, deltas: list[tuple[int, int, int, int]],
                out: list[EventTuple]) -> None:
        """Take the SAMPLES counter deltas; turn the sampler off (``off_reason``, one
        SAMPLER_OFF event) when validation has failed."""
        for table, _p, key, delta in deltas:
            if table == Counter.SAMPLES:
                self._outcomes[key] = self._outcomes.get(key, 0) + delta
        if not self.off_reason:
            good, seen = self.validation_counts()
            self.off_reason = validation_failure(good, seen)
            if self.off_reason:
                out.append((now, Kind.SAMPLER_OFF, -1, 0, 0, good, seen))
                self.stop_sampling()
                if self.ring is not None:
                    self.ring.read([])  # whatever came before the verdict is not reported

    def validation_counts(self) -> tuple[int, int]:
        return validation_counts(self._outcomes)

    @property
    def outcomes(self) -> dict[str, int]:
        names = {SAMPLE_GO: "go", SAMPLE_G0: "g0", SAMPLE_NOT_GO: "not_go",
                 SAMPLE_KERNEL: "kernel"}
        return {names.get(k, str(k)): v for k, v in sorted(self._outcomes.items())}

    # --- stacks --------------------------------------------------------------------------

    def _stack_id(
        self, kid: int, top: int, stacks: dict[int, tuple[str, ...]]
    ) -> tuple[int, int]:
        """(Batch stack id, leaf pc) of kernel stack ``kid``; ``top`` = the word at [RSP]."""
        key = (kid, top)
        hit = self._stack_ids.get(key)
        if hit is not None:
            return hit
        if kid >= (1 << 31):  # a negative errno as u32: no stack
            return 0, 0
        walked = self._pcs.get(kid)
        if walked is None:
            walked = tuple(self._walk(kid))
            if walked and len(self._pcs) < CACHE_MAX:
                self._pcs[kid] = walked
        if not walked:
            return 0, 0
        if top and (len(walked) < 2 or walked[1] != top) and self._calls_leaf(top, walked[0]):
            sid = self._sid_of((walked[0], top, *walked[1:]), stacks)
        else:
            # Most (kid, [RSP]) pairs are new (a frame's local at [RSP]) and most of those
            # are the kernel's stack as it is: its id once per kid.
            plain = self._plain.get(kid)
            if plain is None:
                plain = self._sid_of(walked, stacks)
                if walked in self._by_pcs and len(self._plain) < CACHE_MAX:
                    self._plain[kid] = plain  # what _sid_of(walked) answers from now on
            sid = plain
        # Keyed by [RSP] too: bound the cache (a leaf that has a frame sees many values).
        if len(self._stack_ids) < CACHE_MAX:
            self._stack_ids[key] = (sid, walked[0])
        return sid, walked[0]

    def _sid_of(self, pcs: tuple[int, ...], stacks: dict[int, tuple[str, ...]]) -> int:
        """The Batch stack id of ``pcs``: the one its symbolized frames already have, or a
        new one defined in ``stacks`` (the next Batch's)."""
        sid = self._by_pcs.get(pcs)
        if sid is not None:
            return sid
        frames = self._symbolize(list(pcs))
        sid = self._by_frames.get(frames)
        if sid is None:
            self._nstacks += 1
            sid = STACK_ID_BASE + self._nstacks
            stacks[sid] = frames
            if len(self._by_frames) < CACHE_MAX:
                self._by_frames[frames] = sid
        if len(self._by_pcs) < CACHE_MAX:
            self._by_pcs[pcs] = sid
        return sid

    def _leaf_stack(self, pc: int, stacks: dict[int, tuple[str, ...]]) -> int:
        sid = self._leaf_ids.get(pc)
        if sid is None:
            sid = self._sid_of((pc,), stacks)
            if len(self._leaf_ids) < CACHE_MAX:
                self._leaf_ids[pc] = sid
        return sid

    def _calls_leaf(self, ra: int, leaf: int) -> bool:
        """The bytes before return address ``ra`` are a CALL of the function holding
        ``leaf`` (direct: E8 rel32 to its entry; or an indirect call through a register)."""
        i = bisect.bisect_right(self.info.functab.starts, leaf - self.info.load_bias) - 1
        key = (ra, i)
        known = self._calls.get(key)
        if known is None:
            known = self._calls_fn(ra, i)
            if len(self._calls) < NAMES_MAX:
                self._calls[key] = known
        return known

    def _calls_fn(self, ra: int, i: int) -> bool:
        bias = self.info.load_bias
        ft = self.info.functab
        if i < 0 or ft.lookup(ra - bias - 1) is None:
            return False
        b = self._read_text(ra - bias - 5, 5)
        if len(b) < 5:
            return False
        if b[0] == 0xE8:
            return ra - bias + int.from_bytes(b[1:], "little", signed=True) == ft.starts[i]
        # call reg: FF D0+r, or 41 FF D0+r for r8-r15
        return bool(b[3] == 0xFF and 0xD0 <= b[4] <= 0xD7)

    def _read_text(self, vaddr: int, size: int) -> bytes:
        """``size`` bytes of the binary's file at link address ``vaddr`` (b"" if outside)."""
        if self._bt is None:
            self._bt = BinaryText(self.info.path)
        off = self._bt.file_offset(vaddr)
        if off is None or not 0 <= off < 1 << 62 or not 0 <= size <= 64:
            return b""  # a hostile segment table; os.pread would raise OverflowError
        try:
            if self._exe is None:
                self._exe = open(self.info.path, "rb")  # noqa: SIM115 - closed in close()
            return os.pread(self._exe.fileno(), size, off)
        except OSError:
            return b""

    def _walk(self, kid: int) -> list[int]:
        try:
            if self._smap is None:
                table = self.bpf[b"stacks"]
                self._smap = StackMap(table.map_fd, ct.sizeof(table.Leaf))
            return self._smap.pcs(kid)
        except Exception:
            return []

    def _symbolize(self, pcs: list[int]) -> tuple[str, ...]:
        """Root first. The callers' part (every pc but the leaf, return addresses) is
        memoized: the leaf pc is new at most samples, the frames above it seldom are."""
        rest = tuple(pcs[1:])
        above = self._above.get(rest)
        if above is None:
            above = tuple(reversed([self._name(pc, 1) for pc in rest]))
            if len(self._above) < ABOVE_MAX:
                self._above[rest] = above
        return (*above, self._name(pcs[0], 0)) if pcs else ()

    def _name(self, pc: int, back: int) -> str:
        # Return addresses point after the CALL: look up pc-1 to stay inside the caller.
        addr = pc - self.info.load_bias - back
        names = self._names
        if addr in names:
            name = names[addr]
        else:
            name = self.info.functab.lookup(addr)
            if len(names) < NAMES_MAX:
                names[addr] = name
        return name if name else f"[unknown {pc:#x}]"
