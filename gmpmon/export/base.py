"""The shared exporter shape (see gmpmon.export), and the driver that replays a recording
into one."""

from __future__ import annotations

import bisect
import dataclasses
import gc
from typing import Protocol

from gmpmon.errors import UsageError
from gmpmon.events import Batch, Header
from gmpmon.files import open_private
from gmpmon.model import Model
from gmpmon.model.core import SpanSink
from gmpmon.model.delta import since
from gmpmon.model.snapshot import Snapshot
from gmpmon.model.spanmodel import SpanModel, SpansSink
from gmpmon.record import Recording


class Sink(Protocol):
    """Where :meth:`Exporter.dump` writes: a file, standard output."""

    def write(self, data: bytes, /) -> int: ...


class Exporter:
    """Base: ignores batches and spans; subclasses override what they use."""

    wants_spans = False
    # Uses nothing but the spans, the batches and the final snapshot's P list and open spans
    # (perfetto): replayed through model/spanmodel.py's SpanModel, ~3x quicker than the Model.
    spans_only = False

    def __init__(self, header: Header) -> None:
        self.header = header

    def add_batch(self, batch: Batch) -> None:
        return None

    def on_span(self, p: int, start: int, end: int, state: int, goid: int) -> None:
        return None

    def on_spans(self, p: int, spans: list[tuple[int, int, int, int]]) -> None:
        """P ``p``'s next spans, (start, end, state, goid) each, as a SpanModel hands them."""
        for start, end, state, goid in spans:
            self.on_span(p, start, end, state, goid)

    def add(self, snapshot: Snapshot) -> None:
        raise NotImplementedError

    def recording_read(self, rec: Recording) -> None:
        """After :meth:`add`, from a recording: a format that can say that its reader
        stopped early (``rec.error``) says so."""
        return None

    def render(self) -> bytes:
        raise NotImplementedError

    def dump(self, f: Sink) -> None:
        """Write the output to ``f``; everything that depends on the recording's content
        (and may fail on it) runs before the first byte is written."""
        f.write(self.render())

    def write(self, path: str) -> None:
        data = self.render()
        with open_private(path) as f:
            f.write(data)


def export_recording(rec: Recording, exporter: Exporter,
                     span_s: tuple[float, float | None] | None = None) -> Model:
    """Feed the recording through a model and the exporter; returns the model.

    ``span_s`` (from, to): only what happened within those seconds after the recording's
    first event (``export --from/--to``; replay counts its time from there too; to None:
    the end). The model still sees every event up to the span's end, so that the state at
    its start (which goroutine runs where, what waits) is the recording's; the exporter is
    given the counts since the start (delta.since: the snapshot at the start taken off the
    one at the end), the events within it and the P spans cut to it."""
    if span_s is None and exporter.spans_only:
        model = _model(rec, exporter, None, exporter.on_spans)
        # Without the cyclic GC: the replay makes a tuple an event and one a span, none in a
        # cycle (what refcounts leave, if any, is collected once it is back on), and each 700
        # set off a collection: ~2% of a big export's time in a fresh process, ~10% in one
        # holding more objects
        gc_was = gc.isenabled()
        gc.disable()
        try:
            for batch in rec:
                exporter.add_batch(batch)
                model.feed(batch)
            model.flush()
        finally:
            if gc_was:
                gc.enable()
        exporter.add(model.snapshot())  # no findings: a spans-only exporter reads none
        exporter.recording_read(rec)
        return model
    # Imported here: a spans-only export needs no findings (their rules take ~80 ms to import)
    from gmpmon.findings.engine import snapshot_with_findings
    from gmpmon.replay import replay_all

    if span_s is None:
        model = _model(rec, exporter, exporter.on_span if exporter.wants_spans else None,
                       exporter.on_spans)
        exporter.add(replay_all(rec, model=model, on_batch=exporter.add_batch))
        exporter.recording_read(rec)
        return model
    lo = hi = -1

    def on_span(p: int, start: int, end: int, state: int, goid: int) -> None:
        if end > lo and start < hi:
            exporter.on_span(p, max(start, lo), min(end, hi), state, goid)

    def on_spans(p: int, spans: list[tuple[int, int, int, int]]) -> None:
        kept = [(max(s, lo), min(e, hi), st, g) for s, e, st, g in spans if e > lo and s < hi]
        if kept:
            exporter.on_spans(p, kept)

    model = _model(rec, exporter, on_span if exporter.wants_spans else None, on_spans)
    base: Snapshot | None = None
    started = fed = False  # the span's start reached; events before it fed
    last = 0
    for batch in rec:
        ev = batch.events
        if not ev:
            model.feed(batch)
            continue
        last = ev[-1][0]
        if lo < 0:  # the first event: the span in ns
            lo = ev[0][0] + round(span_s[0] * 1e9)
            hi = ev[0][0] + round(span_s[1] * 1e9) if span_s[1] is not None else 1 << 62
        if not started and ev[-1][0] >= lo:
            started = True
            cut = bisect.bisect_left(ev, lo, key=_ts)
            if cut or fed:  # else the span starts at the first event: counts from 0
                model.feed(Batch(ev[:cut], batch.stacks))
                model.flush()  # all before the span applied, none held for reordering
                base = snapshot_with_findings(model)
                batch = Batch(ev[cut:], {})
                ev = batch.events
        fed = True
        end = bisect.bisect_right(ev, hi, key=_ts)
        part = batch if end == len(ev) else Batch(ev[:end], batch.stacks)
        if started:
            exporter.add_batch(part)
        model.feed(part)
        if end < len(ev):
            break
    if not started:
        raise UsageError(f"--from {span_s[0]:g}: the recording's events end "
                         f"{(last - lo) / 1e9 + span_s[0]:.3f} s after its first" if lo >= 0
                         else "the recording has no event to export a span of")
    model.flush()
    exporter.add(_cut(since(snapshot_with_findings(model), base), lo))
    exporter.recording_read(rec)
    return model


def _model(rec: Recording, exporter: Exporter, on_span: SpanSink | None,
           on_spans: SpansSink) -> Model:
    if exporter.spans_only:
        return SpanModel(rec.header, on_spans=on_spans)
    return Model(rec.header, on_span=on_span, history=False)


def _ts(e: tuple[int, ...]) -> int:
    return e[0]


def _cut(snap: Snapshot, lo: int) -> Snapshot:
    """``snap`` with each P's still-open span starting no earlier than ``lo``."""
    procs = tuple(
        dataclasses.replace(pv, timeline=(*pv.timeline[:-1], dataclasses.replace(
            pv.timeline[-1], start=lo))) if pv.timeline and pv.timeline[-1].start < lo else pv
        for pv in snap.procs)
    return dataclasses.replace(snap, procs=procs)
