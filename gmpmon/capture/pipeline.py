"""The bounded queue between the ring reader and the model, and what is dropped when full.

Memory is bounded by design: the queue holds at most MAX_QUEUED_EVENTS events (~270 bytes
each, tuple and ints, by tracemalloc: ~68 MB at the bound). 100,000 (~27 MB) was tried to
bring the full-mode soak under 300 MB: full mode at 8 Ps then saw 67% of a 1-s phase's
goroutine starts under CI's load, none lost in the kernel
(test_many_ps_against_runtime_trace[8]): the queue's bound is what absorbs the model's
stalls, so it stays at 250,000.

When the model falls that far behind, the reader does not block (a blocked reader lets the
kernel ring buffer overflow, and makes the end of a run wait for the backlog): it drops the
per-event records of the batch at hand, keeps what aggregates and bookkeeping need (COUNTER
deltas, WINDOW, COST, LOST, STW, mutex waits...), and says how many it dropped in a DROP
event, so that the model forgets what the missing records would have changed and the
summary counts them where they were dropped.
"""

from __future__ import annotations

import os
import queue
import threading

from gmpmon.events import (
    RING_COUNTERS_FULL,
    RING_CUT,
    RING_MARKS,
    RING_READ,
    RING_REFUSED,
    RING_WRITTEN,
    Batch,
    Counter,
    EventTuple,
    Kind,
    Stage,
)

MAX_QUEUED_EVENTS = 250_000


def max_queued_events() -> int:
    """The queue's bound; GMPMON_MAX_QUEUED_EVENTS makes it smaller, so that a test can make
    the reader thin records on a real capture (tests/integration/test_busy_oracle.py)."""
    v = os.environ.get("GMPMON_MAX_QUEUED_EVENTS", "")
    return int(v) if v.isdigit() and 0 < int(v) <= MAX_QUEUED_EVENTS else MAX_QUEUED_EVENTS

MAX_QUEUED_BATCHES = 4096  # ~40 s of 10-ms polls: the event bound comes first

# Per-event records that only rebuild state and timelines (dropping them loses detail, never
# a total: every total has an in-kernel counter, gmpmon/model/counts.py): the hot probes' and
# the sampler's.
DROPPABLE = frozenset(int(k) for k in (
    Kind.EXECUTE, Kind.FIND_RUNNABLE, Kind.PARK, Kind.READY, Kind.GO_CREATE, Kind.GO_EXIT,
    Kind.SYSCALL_ENTER, Kind.SYSCALL_EXIT, Kind.PREEMPTED, Kind.STEAL, Kind.P_IDLE,
    Kind.P_SAMPLE, Kind.SCHED_SAMPLE,
))


# At the end (--duration, Ctrl-C) what is still queued after the cut time is not worked
# through: only totals and bookkeeping are kept (COUNTER, LOST, WINDOW, COST, DROP, TRIGGER,
# STW, mutex waits, the runtime counters and the census). The perf samples, wake-ups,
# preemption requests and hand-offs go too: at 64 Ps they alone kept the model busy for
# seconds past the end.
END_DROPPABLE = DROPPABLE | frozenset(int(k) for k in (
    Kind.WAKE, Kind.CPU_SAMPLE, Kind.PREEMPT_REQ, Kind.HANDOFF,
))


def thin(events: list[EventTuple], stage: Stage) -> tuple[list[EventTuple], int]:
    """``events`` without the droppable records (at CUT_AT_END: END_DROPPABLE), plus a DROP
    event counting them (if any); and how many were dropped."""
    drop = END_DROPPABLE if stage == Stage.CUT_AT_END else DROPPABLE
    kept = [e for e in events if e[1] not in drop]
    n = len(events) - len(kept)
    if n:
        kept.append((events[-1][0], int(Kind.DROP), -1, 0, 0, n, int(stage)))
    return kept, n


class BatchQueue:
    """Batches from one producer (the reader) to one consumer (the model), bounded in
    events; ``put`` does not wait for a slow consumer (only past MAX_QUEUED_BATCHES tiny
    batches, which the event bound makes unreachable in practice)."""

    def __init__(self, max_events: int | None = None) -> None:
        self.max_events = max_queued_events() if max_events is None else max_events
        self._q: queue.Queue[Batch | None] = queue.Queue(maxsize=MAX_QUEUED_BATCHES)
        self._lock = threading.Lock()
        self.queued = 0  # events in the queue now
        self.dropped = 0  # records dropped because it was full

    def put(self, b: Batch) -> None:
        with self._lock:
            fits = self.queued == 0 or self.queued + len(b.events) <= self.max_events
        if not fits:
            events, n = thin(b.events, Stage.READER_QUEUE)
            self.dropped += n
            b = Batch(events, b.stacks)
        with self._lock:
            self.queued += len(b.events)
        self._q.put(b)

    def put_end(self) -> None:
        self._q.put(None)

    def get(self, timeout: float | None = None) -> Batch | None:
        b = self._q.get(timeout=timeout)
        if b is not None:
            with self._lock:
                self.queued -= len(b.events)
        return b


def ring_ledger(now: int, kernel: tuple[int, int, int, int], read: int, cut: int,
                prev: dict[int, int], out: list[EventTuple]) -> None:
    """Counter.RING deltas since ``prev`` (updated): what the probes wrote and lost
    (``kernel``: BpfProgram.ring_totals()), what the reader read and cut unread. Once
    drained, written + marks == read + cut + refused."""
    written, refused, full, marks = kernel
    totals = {RING_WRITTEN: written, RING_READ: read, RING_CUT: cut,
              RING_REFUSED: refused, RING_COUNTERS_FULL: full, RING_MARKS: marks}
    for key, total in totals.items():
        d = total - prev.get(key, 0)
        if d:
            prev[key] = total
            out.append((now, Kind.COUNTER, -1, 0, Counter.RING, key, d))
