"""The bytes of a recording (docs/recording-format.md): frame layouts, the batch payload's
column coding, the header's JSON, and the caps a reader holds a file to.

Shared by the writer (gmpmon/record.py) and the reader (gmpmon/recread.py). A payload is
decoded into compact columns (at most 8 bytes a value), and the event tuples a model is fed
are made from them a chunk at a time: a batch of 2^19 events as tuples is ~150 MB, as
columns at most 29 MB.
"""

from __future__ import annotations

import itertools
import json
import math
import operator
import struct
import sys
import zlib
from array import array
from collections.abc import Iterator
from dataclasses import asdict, dataclass, fields
from typing import Any

from gmpmon.events import Batch, EventTuple, Header

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

# --- what a reader holds a file to (docs/recording-format.md, "Reading damaged or hostile
# files"). Capture's batches hold at most a few thousand events, their payloads inflate
# 2-16x (a whole file at most 11x, tests/data), a batch's stacks table is a few KB and its
# header 2 KB: every cap is far above what a real recording holds.
MAX_FRAME = 64 << 20  # bytes of compressed payload; a hostile length stops the reader here
# Events per batch: the writer splits a bigger batch, the reader stops at one. It was 16M,
# and a 514 KB recording claiming 16M events took 2.6 GB to replay.
MAX_EVENTS = 1 << 19
# All the batches of a file inflate to at most MAX_RATIO times the file's own size (plus
# INFLATE_SLACK, for tiny files): a zlib bomb of zeros inflates ~1000x, and 500 KB of
# 150k-event batches that each stayed under a per-batch cap held 70M events (minutes and
# gigabytes of model work). At 32x, 500 KB hold at most ~2.4M events (7 bytes each at least).
MAX_RATIO = 32
INFLATE_SLACK = 1 << 20
# And they hold at most MAX_EVENTS_PER_BYTE events a byte of the file (plus EVENTS_SLACK):
# the model's work is per event, 1-3 µs each. Real recordings hold at most 0.8 a byte (a
# batch 0.94: tests/data/gc.gmp, a preempted loop), so 500 KB hold at most ~1M events.
MAX_EVENTS_PER_BYTE = 2
EVENTS_SLACK = 1 << 16
MAX_STACKS_JSON = 16 << 20  # a batch's stacks table, before json.loads
# Strings in one batch's stacks table (json.loads makes an object of each, ~55 bytes: 16 MiB
# of `"ab",` was 280 MB) and stack ids defined in a whole file (the model keeps them all;
# capture names at most ~150k: census 20k, go sites 50k, perf stacks 65k, mutex stacks).
MAX_STACK_STRINGS = 1 << 19
MAX_STACK_IDS = 1 << 18
MAX_HEADER = 1 << 20  # a header's JSON (a real one is ~2 KB)
MAX_GOMAXPROCS = 1 << 16  # a header's gomaxprocs sizes the model's per-P state
CHUNK_EVENTS = 1 << 15  # event tuples made at a time from a decoded batch (~10 MB)
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


def batch_bound(n: int) -> int:
    """The most bytes a payload of ``n`` events may inflate to (8 bytes a value and a type
    code per column, the counts, a stacks table at its cap)."""
    return 64 * n + 16 + MAX_STACKS_JSON


class _Reader:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes) -> None:
        self.buf = memoryview(buf)
        self.pos = 0

    def take(self, size: int) -> memoryview:
        end = self.pos + size
        if size < 0 or end > len(self.buf):
            raise ValueError("payload too short")
        out = self.buf[self.pos : end]
        self.pos = end
        return out

    def column(self, count: int, allowed: tuple[str, ...]) -> array[int]:
        code = chr(self.take(1)[0])
        if code not in allowed:
            raise ValueError(f"bad column type {code!r}")
        col: array[int] = array(code)
        col.frombytes(self.take(count * col.itemsize))
        return col


