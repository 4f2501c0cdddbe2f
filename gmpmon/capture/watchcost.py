"""Capture's side of default mode's budget controller (capture/hotctl.py, budget.py): the two
figures it hands the controller besides the probe hits (what a probe hit costs gmpmon's own
threads, and the hot-hit rate the runtime's own counters say before and between windows), and
the events it makes of the controller's answers (WINDOW, COST)."""

from __future__ import annotations

from collections import deque

from gmpmon.capture.budget import CostStatus
from gmpmon.capture.hotparent import WindowFact
from gmpmon.events import COST_WATCH_SHIFT, ColdGroup, EventTuple, Kind
from gmpmon.model.cost import TRAPS_OVER

WATCH_SPAN = 40  # intervals (10 s) in the slope
WATCH_SPREAD = 5  # the busiest interval has this many times the records of the quietest
PRIOR_SPAN_NS = 1_000_000_000  # the runtime counters' rates sent to the controller: over this
# gmpmon's CPU per record: at most this much. Before the slope is known it is taken as CPU /
# records, which counts the fixed work of quiet intervals too (~2 ms for ~200 records), and a
# slope over one or two busy intervals moves with whatever else they held (a snapshot, a
# census). The slopes measured 1.2-2.5 µs on net/http; unbounded, a quiet first second of the
# ping-pong under load said 100 µs a record and charged one 20-ms window 0.5 s.
WATCH_MAX_S_PER_RECORD = 3e-6
WATCH_MIN_HITS = 1000  # probe hits in the span below which records per hit are taken as 1


class WatchCost:
    """gmpmon's CPU per probe hit: the slope of its threads' CPU (the capture thread's ring
    reads and releases, the model's feeding) against the records of each interval, over the
    last WATCH_SPAN of them, x ring records per probe hit over the same span. A slope, not
    CPU / records: a quiet interval's ~200 records cost ~2 ms of fixed work (6-8 µs a record),
    a window's 10-20k records ~1.2-2.5 µs each. Until the span holds quiet and busy intervals
    both, CPU / records."""

    def __init__(self) -> None:
        self._prev: tuple[float, int, int, int] | None = None
        self._span: deque[tuple[float, float, float, float]] = deque(maxlen=WATCH_SPAN)

    def per_hit(self, cpu_s: float, records: int, ring_records: int, hits: int
                ) -> float | None:
        """Seconds of gmpmon's CPU per probe hit, from the running totals now; None until
        there is an interval to measure."""
        cur = (cpu_s, records, ring_records, hits)
        prev, self._prev = self._prev, cur
        if prev is None:
            return None
        cpu, recs, rrec, dhits = (a - b for a, b in zip(cur, prev, strict=True))
        span = self._span
        span.append((recs, cpu, rrec, dhits))
        xs = [r[0] for r in span]
        # Ring records per probe hit: ~1 for the hot probes (2 for a semaphore's wait). With
        # few hits in the span (no window yet) the ratio says nothing: the ping-pong's cold
        # probes are hit a few times a second while its ring takes the perf sampler's
        # records, and 50 records "per hit" charged one window 18 s.
        span_hits = sum(r[3] for r in span)
        records_per_hit = (min(max(sum(r[2] for r in span) / span_hits, 0.5), 2.0)
                           if span_hits >= WATCH_MIN_HITS else 1.0)
        if max(xs) < WATCH_SPREAD * (min(xs) + 100):
            # No spread yet (no window in the span, or a target that is quiet throughout):
            # CPU / records, which counts the fixed work too, an overestimate until then.
            if sum(xs) <= 0:
                return None
            per_record = sum(r[1] for r in span) / sum(xs)
            return min(per_record, WATCH_MAX_S_PER_RECORD) * records_per_hit
        n = len(span)
        mx = sum(xs) / n
        my = sum(r[1] for r in span) / n
        var = sum((x - mx) ** 2 for x in xs)
        slope = sum((r[0] - mx) * (r[1] - my) for r in span) / var
        return min(max(slope, 0.0), WATCH_MAX_S_PER_RECORD) * records_per_hit


class PriorRate:
    """The runtime counters' timeToRun samples and syscalls per second over the last
    PRIOR_SPAN_NS: what the controller sizes windows with (budget.prior_hits_per_s)."""

    def __init__(self) -> None:
        self._span: deque[tuple[int, int, int]] = deque()

    def rates(self, now: int, tracked: int, syscalls: int) -> tuple[float, float] | None:
        span = self._span
        span.append((now, tracked, syscalls))
        while len(span) > 2 and now - span[1][0] >= PRIOR_SPAN_NS:
            span.popleft()
        if len(span) < 2 or now - span[0][0] < PRIOR_SPAN_NS // 2:
            return None
        dt = (now - span[0][0]) * 1e-9
        return (tracked - span[0][1]) / dt, (syscalls - span[0][2]) / dt


def window_event(f: WindowFact) -> EventTuple:
    """WINDOW: a0 1 opened, 2 extended (a burst), 3 every hot probe in, 0 closed; a1 the
    planned length, or the overstay at the close."""
    a1 = f.planned_ns if f.on else f.overstay_ns
    a0 = (3 if f.whole else 2 if f.extended else 1) if f.on else 0
    return (f.ts, Kind.WINDOW, -1, 0, 0, a0, a1)


def cost_events(now: int, c: CostStatus) -> list[EventTuple]:
    """COST: the controller's estimate of what the target pays (model/cost.py decodes it),
    and COLD_CUT once the governor has cut the cold sync.Mutex probes back."""
    counts = c.overstays | c.bursts << 20 | c.cut_short << 40
    m = round(c.budget_pct * 1000) | round(c.watch_cost_s * 1e6) << COST_WATCH_SHIFT
    out: list[EventTuple] = [(now, int(Kind.COST), -1, m, counts, int(c.cost_s * 1e9),
                              int(c.target_cpu_s * 1e9))]
    if c.mutex_every_max > 1 or c.mutex_paused_s > 0:
        cm = c.mutex_every | (TRAPS_OVER if c.cold_traps_over else 0)
        g = int(ColdGroup.MUTEX) | round(c.mutex_duty * 1000) << 8
        a0 = c.mutex_every_max | int(c.mutex_paused_s * 1000) << 16
        out.append((now, int(Kind.COLD_CUT), -1, cm, g, a0, int(c.mutex_sampled_s * 1e9)))
    return out
