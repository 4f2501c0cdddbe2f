"""The summary JSON (docs/summary-schema.md) as an export format."""

from __future__ import annotations

import json

from gmpmon.export.base import Exporter
from gmpmon.model.snapshot import Snapshot
from gmpmon.report import summary


class JsonExporter(Exporter):
    doc: dict[str, object] | None = None

    def add(self, snapshot: Snapshot) -> None:
        self.doc = summary(snapshot)

    def render(self) -> bytes:
        return (json.dumps(self.doc, indent=2, sort_keys=False) + "\n").encode()
