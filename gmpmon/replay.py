"""Replay: a recording fed through the same Model as a live run.

:func:`replay_all` runs a whole recording (the summary of a replay equals the live run's,
because the same batches go through the same deterministic model). :class:`ReplaySource`
is the seekable SnapshotSource the TUI is handed: it plays the recording back against a
clock, pauses, steps and seeks. Going back restores the newest checkpoint before the target
(a deep copy of the model taken every million events, ~60 ms and a few MB each) and feeds
forward from there, so a step back costs at most about a second of model work.
"""

from __future__ import annotations

import copy
import threading
import time
from array import array
from bisect import bisect_right
from collections.abc import Callable, Iterator
from operator import itemgetter

from gmpmon.errors import RecordingError
from gmpmon.events import Batch, EventTuple, Header
from gmpmon.findings.engine import snapshot_with_findings
from gmpmon.model import Model
from gmpmon.model.snapshot import Snapshot
from gmpmon.record import FrameInfo, Recording, read_recording
from gmpmon.recread import content_error
from gmpmon.source import SourceStatus

_TS = itemgetter(0)


def replay_all(
    rec: Recording,
    *,
    model: Model | None = None,
    on_batch: Callable[[Batch], None] | None = None,
) -> Snapshot:
    """Feed every good batch of ``rec`` through a model; the final Snapshot."""
    model = model or Model(rec.header, history=False)  # no timeline drawn: no buckets
    for batch in rec:
        if on_batch is not None:
            on_batch(batch)
        model.feed(batch)
    model.flush()
    return snapshot_with_findings(model)


def check_damage(rec: Recording) -> None:
    """A recording damaged at its very first batch has nothing to replay: RecordingError
    (exit 9). Damage later on is a note (:func:`stop_note`): the good batches were used."""
    if rec.error is not None and rec.batches_read == 0:
        raise RecordingError(f"{rec.path}: {rec.error}; no good batch before it")


def stop_note(rec: Recording) -> str | None:
    """One line saying where and why a damaged recording stopped (None when it did not)."""
    if rec.error is None:
        if rec.complete:
            return None
        # No end frame: the writer never closed (gmpmon killed, machine down). Every batch
        # written before that is whole (one write per frame), and all of them were used.
        return (
            f"{rec.path}: ends without its end frame (the recording was cut short, e.g. "
            f"gmpmon was killed); replayed all {rec.batches_read} complete batches"
        )
    return (
        f"{rec.path}: {rec.error}; replayed the {rec.batches_read} good batches before it "
        f"(stopped at byte {rec.stopped_at})"
    )


