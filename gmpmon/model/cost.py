"""The overhead budget as the model sees it: the controller's COST events (kind 80).

Capture turns the controller's cost reports (gmpmon.capture.hotctl) into COST events, so
that a recording replays to the same ``cost`` in the summary as the live run had.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gmpmon.events import COST_WATCH_SHIFT, EventTuple, Kind, Stage
from gmpmon.model.part import Context, Handler, Part


@dataclass(frozen=True)
class CostSummary:
    budget_pct: float
    estimated_pct: float  # estimated cost / target CPU time since attach, percent
    cost_ns: int  # estimated CPU time the target lost to watching
    target_cpu_ns: int  # CPU time the target used since attach
    overstays: int  # windows detached more than 50 ms after their planned end
    bursts: int = 0  # trigger bursts the budget allowed
    cut_short: int = 0  # windows closed early: their hits cost 1.5x their plan
    watch_ns: int = 0  # the part of cost_ns that is gmpmon's own CPU (as contended)


class CostTracker(Part):
    """Keeps the newest COST event (its values are cumulative) and counts DROP events (the
    model hands them on: a DROP also resets its picture, like LOST)."""

    def __init__(self, ctx: Context | None = None) -> None:
        self.last: EventTuple | None = None
        self.dropped: dict[int, int] = {}  # Stage -> records
        self.first_drop_ts = -1
        self.triggers: list[tuple[int, int]] = []  # (ts, --trigger index) of TRIGGER events

    def on_trigger(self, e: EventTuple) -> None:
        if len(self.triggers) < 1000:
            self.triggers.append((e[0], e[4]))

    def on_drop(self, e: EventTuple) -> None:
        if self.first_drop_ts < 0:
            self.first_drop_ts = e[0]
        self.dropped[e[6]] = self.dropped.get(e[6], 0) + e[5]

    def dropped_by_stage(self) -> dict[str, int]:
        names = {int(s): s.name.lower() for s in Stage}
        return {names.get(k, str(k)): n for k, n in sorted(self.dropped.items())}

    def on_cost(self, e: EventTuple) -> None:
        self.last = e

    def handlers(self) -> Iterable[tuple[int, Handler]]:
        return ((Kind.COST, self.on_cost), (Kind.TRIGGER, self.on_trigger))

    def section(self, at: object) -> dict[str, object]:
        return {"cost": self.summary(), "dropped": self.dropped_by_stage(),
                "triggers": tuple(self.triggers)}

    def summary(self) -> CostSummary | None:
        e = self.last
        if e is None:
            return None
        cost, cpu = e[5], e[6]
        return CostSummary(
            budget_pct=(e[3] & ((1 << COST_WATCH_SHIFT) - 1)) / 1000.0,
            estimated_pct=100.0 * cost / cpu if cpu else 0.0,
            cost_ns=cost,
            target_cpu_ns=cpu,
            overstays=e[4] & 0xFFFFF,
            bursts=(e[4] >> 20) & 0xFFFFF,
            cut_short=e[4] >> 40,
            watch_ns=(e[3] >> COST_WATCH_SHIFT) * 1000,
        )
