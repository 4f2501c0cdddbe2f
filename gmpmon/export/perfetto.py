"""Perfetto: a protobuf trace (TracePackets of TrackEvents) for ui.perfetto.dev.

The target process is a track group named "<exe> (pid N, goX)"; inside it one track per P
("P<n>", in P order) and a "stop-the-world" track. Slices: each P span (the running goroutine
"G<goid>", "searching", "idle", "syscall G<goid>", "GC stop", with the goid as an argument),
the STW pauses; instants: steals (on the thief's track: "steal N from P<k>", args victim and
goroutines) and parks (on the P's track: "park G<g>: <reason>", args goid and reason).
Categories say the kind (running, syscall, ..., stw, steal, park). Timestamps are the
recording's (the target's CLOCK_MONOTONIC ns, declared as the trace's clock).

What makes it small and quick to write (a recording can hold millions of spans; the Chrome
JSON this replaced spent ~115 bytes on each): each P's spans are a packet sequence of their
own whose defaults name the P's track and whose timestamps are deltas on an incremental clock
(a span starts where the previous one ended: its begin's delta is 0), names are interned (a
goroutine's "G<goid>" is written once per P, then a small id), the begin packet of a
(state, goroutine) pair is made once and reused, and the packets go out zlib-compressed in
bundles (``compressed_packets``). The wire format is perfetto_wire.py's.

Memory stays bounded whatever the recording's length: a sequence's packets are compressed
into an anonymous temporary file once its buffer is past a share of BUFFER_BYTES, and the
interning tables are cleared past MAX_INTERNED entries (names are then interned anew).
"""

from __future__ import annotations

import shutil
import tempfile
from typing import IO

from gmpmon.events import Batch, Header, Kind
from gmpmon.export import perfetto_wire as w
from gmpmon.export.base import Exporter, Sink
from gmpmon.files import open_private
from gmpmon.model.sched import MAX_PROCS
from gmpmon.model.snapshot import PState, Snapshot

PROCESS_UUID, STW_UUID, ODD_UUID, P_UUID = 1, 2, 3, 16  # P n's track: P_UUID + n
META_SEQ, EVENTS_SEQ, ODD_SEQ, P_SEQ = 1, 2, 3, 16  # P n's sequence: P_SEQ + n
BUFFER_BYTES = 4 << 20  # packets held before compression, all sequences together
MIN_CHUNK = 64 << 10
MAX_INTERNED = 1 << 16  # names (and begin packets) a sequence remembers
LEVEL = 1  # zlib: level 1 already finds the repetition; 6 is ~3x slower for ~15% less

# Interned on every sequence, by its first packet: categories and argument names.
CATEGORIES = ("running", "syscall", "searching", "idle", "gcstop", "unknown", "stw", "steal",
              "park")
CAT = {name: i + 1 for i, name in enumerate(CATEGORIES)}
ARGS = ("goid", "victim", "goroutines", "reason", "p")
A_GOID, A_VICTIM, A_GOROUTINES, A_REASON, A_P = range(1, 6)
_SPAN_NAMES = {
    int(PState.SEARCHING): ("searching", "searching"),
    int(PState.IDLE): ("idle", "idle"),
    int(PState.GCSTOP): ("GC stop", "gcstop"),
    int(PState.UNKNOWN): ("unknown", "unknown"),
}
K_PARK, K_STEAL = int(Kind.PARK), int(Kind.STEAL)
K_STW_START, K_STW_END = int(Kind.STW_START), int(Kind.STW_END)
_KINDS = frozenset((K_PARK, K_STEAL, K_STW_START, K_STW_END))
P_RUNNING, P_SYSCALL = int(PState.RUNNING), int(PState.SYSCALL)
_VARINTS, _SMALL, _LOW2, _LARGE = w.VARINTS, w.SMALL, w.LOW2, w.SMALL << 14
_MID = 1 << 21  # deltas from _SMALL up to this take 3 bytes, then 4 up to _LARGE
_BEGIN = w.fv(9, w.SLICE_BEGIN)
_END = w.fv(9, w.SLICE_END)
_INSTANT = w.fv(9, w.INSTANT)
_CAT_FIELD = {c: w.fv(3, i) for c, i in CAT.items()}
_CAT_RUNNING, _CAT_SYSCALL = _CAT_FIELD["running"], _CAT_FIELD["syscall"]
_K_NAME_IID, _K_ARG, _K_TE, _K_INTERNED = (
    w.key(10, 0), w.key(4, 2), w.key(w.F_TRACK_EVENT, 2), w.key(w.F_INTERNED, 2))