class ReplaySource:
    """SnapshotSource + SeekControl over a recording file."""

    live = False

    def __init__(
        self,
        path: str,
        *,
        speed: float = 1.0,
        paused: bool = False,
        tick_s: float = 0.1,
        autostart: bool = True,
        clock: Callable[[], float] = time.monotonic,
        checkpoint_events: int = 1_000_000,
    ) -> None:
        self.recording = read_recording(path)
        self.failure: RecordingError | None = None  # content the model could not take
        # Going back restores the newest model copy taken before the target (one every
        # checkpoint_events events, at batch boundaries) instead of re-feeding from the start.
        self.checkpoint_events = checkpoint_events
        self._checkpoints: list[tuple[int, int, Model]] = []  # (fed up to ts, next frame, model)
        self._next_frame = 0
        self._since_checkpoint = 0
        self.header: Header = self.recording.header
        self.speed = speed
        self.tick_s = tick_s
        self._clock = clock
        self._lock = threading.Lock()
        # Where each chunk starts, for going back (two machine words a chunk: a file of
        # many tiny frames must not cost a Python object each).
        self._frame_offsets = array("q")
        self._frame_chunks = array("l")
        start = end = None
        for info, _ in self.recording.frames():
            self._frame_offsets.append(info.offset)
            self._frame_chunks.append(info.chunk)
            if info.n_events:
                start = info.first_ts if start is None else min(start, info.first_ts)
                end = info.last_ts if end is None else max(end, info.last_ts)
        check_damage(self.recording)
        self.error = stop_note(self.recording)
        self._start = self.header.start_ns if start is None else start
        self._end = max(self._start if end is None else end, self._start)
        self._paused = paused
        self._closed = False
        self._model = Model(self.header)
        self._frames_iter: Iterator[tuple[FrameInfo, Batch]] = iter(())
        self._carry: list[EventTuple] = []
        self._pos = self._start
        self._at_end = False
        self._latest: Snapshot | None = None
        self._last_wall = clock()
        with self._lock:
            self._reset(self._start)
            self._advance(self._start)
        self._thread: threading.Thread | None = None
        if autostart:
            self._thread = threading.Thread(target=self._run, name="gmpmon-replay", daemon=True)
            self._thread.start()

    # --- SnapshotSource ------------------------------------------------------------------

    def latest(self) -> Snapshot | None:
        return self._latest

    def close(self) -> None:
        self._closed = True
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(timeout=2)

    def status(self) -> str:
        start, pos, end = self.position()
        where = f"{(pos - start) / 1e9:.1f}/{(end - start) / 1e9:.1f}s"
        if self.failure is not None:
            state = "stopped: malformed recording content"
        elif self._at_end:
            state = "end of recording" if self.error is None else "end of good batches"
        elif self._paused:
            state = "paused"
        else:
            state = f"playing x{self.speed:g}"
        return f"replay {where} {state}"

    def state(self) -> SourceStatus:
        error = self.failure or self.error
        return SourceStatus(line=self.status(), live=False, finished=self._at_end,
                            error=str(error) if error is not None else "")

    # --- SeekControl ---------------------------------------------------------------------

    def paused(self) -> bool:
        return self._paused

    def set_paused(self, paused: bool) -> None:
        self._paused = paused
        self._last_wall = self._clock()

    def step(self, delta_ns: int) -> None:
        with self._lock:
            self._paused = True
            self._goto(self._pos + delta_ns)

    def seek(self, fraction: float) -> None:
        fraction = min(max(fraction, 0.0), 1.0)
        with self._lock:
            self._goto(self._start + int((self._end - self._start) * fraction))

    def position(self) -> tuple[int, int, int]:
        return (self._start, self._pos, self._end)

    # --- playback ------------------------------------------------------------------------

    def tick(self) -> None:
        """Advance by the wall time since the last tick (x speed) unless paused."""
        now = self._clock()
        wall, self._last_wall = now - self._last_wall, now
        if self._paused or self._at_end or self.failure is not None:
            return
        with self._lock:
            self._goto(self._pos + int(wall * self.speed * 1e9))

    def _run(self) -> None:
        while not self._closed:
            time.sleep(self.tick_s)
            self.tick()

    def _goto(self, target: int) -> None:
        """Called from the TUI's thread and the playback thread: content the model cannot
        take stops the replay where it is (``failure``, said by the status line and by
        `gmpmon replay` once the TUI ends: exit 9) instead of raising into either."""
        if self.failure is not None:
            return
        target = min(max(target, self._start), self._end)
        try:
            if target < self._pos:
                self._reset(target)
            self._advance(target)
        except (Exception, MemoryError, RecursionError) as e:
            self.failure = content_error(self.recording.path, e)
            self._paused = True

    def _reset(self, target: int) -> None:
        reach = target + self._model.reorder_ns
        best = None
        for ck in self._checkpoints:
            if ck[0] <= reach:
                best = ck
        if best is None:
            self._model = Model(self.header)
            self._frames_iter = self.recording.frames()
            self._next_frame = 0
        else:
            _, idx, model = best
            self._model = copy.deepcopy(model)
            self._next_frame = idx
            self._frames_iter = (
                self.recording.frames(start_offset=self._frame_offsets[idx],
                                      start_chunk=self._frame_chunks[idx])
                if idx < len(self._frame_offsets)
                else iter(())
            )
        self._since_checkpoint = 0
        self._carry = []
        self._pos = self._start
        self._at_end = False

    def _checkpoint(self, fed_ts: int) -> None:
        self._since_checkpoint = 0
        if self._checkpoints and self._checkpoints[-1][1] >= self._next_frame:
            return  # already have one here or later (we came back and replay forward)
        self._checkpoints.append((fed_ts, self._next_frame, copy.deepcopy(self._model)))

    def _advance(self, target: int) -> None:
        model = self._model
        self._pos = target
        # The model holds back reorder_ns of events (live, they may still arrive out of
        # order); replay knows the future, so it feeds that much further ahead and the
        # snapshot shows everything up to the position, with the model's semantics intact.
        target += model.reorder_ns
        carry = self._carry
        if carry:
            cut = bisect_right(carry, target, key=_TS)
            if cut:
                model.feed(Batch(carry[:cut]))
                carry = carry[cut:]
        while not carry:
            nxt = next(self._frames_iter, None)
            if nxt is None:
                break
            info, batch = nxt
            self._next_frame += 1
            if batch.stacks:
                model.feed(Batch([], batch.stacks))
            ev = batch.events
            if info.last_ts <= target:
                model.feed(Batch(ev))
                self._since_checkpoint += len(ev)
                if self._since_checkpoint >= self.checkpoint_events:
                    self._checkpoint(info.last_ts)
                continue
            cut = bisect_right(ev, target, key=_TS)
            if cut:
                model.feed(Batch(ev[:cut]))
            carry = ev[cut:]
        self._carry = carry
        at_end = not carry and self._pos >= self._end
        if at_end:
            model.flush()
        self._latest = snapshot_with_findings(model)
        self._at_end = at_end  # after the snapshot: "end" in status() means it is there
