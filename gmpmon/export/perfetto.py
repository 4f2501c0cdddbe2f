"""Perfetto / chrome://tracing: Chrome trace-event JSON, one track per P.

pid = the target's pid, tid = the P id (named "P<n>"): complete ("X") slices for each span
(the running goroutine "G<goid>", "searching", "idle", "syscall G<goid>", "GC stop"), a
"stop-the-world" track with the pauses, and instant ("i") events for steals (on the thief's
track) and parks (on the P's track). Timestamps are µs from the first event (floats keep
ns precision that way). ui.perfetto.dev and chrome://tracing open it.
"""

from __future__ import annotations

import json
from typing import Any

from gmpmon.events import Batch, Header, Kind
from gmpmon.export.base import Exporter
from gmpmon.export.outfile import open_private
from gmpmon.model.snapshot import PState, Snapshot

STW_TID = 1_000_000
_NAMES = {
    PState.SEARCHING: "searching",
    PState.IDLE: "idle",
    PState.GCSTOP: "GC stop",
}
K_PARK, K_STEAL = int(Kind.PARK), int(Kind.STEAL)
K_STW_START, K_STW_END = int(Kind.STW_START), int(Kind.STW_END)


class PerfettoExporter(Exporter):
    wants_spans = True

    def __init__(self, header: Header) -> None:
        super().__init__(header)
        self.origin = -1
        self.events: list[dict[str, Any]] = []
        self.procs: set[int] = set()
        self.parks = True
        self.stw: list[tuple[int, int]] = []
        self._stw_start = -1

    def _us(self, ts: int) -> float:
        if self.origin < 0:
            self.origin = ts
        return (ts - self.origin) / 1000.0

    def add_batch(self, batch: Batch) -> None:
        if self.origin < 0 and batch.events:
            self.origin = batch.events[0][0]
        wr = self.header.wait_reasons
        pid = self.header.pid
        for ts, kind, p, _m, g, a0, a1 in batch.events:
            if kind == K_STW_START:
                self._stw_start = ts
            elif kind == K_STW_END:
                start = self._stw_start if self._stw_start >= 0 else ts - a1
                self.stw.append((start, ts))
                self._stw_start = -1
            elif kind == K_STEAL and a1:
                self.procs.add(p)
                self.events.append(
                    {
                        "ph": "i",
                        "s": "t",
                        "pid": pid,
                        "tid": p,
                        "ts": self._us(ts),
                        "name": f"steal {a1} from P{a0}",
                        "cat": "steal",
                        "args": {"victim": a0, "goroutines": a1},
                    }
                )
            elif kind == K_PARK and p >= 0 and self.parks:
                reason = wr[a0] if 0 <= a0 < len(wr) and wr[a0] else f"waitreason({a0})"
                self.procs.add(p)
                self.events.append(
                    {
                        "ph": "i",
                        "s": "t",
                        "pid": pid,
                        "tid": p,
                        "ts": self._us(ts),
                        "name": f"park G{g}: {reason}",
                        "cat": "park",
                        "args": {"goid": g, "reason": reason},
                    }
                )

    def on_span(self, p: int, start: int, end: int, state: int, goid: int) -> None:
        st = PState(state)
        if st is PState.RUNNING:
            name = f"G{goid}"
        elif st is PState.SYSCALL:
            name = f"syscall G{goid}" if goid else "syscall"
        else:
            name = _NAMES.get(st, st.name.lower())
        self.procs.add(p)
        self.events.append(
            {
                "ph": "X",
                "pid": self.header.pid,
                "tid": p,
                "ts": self._us(start),
                "dur": (end - start) / 1000.0,
                "name": name,
                "cat": st.name.lower(),
                "args": {"goid": goid} if goid else {},
            }
        )

    def add(self, snapshot: Snapshot) -> None:
        for pv in snapshot.procs:
            self.procs.add(pv.id)
            if pv.timeline and pv.timeline[-1].end == snapshot.now:
                sp = pv.timeline[-1]  # the still-open span at the end of the run
                if sp.end > sp.start:
                    self.on_span(pv.id, sp.start, sp.end, int(sp.state), sp.goid)

    def document(self) -> dict[str, Any]:
        pid = self.header.pid
        meta: list[dict[str, Any]] = [
            {
                "ph": "M",
                "pid": pid,
                "name": "process_name",
                "args": {"name": f"{self.header.exe} (pid {pid}, {self.header.go_version})"},
            },
        ]
        for p in sorted(self.procs):
            meta.append(
                {"ph": "M", "pid": pid, "tid": p, "name": "thread_name", "args": {"name": f"P{p}"}}
            )
            meta.append(
                {
                    "ph": "M",
                    "pid": pid,
                    "tid": p,
                    "name": "thread_sort_index",
                    "args": {"sort_index": p},
                }
            )
        stw = self.stw
        if stw:
            meta.append(
                {
                    "ph": "M",
                    "pid": pid,
                    "tid": STW_TID,
                    "name": "thread_name",
                    "args": {"name": "stop-the-world"},
                }
            )
        spans = [
            {
                "ph": "X",
                "pid": pid,
                "tid": STW_TID,
                "ts": self._us(s),
                "dur": (e - s) / 1000.0,
                "name": "STW",
                "cat": "stw",
            }
            for s, e in stw
        ]
        return {"traceEvents": meta + self.events + spans, "displayTimeUnit": "ns"}

    def render(self) -> bytes:
        return json.dumps(self.document(), separators=(",", ":")).encode()

    def write(self, path: str) -> None:
        doc = self.document()
        with open_private(path) as f:
            enc = json.JSONEncoder(separators=(",", ":"))
            buf: list[str] = []
            size = 0
            for chunk in enc.iterencode(doc):
                buf.append(chunk)
                size += len(chunk)
                if size >= 1 << 20:
                    f.write("".join(buf).encode())
                    buf, size = [], 0
            f.write("".join(buf).encode())
