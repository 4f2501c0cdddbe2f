"""The overhead budget as the model sees it: the controller's COST events (kind 80).

Capture turns the controller's cost reports (gmpmon.capture.hotctl) into COST events, so
that a recording replays to the same ``cost`` in the summary as the live run had.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gmpmon.events import COST_WATCH_SHIFT, ColdGroup, EventTuple, Kind, Stage
from gmpmon.model.part import Context, Handler, Part

COLD_GROUP_NAMES = {int(ColdGroup.MUTEX): "mutex contention"}
TRAPS_OVER = 1 << 16  # COLD_CUT's m: even 1 in the largest N passed the group's share


@dataclass(frozen=True)
class ColdCut:
    """A cold probe group the budget's governor cut back (COLD_CUT, cumulative)."""

    probes: str  # "mutex contention"
    every: int  # 1 in every events traced now (1: all)
    every_max: int  # the largest period so far
    sampled_ns: int  # time spent tracing 1 in N > 1
    traps_over: bool  # even 1 in the largest N passed its share of the budget
    duty: float = 1.0  # the share of each period its sites are linked now
    paused_ns: int = 0  # time its sites were not linked: what happened then was not seen

    def text(self) -> str:
        """What the cut costs in coverage, in one line."""
        return cut_back_text(self.probes, self.every, self.every_max, self.sampled_ns * 1e-9,
                             self.duty, self.paused_ns * 1e-9)


def cut_back_text(probes: str, every: int, every_max: int, sampled_s: float,
                  duty: float = 1.0, paused_s: float = 0.0) -> str:
    """The header's and the summary's line for a cut-back cold group ("" if never cut)."""
    if every_max <= 1 and paused_s <= 0 and duty >= 1.0:
        return ""
    now = []
    if every > 1:
        now.append(f"sampled 1 in {every} while over budget")
    elif every_max > 1:
        now.append(f"every one traced again (was 1 in {every_max})")
    if duty < 1.0:
        now.append(f"linked {duty:.0%} of the time")
    said = []
    if every_max > 1:
        said.append(f"{sampled_s:.1f}s sampled (scaled)")
    if paused_s > 0:
        said.append(f"{paused_s:.1f}s not linked (not seen: a lower bound)")
    return f"{probes}: {', '.join(now) or 'linked throughout again'}; {', '.join(said)}"


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
    cut_back: tuple[ColdCut, ...] = ()  # cold probe groups cut back to stay in the budget


class CostTracker(Part):
    """Keeps the newest COST event (its values are cumulative) and counts DROP events (the
    model hands them on: a DROP also resets its picture, like LOST)."""

    def __init__(self, ctx: Context | None = None) -> None:
        self.last: EventTuple | None = None
        self.dropped: dict[int, int] = {}  # Stage -> records
        self.first_drop_ts = -1
        self.triggers: list[tuple[int, int]] = []  # (ts, --trigger index) of TRIGGER events
        self.cuts: dict[int, ColdCut] = {}  # ColdGroup -> the newest COLD_CUT

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

    def on_cold_cut(self, e: EventTuple) -> None:
        _ts, _, _p, m, g, a0, a1 = e
        group = g & 0xFF
        self.cuts[group] = ColdCut(COLD_GROUP_NAMES.get(group, f"cold group {group}"),
                                   max(m & 0xFFFF, 1), max(a0 & 0xFFFF, 1), a1,
                                   bool(m & TRAPS_OVER), min(max(g >> 8 & 0x3FF, 1), 1000) / 1000,
                                   (a0 >> 16) * 1_000_000)

    def handlers(self) -> Iterable[tuple[int, Handler]]:
        return ((Kind.COST, self.on_cost), (Kind.TRIGGER, self.on_trigger),
                (Kind.COLD_CUT, self.on_cold_cut))

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
            cut_back=tuple(c for _, c in sorted(self.cuts.items())),
        )
