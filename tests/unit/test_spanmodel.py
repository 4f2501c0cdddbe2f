"""SpanModel (gmpmon/model/spanmodel.py), the model a perfetto export replays through: the
same spans as the Model, one for one and in order on each P, the same P list and open spans
at the end, on every committed recording (full, default with its windows, sample, runtime,
kernel, 64 Ps, a cut-short one) and on one made hostile; and a perfetto export through it
reads back as the Model's spans, whole and cut to --from/--to."""

from __future__ import annotations

import gc
import random
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from gmpmon.events import Batch, Header, Kind
from gmpmon.export.base import Exporter, export_recording
from gmpmon.export.registry import make_exporter
from gmpmon.model import Model
from gmpmon.model.snapshot import Snapshot
from gmpmon.model.spanmodel import SpanModel
from gmpmon.record import read_recording
from tests import perfetto_trace

DATA = Path(__file__).resolve().parent.parent / "data"
RECORDINGS = sorted(p.stem for p in DATA.glob("*.gmp"))

Spans = dict[int, list[tuple[int, int, int, int]]]


def _open_spans(snap: Snapshot) -> dict[int, tuple[int, int, int, int] | None]:
    return {pv.id: ((sp.start, sp.end, int(sp.state), sp.goid)
                    if (sp := pv.timeline[-1] if pv.timeline else None) is not None
                    and sp.end == snap.now else None)
            for pv in snap.procs}


def _both(header: Header, batches: list[Batch]) -> tuple[Spans, Spans, Model, SpanModel]:
    want: Spans = defaultdict(list)
    got: Spans = defaultdict(list)
    model = Model(header, on_span=lambda p, s, e, st, g: want[p].append((s, e, st, g)))
    fast = SpanModel(header, on_spans=lambda p, spans: got[p].extend(spans))
    for b in batches:
        model.feed(b)
        fast.feed(b)
    model.flush()
    fast.flush()
    return want, got, model, fast


@pytest.mark.parametrize("name", RECORDINGS)
def test_spanmodel_closes_the_models_spans_on_every_recording(name: str) -> None:
    rec = read_recording(str(DATA / f"{name}.gmp"))
    want, got, model, fast = _both(rec.header, list(rec))
    assert sum(map(len, want.values())) > 0 or rec.header.mode == "sample"
    assert got == want
    a, b = model.snapshot(), fast.snapshot()
    assert (a.now, [pv.id for pv in a.procs]) == (b.now, [pv.id for pv in b.procs])
    assert _open_spans(a) == _open_spans(b)


@pytest.mark.parametrize("seed", range(4))
def test_spanmodel_follows_the_model_on_a_hostile_stream(seed: int) -> None:
    """A real recording's events mangled: P and goroutine ids swapped between events, P ids
    out of range and negative, events repeated and dropped, batches out of order, LOST and
    WINDOW events and stray STW ends inserted: whatever the Model makes of it, SpanModel
    makes the same spans."""
    rec = read_recording(str(DATA / ("gc.gmp", "wide64.gmp")[seed % 2]))
    rnd = random.Random(seed)
    events = [e for b in rec for e in b.events]
    ps = [*sorted({e[2] for e in events if e[2] >= 0}), -1, 1 << 14, 70000]
    gs = sorted({e[4] for e in events})
    out = []
    for e in events:
        r = rnd.random()
        ts, k, p, m, g, a0, a1 = e
        if r < 0.03:
            continue
        if r < 0.08:
            p = rnd.choice(ps)
        elif r < 0.12:
            g = rnd.choice(gs)
        elif r < 0.125:
            k = rnd.choice((int(Kind.LOST), int(Kind.WINDOW), int(Kind.STW_END),
                            int(Kind.STW_START), int(Kind.HANDOFF), int(Kind.P_IDLE)))
            a0 = rnd.randrange(2)
        elif r < 0.15:
            ts -= rnd.randrange(10_000_000)  # late: reordered, or before the P's span
        out.append((ts, k, p, m, g, a0, a1))
        if r > 0.98:
            out.append((ts, k, p, m, g, a0, a1))
    batches = [Batch(out[i:i + 700]) for i in range(0, len(out), 700)]
    for i in range(0, len(batches) - 1, 5):
        batches[i], batches[i + 1] = batches[i + 1], batches[i]
    want, got, model, fast = _both(rec.header, batches)
    assert sum(map(len, want.values())) > 1000
    assert model.sched.violations[2] > 0  # P ids out of range reached the state machine
    assert got == want
    assert _open_spans(model.snapshot()) == _open_spans(fast.snapshot())


