"""The kernel sources of one capture, driven from capture's reader thread.

``--kernel`` picks them (KERNEL_SOURCES): ``samples`` (perf-event sampler,
gmpmon/capture/perfsample.py), ``sched`` and ``syscalls`` (raw-tracepoint groups,
gmpmon/capture/tracepoints.py). DEFAULT_KERNEL is what measured under 0.5% of the net/http
benchmark's throughput (docs/modes.md has the figures); the rest is opt-in.

A source that cannot start (no offsets, no perf events, a kernel without raw tracepoints)
is left out with one line in ``notes``; the others and the uprobes go on. A sampler that
turns itself off (validation failed) emits one SAMPLER_OFF event, so replay says it too.
"""

from __future__ import annotations

from typing import Any

from gmpmon.binary.info import BinaryInfo
from gmpmon.capture.kernelbpf import CounterReader, compile_program
from gmpmon.capture.perfsample import SAMPLE_HZ, PerfSampler
from gmpmon.capture.tracepoints import Tracepoints
from gmpmon.errors import GmpmonError
from gmpmon.events import EventTuple

KERNEL_SOURCES = ("samples", "sched", "syscalls")
DEFAULT_KERNEL: tuple[str, ...] = ("samples",)


def parse_kernel(text: str) -> tuple[str, ...]:
    """``--kernel`` value: a comma list of KERNEL_SOURCES, "default", or "none"."""
    if text in ("", "none"):
        return ()
    out: list[str] = []
    for part in text.split(","):
        part = part.strip()
        names = DEFAULT_KERNEL if part == "default" else (part,)
        for n in names:
            if n not in KERNEL_SOURCES:
                raise ValueError(f"unknown kernel source {n!r} (known: "
                                 f"{', '.join(KERNEL_SOURCES)}, default, none)")
            if n not in out:
                out.append(n)
    return tuple(out)


class KernelSources:
    def __init__(self, info: BinaryInfo, pid: int, which: tuple[str, ...],
                 sample_hz: int = SAMPLE_HZ) -> None:
        self.info = info
        self.pid = pid
        self.which = which
        self.sample_hz = sample_hz
        self.sampler: PerfSampler | None = None
        self.tracepoints: Tracepoints | None = None
        self.notes: list[str] = []  # one line per source left out or turned off
        self.stacks: dict[int, tuple[str, ...]] = {}  # new sample stacks, for the next Batch
        self.bpf: Any = None  # samples.bpf.c + tracepoints.bpf.c: one object for both
        self.counters: CounterReader | None = None
        self._made: tuple[PerfSampler | None, Tracepoints | None, tuple[str, ...]] | None = None

    @property
    def active(self) -> tuple[str, ...]:
        out = []
        if self.sampler is not None and self.sampler.on:
            out.append("samples")
        if self.tracepoints is not None:
            out += self.tracepoints.groups
        return tuple(out)

    def start(self) -> None:
        """compile() and attach() at once (scripts/bench-kernel)."""
        self.compile()
        self.attach()

    def compile(self) -> None:
        """Compile what was asked for as one object (``attach`` then attaches each source);
        one that fails is left out with a line in ``notes``."""
        groups = tuple(g for g in ("sched", "syscalls") if g in self.which)
        want_samples = "samples" in self.which
        if not (want_samples or groups):
            return
        defs: dict[str, int] = {}
        srcs: list[str] = []
        sampler = tps = None
        try:
            if want_samples:
                sampler = PerfSampler(self.info, self.pid, hz=self.sample_hz)
                defs.update(sampler.defs)
                srcs.append("samples.bpf.c")
        except GmpmonError as e:
            self.notes.append(f"perf samples off: {_line(e)}")
        try:
            if groups:
                tps = Tracepoints(self.info, self.pid)
                defs.update(tps.defs)
                srcs.append("tracepoints.bpf.c")
        except GmpmonError as e:
            self.notes.append(f"tracepoints off: {_line(e)}")
        if sampler is None and tps is None:
            return
        try:
            self.bpf = compile_program(tuple(srcs), defs)
        except GmpmonError as e:
            self.notes.append(f"kernel sources off: {_line(e)}")
            return
        self.counters = CounterReader(self.bpf)
        self._made = (sampler, tps, groups)

    def attach(self) -> None:
        """Attach what ``compile`` made; one that fails is left out with a line in
        ``notes``."""
        if self._made is None:
            return
        sampler, tps, groups = self._made
        self._made = None
        if sampler is not None:
            try:
                sampler.start(self.bpf)
                self.sampler = sampler
            except Exception as e:  # BCC raises bare Exceptions when an attach fails
                self.notes.append(f"perf samples off: {_line(e)}")
        if tps is not None:
            try:
                tps.start(groups, self.bpf)
                self.tracepoints = tps
            except Exception as e:
                self.notes.append(f"tracepoints off: {_line(e)}")

    def rebind(self, info: BinaryInfo) -> None:
        """`run` of a PIE: its load bias, known after the exec (before the first poll)."""
        self.info = info
        if self.sampler is not None:
            self.sampler.info = info
        if self.tracepoints is not None:
            self.tracepoints.info = info

    def poll(self, out: list[EventTuple]) -> int:
        if self.sampler is None:
            return 0
        return self.sampler.poll(out, self.stacks)

    def read_counters(self, now: int, out: list[EventTuple]) -> None:
        if self.counters is None:
            return
        deltas = self.counters.emit(now, out)
        s = self.sampler
        if s is not None:
            was_on = not s.off_reason
            s.observe(now, deltas, out)
            if was_on and s.off_reason:
                self.notes.append(s.off_reason)
        if self.tracepoints is not None:
            self.tracepoints.sched_deltas(now, out)

    def take_stacks(self) -> dict[int, tuple[str, ...]]:
        st, self.stacks = self.stacks, {}
        return st

    def close(self) -> None:
        if self.sampler is not None:
            self.sampler.close()
            self.sampler = None
        if self.tracepoints is not None:
            self.tracepoints.close()
            self.tracepoints = None
        if self.bpf is not None:
            self.bpf.cleanup()
            self.bpf = None
            self.counters = None


def _line(e: BaseException) -> str:
    s = str(e).strip().splitlines()
    return s[0] if s else type(e).__name__
