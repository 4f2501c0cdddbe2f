"""What the readers of the target's memory met (gmpmon/capture/targetmem.py): a reader that
stopped (a structural value was implausible: allgs' header, a count) and one that skipped
reads and went on (one element's pointer: a G of allgs, a P's M). Each is said three ways:
one line for the user at the end (``stops``, ``skip_lines``), and for the model RT_MISSING
(a1 = 1) or RT_SKIPPED events whose reason rides in the stacks table (reader_note_id), so
that the report and the summary JSON say which part and why, live and in a replay.

Thread-safe for its use: the census thread adds stops and skips, capture's thread takes them.
"""

from __future__ import annotations

import threading

from gmpmon.capture.targetmem import Skips
from gmpmon.errors import CaptureError, GmpmonError, TargetMemoryError
from gmpmon.events import NO_P, EventTuple, Kind, RtFeature, reader_note_id

Stacks = dict[int, tuple[str, ...]]


class ReaderNotes:
    def __init__(self) -> None:
        self.stops: list[tuple[str, int]] = []  # (one line, exit code), in order
        self._skips: list[tuple[str, RtFeature, Skips]] = []
        self._lock = threading.Lock()
        self._events: list[EventTuple] = []
        self._stacks: Stacks = {}
        self._said: set[int] = set()  # skip notes sent (the first reason never changes)
        self._told = 0  # readers whose first skip new_skips() has told

    def watch(self, name: str, feature: RtFeature, skips: Skips) -> None:
        """A reader's skips, to be said as ``name`` (e.g. "P sampler")."""
        with self._lock:
            self._skips.append((name, feature, skips))

    def stopped(self, name: str, e: BaseException, features: tuple[RtFeature, ...],
                now: int) -> None:
        """Reader ``name`` stopped for ``e``: ``features`` are missing from here on."""
        why = e.one_line() if isinstance(e, GmpmonError) else f"{type(e).__name__}: {e}"
        code = e.exit_code if isinstance(e, GmpmonError) else CaptureError.exit_code
        with self._lock:
            self.stops.append((f"{name} stopped: {why}", code))
            for f in features:
                sid = reader_note_id(f, True)
                self._stacks[sid] = (why,)
                self._events.append((now, Kind.RT_MISSING, NO_P, 0, sid, int(f), 1))

    def take(self, now: int, out: list[EventTuple], stacks: Stacks) -> None:
        """The stops and skips since the last call, as events (into ``out``) and their
        reasons (into ``stacks``, which must reach the model before the events)."""
        with self._lock:
            out.extend((now, *e[1:]) for e in self._events)  # stamped when handed on
            stacks.update(self._stacks)
            self._events, self._stacks = [], {}
            skips = list(self._skips)
        for _name, f, s in skips:
            n = s.take()
            if n:
                sid = reader_note_id(f, False)
                if sid not in self._said:
                    self._said.add(sid)
                    stacks[sid] = (s.first,)
                out.append((now, Kind.RT_SKIPPED, NO_P, 0, sid, int(f), n))

    def new_skips(self) -> list[str]:
        """One line for each reader that began to skip reads since the last call (serve says
        each once, as it says a stop; the count is in the report and the summary)."""
        out = []
        with self._lock:
            skips = list(self._skips)
        for i, (name, _f, s) in enumerate(skips):
            if s.n and not self._told & 1 << i:
                self._told |= 1 << i
                out.append(f"{name} skips what it cannot read of the target's memory (first: "
                           f"{s.first}); it goes on")
        return out

    def skip_lines(self) -> list[tuple[str, int]]:
        """One line for each reader that skipped reads (and went on), with its exit code
        (attach ends it with "; the capture went on without it", as a stop's)."""
        out = []
        for name, _f, s in self._skips:
            if s.n:
                reads = "read" if s.n == 1 else "reads"
                out.append((f"{name} skipped what it could not read: {s.n} {reads} of the "
                            f"target's memory (first: {s.first})", TargetMemoryError.exit_code))
        return out
