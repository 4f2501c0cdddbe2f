"""The shared exporter shape (see gmpmon.export), and the driver that replays a recording
into one."""

from __future__ import annotations

from typing import Protocol

from gmpmon.events import Batch, Header
from gmpmon.files import open_private
from gmpmon.model import Model
from gmpmon.model.snapshot import Snapshot
from gmpmon.record import Recording
from gmpmon.replay import replay_all


class Sink(Protocol):
    """Where :meth:`Exporter.dump` writes: a file, standard output."""

    def write(self, data: bytes, /) -> int: ...


class Exporter:
    """Base: ignores batches and spans; subclasses override what they use."""

    wants_spans = False

    def __init__(self, header: Header) -> None:
        self.header = header

    def add_batch(self, batch: Batch) -> None:
        return None

    def on_span(self, p: int, start: int, end: int, state: int, goid: int) -> None:
        return None

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


def export_recording(rec: Recording, exporter: Exporter) -> Model:
    """Feed the recording through a model and the exporter; returns the model."""
    model = Model(rec.header, on_span=exporter.on_span if exporter.wants_spans else None)
    exporter.add(replay_all(rec, model=model, on_batch=exporter.add_batch))
    exporter.recording_read(rec)
    return model
