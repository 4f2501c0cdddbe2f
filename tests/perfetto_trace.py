"""Read a `gmpmon export --format perfetto` trace back with Perfetto's own generated protobuf
classes (the `perfetto` package's perfetto_trace_pb2), resolving what trace processor resolves:
compressed bundles, per-sequence interning, defaults and incremental clocks. Strict: a name
used before it is interned, a packet on a sequence never started, a slice begun on a track
whose slice is open, or an end without a begin raise."""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

BOOTTIME, INCREMENTAL = 6, 64
SLICE_BEGIN, SLICE_END, INSTANT = 1, 2, 3


@dataclass
class Track:
    uuid: int
    name: str
    parent: int
    rank: int
    pid: int = 0


@dataclass
class _Seq:
    track: int
    names: dict[int, str] = field(default_factory=dict)
    cats: dict[int, str] = field(default_factory=dict)
    args: dict[int, str] = field(default_factory=dict)
    strings: dict[int, str] = field(default_factory=dict)
    clock: int | None = None


@dataclass
class Trace:
    tracks: dict[int, Track]
    # (track name, start ns, end ns, name, category, args)
    slices: list[tuple[str, int, int, str, str, dict[str, Any]]]
    # (track name, ns, name, category, args)
    instants: list[tuple[str, int, str, str, dict[str, Any]]]
    packets: int


def packets(data: bytes) -> Iterator[Any]:
    trace = pb.Trace()
    trace.ParseFromString(data)
    for p in trace.packet:
        if p.HasField("compressed_packets"):
            yield from packets(zlib.decompress(p.compressed_packets))
        else:
            yield p


def read(data: bytes) -> Trace:
    tracks: dict[int, Track] = {}
    seqs: dict[int, _Seq] = {}
    events = []
    n = 0
    for p in packets(data):
        n += 1
        if p.HasField("track_descriptor"):
            td = p.track_descriptor
            assert td.uuid not in tracks, td
            tracks[td.uuid] = Track(td.uuid, td.name or td.process.process_name,
                                    td.parent_uuid, td.sibling_order_rank, td.process.pid)
            continue
        sid = p.trusted_packet_sequence_id
        assert sid, p
        if p.sequence_flags & 1:  # SEQ_INCREMENTAL_STATE_CLEARED
            d = p.trace_packet_defaults
            assert d.timestamp_clock_id == INCREMENTAL, d
            seqs[sid] = _Seq(d.track_event_defaults.track_uuid)
        s = seqs[sid]
        if p.HasField("interned_data"):
            i = p.interned_data
            for kind, table in ((i.event_names, s.names), (i.event_categories, s.cats),
                                (i.debug_annotation_names, s.args)):
                for e in kind:
                    assert e.iid not in table, e  # never defined twice
                    table[e.iid] = e.name
            for e in i.debug_annotation_string_values:
                s.strings[e.iid] = e.str.decode()
        if p.HasField("clock_snapshot"):
            clocks = {c.clock_id: c for c in p.clock_snapshot.clocks}
            assert clocks[INCREMENTAL].is_incremental
            assert clocks[INCREMENTAL].timestamp == clocks[BOOTTIME].timestamp
            s.clock = clocks[INCREMENTAL].timestamp
            continue
        if not p.HasField("track_event"):
            continue
        if p.timestamp_clock_id:
            assert p.timestamp_clock_id == BOOTTIME, p
            ts = p.timestamp
        else:
            assert s.clock is not None
            s.clock += p.timestamp
            ts = s.clock
        te = p.track_event
        track = te.track_uuid or s.track
        args = {s.args[a.name_iid]: a.int_value if a.HasField("int_value")
                else s.strings[a.string_value_iid] for a in te.debug_annotations}
        name = s.names[te.name_iid] if te.type != SLICE_END else ""
        cat = s.cats[te.category_iids[0]] if te.type != SLICE_END else ""
        events.append((ts, len(events), track, te.type, name, cat, args))
    # What trace processor does: every event in timestamp order (ties in file order).
    events.sort(key=lambda e: (e[0], e[1]))
    open_: dict[int, tuple[int, str, str, dict[str, Any]]] = {}
    slices = []
    instants = []
    for ts, _i, track, typ, name, cat, args in events:
        tn = tracks[track].name
        if typ == SLICE_BEGIN:
            assert track not in open_, (tn, ts, name, open_[track])
            open_[track] = (ts, name, cat, args)
        elif typ == SLICE_END:
            start, name, cat, args = open_.pop(track)
            slices.append((tn, start, ts, name, cat, args))
        else:
            assert typ == INSTANT
            instants.append((tn, ts, name, cat, args))
    assert not open_, open_
    return Trace(tracks, slices, instants, n)
