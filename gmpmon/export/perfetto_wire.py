"""The few pieces of Perfetto's trace format (protos/perfetto/trace/perfetto_trace.proto) the
perfetto exporter writes, encoded by hand: varints and length-delimited fields, as pprof.py
does. A trace is a sequence of ``Trace.packet`` (field 1) TracePackets; the exporter's are:

- track descriptors (a process track, a child track per P, stop-the-world), on sequence 1;
- per sequence, a first packet that clears its incremental state and sets its defaults
  (timestamps on a sequence-scoped incremental clock, 64, tied to BOOTTIME by a
  ClockSnapshot; on a P's sequence, every event on that P's track) and the interned
  categories and argument names;
- TrackEvents: slice begin/end and instants, names interned (EventName, the first packet that
  uses a name carries it), timestamps as deltas from the sequence's previous packet;
- a bundle of those, zlib-compressed, in a packet's ``compressed_packets`` (field 50), as
  Perfetto's own tracing service writes them (trace processor inflates them in place).
"""

from __future__ import annotations

# TracePacket fields
F_TIMESTAMP = 8
F_TRACK_EVENT = 11
F_SEQ_ID = 10
F_INTERNED = 12
F_SEQ_FLAGS = 13
F_COMPRESSED = 50
F_CLOCK_ID = 58
F_DEFAULTS = 59
F_TRACK_DESCRIPTOR = 60
F_CLOCK_SNAPSHOT = 6
SEQ_INCREMENTAL_STATE_CLEARED = 1
# TrackEvent types
SLICE_BEGIN, SLICE_END, INSTANT = 1, 2, 3
CLOCK_BOOTTIME = 6
CLOCK_INCREMENTAL = 64  # sequence-scoped
CHILD_ORDERING_EXPLICIT = 3

SMALL = 1 << 14  # varints of values below this are precomputed (1 or 2 bytes)


def _varint(n: int) -> bytes:
    if n < 0:
        n += 1 << 64  # int64 fields: two's complement, 10 bytes
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


# Both tables are concatenations of one-byte strings (~1.5 ms; a call a value took ~6 ms of
# each export's start).
_BYTE = [bytes((i,)) for i in range(256)]
VARINTS: tuple[bytes, ...] = (*_BYTE[:0x80],
                              *(lo + hi for hi in _BYTE[1 : SMALL >> 7] for lo in _BYTE[0x80:]))
# The first two bytes of the varint of any n >= SMALL, by n's low 14 bits (the rest of it is
# VARINTS[n >> 14] while n < SMALL << 14): the exporter's hot path needs no call.
LOW2: tuple[bytes, ...] = tuple(lo + hi for hi in _BYTE[0x80 : 0x80 + (SMALL >> 7)]
                                for lo in _BYTE[0x80:])


def varint(n: int) -> bytes:
    """A varint; a negative value as int64 (10 bytes)."""
    if 0 <= n < SMALL:
        return VARINTS[n]
    if 0 < n < 1 << 21:
        return bytes(((n & 0x7F) | 0x80, ((n >> 7) & 0x7F) | 0x80, n >> 14))
    return _varint(n)


_KEYS: dict[int, bytes] = {}


def key(num: int, wire: int) -> bytes:
    k = num << 3 | wire
    got = _KEYS.get(k)
    if got is None:
        got = _KEYS[k] = _varint(k)
    return got


def fv(num: int, value: int) -> bytes:
    """A varint field."""
    return key(num, 0) + varint(value)


def fb(num: int, data: bytes) -> bytes:
    """A length-delimited field (bytes, string, message)."""
    return key(num, 2) + varint(len(data)) + data


def fs(num: int, text: str) -> bytes:
    return fb(num, text.encode("utf-8", "replace"))


def packet(body: bytes) -> bytes:
    """``Trace.packet`` (field 1) holding a TracePacket."""
    return b"\x0a" + varint(len(body)) + body


def compressed(packets: bytes, level: int) -> bytes:
    """A TracePacket whose ``compressed_packets`` holds ``packets`` (serialized
    ``Trace.packet`` fields) deflated with a zlib header."""
    import zlib

    return packet(fb(F_COMPRESSED, zlib.compress(packets, level)))


def interned(num: int, iid: int, name: str) -> bytes:
    """One InternedData entry (EventCategory, EventName, DebugAnnotationName: iid 1, name 2;
    an InternedString's str 2 is bytes, the same wire)."""
    return fb(num, fv(1, iid) + fs(2, name))


# InternedData fields
I_CATEGORIES, I_NAMES, I_ARG_NAMES, I_STRINGS = 1, 2, 3, 29


def sequence_start(seq: int, origin: int, track_uuid: int, interned_data: bytes) -> bytes:
    """The first packet of a sequence: its incremental state cleared, the defaults (timestamps
    on the incremental clock; ``track_uuid`` for events that name none, 0: none), a
    ClockSnapshot that sets the incremental clock to ``origin`` ns of BOOTTIME (the first
    delta counts from it), and the interned data the whole sequence uses."""
    te_defaults = fb(11, fv(11, track_uuid)) if track_uuid else b""
    defaults = fv(F_CLOCK_ID, CLOCK_INCREMENTAL) + te_defaults
    clocks = fb(1, fv(1, CLOCK_BOOTTIME) + fv(2, origin)) + fb(
        1, fv(1, CLOCK_INCREMENTAL) + fv(2, origin) + fv(3, 1)
    )
    return packet(
        fv(F_SEQ_ID, seq)
        + fv(F_SEQ_FLAGS, SEQ_INCREMENTAL_STATE_CLEARED)
        + fb(F_DEFAULTS, defaults)
        + fb(F_INTERNED, interned_data)
        + fb(F_CLOCK_SNAPSHOT, clocks)
    )


def process_track(uuid: int, pid: int, name: str) -> bytes:
    """TrackDescriptor for the target process; its children ordered by their rank."""
    proc = fv(1, pid) + fs(6, name)
    return fb(F_TRACK_DESCRIPTOR, fv(1, uuid) + fb(3, proc) + fv(11, CHILD_ORDERING_EXPLICIT))


def child_track(uuid: int, parent: int, name: str, rank: int) -> bytes:
    """TrackDescriptor of a named track inside the process, at ``rank`` among its siblings."""
    return fb(F_TRACK_DESCRIPTOR, fv(1, uuid) + fv(5, parent) + fs(2, name) + fv(12, rank))


def int_arg(name_iid: int, value: int) -> bytes:
    """TrackEvent.debug_annotations (4): DebugAnnotation {name_iid 1, int_value 4}."""
    return fb(4, fv(1, name_iid) + fv(4, value))


def string_arg(name_iid: int, value_iid: int) -> bytes:
    """DebugAnnotation {name_iid 1, string_value_iid 17} (the value an InternedString)."""
    return fb(4, fv(1, name_iid) + fv(17, value_iid))
