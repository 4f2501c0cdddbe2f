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

from collections.abc import Callable, Sequence

from gmpmon.events import CENSUS_STACK_BASE, MAX_STACK_FRAMES, UNKNOWN_FRAME

# (pc, sp, bp, stack.lo, stack.hi) -> function names, leaf first; raises OSError/ValueError
# when the stack cannot be read or walked.
Unwind = Callable[[int, int, int, int, int], Sequence[str]]
Shape = tuple[int, int, int, int]  # (startpc, sched.pc, hi - sp, hi - bp)

MAX_SHAPES = 50_000  # shape -> stack id entries kept across walks (cleared when full)
MAX_UNWINDS = 2_000  # unwinds per walk at most: beyond, a new shape counts as not unwound
CUT = "[...]"
NOT_UNWOUND = "[stack not unwound]"


class WaitStacks:
    def __init__(self, unwind: Unwind) -> None:
        self.unwind = unwind
        self.shapes: dict[Shape, int] = {}
        self._ids: dict[tuple[str, ...], int] = {}
        self.new: dict[int, tuple[str, ...]] = {}  # ids named since the last take()
        self.unwinds = 0  # this walk
        self.failed = 0  # this walk: stacks that changed or could not be read
        self.total_unwinds = 0

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
        except (OSError, ValueError, KeyError, IndexError):
            self.failed += 1
            return self._intern((NOT_UNWOUND,))  # not cached: the next walk tries again
        if not leaf_first:
            leaf_first = [UNKNOWN_FRAME]
        cut = len(leaf_first) > MAX_STACK_FRAMES
        frames = tuple(reversed(leaf_first[:MAX_STACK_FRAMES - 1 if cut else MAX_STACK_FRAMES]))
        sid = self._intern((CUT, *frames) if cut else frames)
        self.shapes[shape] = sid
        return sid

    def _intern(self, frames: tuple[str, ...]) -> int:
        sid = self._ids.get(frames)
        if sid is None:
            sid = self._ids[frames] = CENSUS_STACK_BASE + len(self._ids) + 1
            self.new[sid] = frames
        return sid

    def take(self) -> dict[int, tuple[str, ...]]:
        new, self.new = self.new, {}
        return new
