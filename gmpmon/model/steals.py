"""Work stealing: attempts, successes and goroutines taken, per (thief P, victim P).

Each of the three columns is its own Counted: the kernel's STEAL_ATTEMPT / STEAL_OK /
STEAL_GS tables (key = thief << 16 | victim) or the STEAL events.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gmpmon.events import Counter, EventTuple, Kind
from gmpmon.model.part import Context, Counted, Handler, Part
from gmpmon.model.snapshot import StealStats

Pair = tuple[int, int]


class Steals(Part):
    def __init__(self, ctx: Context) -> None:
        self.attempts: Counted[dict[Pair, int]] = Counted(
            "steal_attempts", Counter.STEAL_ATTEMPT, dict)
        self.ok: Counted[dict[Pair, int]] = Counted("steal_ok", Counter.STEAL_OK, dict)
        self.gs: Counted[dict[Pair, int]] = Counted("steal_goroutines", Counter.STEAL_GS, dict)
        self._cols = (self.attempts, self.ok, self.gs)

    def handlers(self) -> Iterable[tuple[int, Handler]]:
        return ((Kind.STEAL, self.on_steal),)

    def counters(self) -> Iterable[tuple[int, Handler]]:
        return tuple((c.table, self.on_counter) for c in self._cols)

    def on_steal(self, e: EventTuple) -> None:
        key = (e[2], e[5])
        n = e[6]
        att = self.attempts.events
        att[key] = att.get(key, 0) + 1
        if n:
            ok, gs = self.ok.events, self.gs.events
            ok[key] = ok.get(key, 0) + 1
            gs[key] = gs.get(key, 0) + n

    def on_counter(self, e: EventTuple) -> None:
        c = self._cols[e[4] - Counter.STEAL_ATTEMPT]
        c.seen = True
        key = e[5]
        pair = (key >> 16, key & 0xFFFF)
        c.kernel[pair] = c.kernel.get(pair, 0) + e[6]

    def sources(self) -> Iterable[Counted[Any]]:
        return self._cols

    def matrix(self) -> dict[Pair, tuple[int, int, int]]:
        """(thief, victim) -> (attempts, successes, goroutines), each column from its choice."""
        a, o, g = (c.chosen for c in self._cols)
        keys: set[Pair] = set()
        for c in self._cols:
            keys |= c.events.keys() | c.kernel.keys()
        out: dict[Pair, tuple[int, int, int]] = {}
        for key in sorted(keys):
            vals = (a.get(key, 0), o.get(key, 0), g.get(key, 0))
            if any(vals):
                out[key] = vals
        return out

    def section(self, at: object) -> dict[str, object]:
        matrix = self.matrix()
        return {
            "steals": StealStats(
                attempts=sum(v[0] for v in matrix.values()),
                count=sum(v[1] for v in matrix.values()),
                goroutines=sum(v[2] for v in matrix.values()),
                matrix=matrix,
            )
        }