@dataclass(frozen=True, slots=True)
class Columns:
    """A decoded batch: its events as columns (timestamps as deltas), its stacks table."""

    n: int
    first: int
    cols: tuple[array[int], ...]  # deltas (n-1), kind, p, m, g, a0, a1 (n each)
    stacks: dict[int, tuple[str, ...]]
    raw_size: int  # bytes the payload inflated to

    def chunks(self, size: int = 0) -> Iterator[list[EventTuple]]:
        """The events as tuples, ``size`` (CHUNK_EVENTS) at a time."""
        if not self.n:
            return
        size = size or CHUNK_EVENTS
        deltas, kind, p, m, g, a0, a1 = self.cols
        t = self.first
        for lo in range(0, self.n, size):
            hi = min(self.n, lo + size)
            ts = list(itertools.accumulate(deltas[lo : hi - 1], initial=t))
            if hi < self.n:
                t = ts[-1] + deltas[hi - 1]
            yield list(zip(ts, kind[lo:hi], p[lo:hi], m[lo:hi], g[lo:hi], a0[lo:hi],
                           a1[lo:hi], strict=True))


def decode_columns(payload: bytes, n_expected: int, cap: int | None = None) -> Columns:
    """A payload into columns, inflating it to at most ``cap`` bytes (and its batch_bound);
    raises ValueError/zlib.error on any inconsistency or excess."""
    if n_expected > MAX_EVENTS:
        raise ValueError("too many events")
    bound = batch_bound(n_expected)
    limit = bound if cap is None else max(0, min(cap, bound))
    d = zlib.decompressobj()
    raw = d.decompress(payload, limit) if limit else b""
    if d.unconsumed_tail or not d.eof:
        if limit < bound:
            raise ValueError(f"payload inflates past what the file's size allows (its "
                             f"batches together inflate to at most {MAX_RATIO}x it)")
        raise ValueError("payload does not decompress to one batch within its bounds")
    r = _Reader(raw)
    (n,) = struct.unpack("<I", r.take(4))
    if n != n_expected:
        raise ValueError("event count mismatch")
    first = 0
    cols: tuple[array[int], ...] = ()
    if n:
        (first,) = struct.unpack("<Q", r.take(8))
        cols = (r.column(n - 1, _SIGNED), *(r.column(n, _ANY) for _ in range(6)))
    (slen,) = struct.unpack("<I", r.take(4))
    stacks = _stacks(r.take(slen)) if slen else {}
    if r.pos != len(raw):
        raise ValueError("trailing bytes in batch")
    return Columns(n, first, cols, stacks, len(raw))


def _stacks(sj: memoryview) -> dict[int, tuple[str, ...]]:
    if len(sj) > MAX_STACKS_JSON:
        raise ValueError(f"stacks table of {len(sj)} bytes")
    text = sj.tobytes()
    if text.count(b'"') > 2 * MAX_STACK_STRINGS:
        raise ValueError(f"stacks table of more than {MAX_STACK_STRINGS} strings")
    obj = json.loads(text)
    if not isinstance(obj, dict):
        raise ValueError("stacks table is not an object")
    stacks: dict[int, tuple[str, ...]] = {}
    for k, v in obj.items():
        if not isinstance(v, list) or not all(isinstance(f, str) for f in v):
            raise ValueError("bad stack")
        if not isinstance(k, str) or not k.lstrip("-").isdigit() or len(k) > 20:
            raise ValueError("bad stack id")
        # Interned: frames repeat across stacks (runtime.gopark in most of them).
        stacks[int(k)] = tuple(map(sys.intern, v))
    return stacks


def decode_batch(payload: bytes, n_expected: int) -> Batch:
    """Inverse of :func:`encode_batch`, the whole batch at once; raises ValueError/zlib.error
    on any inconsistency."""
    c = decode_columns(payload, n_expected)
    return Batch([e for ch in c.chunks() for e in ch], c.stacks)


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
    }.get(t)
    if ok is None:  # a field of a type this check does not know: a new field, say why
        raise ValueError(f"header field {name} has type {t}, which the reader cannot check")
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
