"""The pure rendering helpers: what a timeline cell shows, bars, durations, the latency axis."""

from __future__ import annotations

from gmpmon.model.snapshot import LatencyStats, PState, Span
from gmpmon.tui.render import (
    UNKNOWN_CELL,
    TimelineGrid,
    bar,
    fmt_count,
    fmt_ns,
    latency_spark,
    sampled_cell,
    short_stack,
    stw_band,
    stw_shares,
    timeline_cells,
)

R, S, IDLE = PState.RUNNING, PState.SEARCHING, PState.IDLE


def test_running_share_of_a_cell_is_its_height() -> None:
    spans = [Span(0, 25, R, 7), Span(25, 100, S), Span(100, 200, R, 8)]
    assert timeline_cells(spans, (), 0, 200, 2) == [(R, 7, 2), (R, 8, 8)]


def test_brief_runs_still_show_and_otherwise_the_longest_state_wins() -> None:
    spans = [Span(0, 2, R, 7), Span(2, 40, S), Span(40, 100, IDLE)]
    assert timeline_cells(spans, (), 0, 100, 1) == [(R, 7, 1)]
    spans = [Span(0, 40, S), Span(40, 100, IDLE)]
    assert timeline_cells(spans, (), 0, 100, 1) == [(IDLE, 0, 8)]


def test_syscall_time_shows_like_running_and_the_most_running_goroutine_names_the_cell() -> None:
    spans = [Span(0, 10, R, 3), Span(10, 40, R, 4), Span(40, 100, PState.SYSCALL, 5)]
    assert timeline_cells(spans, (), 0, 100, 1) == [(R, 4, 3)]
    spans = [Span(0, 50, PState.SYSCALL, 5), Span(50, 100, IDLE)]
    assert timeline_cells(spans, (), 0, 100, 1) == [(PState.SYSCALL, 5, 4)]


def test_uncovered_time_is_unknown_and_spans_outside_are_ignored() -> None:
    spans = [Span(-500, -100, R, 1), Span(50, 100, R, 2)]
    assert timeline_cells(spans, (), 0, 100, 4) == [UNKNOWN_CELL] * 2 + [(R, 2, 8)] * 2


def test_stop_the_world_overrides_the_cells_it_stopped_for_half_their_time() -> None:
    spans = [Span(0, 100, R, 1)]
    # 52-53: a tenth of cell 5, the P's work shows; 64-79: half of cell 6, all of cell 7
    cells = timeline_cells(spans, [(52, 53), (65, 80)], 0, 100, 10)
    assert cells[5] == (R, 1, 8)
    assert cells[6] == cells[7] == (PState.GCSTOP, 0, 8)
    assert [c for i, c in enumerate(cells) if i not in (6, 7)] == [(R, 1, 8)] * 8


def test_stw_band_is_the_share_of_each_cell_stopped() -> None:
    """Issue 27: Prometheus stops the world ~25 times a second; a mark per pause on every P
    hid the Ps' work. The STW line shows how much of each cell was stopped instead."""
    band = stw_band([(52, 53), (65, 80), (95, 100)], 0, 10, 10)
    assert band is not None and band.plain == "     ▁▄█ ▄"
    assert stw_shares([(52, 53), (65, 80)], 0, 10, 10)[5:8] == [0.1, 0.5, 1.0]
    assert stw_band([], 0, 10, 10) is None
    assert stw_band([(200, 300)], 0, 10, 10) is None  # out of view


def test_grid_reuses_finished_cells_and_matches_a_full_recompute() -> None:
    # A P alternating 3 units running / 5 searching, growing as snapshots come in.
    spans: list[Span] = []
    for k in range(400):
        spans += [Span(8 * k, 8 * k + 3, R, k % 5 + 1), Span(8 * k + 3, 8 * k + 8, S)]
    grid = TimelineGrid()
    cell, width = 20, 30
    for now in (100, 350, 351, 900, 2000, 1500, 3199):  # 1500: a replay seeking back
        shown = [sp if sp.end <= now else Span(sp.start, now, sp.state, sp.goid)
                 for sp in spans if sp.start < now]
        stw = [(now - 50, now - 45)]
        row = grid.row(0, shown, stw, now, cell, width)
        first = (now // cell - width + 1) * cell
        assert row == timeline_cells(shown, stw, first, first + cell * width, width), now
    assert grid.row(0, [], (), 3300, cell, width)[-1] == UNKNOWN_CELL
    assert len(grid._done[0]) <= width


def test_sampled_cell_runs_where_samples_saw_a_cpu_else_the_off_cpu_status() -> None:
    """Sample mode: perf samples (on CPU) first; the 50 Hz P status reads fill the rest only
    with states off the CPU; a status read saying running with no sample is not observed."""
    on_cpu = [Span(10, 11, R, 7), Span(30, 31, S)]
    status = [Span(0, 20, R, 7), Span(20, 60, IDLE), Span(60, 80, PState.SYSCALL, 9),
              Span(80, 100, R, 5)]
    assert sampled_cell(on_cpu, status, 0, 20) == (R, 7, 1)
    assert sampled_cell(on_cpu, status, 20, 40) == (S, 0, 8)  # g0 searching, seen on a CPU
    assert sampled_cell(on_cpu, status, 40, 60) == (IDLE, 0, 8)
    assert sampled_cell(on_cpu, status, 60, 80) == (PState.SYSCALL, 9, 8)
    assert sampled_cell(on_cpu, status, 80, 100) == UNKNOWN_CELL  # "running", no sample
    # The grid draws a sampled row with the same rule, and keeps no unsettled cell.
    grid = TimelineGrid()
    row = grid.row(0, status, (), 99, 20, 5, sampled=on_cpu, settle_ns=30)
    assert row == [sampled_cell(on_cpu, status, 20 * i, 20 * i + 20) for i in range(5)]
    assert sorted(grid._done[0]) == [0, 1, 2]


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
