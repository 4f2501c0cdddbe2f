"""Recording files: the event batches of a run, written incrementally, read back for replay.

Format (docs/recording-format.md has the byte-level description):

    magic "GMPMONRC" | u16 version | u16 flags
    header frame:  u32 len | u32 crc32(json) | JSON (Header fields + "extra")
    batch frames:  "GB" | u32 len | u32 n | u64 first_ts | u64 last_ts | u32 crc | payload
    end frame:     "GE" | u32 batches | u32 crc   (written by close(); absent after a crash)

A batch payload is zlib(columns): the 7 event fields stored column by column, timestamps as
deltas, each column in the narrowest fixed width that holds it, then the batch's stacks table
as JSON. Column transposition, width choice and delta sums all run at C speed (zip, array,
itertools), so writing keeps up with capture.

Every frame is written with one unbuffered write: a crash or a killed target loses at most
the batch being written. A reader stops at the first frame that is short or fails its CRC and
says where (:attr:`Recording.stopped_at`, :attr:`Recording.error`).
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import json
import math
import operator
import struct
import threading
import time
import zlib
from array import array
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any, BinaryIO

from gmpmon.errors import GmpmonError, RecordingError
from gmpmon.events import Batch, EventTuple, Header
from gmpmon.files import open_new_private, open_private
from gmpmon.priority import name_thread

MAGIC = b"GMPMONRC"
# 2: CENSUS_STACK/CENSUS_STACK_WAIT (census wait stacks). Version 1 files read the same way
# (they have no such events); a version-1 reader refuses version 2 files in one line.
VERSION = 2
READABLE = (1, 2)
PREAMBLE = struct.Struct("<8sHH")
HEADER_FRAME = struct.Struct("<II")  # len, crc
BATCH_TAG = b"GB"
END_TAG = b"GE"
BATCH_FRAME = struct.Struct("<2sIIQQI")  # tag, len, n_events, first_ts, last_ts, crc
END_FRAME = struct.Struct("<2sII")  # tag, batches, crc
MAX_FRAME = 64 << 20  # bytes of compressed payload; a hostile length stops the reader here
# Events per batch: the writer splits a bigger batch, the reader stops at one. A batch is
# decoded whole (a tuple per event, ~250 B each): 2^19 keeps one under ~130 MB. It was 16M,
# and a 514 KB recording claiming 16M events took 2.6 GB to replay.
MAX_EVENTS = 1 << 19
# A payload inflates to at most this many times its own size (and at least 1 MiB may come
# of it): capture's batches inflate 2-14x; a zlib bomb of zeros ~1000x.
MAX_RATIO = 128
MAX_STACKS_JSON = 16 << 20  # a batch's stacks table, before json.loads
MAX_HEADER = 16 << 20
MAX_GOMAXPROCS = 1 << 16  # a header's gomaxprocs sizes the model's per-P state
BACKLOG_EVENTS = 100_000  # background writer: events handed on but not yet written (~27 MB)
ZLIB_LEVEL = 1  # 1.9 M events/s at 1.7 B/event; level 6: 1.3 M/s at 1.4 B/event

# Column type codes: width chosen per column per batch.
_UNSIGNED = ("B", "H", "I", "Q")
_SIGNED = ("b", "h", "i", "q")
_ANY = _UNSIGNED + _SIGNED
_LIMITS = {"B": 0xFF, "H": 0xFFFF, "I": 0xFFFFFFFF, "Q": (1 << 64) - 1}
_SLIMITS = {"b": 1 << 7, "h": 1 << 15, "i": 1 << 31, "q": 1 << 63}


def _pack_unsigned(col: tuple[int, ...] | list[int]) -> bytes:
    hi = max(col) if col else 0
    lo = min(col) if col else 0
    if lo < 0:
        return _pack_signed(col)  # never from capture (u64 fields); keeps odd input lossless
    code = next(c for c in _UNSIGNED if hi <= _LIMITS[c])
    return code.encode() + array(code, col).tobytes()


def _pack_signed(col: tuple[int, ...] | list[int]) -> bytes:
    hi = max(col) if col else 0
    lo = min(col) if col else 0
    code = next((c for c in _SIGNED if -_SLIMITS[c] <= lo and hi < _SLIMITS[c]), "")
    if not code:
        raise ValueError("column value does not fit in 64 bits")
    return code.encode() + array(code, col).tobytes()


_FIELDS = tuple(operator.itemgetter(i) for i in range(7))


def encode_batch(batch: Batch) -> tuple[bytes, int, int, int]:
    """-> (compressed payload, n_events, first_ts, last_ts)."""
    raw, n, first, last = pack_batch(batch)
    return zlib.compress(raw, ZLIB_LEVEL), n, first, last


def pack_batch(batch: Batch) -> tuple[bytes, int, int, int]:
    """-> (payload before compression, n_events, first_ts, last_ts)."""
    ev = batch.events
    n = len(ev)
    parts = [struct.pack("<I", n)]
    first = last = 0
    if n:
        # A column per field by itemgetter: 3x faster than zip(*ev) on batches of thousands
        # (the model thread writes the recording: at ~600k events/s in full mode the
        # transposition alone was a tenth of its time).
        ts, kind, p, m, g, a0, a1 = (list(map(f, ev)) for f in _FIELDS)
        first, last = ts[0], ts[-1]
        deltas = list(map(operator.sub, ts[1:], ts[:-1]))
        parts.append(struct.pack("<Q", first))
        parts.append(_pack_signed(deltas))
        parts.append(_pack_unsigned(kind))
        parts.append(_pack_signed(p))
        for col in (m, g, a0, a1):
            parts.append(_pack_unsigned(col))
    stacks = {str(k): list(v) for k, v in batch.stacks.items()}
    sj = json.dumps(stacks, separators=(",", ":")).encode() if stacks else b""
    parts.append(struct.pack("<I", len(sj)))
    parts.append(sj)
    return b"".join(parts), n, first, last


class _Reader:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes) -> None:
        self.buf = buf
        self.pos = 0

    def take(self, size: int) -> bytes:
        end = self.pos + size
        if size < 0 or end > len(self.buf):
            raise ValueError("payload too short")
        out = self.buf[self.pos : end]
        self.pos = end
        return out

    def column(self, count: int, allowed: tuple[str, ...]) -> array[int]:
        code = self.take(1).decode("latin-1")
        if code not in allowed:
            raise ValueError(f"bad column type {code!r}")
        col: array[int] = array(code)
        col.frombytes(self.take(count * col.itemsize))
        return col


def decode_batch(payload: bytes, n_expected: int) -> Batch:
    """Inverse of :func:`encode_batch`; raises ValueError/zlib.error on any inconsistency."""
    if n_expected > MAX_EVENTS:
        raise ValueError("too many events")
    d = zlib.decompressobj()
    cap = min(64 * n_expected + MAX_HEADER, max(MAX_RATIO * len(payload), 1 << 20))
    raw = d.decompress(payload, cap)
    if d.unconsumed_tail or not d.eof:
        raise ValueError("payload does not decompress to one batch within its bounds")
    r = _Reader(raw)
    (n,) = struct.unpack("<I", r.take(4))
    if n != n_expected:
        raise ValueError("event count mismatch")
    events: list[EventTuple] = []
    if n:
        (first,) = struct.unpack("<Q", r.take(8))
        deltas = r.column(n - 1, _SIGNED)
        kind = r.column(n, _ANY)
        p = r.column(n, _ANY)
        m = r.column(n, _ANY)
        g = r.column(n, _ANY)
        a0 = r.column(n, _ANY)
        a1 = r.column(n, _ANY)
        ts = list(itertools.accumulate(deltas, initial=first))
        events = list(zip(ts, kind, p, m, g, a0, a1, strict=True))
    (slen,) = struct.unpack("<I", r.take(4))
    stacks: dict[int, tuple[str, ...]] = {}
    if slen:
        if slen > MAX_STACKS_JSON:
            raise ValueError(f"stacks table of {slen} bytes")
        obj = json.loads(r.take(slen))
        if not isinstance(obj, dict):
            raise ValueError("stacks table is not an object")
        for k, v in obj.items():
            if not isinstance(v, list) or not all(isinstance(f, str) for f in v):
                raise ValueError("bad stack")
            if not isinstance(k, str) or not k.lstrip("-").isdigit() or len(k) > 20:
                raise ValueError("bad stack id")
            stacks[int(k)] = tuple(v)
    if r.pos != len(raw):
        raise ValueError("trailing bytes in batch")
    return Batch(events, stacks)


def header_to_json(header: Header, extra: dict[str, Any] | None = None) -> bytes:
    d: dict[str, Any] = asdict(header)
    d["extra"] = extra or {}
    return json.dumps(d, separators=(",", ":"), sort_keys=True).encode()


# Header field types as written (events.Header's annotations): every field read is checked
# against its type, so that a hostile header is one line, not a TypeError deep in the model.
_HEADER_TYPES: dict[str, str] = {f.name: str(f.type) for f in fields(Header)}


def _check_header_field(name: str, v: Any) -> Any:
    t = _HEADER_TYPES[name]
    if t == "tuple[str, ...]":
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise ValueError(f"header field {name} is not a list of strings")
        return tuple(v)
    ok = {
        "int": isinstance(v, int) and not isinstance(v, bool),
        "str": isinstance(v, str),
        "float": isinstance(v, (int, float)) and not isinstance(v, bool),
    }.get(t, True)
    if not ok:
        raise ValueError(f"header field {name} is not of type {t}")
    if t == "int" and not -(1 << 63) <= v < 1 << 64:
        raise ValueError(f"header field {name} does not fit in 64 bits")
    if t == "float" and not math.isfinite(v):
        raise ValueError(f"header field {name} is not a finite number")
    return v


def header_from_json(raw: bytes) -> tuple[Header, dict[str, Any]]:
    d = json.loads(raw)
    if not isinstance(d, dict):
        raise ValueError("header is not an object")
    kw: dict[str, Any] = {}
    for f in fields(Header):
        if f.name not in d:
            continue
        kw[f.name] = _check_header_field(f.name, d[f.name])
    if not 0 < kw.get("gomaxprocs", 1) <= MAX_GOMAXPROCS:
        raise ValueError(f"header field gomaxprocs {kw['gomaxprocs']} is implausible")
    for need, typ in (
        ("pid", int),
        ("exe", str),
        ("go_version", str),
        ("gomaxprocs", int),
        ("mode", str),
        ("start_ns", int),
        ("wall_start", (int, float)),
        ("wait_reasons", tuple),
    ):
        if not isinstance(kw.get(need), typ):
            raise ValueError(f"header field {need} missing or of the wrong type")
    for name in ("duty_window_ms", "duty_period_ms", "sample_hz"):
        if name in kw and not isinstance(kw[name], int):
            raise ValueError(f"header field {name} is not an integer")
    extra = d.get("extra", {})
    return Header(**kw), extra if isinstance(extra, dict) else {}


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
                batch = self._backlog.popleft()
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


@dataclass(frozen=True, slots=True)
class FrameInfo:
    offset: int
    n_events: int
    first_ts: int
    last_ts: int


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
        self.batches_read = 0

    def __iter__(self) -> Iterator[Batch]:
        for _info, batch in self.frames():
            yield batch

    def frames(self, start_offset: int | None = None) -> Iterator[tuple[FrameInfo, Batch]]:
        """Batches with their frame info, from the first frame (or ``start_offset``)."""
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
                try:
                    batch = decode_batch(payload, n)
                except (ValueError, zlib.error, struct.error, UnicodeDecodeError,
                        RecursionError, OverflowError, MemoryError) as e:
                    self._stop(pos, f"undecodable batch {self.batches_read + 1} at byte {pos}: {e}")
                    return
                self.batches_read += 1
                yield FrameInfo(pos, n, first, last), batch
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
        raise RecordingError(
            f"{path}: malformed recording content ({type(e).__name__}: {e})"[:300]
        ) from e


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
