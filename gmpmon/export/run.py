"""Drive an exporter over a recording: batches -> model (+ exporter) -> final snapshot."""

from __future__ import annotations

from gmpmon.events import Header
from gmpmon.export.base import Exporter
from gmpmon.model import Model
from gmpmon.record import Recording
from gmpmon.replay import replay_all


def make_exporter(
    fmt: str, header: Header, *, what: str = "mutex", weight: str = "wait"
) -> Exporter:
    if fmt == "folded":
        from gmpmon.export.folded import FoldedExporter

        return FoldedExporter(header, what=what, weight=weight)
    if fmt == "pprof" and what == "cpu":
        from gmpmon.export.pprof_cpu import PprofCpuExporter

        return PprofCpuExporter(header)
    if fmt == "pprof":
        from gmpmon.export.pprof import PprofExporter

        return PprofExporter(header)
    if fmt == "perfetto":
        from gmpmon.export.perfetto import PerfettoExporter

        return PerfettoExporter(header)
    if fmt == "json":
        from gmpmon.export.json import JsonExporter

        return JsonExporter(header)
    raise ValueError(f"unknown export format {fmt!r}")


def export_recording(rec: Recording, exporter: Exporter) -> Model:
    """Feed the recording through a model and the exporter; returns the model."""
    model = Model(rec.header, on_span=exporter.on_span if exporter.wants_spans else None)
    exporter.add(replay_all(rec, model=model, on_batch=exporter.add_batch))
    return model
