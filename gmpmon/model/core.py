"""The scheduler model: event batches in, a frozen Snapshot out. Pure and deterministic.

The model is a set of parts (gmpmon/model/part.py) behind one dispatch table (kind ->
handler): the G/P state machine (sched.py), the aggregates it feeds (latency.py, parks.py)
and the registered ones (registry.py: steals, syscalls, preemption, creation/exit, STW,
waits, probe hits, runtime counters). The view (view.py) builds the Snapshot from the parts.
This module owns what is about the stream rather than the scheduler:

- Events are applied in timestamp order: a batch is merged into a small pending buffer and
  only events older than (newest - reorder_ns) are applied; ``flush()`` drains the rest.
- LOST, DROP (records capture itself dropped) and WINDOW reset the picture (every part's
  ``reset``; the state machine bumps its epoch: every G learnt before is UNKNOWN again).
- Duty-cycled capture (``default`` mode): kinds only hot probes emit (HOT_KINDS) are dropped
  between a WINDOW 0 and the next WINDOW 1.
- In-kernel COUNTER events go to the part that owns their table (``Part.counters``); each
  such aggregate chooses "kernel counter or per-event count" through one helper (Counted).
- Memory is bounded: P timelines keep ``window_ns`` of time: their last spans exactly (as
  many as a Snapshot carries), the older ones folded into time buckets whose memory has a
  fixed cap (model/phistory.py); the G table holds at most ``max_goroutines`` (oldest
  evicted, counts stay exact).

No wall clock is read here: the same batches give the same Snapshot, live or on replay.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import deque
from collections.abc import Callable
from operator import itemgetter

from gmpmon.events import Batch, EventTuple, Header, Kind
from gmpmon.model.cost import CostTracker
from gmpmon.model.evidence import FindingsTracker
from gmpmon.model.latency import Latency
from gmpmon.model.legal import LEGAL_G, LEGAL_P, LEGAL_P_IDLE_FROM
from gmpmon.model.parks import Parks
from gmpmon.model.part import (
    WAKE_CREATED,
    WAKE_GOSCHED,
    WAKE_NAMES,
    WAKE_PREEMPTED,
    Context,
    Handler,
    Part,
)
from gmpmon.model.registry import PARTS
from gmpmon.model.sched import MAX_PROCS, Sched
from gmpmon.model.snapshot import Snapshot
from gmpmon.model.steals import Steals

WINDOW_SPANS = 256
# Events the reorder buffer holds at most: beyond, the oldest are applied (as if later ones
# had arrived late). Live, it holds reorder_ns of events (~10k at 2M events/s); a recording
# whose timestamps barely move would otherwise be held whole until the end.
MAX_PENDING = 1 << 17

__all__ = [
    "HOT_KINDS",
    "LEGAL_G",
    "LEGAL_P",
    "LEGAL_P_IDLE_FROM",
    "MAX_PROCS",
    "WAKE_CREATED",
    "WAKE_GOSCHED",
    "WAKE_NAMES",
    "WAKE_PREEMPTED",
    "Model",
]

_TS = itemgetter(0)
MAX_SPANS_TOTAL = 200_000  # closed P spans kept, all Ps together (~100 bytes each)
SNAPSHOT_SPANS_TOTAL = 128_000  # spans a Snapshot carries, all Ps together

# What the duty-cycled probes produce (probetable.py: hot=True): the timeline. In a windowed
# capture these count only inside windows; everything else counts all the time. Not derived
# from the probe table: MUTEX/MUTEX_ADDR also come from the cold lock_exit (sema_exit checks
# the window generation itself), and SYSCALL_ENTER / PREEMPTED from cold probes too, which
# are dropped with their hot siblings so that a window's stream stays consistent.
HOT_KINDS = frozenset(
    int(k)
    for k in (
        Kind.EXECUTE,
        Kind.FIND_RUNNABLE,
        Kind.PARK,
        Kind.READY,
        Kind.WAKE,
        Kind.GO_CREATE,
        Kind.GO_EXIT,
        Kind.SYSCALL_ENTER,
        Kind.SYSCALL_EXIT,
        Kind.PREEMPTED,
        Kind.STEAL,
        Kind.P_IDLE,
    )
)

# (P id, start, end, PState value, goid) of every closed span, for exporters.
SpanSink = Callable[[int, int, int, int, int], None]


class _Fanout:
    """Several parts' handlers of one kind, in order. A bound method (``call``), not a
    closure: replay deep-copies the model, and a copied closure would still call the
    original parts."""

    __slots__ = ("fns",)

    def __init__(self, fns: list[Handler]) -> None:
        self.fns = tuple(fns)

    def call(self, e: EventTuple) -> None:
        for fn in self.fns:
            fn(e)


class Model:
    """Feed batches, take snapshots. See the module docstring for the semantics."""

    def __init__(
        self,
        header: Header,
        *,
        window_ns: int = 10_000_000_000,
        reorder_ns: int = 5_000_000,
        max_goroutines: int = 100_000,
        goroutine_view: int = 500,
        recent_dead: int = 100,
        max_spans: int = 20_000,
        snapshot_spans: int = 2_000,
        on_span: SpanSink | None = None,
        history: bool = True,
    ) -> None:
        self.header = header
        self.window_ns = window_ns
        self.reorder_ns = reorder_ns
        self.goroutine_view = goroutine_view
        # Memory and snapshot time bounded whatever GOMAXPROCS: the per-P span lists share
        # fixed totals (unchanged up to 10 / 64 Ps; 256 Ps get 1,000 spans each, 500 per view).
        nprocs = max(header.gomaxprocs, 1)
        self.snapshot_spans = max(64, min(snapshot_spans, SNAPSHOT_SPANS_TOTAL // nprocs))
        # Closed spans kept exactly per P: no more than a Snapshot carries, so that every
        # span is either in the Snapshot or folded into the P's buckets (ProcView.history).
        self.max_spans = min(max(1_000, min(max_spans, MAX_SPANS_TOTAL // nprocs)),
                             self.snapshot_spans - 1)
        self.ctx = Context(header, window_ns)
        self.stacks = self.ctx.stacks
        self._pending: list[EventTuple] = []
        self.applied_ts = -1  # newest ts applied
        self.first_ts = -1
        self._rate: deque[tuple[int, int]] = deque()  # (ts, events_total) per applied chunk
        self.events_total = 0
        self.events_lost = 0
        self.first_lost_ts = -1  # the first LOST record (the ring refused records)
        self.late_events = 0

        # What the findings rules need that the Snapshot does not keep (model/evidence.py):
        # fed every applied chunk, and by the state machine where it sees what they need.
        # The rules run above the model (gmpmon.findings.engine.snapshot_with_findings).
        self.findings = FindingsTracker(header, self.stacks)
        self.latency = Latency(self.ctx)
        self.parks = Parks(self.ctx)
        self.sched = Sched(
            self.ctx, self.latency, self.parks, max_goroutines=max_goroutines,
            recent_dead=recent_dead, max_spans=self.max_spans, on_span=on_span,
            findings=self.findings, history=history,
        )
        self.latency.proc = self.sched.proc
        self.parts: list[Part] = [self.sched, self.latency, self.parks]
        self.parts += [make(self.ctx) for make in PARTS]
        self.steals = next(p for p in self.parts if isinstance(p, Steals))
        self.cost = next(p for p in self.parts if isinstance(p, CostTracker))

        # Hot probes attached: events are exact. sample/default start without them.
        self._hot = header.mode not in ("sample", "default")
        self.sched.hot = self._hot
        self.sched.account_samples = header.mode == "sample"
        self._windows_seen = header.mode == "default"
        self._hot_since = self.sched.hot_since = 0 if self._hot else -1
        self.windows = 0
        self.windows_covered_ns = 0
        # The last duty-cycle windows, (start, end): the Procs strip marks where its cells
        # are the probes' (the timeline keeps ~seconds, so a few hundred windows suffice).
        self._window_spans: deque[tuple[int, int]] = deque(maxlen=WINDOW_SPANS)

        by_kind: dict[int, list[Handler]] = {}
        counters: dict[int, list[Handler]] = {}
        for part in self.parts:
            for kind, fn in part.handlers():
                by_kind.setdefault(int(kind), []).append(fn)
            for table, fn in part.counters():
                counters.setdefault(int(table), []).append(fn)
        by_kind[Kind.COUNTER] = [self._on_counter]
        by_kind[Kind.LOST] = [self._on_lost]
        by_kind[Kind.WINDOW] = [self._on_window]
        by_kind[Kind.DROP] = [self._on_drop]
        handlers: list[Handler | None] = [None] * 256
        for kind, fns in by_kind.items():
            handlers[kind] = fns[0] if len(fns) == 1 else _Fanout(fns).call
        self._counters = {t: fns[0] if len(fns) == 1 else _Fanout(fns).call
                          for t, fns in counters.items()}
        # Kinds only the hot (duty-cycled) probes emit. Between a WINDOW 0 and the next
        # WINDOW 1 they are dropped: capture announces the window's end before it detaches,
        # and a partial stream (parks and readies without executes) would be nonsense.
        self._hot_table = handlers
        self._cold_table = [None if k in HOT_KINDS else fn for k, fn in enumerate(handlers)]
        # Mutated in place (slice assignment) so that _apply's local alias follows a WINDOW
        # event in the middle of a chunk.
        self._handlers = list(handlers if self._hot or not self._windows_seen else self._cold_table)

    @property
    def on_span(self) -> SpanSink | None:
        """Exporters that need every span (perfetto) get each closed span here."""
        return self.sched.on_span  # type: ignore[return-value]

    @on_span.setter
    def on_span(self, sink: SpanSink | None) -> None:
        self.sched.on_span = sink

    # ------------------------------------------------------------------ input

    def feed(self, batch: Batch) -> None:
        if batch.stacks:
            self.stacks.update(batch.stacks)
        ev = batch.events
        if not ev:
            return
        pend = self._pending
        if pend and ev[0][0] < pend[-1][0]:
            pend.extend(ev)
            pend.sort(key=_TS)  # stable: same-ts events keep their order (MUTEX_ADDR, MUTEX)
        else:
            pend.extend(ev)
            # Capture promises ts order within a batch; check cheaply, sort if broken.
            if ev[-1][0] < ev[0][0] or not _sorted_ts(ev):
                pend.sort(key=_TS)
        cut = bisect_right(pend, pend[-1][0] - self.reorder_ns, key=_TS)
        cut = max(cut, len(pend) - MAX_PENDING)
        if cut:
            ready = pend[:cut]
            del pend[:cut]
            self._apply(ready)

    def flush(self) -> None:
        """Apply everything still held in the reorder buffer (end of input)."""
        if self._pending:
            ready = self._pending
            self._pending = []
            self._apply(ready)

    def _batch_begins(self, events: list[EventTuple]) -> None:
        """Once a batch (the Model's and the SpanModel's _apply): late events counted, the
        first timestamp set."""
        if events[0][0] < self.applied_ts:
            self.late_events += sum(1 for e in events if e[0] < self.applied_ts)
        if self.first_ts < 0:
            self.first_ts = events[0][0]
            self.findings.begin(self.first_ts)

    def _apply(self, events: list[EventTuple]) -> None:
        self._batch_begins(events)
        handlers = self._handlers
        for e in events:
            fn = handlers[e[1] & 0xFF]
            if fn is not None:
                fn(e)
        self.findings.apply(events)
        last = events[-1][0]
        if last > self.applied_ts:
            self.applied_ts = last
        self.events_total += len(events)
        rate = self._rate
        rate.append((self.applied_ts, self.events_total))
        while len(rate) > 2 and rate[1][0] <= self.applied_ts - 1_000_000_000:
            rate.popleft()

    # ------------------------------------------------------------------ the stream

    def _on_counter(self, e: EventTuple) -> None:
        fn = self._counters.get(e[4])
        if fn is not None:
            fn(e)

    def _reset(self, ts: int) -> None:
        for part in self.parts:
            part.reset(ts)

    def _on_drop(self, e: EventTuple) -> None:
        self.cost.on_drop(e)
        self._reset(e[0])

    def _on_lost(self, e: EventTuple) -> None:
        self.events_lost += e[5]
        if self.first_lost_ts < 0:
            self.first_lost_ts = e[0]
        self._reset(e[0])

    def _on_window(self, e: EventTuple) -> None:
        ts = e[0]
        self._windows_seen = True
        self.sched.account_samples = False
        if e[5]:
            if self._hot:
                return
            self._hot = self.sched.hot = True
            self._handlers[:] = self._hot_table
            self._hot_since = self.sched.hot_since = ts
            self.windows += 1
            self.sched.restart_counting(ts)
        else:
            if not self._hot:
                return
            self._hot = self.sched.hot = False
            self._handlers[:] = self._cold_table
            if self._hot_since >= 0:
                self.windows_covered_ns += max(0, ts - self._hot_since)
                self._window_spans.append((self._hot_since, ts))
            self._hot_since = self.sched.hot_since = -1
            self._reset(ts)

    # ------------------------------------------------------------------ output

    def reason_name(self, idx: int) -> str:
        return self.ctx.reason_name(idx)

    @property
    def window(self) -> str:
        if self._windows_seen:
            return "windows"
        if self.header.mode == "sample":
            return "sampled"
        return "exact"

    def covered_ns(self, now: int, start: int) -> int:
        """Time with hot probes attached (the whole run in full mode)."""
        covered = self.windows_covered_ns
        if self._hot and self._hot_since >= 0:
            covered += max(0, now - max(self._hot_since, start))
        return covered

    def window_spans(self, now: int) -> tuple[tuple[int, int], ...]:
        """The last duty-cycle windows (start, end), the open one ending at ``now``; () when
        the run has no windows (full and sample mode)."""
        if not self._windows_seen:
            return ()
        spans = tuple(self._window_spans)
        if self._hot and self._hot_since >= 0:
            spans += ((self._hot_since, max(now, self._hot_since)),)
        return spans

    def event_rate(self) -> float:
        """Events/s over the last second of the stream."""
        if len(self._rate) >= 2:
            (t0, n0), (t1, n1) = self._rate[0], self._rate[-1]
            if t1 > t0:
                return (n1 - n0) * 1e9 / (t1 - t0)
        return 0.0

    def snapshot(self, light: bool = False) -> Snapshot:
        """The parts' picture now, without findings: the findings engine sits above the
        model and fills them in (gmpmon.findings.engine.snapshot_with_findings).
        ``light``: without the costly parts' sections (the kernel views), for a line."""
        from gmpmon.model.view import build

        return build(self, light)


def _sorted_ts(ev: list[EventTuple]) -> bool:
    # A plain loop: ~14 ns/event, faster than all(map(operator.le, ...)) (~22 ns).
    prev = ev[0][0]
    for e in ev:
        t = e[0]
        if t < prev:
            return False
        prev = t
    return True
