"""Snapshot.window_spans: default mode's duty-cycle windows as the model saw them open and
close (WINDOW 1 / WINDOW 0), on a recording of the demo in default mode; WINDOW 3 (every
hot site in) changes neither."""

from __future__ import annotations

from pathlib import Path

from gmpmon.events import Kind
from gmpmon.record import read_recording
from gmpmon.replay import replay_all
from tests.unit.test_model_scenarios import SLEEP, ev, proc, run

DATA = Path(__file__).resolve().parents[1] / "data"


def test_window_spans_are_the_windows_opened_and_closed() -> None:
    path = str(DATA / "demo-default-kernel.gmp")
    snap = replay_all(read_recording(path))
    opened: list[int] = []
    spans: list[tuple[int, int]] = []
    for batch in read_recording(path):
        for e in batch.events:
            if e[1] != Kind.WINDOW:
                continue
            if e[5] == 1 and not opened:
                opened.append(e[0])
            elif e[5] == 0 and opened:
                spans.append((opened.pop(), e[0]))
    assert len(spans) >= 2
    got = snap.window_spans
    if opened:  # the recording ended inside a window: it runs to the snapshot's now
        assert got[-1] == (opened[0], snap.now)
        got = got[:-1]
    assert got == tuple(sorted(spans))
    assert snap.windows_covered_ns == sum(b - a for a, b in snap.window_spans)
    assert all(a < b for a, b in got)
    assert all(got[i][1] <= got[i + 1][0] for i in range(len(got) - 1))  # disjoint, sorted


def test_window_3_every_hot_site_in_changes_nothing_in_the_model() -> None:
    # WINDOW 3 (capture: the controller's link is in, every hot site records) lies inside the
    # window WINDOW 1 opened: the same counts, the same window, with it or without it.
    running = 1 | (2 << 8)
    base = [ev(0, Kind.P_SAMPLE, p=0, m=100, g=1, a0=running), ev(100, Kind.WINDOW, a0=1),
            ev(150, Kind.PARK, p=0, m=100, g=1, a0=SLEEP), ev(300, Kind.WINDOW, a0=0)]
    with3 = [*base[:2], ev(120, Kind.WINDOW, a0=3, a1=20_000), *base[2:]]
    a, b = run(base, mode="default"), run(with3, mode="default")
    assert b.windows == a.windows == 1 and b.windows_covered_ns == a.windows_covered_ns
    assert proc(b, 0).running_ns == proc(a, 0).running_ns == 50_000
