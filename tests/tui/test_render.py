"""The pure rendering helpers: what a timeline cell shows, bars, durations, the latency axis."""

from __future__ import annotations

from gmpmon.model.snapshot import LatencyStats, PState, Span
from gmpmon.tui.render import bar, fmt_count, fmt_ns, latency_spark, short_stack, timeline_cells

R, S, IDLE = PState.RUNNING, PState.SEARCHING, PState.IDLE


def test_cell_shows_the_state_that_covered_most_of_it() -> None:
    spans = [Span(0, 30, R, 7), Span(30, 100, S), Span(100, 190, IDLE), Span(190, 200, R, 8)]
    cells = timeline_cells(spans, (), 0, 200, 2)
    assert cells == [(S, 0), (IDLE, 0)]
    assert timeline_cells(spans, (), 0, 200, 20)[0] == (R, 7)
    assert timeline_cells(spans, (), 0, 200, 20)[-1] == (R, 8)


def test_uncovered_time_is_unknown_and_spans_outside_are_ignored() -> None:
    spans = [Span(-500, -100, R, 1), Span(50, 100, R, 2)]
    assert timeline_cells(spans, (), 0, 100, 4) == [(PState.UNKNOWN, 0)] * 2 + [(R, 2)] * 2


def test_stop_the_world_overrides_every_cell_it_touches() -> None:
    spans = [Span(0, 100, R, 1)]
    cells = timeline_cells(spans, [(52, 53)], 0, 100, 10)
    assert cells[5] == (PState.GCSTOP, 0)
    assert [c for i, c in enumerate(cells) if i != 5] == [(R, 1)] * 9


def test_many_tiny_spans_are_sampled_and_agree_with_the_exact_answer() -> None:
    # 3 units running, 1 unit searching, repeated far more often than there are cells.
    spans = []
    for k in range(10_000):
        spans += [Span(4 * k, 4 * k + 3, R, 5), Span(4 * k + 3, 4 * k + 4, S)]
    cells = timeline_cells(spans, (), 0, 40_000, 10)  # 20000 spans > 8 * 10: sampled
    assert cells == [(R, 5)] * 10
    exact = timeline_cells(spans[:100], (), 0, 200, 10)  # 100 spans <= 8 * 10: exact
    assert exact == [(R, 5)] * 10


def test_bar_is_proportional_and_never_empty_for_nonzero() -> None:
    assert bar(8, 8, 4) == "████"
    assert bar(4, 8, 4) == "██  "
    assert bar(1, 1000, 4).strip() == "▏"
    assert bar(0, 8, 4) == "    "
    assert bar(50, 8, 4) == "████"


def test_durations_and_counts_stay_short() -> None:
    assert [fmt_ns(v) for v in (850, 12_345, 4_100_000, 2_500_000_000, 200 * 10**9)] == [
        "850ns", "12.3µs", "4.1ms", "2.50s", "3m20s"]
    assert [fmt_count(v) for v in (999, 12_345, 4_560_000)] == ["999", "12.3k", "4.56M"]
    assert all(len(fmt_ns(10**k)) <= 6 for k in range(0, 13))


def test_latency_spark_puts_a_bucket_under_its_axis_label() -> None:
    stats = LatencyStats(count=5, histogram=((1 << 27, 5),))  # 134 ms
    spark, axis = latency_spark(stats)
    col = spark.plain.index("█")
    assert axis.plain[col:col + 5] == "100ms"


def test_short_stack_drops_the_lock_frames_and_reads_leaf_first() -> None:
    stack = ("runtime.goexit", "main.main", "main.work", "sync.(*Mutex).Lock",
             "internal/sync.(*Mutex).lockSlow")
    assert short_stack(stack) == "main.work < main.main"
    assert short_stack(("sync.(*Mutex).Lock",)) == "sync.(*Mutex).Lock"