_K_NAMES = w.key(w.I_NAMES, 2)
_GOID_ARG = w.fv(1, A_GOID) + w.key(4, 0)  # a goid's DebugAnnotation up to its value
_INTERNED_FIXED = b"".join(
    [w.interned(w.I_CATEGORIES, i + 1, c) for i, c in enumerate(CATEGORIES)]
    + [w.interned(w.I_ARG_NAMES, i + 1, a) for i, a in enumerate(ARGS)]
)


class _Seq:
    """One packet sequence: its buffer, its clock's last value, what it has interned."""

    __slots__ = ("bodies", "buf", "ends", "field", "id", "instants", "last", "names", "next_iid",
                 "track")

    def __init__(self, seq: int, track: int, origin: int) -> None:
        self.id = seq
        self.track = track  # the default track of its events (0: each event names its own)
        self.field = w.fv(w.F_SEQ_ID, seq)
        self.last = origin
        self.buf = bytearray(w.sequence_start(seq, origin, track, _INTERNED_FIXED))
        self.names: dict[str, int] = {}
        self.next_iid = 0
        # (goid << 3 | state) -> the whole begin packet of that span when it starts where the
        # previous one ended (delta 0): most spans; and that packet followed by the end's
        # packet up to its delta, for a delta of 3 bytes (16 us to 2 ms), of 4 (to 268 ms)
        self.bodies: dict[int, tuple[bytes, bytes, bytes]] = {}
        # (P, goid, wait reason) -> a park instant's TrackEvent, once its name is interned
        self.instants: dict[tuple[int, int, int], bytes] = {}
        # An end packet on the default track, by the length of its delta's varint (1..10):
        # everything before the delta's bytes.
        self.ends = tuple(
            b"\x0a" + w.varint(len(self.field) + len(_END) + 3 + k) + self.field
            + w.fb(w.F_TRACK_EVENT, _END) + b"\x40"
            for k in range(11)
        )

    def name(self, name: str) -> tuple[int, bytes]:
        """The iid of ``name`` on this sequence, and the InternedData entry to send with the
        packet that uses it (b"" when sent before)."""
        iid = self.names.get(name)
        if iid is not None:
            return iid, b""
        if len(self.names) >= MAX_INTERNED:
            self.names.clear()
            self.bodies.clear()
            self.instants.clear()
        self.next_iid += 1
        iid = self.names[name] = self.next_iid
        # w.interned(w.I_NAMES, iid, name), written out: once a goroutine a P runs
        nb = name.encode("utf-8", "replace")
        entry = b"\x08" + w.varint(iid) + b"\x12" + w.varint(len(nb)) + nb
        return iid, _K_NAMES + w.varint(len(entry)) + entry

    def ts(self, ts: int) -> bytes:
        """The packet's timestamp fields: a delta on the incremental clock, or, earlier than
        the sequence's previous packet (out-of-order input), absolute on BOOTTIME (the
        incremental clock keeps its value)."""
        d = ts - self.last
        if d >= 0:
            self.last = ts
            return b"\x40" + (_VARINTS[d] if d < _SMALL else w.varint(d))
        return w.fv(w.F_CLOCK_ID, w.CLOCK_BOOTTIME) + w.fv(w.F_TIMESTAMP, max(ts, 0))

    def event(self, ts: int, te: bytes, intern: bytes = b"") -> None:
        """A TrackEvent packet (``te``: its fields), with interned data if any."""
        body = self.ts(ts) + self.field
        if intern:
            body += w.fb(w.F_INTERNED, intern)
        self.buf += w.packet(body + w.fb(w.F_TRACK_EVENT, te))


