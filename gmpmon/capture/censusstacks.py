"""Wait stacks for the census: where each parked goroutine waits, unwound from ``g.sched``,
grouped, interned, bounded.

The census (capture/census.py) hands every waiting user goroutine's saved registers here. An
unwind reads the goroutine's stack and walks the binary's pcsp tables (gdump's unwinder);
goroutines parked at the same place share a *shape*: their start function, ``sched.pc`` (the
return into ``gopark``), and the depths ``stack.hi - sched.sp`` and ``stack.hi - sched.bp``.
One unwind per shape per walk (and the shape's stack kept for the next walks while the shape
cache has room): 100k goroutines parked at a few dozen places cost a few dozen unwinds.
Two goroutines of one start function parked through different callers at exactly the same
depths would share a stack: frames sizes make that rare, and it only merges two groups.

Stacks are named (function names, root first, the leaf-most ``MAX_STACK_FRAMES``; a cut stack
starts with ``[...]``) and interned: the same frames get the same id for the whole run, so a
steady program's recording names each stack once.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence

from gmpmon.binary.info import BinaryInfo
from gmpmon.binary.unwind import OK, TRUNCATED, Unwinder, visible
from gmpmon.capture.targetmem import TargetMemory
from gmpmon.errors import GmpmonError
from gmpmon.events import CENSUS_STACK_BASE, MAX_STACK_FRAMES, UNKNOWN_FRAME

# (pc, sp, bp, stack.lo, stack.hi) -> function names, leaf first; raises OSError/ValueError
# when the stack cannot be read or walked.
Unwind = Callable[[int, int, int, int, int], Sequence[str]]
Shape = tuple[int, int, int, int]  # (startpc, sched.pc, hi - sp, hi - bp)

MAX_STACK_READ = 64 << 10  # bytes of a stack read from sp up (deeper: the leaf end is kept)
MAX_SHAPES = 50_000  # shape -> stack id entries kept across walks (cleared when full)
MAX_UNWINDS = 2_000  # unwinds per walk at most: beyond, a new shape counts as not unwound
MAX_STACKS = 20_000  # distinct stacks named in a run (ids live as long as the model's table)
CUT = "[...]"
NOT_UNWOUND = "[stack not unwound]"
TOO_MANY = "[too many distinct stacks]"


class CensusUnwind:
    """The census's unwind: the pclntab unwinder of ``gmpmon goroutines``
    (gmpmon/binary/unwind.py) over the stack bytes read from ``sp`` up; the frames Go's own
    dump prints (``visible``: wrappers and runtime internals hidden). The Unwinder holds the
    binary's file (Prometheus, 50 MB: +66 MB, 0.27 s to build): ``prepare()`` builds it in
    the census's thread before its first walk, not on attach's path, and not in a walk's CPU
    time (which the census backs off on: a one-time cost must not slow its cadence)."""

    def __init__(self, info: BinaryInfo, mem: TargetMemory) -> None:
        self.info, self.mem = info, mem
        self._built = False
        self._uw: Unwinder | None = None
        self._wrapper = 0

    def prepare(self) -> None:
        if self._built:
            return
        self._built = True
        from gmpmon.binary.elf import Elf
        from gmpmon.binary.load import read_file

        try:
            uw = Unwinder(Elf(read_file(self.info.path), self.info.path))
            self._wrapper = uw.wrapper_id
            self._uw = uw
        except (GmpmonError, OSError, ValueError, KeyError, IndexError):
            self._uw = None

    def __call__(self, pc: int, sp: int, bp: int, lo: int, hi: int) -> list[str]:
        self.prepare()
        uw = self._uw
        if uw is None:
            raise ValueError("the binary's pclntab could not be read for unwinding")
        if not lo <= sp < hi:
            raise ValueError("sched.sp outside the goroutine's stack")
        bias = self.info.load_bias
        stack = self.mem.read(sp, min(hi - sp, MAX_STACK_READ))
        frames, why = uw.unwind(pc - bias, sp, stack, sp, bias)
        if why not in (OK, TRUNCATED) or not frames:
            raise ValueError(f"stack not walked: {why}")
        out: list[str] = []
        callee = 0
        for f in frames:
            if visible(f, not out, callee, self._wrapper):
                out.append(f.func)
            callee = f.func_id
        return out or [frames[0].func]


def census_unwinder(info: BinaryInfo, mem: TargetMemory) -> CensusUnwind:
    return CensusUnwind(info, mem)


class WaitStacks:
    def __init__(self, unwind: Unwind) -> None:
        self.unwind = unwind
        self.shapes: dict[Shape, int] = {}
        self._ids: dict[tuple[str, ...], int] = {}
        self.new: dict[int, tuple[str, ...]] = {}  # ids named since the last take()
        self.unwinds = 0  # this walk
        self.failed = 0  # this walk: stacks that changed or could not be read
        self.total_unwinds = 0

    def prepare(self) -> None:
        """One-time set-up of the unwinder (CensusUnwind.prepare), outside any walk's time."""
        prepare = getattr(self.unwind, "prepare", None)
        if prepare is not None:
            prepare()

    def begin(self) -> None:
        self.unwinds = self.failed = 0
        if len(self.shapes) > MAX_SHAPES:
            self.shapes.clear()

    def stack_id(self, shape: Shape, pc: int, sp: int, bp: int, lo: int, hi: int) -> int:
        """The interned id of a shape's stack: unwound on the shape's first sight."""
        if self.unwinds >= MAX_UNWINDS:
            return self._intern((NOT_UNWOUND,))
        self.unwinds += 1
        self.total_unwinds += 1
        try:
            leaf_first = list(self.unwind(pc, sp, bp, lo, hi))
        except (OSError, ValueError, KeyError, IndexError, struct.error, GmpmonError):
            # unreadable, moved, or implausible (TargetMemoryError: a hostile sp): this G's
            # stack only, never the census
            self.failed += 1
            return self._intern((NOT_UNWOUND,))  # not cached: the next walk tries again
        if not leaf_first:
            leaf_first = [UNKNOWN_FRAME]
        cut = len(leaf_first) > MAX_STACK_FRAMES
        frames = tuple(reversed(leaf_first[:MAX_STACK_FRAMES - 1 if cut else MAX_STACK_FRAMES]))
        sid = self._intern((CUT, *frames) if cut else frames)
        self.shapes[shape] = sid
        return sid

    def moved(self, shape: Shape) -> int:
        """The goroutine moved while its stack was read: that stack is not kept."""
        if self.shapes.get(shape) is not None:
            del self.shapes[shape]
        self.failed += 1
        return self._intern((NOT_UNWOUND,))

    def _intern(self, frames: tuple[str, ...]) -> int:
        sid = self._ids.get(frames)
        if sid is None:
            if len(self._ids) >= MAX_STACKS:
                frames = (TOO_MANY,)
                sid = self._ids.get(frames)
                if sid is not None:
                    return sid
            sid = self._ids[frames] = CENSUS_STACK_BASE + len(self._ids) + 1
            self.new[sid] = frames
        return sid

    def take(self) -> dict[int, tuple[str, ...]]:
        new, self.new = self.new, {}
        return new
