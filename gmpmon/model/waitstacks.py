"""The census's wait stacks: where the goroutines are parked, grouped (events CENSUS_STACK,
CENSUS_STACK_WAIT; capture/census.py), and how each group grew across census passes.

Pure. A group is (G status and wait reason, the parked stack, the creation site): what Go's
``debug=1`` goroutine profile and panicparse fold together. The stack and the creation site
are names from the model's stack table (interned ids: a steady program's stacks are named
once per run). ``GroupTrend`` follows each group over complete walks, bounded in the number
of groups it follows, for the goroutine-leak finding.
"""

from __future__ import annotations

from dataclasses import dataclass

from gmpmon.events import CENSUS_SITE_BASE, UNKNOWN_FRAME

MAX_TRACKED = 2000  # groups GroupTrend follows at once (a new one beyond that is not followed)


@dataclass(frozen=True, slots=True)
class CensusStack:
    """Goroutines parked at one stack, from one creation site, in one state and wait reason."""

    stack_id: int  # interned: the same stack has the same id for the whole run
    state: str
    reason: str  # wait reason ("" unless waiting)
    system: bool  # runtime goroutines (not counted by NumGoroutine)
    frames: tuple[str, ...]  # root first; the leaf is where it parked
    creator: str  # the function with the go statement ("" when unknown)
    start: str  # the goroutine's start function ("" when unknown)
    count: int
    waited: int = 0  # of them, goroutines with g.waitsince set (parked across a GC)
    wait_sum_ns: int = 0
    wait_max_ns: int = 0

    @property
    def leaf_first(self) -> tuple[str, ...]:
        return tuple(reversed(self.frames))


def site_names(stacks: dict[int, tuple[str, ...]], rel: int) -> tuple[str, str]:
    """(creator, start) of a CENSUS_STACK's m (a CENSUS_SITE id minus its base); ("", "")."""
    frames = stacks.get(CENSUS_SITE_BASE + rel) if rel else None
    return (frames[0], frames[-1]) if frames else ("", "")


def stack_frames(stacks: dict[int, tuple[str, ...]], sid: int) -> tuple[str, ...]:
    return stacks.get(sid) or (UNKNOWN_FRAME,)


# Frames every wait stack shares (the park itself): left out where a stack is shown short.
PARK_FRAMES = ("runtime.", "internal/", "sync.", "[")


def wait_site(frames: tuple[str, ...]) -> str:
    """The leaf-most frame a user wrote (``main.handle``), else the leaf."""
    for f in reversed(frames):
        if not f.startswith(PARK_FRAMES):
            return f
    return frames[-1] if frames else UNKNOWN_FRAME


def top_frames(frames: tuple[str, ...], n: int = 3) -> str:
    """``runtime.chanrecv1 < main.handle < main.serve``: where it parked (the leaf, then
    the first ``n`` frames a user wrote), leaf first."""
    leaf_first = list(reversed(frames))
    mine = [f for f in leaf_first if not f.startswith(PARK_FRAMES)][:n]
    parked = [f for f in leaf_first[:4] if f not in ("runtime.gopark", "runtime.goparkunlock")]
    head = parked[0] if parked and parked[0] not in mine else ""
    return " < ".join(([head] if head else []) + mine) or " < ".join(leaf_first[:n])


GroupKey = tuple[int, int, int]  # (stack id, creation site rel id, status|reason|system key)


@dataclass(frozen=True, slots=True)
class StackTrend:
    """One group over the complete census walks that saw it (or saw it gone: count 0)."""

    key: GroupKey
    first_ts: int
    first_count: int
    last_ts: int
    last_count: int
    passes: int  # complete walks since it was first seen
    rises: int  # walks where it had more goroutines than the walk before
    falls: int  # ... fewer
    wait_max_ns: int  # the longest wait in the last walk (g.waitsince; 0 = none set)
    frames: tuple[str, ...] = ()  # root first
    creator: str = ""
    start: str = ""
    reason: str = ""  # wait reason ("" unless waiting)
    system: bool = False

    @property
    def growth(self) -> int:
        return self.last_count - self.first_count

    @property
    def seconds(self) -> float:
        return (self.last_ts - self.first_ts) / 1e9


class GroupTrend:
    """Counts of each group at every complete census walk: first, last, rises and falls."""

    def __init__(self) -> None:
        # key -> [first_ts, first_count, last_ts, last_count, passes, rises, falls, wait_max]
        self._rows: dict[GroupKey, list[int]] = {}

    def walk(self, ts: int, groups: dict[GroupKey, tuple[int, int]]) -> None:
        """A complete walk's groups: key -> (goroutines, longest wait ns)."""
        rows = self._rows
        for key, row in rows.items():
            n, wmax = groups.get(key, (0, 0))
            if n > row[3]:
                row[5] += 1
            elif n < row[3]:
                row[6] += 1
            row[2], row[3], row[7] = ts, n, wmax
            row[4] += 1
        for key, (n, wmax) in groups.items():
            if key not in rows and len(rows) < MAX_TRACKED:
                rows[key] = [ts, n, ts, n, 1, 0, 0, wmax]

    def trends(self, stacks: dict[int, tuple[str, ...]], wait_reasons: tuple[str, ...],
               top: int = 50) -> tuple[StackTrend, ...]:
        """The ``top`` followed groups that grew most, named."""
        best = sorted(self._rows.items(), key=lambda kv: (-(kv[1][3] - kv[1][1]), -kv[1][3],
                                                          kv[0]))[:top]
        out = []
        for key, r in best:
            sid, site, a0 = key
            reason = (a0 >> 16) & 0xFFFF
            creator, start = site_names(stacks, site)
            out.append(StackTrend(
                key, r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7],
                frames=stack_frames(stacks, sid), creator=creator, start=start,
                reason=(wait_reasons[reason] if (a0 & 0xFFFF) == 4 and reason < len(wait_reasons)
                        else ""),
                system=bool(a0 >> 32)))
        return tuple(out)
