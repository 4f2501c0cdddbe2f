"""The output formats by name: every one is an Exporter (gmpmon/export/base.py: built from
the run's Header and its options, add(snapshot), write(path)), whether `gmpmon export`
replays a recording into it or `attach`/`run` hand it the final Snapshot."""

from __future__ import annotations

from collections.abc import Callable

from gmpmon.events import Header
from gmpmon.export.base import Exporter


def _folded(header: Header, *, what: str = "mutex", weight: str = "wait") -> Exporter:
    from gmpmon.export.folded import FoldedExporter

    return FoldedExporter(header, what=what, weight=weight)


def _pprof(header: Header, *, what: str = "mutex", **_opts: str) -> Exporter:
    if what == "cpu":
        from gmpmon.export.pprof_cpu import PprofCpuExporter

        return PprofCpuExporter(header)
    from gmpmon.export.pprof import PprofExporter

    return PprofExporter(header)


def _perfetto(header: Header, **_opts: str) -> Exporter:
    from gmpmon.export.perfetto import PerfettoExporter

    return PerfettoExporter(header)


def _json(header: Header, **_opts: str) -> Exporter:
    from gmpmon.export.json import JsonExporter

    return JsonExporter(header)


# name -> factory(header, **options). A new format: its module + one line here.
EXPORTERS: dict[str, Callable[..., Exporter]] = {
    "folded": _folded,
    "pprof": _pprof,
    "perfetto": _perfetto,
    "json": _json,
}
FORMATS = tuple(EXPORTERS)


def make_exporter(fmt: str, header: Header, **options: str) -> Exporter:
    try:
        factory = EXPORTERS[fmt]
    except KeyError:
        raise ValueError(f"unknown export format {fmt!r}") from None
    return factory(header, **options)