class _ModelSpans(Exporter):
    """The spans the Model closes, and those still open at the end, as perfetto has them."""

    wants_spans = True

    def __init__(self, header: Header) -> None:
        super().__init__(header)
        self.spans: list[tuple[int, int, int, int, int]] = []

    def on_span(self, p: int, start: int, end: int, state: int, goid: int) -> None:
        self.spans.append((p, start, end, state, goid))

    def add(self, snapshot: Snapshot) -> None:
        for p, sp in _open_spans(snapshot).items():
            done = max((e for q, _s, e, _st, _g in self.spans if q == p), default=-1)
            if sp is not None and sp[1] > max(sp[0], done):
                self.on_span(p, *sp)


SPAN_NAMES = {1: "G{}", 2: "searching", 3: "idle", 4: "syscall G{}", 5: "GC stop", 0: "unknown"}


@pytest.mark.parametrize("name", ["caddy-wrk-default", "wide64", "demo-sample", "gc"])
def test_a_perfetto_export_holds_the_models_spans(name: str) -> None:
    """The export (through SpanModel) read back: the P slices are the Model's spans exactly,
    whole and cut to a span of the recording."""
    path = str(DATA / f"{name}.gmp")
    evs = [e[0] for b in read_recording(path) for e in b.events]
    dur = (evs[-1] - evs[0]) / 1e9
    for cut in (None, (dur * 0.2, dur * 0.7)):
        want = _ModelSpans(read_recording(path).header)
        export_recording(read_recording(path), want, cut)
        rec = read_recording(path)
        ex = make_exporter("perfetto", rec.header)
        assert ex.spans_only
        export_recording(rec, ex, cut)
        tr = perfetto_trace.read(ex.render())
        got = Counter((t, s0, s1, n) for t, s0, s1, n, _c, _a in tr.slices
                      if t != "stop-the-world")
        spans = Counter(
            (f"P{p}", s, e, SPAN_NAMES[st].format(g) if g or st not in (1, 4) else "syscall")
            for p, s, e, st, g in want.spans
        )
        assert sum(spans.values()) > 100
        assert got == spans


@pytest.mark.parametrize("enabled", [True, False])
def test_a_spans_only_export_leaves_the_cyclic_gc_as_it_was(enabled: bool) -> None:
    """export_recording turns the cyclic GC off for a spans-only replay (a collection every
    700 tuples): it is back on after it, also when the exporter fails, and off if it was."""
    path = str(DATA / "caddy-wrk-default.gmp")

    class Fails(Exporter):
        spans_only = True

        def on_spans(self, p: int, spans: list[tuple[int, int, int, int]]) -> None:
            assert not gc.isenabled()
            raise RuntimeError("exporter failed")

    was = gc.isenabled()
    try:
        gc.enable() if enabled else gc.disable()
        rec = read_recording(path)
        ex = make_exporter("perfetto", rec.header)
        export_recording(rec, ex)
        assert gc.isenabled() is enabled
        with pytest.raises(RuntimeError, match="exporter failed"):
            export_recording(read_recording(path), Fails(rec.header))
        assert gc.isenabled() is enabled
    finally:
        gc.enable() if was else gc.disable()


def test_a_perfetto_export_in_many_bundles_reads_as_in_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """The spans' fast path flushes a sequence's buffer once a run of spans: with a buffer of
    4 KB (a bundle a run, on every sequence) the trace reads back as the one-bundle export
    does, every slice and instant at its time; a bundle that cannot be written fails the
    export."""
    import gmpmon.export.perfetto as perfetto

    path = str(DATA / "wide64.gmp")  # 64 Ps: 66 sequences

    def export() -> bytes:
        rec = read_recording(path)
        ex = make_exporter("perfetto", rec.header)
        export_recording(rec, ex)
        return ex.render()

    one = export()
    monkeypatch.setattr(perfetto, "BUFFER_BYTES", 4096)
    monkeypatch.setattr(perfetto, "MIN_CHUNK", 1)
    many = export()
    top = perfetto_trace.pb.Trace()
    top.ParseFromString(many)
    assert sum(1 for p in top.packet if p.HasField("compressed_packets")) > 20
    a, b = perfetto_trace.read(one), perfetto_trace.read(many)
    assert sorted(map(repr, a.slices)) == sorted(map(repr, b.slices))
    assert sorted(map(repr, a.instants)) == sorted(map(repr, b.instants))
    assert len(a.slices) > 1000 and a.instants

    def full(data: bytes, level: int) -> bytes:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(perfetto.w, "compressed", full)
    with pytest.raises(OSError, match="No space left"):
        export()
