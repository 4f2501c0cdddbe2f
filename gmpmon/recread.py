"""Reading a recording back: the header checked against the schema, then the batches one
frame at a time, each decoded into columns and handed on a chunk of events at a time.

A recording is not trusted (docs/recording-format.md): the reader stops at the first frame
that is short, fails its CRC, or is over a cap (events per batch, what all the batches may
inflate to given the file's size, the stacks tables), and says where
(:attr:`Recording.stopped_at`, :attr:`Recording.error`). Iterating never raises.
"""

from __future__ import annotations

import contextlib
import os
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

from gmpmon.errors import GmpmonError, RecordingError
from gmpmon.events import Batch, Header
from gmpmon.recformat import (
    BATCH_FRAME,
    BATCH_TAG,
    END_FRAME,
    END_TAG,
    EVENTS_SLACK,
    HEADER_FRAME,
    INFLATE_SLACK,
    MAGIC,
    MAX_EVENTS,
    MAX_EVENTS_PER_BYTE,
    MAX_FRAME,
    MAX_HEADER,
    MAX_RATIO,
    MAX_STACK_IDS,
    PREAMBLE,
    READABLE,
    decode_columns,
    header_from_json,
)


@dataclass(frozen=True, slots=True)
class FrameInfo:
    """Where a chunk of events comes from: its frame's offset and its index in that frame
    (a frame of more than CHUNK_EVENTS events is handed on in several), and the smallest and
    largest timestamps among its events (the frame header's own, unchecked, when it has
    none)."""

    offset: int
    n_events: int
    first_ts: int
    last_ts: int
    chunk: int = 0


_TS = itemgetter(0)
_DECODE_ERRORS = (ValueError, zlib.error, struct.error, UnicodeDecodeError, RecursionError,
                  OverflowError, MemoryError)


class Recording:
    """A recording opened for reading. Iterate for batches; then look at stopped_at/error."""

    def __init__(self, path: str, header: Header, extra: dict[str, Any], data_offset: int) -> None:
        self.path = path
        self.header = header
        self.extra = extra
        self.data_offset = data_offset
        self.stopped_at: int | None = None  # byte offset where reading stopped early
        self.error: str | None = None  # why it stopped early (None: clean end)
        self.complete = False  # the writer's end frame was found
        self.batches_read = 0  # frames read whole (a frame may come as several chunks)

    def __iter__(self) -> Iterator[Batch]:
        for _info, batch in self.frames(ranges=False):
            yield batch

    def frames(
        self, start_offset: int | None = None, start_chunk: int = 0, *, ranges: bool = True
    ) -> Iterator[tuple[FrameInfo, Batch]]:
        """Chunks of events with where they come from, from the first frame (or the frame
        at ``start_offset``, from its chunk ``start_chunk``). The first chunk of a frame
        carries its stacks table; a frame without events is one empty chunk. ``ranges``
        False: each FrameInfo has its frame header's timestamps, not its chunk's smallest
        and largest (two passes over the events less)."""
        self.stopped_at = None
        self.error = None
        self.complete = False
        self.batches_read = 0
        try:
            f = open(self.path, "rb")  # noqa: SIM115 - closed in finally, generator
        except OSError as e:
            self._stop(self.data_offset, f"cannot reopen: {e.strerror}")
            return
        try:
            pos = self.data_offset if start_offset is None else start_offset
            f.seek(pos)
            inflated = 0  # bytes all the payloads read so far inflated to
            events = 0  # and the events they held
            stack_ids = 0  # stack ids their tables defined
            skip = start_chunk
            while True:
                head = f.read(BATCH_FRAME.size)
                if not head:
                    return  # clean end without an end frame: writer was interrupted
                tag = head[:2]
                if tag == END_TAG and len(head) >= END_FRAME.size:
                    _, _nb, crc = END_FRAME.unpack(head[: END_FRAME.size])
                    if zlib.crc32(head[2:6]) != crc:
                        self._stop(pos, f"corrupt end frame at byte {pos}")
                    else:
                        self.complete = True
                    return
                if tag != BATCH_TAG:
                    self._stop(pos, f"no batch frame at byte {pos} (garbage or corruption)")
                    return
                if len(head) < BATCH_FRAME.size:
                    self._stop(pos, f"truncated batch header at byte {pos}")
                    return
                _, size, n, first, last, crc = BATCH_FRAME.unpack(head)
                if size > MAX_FRAME or n > MAX_EVENTS:
                    self._stop(pos, f"implausible batch size at byte {pos}")
                    return
                payload = f.read(size)
                if len(payload) < size:
                    self._stop(pos, f"truncated batch {self.batches_read + 1} at byte {pos}")
                    return
                if zlib.crc32(payload, zlib.crc32(head[2:-4])) != crc:
                    self._stop(
                        pos, f"checksum mismatch in batch {self.batches_read + 1} at byte {pos}"
                    )
                    return
                # The file's size now (a recording still being written grows).
                fsize = os.fstat(f.fileno()).st_size
                events += n
                if events > MAX_EVENTS_PER_BYTE * fsize + EVENTS_SLACK:
                    self._stop(pos, f"batch {self.batches_read + 1} at byte {pos} takes the "
                                    f"events past what the file's size allows "
                                    f"({MAX_EVENTS_PER_BYTE} a byte)")
                    return
                budget = MAX_RATIO * fsize + INFLATE_SLACK
                try:
                    cols = decode_columns(payload, n, budget - inflated)
                except _DECODE_ERRORS as e:
                    self._stop(pos, f"undecodable batch {self.batches_read + 1} at byte {pos}: {e}")
                    return
                del payload
                inflated += cols.raw_size
                stack_ids += len(cols.stacks)
                if stack_ids > MAX_STACK_IDS:
                    self._stop(pos, f"batch {self.batches_read + 1} at byte {pos} takes the "
                                    f"stack ids defined past {MAX_STACK_IDS}")
                    return
                self.batches_read += 1
                if not n:
                    if not skip:
                        yield FrameInfo(pos, 0, first, last), Batch([], cols.stacks)
                else:
                    for i, chunk in enumerate(cols.chunks()):
                        if i < skip:
                            continue
                        info = FrameInfo(pos, len(chunk), min(map(_TS, chunk)),
                                         max(map(_TS, chunk)), i) if ranges else \
                            FrameInfo(pos, len(chunk), first, last, i)
                        yield info, Batch(chunk, cols.stacks if i == 0 else {})
                skip = 0
                del cols
                pos += BATCH_FRAME.size + size
        finally:
            f.close()

    def _stop(self, pos: int, why: str) -> None:
        self.stopped_at = pos
        self.error = why


