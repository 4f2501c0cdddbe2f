"""Any event stream (hostile recordings, future kinds, garbage values) is modelled without an
exception, and the views of the result (summary, report, exports) work too."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gmpmon.events import U64_MAX, Batch, Kind
from gmpmon.export.folded import LINE_RE, FoldedExporter
from gmpmon.export.json import summary
from gmpmon.export.perfetto import PerfettoExporter
from gmpmon.export.pprof import PprofExporter
from gmpmon.interval import interval_line
from gmpmon.model import Model
from gmpmon.report import text_report
from tests import perfetto_trace
from tests.unit.test_model_scenarios import header

kinds = st.one_of(st.sampled_from([int(k) for k in Kind]), st.integers(0, 255))
small = st.one_of(st.integers(0, 20), st.sampled_from([0, 1, U64_MAX, 1 << 40]))
event = st.tuples(
    st.integers(0, 10**6),
    kinds,
    st.one_of(st.integers(-1, 5), st.sampled_from([1 << 20, 2**31 - 1])),
    st.integers(0, 5),
    small,
    small,
    small,
)


@settings(max_examples=300, deadline=None)
@given(
    batches=st.lists(st.lists(event, max_size=40), max_size=5),
    mode=st.sampled_from(["full", "default", "sample"]),
    stacks=st.dictionaries(st.integers(0, 20), st.lists(st.text(max_size=8), max_size=4)),
)
def test_any_event_stream_is_modelled_without_error(
    batches: list[list[tuple[int, int, int, int, int, int, int]]],
    mode: str,
    stacks: dict[int, list[str]],
) -> None:
    model = Model(header(mode, gomaxprocs=3), reorder_ns=1000)
    ex = PerfettoExporter(model.header)
    model.on_span = ex.on_span
    first = True
    for b in batches:
        batch = Batch(
            sorted(b, key=lambda e: e[0]) if first else b,
            {k: tuple(v) for k, v in stacks.items()} if first else {},
        )
        first = False
        model.feed(batch)
        ex.add_batch(batch)
    prev = model.snapshot()
    model.flush()
    snap = model.snapshot()
    assert len(snap.procs) <= 3 + 6  # corrupt P ids never grow the P table
    summary(snap)
    assert max(len(line) for line in text_report(snap).splitlines()) <= 80
    assert len(interval_line(snap, prev)) <= 80
    ex.add(snap)
    perfetto_trace.read(ex.render())  # a trace that reads back: every slice begun is ended
    for weight in ("wait", "count"):
        for what in ("mutex", "latency"):
            f = FoldedExporter(model.header, what=what, weight=weight)
            f.add(snap)
            assert all(LINE_RE.match(line) for line in f.text().splitlines())
    pp = PprofExporter(model.header)
    pp.add(snap)
    pp.render()
