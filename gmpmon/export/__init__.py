"""Exporters: one module per output format, each the same small shape.

Every exporter is built with the recording's Header and options, then sees the run:
``add_batch(batch)`` for each event batch (in order), ``on_span(...)`` for each P span the
model closes (only exporters that draw timelines use it), ``add(snapshot)`` once with the
final Snapshot, and ``write(path)`` to produce the file (0600, never through a symlink).
:func:`gmpmon.export.base.export_recording` drives them over a recording; the formats by
name are gmpmon/export/registry.py's (a new format: its module and one line there).
"""

from __future__ import annotations

from typing import Any

__all__ = ["FORMATS"]


def __getattr__(name: str) -> Any:
    # Lazy: `gmpmon goroutines` imports gmpmon.export.goroutines alone, and every exporter
    # (the model, the TUI's pieces) cost its one-shot run ~0.2 CPU-s of imports.
    if name == "FORMATS":
        from gmpmon.export.registry import FORMATS

        return FORMATS
    raise AttributeError(name)
