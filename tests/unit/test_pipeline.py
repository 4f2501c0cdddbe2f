"""The bounded reader -> model queue (gmpmon.capture.pipeline): it never holds more than
its bound, never blocks on a slow model, and every record it drops is counted."""

from __future__ import annotations

from gmpmon.capture.pipeline import DROPPABLE, BatchQueue, thin
from gmpmon.events import Batch, Counter, Kind, Stage
from gmpmon.export.json import summary
from gmpmon.model.snapshot import PState
from tests.unit.test_model_scenarios import ev, run


def hot_batch(t0: int, n: int) -> Batch:
    evs = [ev(t0 + i, Kind.EXECUTE, p=0, m=1, g=10 + i % 5) for i in range(n)]
    evs.append(ev(t0 + n, Kind.COUNTER, g=Counter.PARK_COUNT, a0=3, a1=2))
    return Batch(evs)


def test_queue_holds_at_most_its_bound_and_counts_what_it_drops() -> None:
    q = BatchQueue(max_events=1000)
    for i in range(10):  # the consumer is stuck: nothing is taken out
        q.put(hot_batch(i * 10_000, 400))
    assert q.queued <= 1000 + 10 * 2  # thinned batches keep their COUNTER and one DROP
    assert q.dropped == 8 * 400
    kinds: list[int] = []
    while q.queued:
        b = q.get(timeout=1)
        assert b is not None
        kinds += [e[1] for e in b.events]
    assert kinds.count(Kind.COUNTER) == 10  # aggregates are never dropped
    assert kinds.count(Kind.DROP) == 8


def test_thin_keeps_bookkeeping_and_says_how_many_went() -> None:
    evs = [*hot_batch(0, 5).events, ev(9, Kind.WINDOW, a0=0), ev(10, Kind.LOST, a0=3)]
    kept, n = thin(evs, Stage.CUT_AT_END)
    assert n == 5
    assert [e[1] for e in kept] == [Kind.COUNTER, Kind.WINDOW, Kind.LOST, Kind.DROP]
    assert kept[-1][5:] == (5, Stage.CUT_AT_END)
    assert all(e[1] not in DROPPABLE for e in kept)


def test_drops_are_counted_by_stage_in_the_summary() -> None:
    snap = run([
        ev(0, Kind.EXECUTE, p=0, m=1, g=7),
        ev(5, Kind.DROP, a0=120, a1=Stage.READER_QUEUE),
        ev(6, Kind.DROP, a0=30, a1=Stage.READER_QUEUE),
        ev(9, Kind.DROP, a0=4, a1=Stage.CUT_AT_END),
    ])
    assert summary(snap)["events"]["dropped"] == {"reader_queue": 150, "cut_at_end": 4}
    # Like LOST: what the model knew of G 7 is forgotten with the records.
    assert snap.procs[0].state == PState.UNKNOWN