@contextlib.contextmanager
def content_checked(path: str) -> Iterator[None]:
    """Around everything a replay or an export does with a recording's events: a recording
    is not trusted, and whatever its content makes fail (past the checks of its frames and
    header) ends in one line and RecordingError's exit (9), never a traceback."""
    try:
        yield
    except (GmpmonError, OSError):  # said as they are (an output that cannot be written)
        raise
    except (Exception, MemoryError, RecursionError) as e:
        raise content_error(path, e) from e


def content_error(path: str, e: BaseException) -> RecordingError:
    return RecordingError(f"{path}: malformed recording content ({type(e).__name__}: {e})"[:300])


def read_recording(path: str) -> Recording:
    """Open a recording and read its header; RecordingError if it is not one."""
    try:
        with open(path, "rb") as f:
            pre = f.read(PREAMBLE.size)
            if len(pre) < PREAMBLE.size or not pre.startswith(MAGIC):
                raise RecordingError(f"{path}: not a gmpmon recording")
            _, version, _flags = PREAMBLE.unpack(pre)
            if version not in READABLE:
                raise RecordingError(
                    f"{path}: recording format version {version} is not supported "
                    f"(this gmpmon reads versions {READABLE[0]}-{READABLE[-1]})"
                )
            hf = f.read(HEADER_FRAME.size)
            if len(hf) < HEADER_FRAME.size:
                raise RecordingError(f"{path}: truncated recording header")
            size, crc = HEADER_FRAME.unpack(hf)
            if size > MAX_HEADER:
                raise RecordingError(f"{path}: corrupt recording header (size {size})")
            raw = f.read(size)
            if len(raw) < size:
                raise RecordingError(f"{path}: truncated recording header")
            if zlib.crc32(raw) != crc:
                raise RecordingError(f"{path}: corrupt recording header (checksum mismatch)")
            try:
                header, extra = header_from_json(raw)
            except (ValueError, TypeError, RecursionError, OverflowError) as e:
                raise RecordingError(f"{path}: corrupt recording header ({e})") from None
            return Recording(path, header, extra, f.tell())
    except IsADirectoryError:
        raise RecordingError(f"{path}: is a directory, not a recording") from None
    except FileNotFoundError:
        raise RecordingError(f"{path}: no such file") from None
    except OSError as e:
        raise RecordingError(f"{path}: {e.strerror}") from None