class PerfettoExporter(Exporter):
    wants_spans = True
    spans_only = True

    def __init__(self, header: Header) -> None:
        super().__init__(header)
        self.origin = -1
        self._pid = int(header.pid)
        self._seqs: dict[int, _Seq] = {}  # P id (ODD_SEQ's key: -1) -> its sequence
        self._events: _Seq | None = None  # STW, steals, parks
        self._chunk = BUFFER_BYTES
        self._spool: IO[bytes] | None = None
        self.procs: set[int] = set()  # Ps with a track
        self.odd = False  # events of P ids out of range, on a track of their own
        self.stw = 0  # pauses on the stop-the-world track
        self._stw_start = -1
        self._stw_end = 0  # where the last pause ended
        self._reasons: dict[int, str] = {}
        self._strings: dict[str, int] = {}  # park reasons interned on the events sequence
        self._string_iid = 0

    # ------------------------------------------------------------------ sequences

    def _new_seq(self, seq: int, track: int, ts: int) -> _Seq:
        if self.origin < 0:
            self.origin = max(ts, 0)
        s = _Seq(seq, track, self.origin)
        nseq = len(self._seqs) + 2
        self._chunk = max(MIN_CHUNK, BUFFER_BYTES // nseq)
        return s

    def _p_seq(self, p: int, ts: int) -> _Seq:
        if 0 <= p < MAX_PROCS:
            self.procs.add(p)
            s = self._seqs[p] = self._new_seq(P_SEQ + p, P_UUID + p, ts)
        else:
            s = self._seqs.get(-1) or self._new_seq(ODD_SEQ, ODD_UUID, ts)
            self._seqs[-1] = self._seqs[p] = s
            self.odd = True
        return s

    def _track(self, p: int) -> int:
        """The track of an instant on P ``p``."""
        if 0 <= p < MAX_PROCS:
            self.procs.add(p)
            return P_UUID + p
        self.odd = True
        return ODD_UUID

    def _ev(self, ts: int) -> _Seq:
        s = self._events
        if s is None:
            s = self._events = self._new_seq(EVENTS_SEQ, 0, ts)
        return s

    def _flush(self, s: _Seq) -> None:
        if not s.buf:
            return
        if self._spool is None:
            self._spool = tempfile.TemporaryFile()  # noqa: SIM115 - closed with the exporter
        self._spool.write(w.compressed(bytes(s.buf), LEVEL))
        s.buf.clear()

    # ------------------------------------------------------------------ input

    def on_span(self, p: int, start: int, end: int, state: int, goid: int) -> None:
        s = self._seqs.get(p)
        if s is None:
            s = self._p_seq(p, start)
        buf = s.buf
        if start == s.last:
            # the model's states are PState values (< 8): the key is unique (the P id out of
            # range sequence caches none: its begins carry the P id)
            got = s.bodies.get(goid << 3 | state)
            if got is None:
                self._begin(s, p, start, state, goid)
            else:
                buf += got[0]
        else:
            self._begin(s, p, start, state, goid)
        d = end - s.last  # the begin left the clock at ``start`` (unless out of order)
        if d >= 0:
            v = _VARINTS[d] if d < _SMALL else w.varint(d)
            buf += s.ends[len(v)]
            buf += v
            s.last = end
        else:
            s.event(end, _END)
        if len(buf) > self._chunk:
            self._flush(s)

    def on_spans(self, p: int, spans: list[tuple[int, int, int, int]]) -> None:
        """on_span's work for a P's run of spans, with the sequence's state in locals."""
        s = self._seqs.get(p)
        if s is None:
            s = self._p_seq(p, spans[0][0])
        if s.id == ODD_SEQ:
            for start, end, state, goid in spans:
                self.on_span(p, start, end, state, goid)
            return
        buf, ends = s.buf, s.ends
        get, varints, low2, small, large = s.bodies.get, _VARINTS, _LOW2, _SMALL, _LARGE
        mid = _MID
        last = s.last
        for start, end, state, goid in spans:
            got = get(goid << 3 | state) if start == last else None
            if got is None:
                s.last = last
                self._begin(s, p, start, state, goid)
                last = s.last
            else:
                d = end - start
                if small <= d < mid:  # most spans: 16 us to 2 ms, a 3-byte delta
                    buf += got[1]  # the begin packet and the end's up to its delta
                    buf += low2[d & 0x3FFF]
                    buf += varints[d >> 14]
                    last = end
                    continue
                if mid <= d < large:  # to 268 ms: 4 bytes
                    buf += got[2]
                    buf += low2[d & 0x3FFF]
                    buf += varints[d >> 14]
                    last = end
                    continue
                buf += got[0]
            d = end - last
            if 0 <= d < small:
                v = varints[d]
                buf += ends[len(v)]
                buf += v
                last = end
            elif d >= 0:
                v = w.varint(d)
                buf += ends[len(v)]
                buf += v
                last = end
            else:
                s.event(end, _END)
        s.last = last
        # Once a run (at most CHUNK_EVENTS spans, ~1 MB), not once a span
        if len(buf) > self._chunk:
            self._flush(s)

    def _begin(self, s: _Seq, p: int, start: int, state: int, goid: int) -> None:
        """A span's begin packet the long way: its name interned if new, an argument for a
        P id out of range; remembered for when the next such span starts on the dot."""
        if state == P_RUNNING:
            name, cat = f"G{goid}", _CAT_RUNNING
        elif state == P_SYSCALL:
            name, cat = (f"syscall G{goid}" if goid else "syscall"), _CAT_SYSCALL
        else:
            name, c = _SPAN_NAMES.get(state, ("unknown", "unknown"))
            cat = _CAT_FIELD[c]
        iid, intern = s.name(name)
        te = _BEGIN + _K_NAME_IID + w.varint(iid) + cat
        if goid:  # w.int_arg(A_GOID, goid), written out: once a goroutine a P runs
            v = w.varint(goid)
            te += _K_ARG + _VARINTS[3 + len(v)] + _GOID_ARG + v
        if s.id == ODD_SEQ:
            s.event(start, te + w.int_arg(A_P, p), intern)
            return
        if start != s.last or not 0 <= state < 8 or goid < 0:
            s.event(start, te, intern)
            return
        # s.event(start, te, intern) at a delta of 0, the packet without its interned data
        # remembered for the next such span
        tef = _K_TE + w.varint(len(te)) + te
        body = w.packet(b"\x40\x00" + s.field + tef)
        if intern:
            s.buf += w.packet(b"\x40\x00" + s.field + _K_INTERNED + w.varint(len(intern))
                              + intern + tef)
        else:
            s.buf += body
        s.bodies[goid << 3 | state] = (body, body + s.ends[3], body + s.ends[4])

    def _reason(self, a0: int) -> str:
        got = self._reasons.get(a0)
        if got is None:
            wr = self.header.wait_reasons
            got = wr[a0] if 0 <= a0 < len(wr) and wr[a0] else f"waitreason({a0})"
            if len(self._reasons) < 4096:
                self._reasons[a0] = got
        return got

    def add_batch(self, batch: Batch) -> None:
        if self.origin < 0 and batch.events:
            self.origin = max(batch.events[0][0], 0)
        kinds = _KINDS
        for e in batch.events:
            if e[1] in kinds:
                self._event(e)

    def _event(self, e: tuple[int, ...]) -> None:
        ts, kind, p, _m, g, a0, a1 = e
        if kind == K_STW_START:
            self._stw_start = ts
            return
        s = self._ev(ts)
        if kind == K_STW_END:
            start = self._stw_start if self._stw_start >= 0 else ts - a1
            # after the previous pause (hostile input overlaps them; slices on a track nest)
            ts = max(ts, self._stw_end)
            start = min(max(start, self._stw_end), ts)
            self._stw_end = ts
            iid, intern = s.name("STW")
            s.event(start, _BEGIN + w.fv(11, STW_UUID) + w.fv(10, iid) + w.fv(3, CAT["stw"]),
                    intern)
            s.event(ts, _END + w.fv(11, STW_UUID))
            self.stw += 1
            self._stw_start = -1
        elif kind == K_STEAL and a1:
            iid, intern = s.name(f"steal {a1} from P{a0}")
            te = (_INSTANT + w.fv(11, self._track(p)) + w.fv(10, iid) + w.fv(3, CAT["steal"])
                  + w.int_arg(A_VICTIM, a0) + w.int_arg(A_GOROUTINES, a1))
            if not 0 <= p < MAX_PROCS:
                te += w.int_arg(A_P, p)
            s.event(ts, te, intern)
        elif kind == K_PARK and p >= 0:
            known = s.instants.get((p, g, a0))
            if known is not None:
                s.event(ts, known)
            else:
                self._park(s, ts, p, g, a0)
        if len(s.buf) > self._chunk:
            self._flush(s)

    def _park(self, s: _Seq, ts: int, p: int, g: int, a0: int) -> None:
        """A park instant the long way (its name and reason interned if new); its TrackEvent
        is remembered for the next park of that goroutine on that P for that reason."""
        reason = self._reason(a0)
        iid, intern = s.name(f"park G{g}: {reason}")
        riid = self._strings.get(reason)
        if riid is None:
            if len(self._strings) >= MAX_INTERNED:
                self._strings.clear()  # iids keep growing: none is defined twice
            self._string_iid += 1
            riid = self._strings[reason] = self._string_iid
            intern += w.fb(w.I_STRINGS, w.fv(1, riid) + w.fb(2, reason.encode()))
        te = (_INSTANT + w.fv(11, self._track(p)) + w.fv(10, iid) + w.fv(3, CAT["park"])
              + w.int_arg(A_GOID, g) + w.string_arg(A_REASON, riid))
        if p >= MAX_PROCS:
            te += w.int_arg(A_P, p)
        s.event(ts, te, intern)
        if len(s.instants) < MAX_INTERNED:
            s.instants[p, g, a0] = te

    def add(self, snapshot: Snapshot) -> None:
        for pv in snapshot.procs:
            if 0 <= pv.id < MAX_PROCS:
                self.procs.add(pv.id)
            if pv.timeline and pv.timeline[-1].end == snapshot.now:
                sp = pv.timeline[-1]  # the still-open span at the end of the run
                seq = self._seqs.get(pv.id)
                if seq is not None and seq.last >= sp.end:
                    continue  # closed right at the end: on_span had it already
                if sp.end > sp.start:
                    self.on_span(pv.id, sp.start, sp.end, int(sp.state), sp.goid)

    # ------------------------------------------------------------------ output

    def _meta(self) -> bytes:
        h = self.header
        seq = w.fv(w.F_SEQ_ID, META_SEQ)
        name = f"{h.exe} (pid {self._pid}, {h.go_version})"
        out = [w.packet(seq + w.process_track(PROCESS_UUID, self._pid, name))]
        for p in sorted(self.procs):
            out.append(w.packet(seq + w.child_track(P_UUID + p, PROCESS_UUID, f"P{p}", p)))
        if self.stw:
            out.append(w.packet(seq + w.child_track(STW_UUID, PROCESS_UUID, "stop-the-world",
                                                    MAX_PROCS)))
        if self.odd:
            out.append(w.packet(seq + w.child_track(ODD_UUID, PROCESS_UUID,
                                                    "P id out of range", MAX_PROCS + 1)))
        return b"".join(out)

    def render(self) -> bytes:
        with tempfile.TemporaryFile() as f:
            self.dump(f)
            f.seek(0)
            return f.read()

    def dump(self, f: Sink) -> None:
        """The track descriptors, then every sequence's compressed bundles (the buffers
        still held are compressed into the spool first: a second dump writes the same)."""
        seqs = {id(s): s for s in self._seqs.values()}
        if self._events is not None:
            seqs[id(self._events)] = self._events
        for s in seqs.values():
            self._flush(s)
        f.write(self._meta())
        if self._spool is not None:
            self._spool.seek(0)
            shutil.copyfileobj(self._spool, f, 1 << 20)
            self._spool.seek(0, 2)  # where the next flush appends

    def write(self, path: str) -> None:
        with open_private(path) as f:
            self.dump(f)
