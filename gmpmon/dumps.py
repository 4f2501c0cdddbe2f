"""Flight-recorder dumps: when a trigger fires (a TRIGGER event in the stream), the live
session writes a recording of the last PRE_S seconds of what it received (the cheap data:
samples, runtime counters, census, cold probes, and any windows in them), the trigger, and
the burst of hot probes that follows, until the burst's end plus POST_S. ``gmpmon replay``
opens it like any recording.

Bounded: the look-back keeps at most PRE_MAX_EVENTS events (oldest batches dropped first),
and one dump is written at a time (a trigger while one is open extends nothing: the open
dump already holds it).

``--dump-dir`` may be writable by others. A dump's name that exists there (a planted
symlink, a file) is skipped, never replaced or written through (O_EXCL|O_NOFOLLOW), and so
is a dump that cannot be written (the directory went away or is full); each is one line,
and the capture goes on to the next trigger.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections import deque
from collections.abc import Mapping

from gmpmon.capture.triggers import TriggerSpec
from gmpmon.errors import GmpmonError
from gmpmon.events import Batch, Header, Kind
from gmpmon.record import RecordingWriter

PRE_S = 5.0
POST_S = 0.5
PRE_MAX_EVENTS = 300_000
_TRIGGER = int(Kind.TRIGGER)


def dump_name(header: Header, ts: int, spec: TriggerSpec) -> str:
    """``gmpmon-<pid>-<UTC time of the trigger>-<trigger>.gmp``."""
    wall = header.wall_start + (ts - header.start_ns) / 1e9
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(wall)) + f".{int(wall * 1000) % 1000:03d}"
    return f"gmpmon-{header.pid}-{stamp}-{spec.slug}.gmp"


class DumpKeeper:
    """Fed every batch the model gets (on the model thread); writes dumps into ``dump_dir``.
    Its lines for the user are taken by another thread (``take_notes``)."""

    def __init__(self, header: Header, specs: list[TriggerSpec], dump_dir: str) -> None:
        self.header = header
        self.specs = specs
        self.dump_dir = dump_dir
        self._pre: deque[Batch] = deque()
        self._pre_events = 0
        self._writer: RecordingWriter | None = None
        self._until = 0
        self.written: list[str] = []  # paths of finished dumps
        self.skipped: list[str] = []  # paths of dumps not written, or not to their end
        self._notes: deque[str] = deque()  # one line per dump, not yet said
        self._tallied = False

    def take_notes(self, final: bool = False) -> list[str]:
        """The lines not said yet; ``final`` (the run's end) adds, once, a tally when a dump
        was skipped."""
        out = []
        with contextlib.suppress(IndexError):
            while True:
                out.append(self._notes.popleft())
        if final and self.skipped and not self._tallied:
            self._tallied = True  # once: the TUI's watchdog may end the outputs repeatedly
            out.append(f"dumps in {self.dump_dir}: {len(self.written)} written, "
                       f"{len(self.skipped)} skipped")
        return out

    def feed(self, batch: Batch, stacks: Mapping[int, tuple[str, ...]]) -> None:
        ev = batch.events
        if self._writer is not None:
            self._write(batch)
            if self._writer is not None and ev and ev[-1][0] >= self._until:
                self._finish()
        else:
            # Capture appends TRIGGER events at the end of their batch (a DROP may follow).
            trig = next((e for e in ev[-3:] if e[1] == _TRIGGER), None)
            if trig is not None:
                self._start(trig[0], trig[4], trig[5], stacks)
                self._write_pre(batch)
        if self._writer is None:
            self._keep(batch, ev[-1][0] if ev else 0)

    def _keep(self, batch: Batch, ts: int) -> None:
        if not batch.events and not batch.stacks:
            return
        self._pre.append(batch)
        self._pre_events += len(batch.events)
        cut = ts - int(PRE_S * 1e9)
        while self._pre and (
            self._pre_events > PRE_MAX_EVENTS
            or (self._pre[0].events and self._pre[0].events[-1][0] < cut)
        ):
            self._pre_events -= len(self._pre.popleft().events)

    def _start(self, ts: int, idx: int, burst_ns: int, stacks: Mapping[int, tuple[str, ...]]
               ) -> None:
        spec = self.specs[idx] if 0 <= idx < len(self.specs) else TriggerSpec("?", "?", 0)
        path = os.path.join(self.dump_dir, dump_name(self.header, ts, spec))
        try:
            self._writer = RecordingWriter(path, self.header, stacks=dict(stacks),
                                           extra={"trigger": spec.text, "trigger_ts": ts},
                                           new_only=True)
        except FileExistsError:
            self._skip(path, f"trigger {spec.text} fired; dump {path} already exists: "
                       "skipped (not overwritten)")
            return
        except (GmpmonError, OSError) as e:
            self._skip(path, f"trigger {spec.text} fired; dump {path} skipped: {_why(e)}")
            return
        self._until = ts + burst_ns + int(POST_S * 1e9)
        self._notes.append(f"trigger {spec.text} fired; dump {path}")

    def _skip(self, path: str, note: str) -> None:
        self.skipped.append(path)
        self._notes.append(note)

    def _write_pre(self, batch: Batch) -> None:
        if self._writer is None:  # skipped
            return
        for b in self._pre:
            self._write(b)
        self._pre.clear()
        self._pre_events = 0
        self._write(batch)

    def _write(self, batch: Batch) -> None:
        """A dump that cannot be written to its end is given up, not the capture."""
        w = self._writer
        if w is None:
            return
        try:
            w.write(batch)
        except (GmpmonError, OSError) as e:
            self._writer = None
            with contextlib.suppress(GmpmonError, OSError):
                w.close()
            self._skip(w.path, f"dump {w.path} given up: {_why(e)}")

    def _finish(self) -> None:
        w, self._writer = self._writer, None
        if w is None:
            return
        try:
            w.close()
        except (GmpmonError, OSError) as e:
            self._skip(w.path, f"dump {w.path} given up: {_why(e)}")
            return
        self.written.append(w.path)

    def close(self) -> None:
        """End of the run: a dump still open is closed with what it has."""
        self._finish()


def _why(e: GmpmonError | OSError) -> str:
    if isinstance(e, GmpmonError):
        return e.one_line()
    return e.strerror or str(e)
