"""Parks per wait reason: how many, and how long until the ready (park -> ready ns).

The state machine (gmpmon.model.sched) fills the event-side tables as it sees PARK and
READY; the kernel's PARK_COUNT / PARK_WAIT_NS tables are the other side of each Counted.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gmpmon.events import Counter, EventTuple
from gmpmon.model.part import Context, Counted, Handler, Part
from gmpmon.model.snapshot import ParkReason


class Parks(Part):
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        # wait-reason index -> parks / total ns parked
        self.count: Counted[dict[int, int]] = Counted("park_count", Counter.PARK_COUNT, dict)
        self.wait: Counted[dict[int, int]] = Counted("park_wait", Counter.PARK_WAIT_NS, dict)

    def counters(self) -> Iterable[tuple[int, Handler]]:
        return ((Counter.PARK_COUNT, self.on_count), (Counter.PARK_WAIT_NS, self.on_wait))

    def on_count(self, e: EventTuple) -> None:
        c = self.count
        c.seen = True
        c.kernel[e[5]] = c.kernel.get(e[5], 0) + e[6]

    def on_wait(self, e: EventTuple) -> None:
        c = self.wait
        c.seen = True
        c.kernel[e[5]] = c.kernel.get(e[5], 0) + e[6]

    def sources(self) -> Iterable[Counted[Any]]:
        return (self.count, self.wait)

    def section(self, at: object) -> dict[str, object]:
        pcount, pwait = self.count.chosen, self.wait.chosen
        merged: dict[str, list[int]] = {}
        for idx in set(pcount) | set(pwait):
            row = merged.setdefault(self.ctx.reason_name(idx), [0, 0])
            row[0] += pcount.get(idx, 0)
            row[1] += pwait.get(idx, 0)
        parks = tuple(
            ParkReason(name, c, w)
            for name, (c, w) in sorted(merged.items(), key=lambda kv: (-kv[1][0], kv[0]))
        )
        return {"park_reasons": parks}
