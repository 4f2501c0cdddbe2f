"""Recording files: the event batches of a run, written incrementally, read back for replay.

Format (docs/recording-format.md has the byte-level description; gmpmon/recformat.py the
code of each part):

    magic "GMPMONRC" | u16 version | u16 flags
    header frame:  u32 len | u32 crc32(json) | JSON (Header fields + "extra")
    batch frames:  "GB" | u32 len | u32 n | u64 first_ts | u64 last_ts | u32 crc | payload
    end frame:     "GE" | u32 batches | u32 crc   (written by close(); absent after a crash)

A batch payload is zlib(columns): the 7 event fields stored column by column, timestamps as
deltas, each column in the narrowest fixed width that holds it, then the batch's stacks table
as JSON. Column transposition, width choice and delta sums all run at C speed (zip, array,
itertools), so writing keeps up with capture.

Every frame is written with one unbuffered write: a crash or a killed target loses at most
the batch being written. The reader (gmpmon/recread.py, re-exported here) stops at the first
frame that is short, fails its CRC or is over a cap, and says where
(:attr:`Recording.stopped_at`, :attr:`Recording.error`).
"""

from __future__ import annotations

import collections
import contextlib
import struct
import threading
import time
import zlib
from collections.abc import Mapping
from typing import Any, BinaryIO

from gmpmon.errors import RecordingError
from gmpmon.events import Batch, Header
from gmpmon.files import open_new_private, open_private
from gmpmon.priority import name_thread
from gmpmon.recformat import (
    BATCH_FRAME,
    BATCH_TAG,
    END_FRAME,
    END_TAG,
    HEADER_FRAME,
    MAGIC,
    MAX_EVENTS,
    PREAMBLE,
    READABLE,
    VERSION,
    decode_batch,
    encode_batch,
    header_from_json,
    header_to_json,
    pack_batch,
)
from gmpmon.recread import (
    FrameInfo,
    Recording,
    content_checked,
    read_recording,
)

# The format's names and the reader, where their users import them from.
__all__ = [
    "BATCH_FRAME", "BATCH_TAG", "END_FRAME", "END_TAG", "HEADER_FRAME", "MAGIC", "MAX_EVENTS",
    "PREAMBLE", "READABLE", "VERSION", "FrameInfo", "Recording", "RecordingWriter",
    "content_checked", "decode_batch", "encode_batch", "header_from_json", "header_to_json",
    "pack_batch", "read_recording",
]

BACKLOG_EVENTS = 100_000  # background writer: events handed on but not yet written (~27 MB)
# The background writer takes what waits once every FLUSH_S (sooner past WAKE_EVENTS, or at
# close), not at each batch: sample mode hands on 10 batches a second, and each wakeup of a
# Python thread costs ~55 µs of CPU here (gmpmon/session.py IDLE_WAIT_S).
FLUSH_S = 1.0
WAKE_EVENTS = 20_000


class RecordingWriter:
    """Append batches to a new recording file (0600, never through a symlink).

    ``background``: a thread of its own packs, compresses and writes the batches, so that the
    caller (the live model thread) does not: in full mode at ~600k events/s the recording
    was half of the model thread's time, and the reader's queue overflowed behind it. At
    most BACKLOG_EVENTS events wait for it (held by reference: batches are never changed
    after they are handed on); beyond, ``write`` waits. A write error is raised by the next
    ``write`` or by ``close``.
    """

    def __init__(
        self,
        path: str,
        header: Header,
        *,
        extra: dict[str, Any] | None = None,
        stacks: Mapping[int, tuple[str, ...]] | None = None,
        background: bool = False,
        new_only: bool = False,
    ) -> None:
        """``stacks``: stack ids already defined by earlier batches of a live run (a recording
        started mid-run), written first so that the file stands on its own. ``new_only``:
        a name that exists is not replaced (FileExistsError; flight-recorder dumps)."""
        self.path = path
        self.batches = 0
        self.events = 0
        self.bytes = 0
        self._f: BinaryIO | None = open_new_private(path) if new_only else open_private(path)
        self._cv = threading.Condition()
        self._backlog: collections.deque[Batch | None] = collections.deque()
        self._queued = 0  # events in _backlog
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self.cpu_s = 0.0  # the background thread's CPU time so far (what recording costs)
        hj = header_to_json(header, extra)
        self._write(
            PREAMBLE.pack(MAGIC, VERSION, 0) + HEADER_FRAME.pack(len(hj), zlib.crc32(hj)) + hj
        )
        if background:
            self._thread = threading.Thread(target=self._drain, name="gmpmon-recorder",
                                            daemon=True)
            self._thread.start()
        if stacks:
            self.write(Batch([], dict(stacks)))

    def _write(self, data: bytes) -> None:
        if self._f is None:
            raise RecordingError(f"{self.path}: recording already closed")
        view = memoryview(data)
        while view:
            n = self._f.write(view)
            if n is None:
                continue
            view = view[n:]
        self.bytes += len(data)

    def write(self, batch: Batch) -> None:
        if not batch.events and not batch.stacks:
            return
        if self._error is not None:
            raise self._error
        if self._f is None:
            raise RecordingError(f"{self.path}: recording already closed")
        if self._thread is None:
            self._frame(batch)
            return
        with self._cv:
            while self._queued > BACKLOG_EVENTS and self._error is None:
                self._cv.wait()
            self._backlog.append(batch)
            self._queued += len(batch.events)
            if len(self._backlog) == 1 or self._queued >= WAKE_EVENTS:
                self._cv.notify_all()

    def _frame(self, batch: Batch) -> None:
        if len(batch.events) > MAX_EVENTS:  # a reader refuses bigger batches: split
            ev = batch.events
            for i in range(0, len(ev), MAX_EVENTS):
                self._frame(Batch(ev[i : i + MAX_EVENTS], batch.stacks if i == 0 else {}))
            return
        payload, n, first, last = encode_batch(batch)
        head = BATCH_FRAME.pack(BATCH_TAG, len(payload), n, first, last, 0)[:-4]
        crc = zlib.crc32(payload, zlib.crc32(head[2:]))
        self._write(head + struct.pack("<I", crc) + payload)
        self.batches += 1
        self.events += n

    def _drain(self) -> None:
        name_thread()
        while True:
            with self._cv:
                while not self._backlog:
                    self._cv.wait()
                if self._backlog[-1] is not None and self._queued < WAKE_EVENTS:
                    self._cv.wait(FLUSH_S)  # more batches join it; close() or a backlog wakes it
                batches = list(self._backlog)
                self._backlog.clear()
            for batch in batches:
                if batch is None:
                    return
                if self._error is None:
                    c0 = time.thread_time()
                    try:
                        self._frame(batch)
                    except BaseException as e:  # said by the next write() or close()
                        self._error = e
                    self.cpu_s += time.thread_time() - c0
                with self._cv:
                    self._queued -= len(batch.events)
                    self._cv.notify_all()

    def close(self) -> None:
        if self._f is None:
            return
        if self._thread is not None:
            with self._cv:
                self._backlog.append(None)
                self._cv.notify_all()
            self._thread.join()
            self._thread = None
        body = END_FRAME.pack(END_TAG, self.batches, 0)[:-4]
        with contextlib.suppress(OSError):
            self._write(body + struct.pack("<I", zlib.crc32(body[2:])))
        f, self._f = self._f, None
        f.close()
        if self._error is not None:
            raise self._error

    def __enter__(self) -> RecordingWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
