"""Perfetto / chrome://tracing: Chrome trace-event JSON, one track per P.

pid = the target's pid, tid = the P id (named "P<n>"): complete ("X") slices for each span
(the running goroutine "G<goid>", "searching", "idle", "syscall G<goid>", "GC stop"), a
"stop-the-world" track with the pauses, and instant ("i") events for steals (on the thief's
track) and parks (on the P's track). Timestamps are µs from the first event with 3 decimals
(ns precision). ui.perfetto.dev and chrome://tracing open it.

Events are kept as ready-made JSON text (a recording can hold millions of spans: a dict per
event would cost ~10x the memory and time), and past SPOOL_EVENTS of them they go to an
anonymous temporary file: memory stays bounded whatever the recording's length (a 500 KB
recording can make a 300 MB trace).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from typing import IO

from gmpmon.events import Batch, Header, Kind
from gmpmon.export.base import Exporter, Sink
from gmpmon.files import open_private
from gmpmon.model.sched import MAX_PROCS
from gmpmon.model.snapshot import PState, Snapshot

STW_TID = 1_000_000
SPOOL_EVENTS = 20_000
_HEAD = '{"displayTimeUnit":"ns","traceEvents":[\n'
_TAIL = "\n]}\n"
_SPAN_NAMES = {
    int(PState.SEARCHING): ("searching", "searching"),
    int(PState.IDLE): ("idle", "idle"),
    int(PState.GCSTOP): ("GC stop", "gcstop"),
    int(PState.UNKNOWN): ("unknown", "unknown"),
}
K_PARK, K_STEAL = int(Kind.PARK), int(Kind.STEAL)
K_STW_START, K_STW_END = int(Kind.STW_START), int(Kind.STW_END)
P_RUNNING, P_SYSCALL = int(PState.RUNNING), int(PState.SYSCALL)


class PerfettoExporter(Exporter):
    wants_spans = True

    def __init__(self, header: Header) -> None:
        super().__init__(header)
        self.origin = -1
        self.events: list[str] = []  # the newest, not yet in the spool
        self._spool: IO[bytes] | None = None
        self._spooled = 0  # events in the spool
        self.procs: set[int] = set()
        self.stw = 0  # pauses on the stop-the-world track
        self._stw_start = -1
        self._pid = int(header.pid)
        self._reasons: dict[int, str] = {}

    def _us(self, ts: int) -> str:
        if self.origin < 0:
            self.origin = ts
        d = ts - self.origin
        return f"{'-' if d < 0 else ''}{abs(d) // 1000}.{abs(d) % 1000:03d}"

    def _instant(self, ts: int, tid: int, name: str, cat: str, args: str) -> str:
        """``name`` and ``args`` are JSON already."""
        return (
            f'{{"ph":"i","s":"t","pid":{self._pid},"tid":{tid},"ts":{self._us(ts)},'
            f'"name":{name},"cat":"{cat}","args":{args}}}'
        )

    def _reason(self, a0: int) -> str:
        """A wait reason's name as JSON text (made once each: a recording holds millions of
        parks and a few dozen reasons)."""
        got = self._reasons.get(a0)
        if got is None:
            wr = self.header.wait_reasons
            got = json.dumps(wr[a0] if 0 <= a0 < len(wr) and wr[a0] else f"waitreason({a0})")
            if len(self._reasons) < 4096:
                self._reasons[a0] = got
        return got

    def add_batch(self, batch: Batch) -> None:
        if self.origin < 0 and batch.events:
            self.origin = batch.events[0][0]
        out = self.events
        for ts, kind, p, _m, g, a0, a1 in batch.events:
            if kind == K_STW_START:
                self._stw_start = ts
            elif kind == K_STW_END:
                start = self._stw_start if self._stw_start >= 0 else ts - a1
                d = ts - start
                out.append(
                    f'{{"ph":"X","pid":{self._pid},"tid":{STW_TID},"ts":{self._us(start)},'
                    f'"dur":{d // 1000}.{d % 1000:03d},"name":"STW","cat":"stw"}}'
                )
                self.stw += 1
                self._stw_start = -1
            elif kind == K_STEAL and a1:
                self._track(p)
                out.append(self._instant(ts, p, f'"steal {a1} from P{a0}"', "steal",
                                         f'{{"victim":{a0},"goroutines":{a1}}}'))
            elif kind == K_PARK and p >= 0:
                reason = self._reason(a0)
                self._track(p)
                out.append(self._instant(ts, p, f'"park G{g}: {reason[1:]}', "park",
                                         f'{{"goid":{g},"reason":{reason}}}'))

        if len(out) >= SPOOL_EVENTS:
            self._spill()

    def _track(self, p: int) -> None:
        """A P's track gets a name (P ids past the model's bound are corrupt input: their
        events keep their tid, without a name for each)."""
        if 0 <= p < MAX_PROCS:
            self.procs.add(p)

    def _spill(self) -> None:
        if self._spool is None:
            self._spool = tempfile.TemporaryFile()  # noqa: SIM115 - closed with the exporter
        sep = ",\n" if self._spooled else ""
        self._spool.write((sep + ",\n".join(self.events)).encode())
        self._spooled += len(self.events)
        self.events.clear()

    def on_span(self, p: int, start: int, end: int, state: int, goid: int) -> None:
        if state == P_RUNNING:
            name, cat = f"G{goid}", "running"
        elif state == P_SYSCALL:
            name, cat = (f"syscall G{goid}" if goid else "syscall"), "syscall"
        else:
            name, cat = _SPAN_NAMES.get(state, ("unknown", "unknown"))
        self.procs.add(p)
        d = end - start
        args = f'{{"goid":{goid}}}' if goid else "{}"
        self.events.append(
            f'{{"ph":"X","pid":{self._pid},"tid":{p},"ts":{self._us(start)},'
            f'"dur":{d // 1000}.{d % 1000:03d},"name":"{name}","cat":"{cat}","args":{args}}}'
        )
        if len(self.events) >= SPOOL_EVENTS:
            self._spill()

    def add(self, snapshot: Snapshot) -> None:
        for pv in snapshot.procs:
            self.procs.add(pv.id)
            if pv.timeline and pv.timeline[-1].end == snapshot.now:
                sp = pv.timeline[-1]  # the still-open span at the end of the run
                if sp.end > sp.start:
                    self.on_span(pv.id, sp.start, sp.end, int(sp.state), sp.goid)

    def _meta(self) -> list[str]:
        pid = self._pid
        h = self.header
        name = json.dumps(f"{h.exe} (pid {pid}, {h.go_version})")
        meta = [f'{{"ph":"M","pid":{pid},"name":"process_name","args":{{"name":{name}}}}}']
        for p in sorted(self.procs):
            meta.append(
                f'{{"ph":"M","pid":{pid},"tid":{p},"name":"thread_name","args":{{"name":"P{p}"}}}}'
            )
            meta.append(
                f'{{"ph":"M","pid":{pid},"tid":{p},"name":"thread_sort_index",'
                f'"args":{{"sort_index":{p}}}}}'
            )
        if self.stw:
            meta.append(
                f'{{"ph":"M","pid":{pid},"tid":{STW_TID},"name":"thread_name",'
                f'"args":{{"name":"stop-the-world"}}}}'
            )
        return meta

    def render(self) -> bytes:
        with tempfile.TemporaryFile() as f:
            self.dump(f)
            f.seek(0)
            return f.read()

    def dump(self, f: Sink) -> None:
        """The metadata, then the spooled events, then the newest."""
        meta = self._meta()
        f.write((_HEAD + ",\n".join(meta)).encode())
        sep = ",\n" if meta else ""
        if self._spool is not None:
            self._spool.seek(0)
            f.write(sep.encode())
            shutil.copyfileobj(self._spool, f, 1 << 20)
            self._spool.seek(0, 2)  # where the next spill appends
            sep = ",\n"
        for i in range(0, len(self.events), SPOOL_EVENTS):
            f.write((sep + ",\n".join(self.events[i : i + SPOOL_EVENTS])).encode())
            sep = ",\n"
        f.write(_TAIL.encode())

    def write(self, path: str) -> None:
        with open_private(path) as f:
            self.dump(f)
