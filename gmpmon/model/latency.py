"""Scheduling latency (runnable -> running): overall, per wake reason, per P.

Event-derived from the ready/execute pairs the state machine finds (gmpmon.model.sched), or
the kernel's SCHED_LAT histogram (COUNTER), whichever :class:`~gmpmon.model.part.Counted`
chooses. Per-P histograms live on the state machine's P objects (``P.lat*``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol

from gmpmon.events import LAT_BUCKETS, Counter, EventTuple
from gmpmon.model import hist as h
from gmpmon.model.part import Context, Counted, Handler, Part
from gmpmon.model.snapshot import LatencyStats


class P(Protocol):
    """The latency fields of the state machine's P (gmpmon.model.gp.P)."""

    lat: list[int]
    lat_sum: int
    lat_max: int
    lat_counter: list[int]


class Latency(Part):
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.hist: Counted[list[int]] = Counted("sched_latency", Counter.SCHED_LAT, h.new_hist)
        self.sum = 0  # exact, event-derived
        self.max = 0
        # key = wake << 20 | (P + 1): [max, sum, histogram]; from events only
        self.by_wake: dict[int, list[Any]] = {}
        # set by the model: the state machine's P of an id (COUNTERs name Ps)
        self.proc: Callable[[int, int], P] | None = None

    def add(self, lat: int, b: int, wake: int, p: int, pp: P | None) -> None:
        """One ready -> execute latency of ``lat`` ns (bucket ``b``), woken by ``wake``."""
        self.hist.events[b] += 1
        self.sum += lat
        if lat > self.max:
            self.max = lat
        wk = (wake << 20) | (p + 1 if p >= 0 else 0)
        row = self.by_wake.get(wk)
        if row is None:
            row = self.by_wake[wk] = [0, 0, h.new_hist()]
        row[2][b] += 1
        row[1] += lat
        if lat > row[0]:
            row[0] = lat
        if pp is not None:
            pp.lat[b] += 1
            pp.lat_sum += lat
            if lat > pp.lat_max:
                pp.lat_max = lat

    def counters(self) -> Iterable[tuple[int, Handler]]:
        return ((Counter.SCHED_LAT, self.on_counter),)

    def on_counter(self, e: EventTuple) -> None:
        _ts, _, p, _m, _table, key, delta = e
        self.hist.seen = True
        if 0 <= key < LAT_BUCKETS:
            self.hist.kernel[key] += delta
            if p >= 0 and self.proc is not None:
                self.proc(p, e[0]).lat_counter[key] += delta

    def sources(self) -> Iterable[Counted[Any]]:
        return (self.hist,)

    def overall(self) -> LatencyStats:
        if self.hist.seen:
            return h.stats(self.hist.kernel)
        return h.stats(self.hist.events, exact_max=self.max, exact_sum=self.sum)

    def of_p(self, pp: P) -> LatencyStats:
        if self.hist.seen:
            return h.stats(pp.lat_counter)
        return h.stats(pp.lat, exact_max=pp.lat_max, exact_sum=pp.lat_sum)

    def section(self, at: object) -> dict[str, object]:
        merged: dict[str, list[Any]] = {}
        by_reason_proc: dict[tuple[str, int], tuple[int, int]] = {}
        for wk in sorted(self.by_wake):
            mx, total, hist = self.by_wake[wk]
            name = self.ctx.reason_name(wk >> 20)
            by_reason_proc[(name, (wk & 0xFFFFF) - 1)] = (sum(hist), total)
            row = merged.get(name)
            if row is None:
                merged[name] = [mx, total, list(hist)]
            else:
                row[0] = max(row[0], mx)
                row[1] += total
                h.merge_into(row[2], hist)
        by_reason = {
            name: h.stats(hist, exact_max=mx, exact_sum=total)
            for name, (mx, total, hist) in sorted(merged.items())
        }
        return {
            "sched_latency": self.overall(),
            "latency_by_reason": by_reason,
            "latency_by_reason_proc": by_reason_proc,
        }
