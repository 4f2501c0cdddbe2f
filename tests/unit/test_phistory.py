"""A busy P's timeline beyond its exact spans: the history buckets (gmpmon/model/phistory.py).

On a recording of Caddy under wrk in full mode (tests/data/caddy-wrk-full.gmp), each P makes
tens of thousands of transitions a second: its exact spans hold well under half of the
recording, and the Procs strip used to be blank before them (issue 27).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from gmpmon.model import Model
from gmpmon.model.core import MAX_PROCS
from gmpmon.model.phistory import BUCKET_BYTES, HISTORY_BYTES, bucket_ns_for, ring_len
from gmpmon.model.snapshot import ProcView, PState, Snapshot
from gmpmon.record import read_recording
from gmpmon.tui.render import UNKNOWN_CELL, TimelineGrid, history_start
from gmpmon.tui.widgets.procs import TIMELINE_CHOICES_NS

DATA = Path(__file__).resolve().parents[1] / "data"
BUSY = DATA / "caddy-wrk-full.gmp"
MS = 1_000_000
_FIELD = {PState.RUNNING: "running_ns", PState.IDLE: "idle_ns",
          PState.SEARCHING: "searching_ns", PState.SYSCALL: "syscall_ns",
          PState.GCSTOP: "gcstop_ns"}


def _replay(path: Path) -> tuple[Snapshot, dict[int, list[tuple[int, int, int]]]]:
    """The final Snapshot, and every span each P closed (the exporters' sink)."""
    rec = read_recording(str(path))
    every: dict[int, list[tuple[int, int, int]]] = {}
    model = Model(rec.header, on_span=lambda p, s, t, st, g: every.setdefault(p, []).append(
        (s, t, st)))
    for batch in rec:
        model.feed(batch)
    model.flush()
    return model.snapshot(), every


def test_a_busy_ps_time_is_all_there_its_history_and_its_exact_spans() -> None:
    snap, _ = _replay(BUSY)
    assert snap.mode == "full" and snap.events_lost == 0
    length = snap.now - snap.start
    for p in snap.procs:
        h = p.history
        # far more than the exact spans hold: the history has the most of the recording
        assert h is not None and p.timeline, p.id
        assert p.timeline[-1].end - p.timeline[0].start < length / 2
        # no gap: the history ends where the exact spans begin, and began with the capture
        assert h.end == p.timeline[0].start
        assert h.start - snap.start < 5 * MS
        # and it loses no time: per state, the buckets plus the spans are the P's totals
        per, _ = h.cell(h.start, h.end)
        for st, name in _FIELD.items():
            spans = sum(s.end - s.start for s in p.timeline if s.state is st)
            assert per[st] + spans == getattr(p, name), (p.id, st)


def test_a_bucket_aligned_cell_has_the_time_of_every_span_in_it() -> None:
    snap, every = _replay(BUSY)
    compared = 0
    for p in snap.procs:
        h = p.history
        assert h is not None
        for cell_ns in (h.bucket_ns, 2 * h.bucket_ns, 5 * MS):
            for n in range(-(-h.start // cell_ns), h.end // cell_ns):
                lo, hi = n * cell_ns, (n + 1) * cell_ns
                want = [0] * len(PState)
                for s, t, st in every[p.id]:
                    if s < hi and t > lo:
                        want[st] += min(t, hi) - max(s, lo)
                assert h.cell(lo, hi)[0] == want, (p.id, cell_ns, n)
                compared += 1
    assert compared > 300


def _strip(p: ProcView, snap: Snapshot, cell_ns: int, width: int) -> list[tuple[int, object]]:
    cells = TimelineGrid().row(p.id, p.timeline, snap.stw_spans, snap.now, cell_ns, width,
                               history=p.history)
    first = snap.now // cell_ns - width + 1
    return [(first + i, c) for i, c in enumerate(cells)]


def test_the_strip_at_the_automatic_zoom_is_filled_from_the_first_event() -> None:
    snap, _ = _replay(BUSY)
    width = 60
    start = min(s for p in snap.procs if (s := history_start(p)) is not None)
    span = next(c for c in TIMELINE_CHOICES_NS if c >= snap.now - start)  # ProcTable's rule
    cell_ns = -(-span // width)
    for p in snap.procs:
        # every cell after the one the capture began in shows what the P did
        seen = [c for n, c in _strip(p, snap, cell_ns, width) if n * cell_ns > snap.start]
        assert len(seen) > width / 2 and UNKNOWN_CELL not in seen, (p.id, seen)
        # without its history, most of that would be blank again (what issue 27 saw)
        bare = dataclasses.replace(p, history=None)
        blank = [c for n, c in _strip(bare, snap, cell_ns, width)
                 if n * cell_ns > snap.start and c == UNKNOWN_CELL]
        assert len(blank) > len(seen) / 3, p.id


def test_the_buckets_memory_is_capped_and_the_window_kept_whatever_the_ps() -> None:
    window = 10_000 * MS
    assert bucket_ns_for(window, 2) == MS // 2
    for nprocs in (1, 2, 26, 64, 256, 4096, MAX_PROCS):
        b = bucket_ns_for(window, nprocs)
        assert ring_len(window, b) * b >= window + b  # the whole window, and a bucket
        assert ring_len(window, b) * BUCKET_BYTES * nprocs <= HISTORY_BYTES, nprocs


def test_snapshots_share_the_buckets_nothing_was_folded_into() -> None:
    """Each Snapshot carries its Ps' buckets, but copies only the chunks folded into since
    the one before: a snapshot every batch costs a small part of the ring, not a ring."""
    rec = read_recording(str(BUSY))
    model = Model(rec.header)
    before: dict[int, object] = {}
    copied = total = snaps = 0
    for batch in rec:
        model.feed(batch)
        for p in model.snapshot(light=True).procs:
            if p.history is None:
                continue
            old = before.get(p.id)
            seen = {id(c) for c in getattr(old, "chunks", ())}
            copied += sum(len(x) for c in p.history.chunks if id(c) not in seen for x in c)
            total += p.history.nbytes
            before[p.id] = p.history
            snaps += 1
    assert snaps > 10 and copied < total / 5, (snaps, copied, total)


def test_p_ids_beyond_the_header_get_no_more_buckets_than_the_cap() -> None:
    """A recording may name any P id below MAX_PROCS whatever its header's GOMAXPROCS: the
    busy recording's events spread over 400 Ps (each busy enough to fold) allocate no more
    ring memory than HISTORY_BYTES; the Ps beyond keep their exact spans."""
    rec = read_recording(str(BUSY))
    model = Model(rec.header, snapshot_spans=64)  # a P folds after 63 spans
    seen = 0
    for batch in rec:
        events = []
        for e in batch.events:
            shift = 2 * (seen // 400 % 200)  # the next 400 events on two other Ps
            seen += 1
            events.append((e[0], e[1], e[2] + shift if e[2] >= 0 else e[2], *e[3:]))
        model.feed(dataclasses.replace(batch, events=events))
    model.flush()
    rings = [pp.folded for pp in model.sched.procs.values() if pp.folded is not None]
    assert len(model.sched.procs) > 100
    assert rings and sum(r.n for r in rings) * BUCKET_BYTES <= HISTORY_BYTES
    assert all(len(pp.timeline) < model.snapshot_spans for pp in model.sched.procs.values())


def test_without_a_tui_no_history_is_folded_and_no_number_changes() -> None:
    """A replay's report, an export or a headless run draws no timeline: Model(history=False)
    folds nothing (the fold was ~8% of a busy replay's CPU) and every number is the same."""
    from gmpmon.export.json import summary
    from gmpmon.findings.engine import snapshot_with_findings

    rec = read_recording(str(BUSY))
    with_h, without = Model(rec.header), Model(rec.header, history=False)
    for batch in rec:
        with_h.feed(batch)
        without.feed(batch)
    a, b = snapshot_with_findings(with_h), snapshot_with_findings(without)
    assert all(p.history is not None for p in a.procs)
    assert all(p.history is None for p in b.procs)
    assert [p.timeline for p in a.procs] == [p.timeline for p in b.procs]
    assert summary(a) == summary(b)
    assert a.findings == b.findings
