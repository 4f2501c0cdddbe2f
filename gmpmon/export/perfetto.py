"""Perfetto / chrome://tracing: Chrome trace-event JSON, one track per P.

pid = the target's pid, tid = the P id (named "P<n>"): complete ("X") slices for each span
(the running goroutine "G<goid>", "searching", "idle", "syscall G<goid>", "GC stop"), a
"stop-the-world" track with the pauses, and instant ("i") events for steals (on the thief's
track) and parks (on the P's track). Timestamps are µs from the first event with 3 decimals
(ns precision). ui.perfetto.dev and chrome://tracing open it.

Events are kept as ready-made JSON text (a recording can hold millions of spans: a dict per
event would cost ~10x the memory and time).
"""

from __future__ import annotations

import json
from typing import Any

from gmpmon.events import Batch, Header, Kind
from gmpmon.export.base import Exporter
from gmpmon.files import open_private
from gmpmon.model.snapshot import PState, Snapshot

STW_TID = 1_000_000
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
        self.events: list[str] = []
        self.procs: set[int] = set()
        self.stw: list[tuple[int, int]] = []
        self._stw_start = -1
        self._pid = int(header.pid)

    def _us(self, ts: int) -> str:
        if self.origin < 0:
            self.origin = ts
        d = ts - self.origin
        return f"{'-' if d < 0 else ''}{abs(d) // 1000}.{abs(d) % 1000:03d}"

    def _instant(self, ts: int, tid: int, name: str, cat: str, args: dict[str, Any]) -> str:
        return (
            f'{{"ph":"i","s":"t","pid":{self._pid},"tid":{tid},"ts":{self._us(ts)},'
            f'"name":{json.dumps(name)},"cat":"{cat}","args":{json.dumps(args)}}}'
        )

    def add_batch(self, batch: Batch) -> None:
        if self.origin < 0 and batch.events:
            self.origin = batch.events[0][0]
        wr = self.header.wait_reasons
        out = self.events
        for ts, kind, p, _m, g, a0, a1 in batch.events:
            if kind == K_STW_START:
                self._stw_start = ts
            elif kind == K_STW_END:
                start = self._stw_start if self._stw_start >= 0 else ts - a1
                self.stw.append((start, ts))
                self._stw_start = -1
            elif kind == K_STEAL and a1:
                self.procs.add(p)
                out.append(
                    self._instant(
                        ts, p, f"steal {a1} from P{a0}", "steal", {"victim": a0, "goroutines": a1}
                    )
                )
            elif kind == K_PARK and p >= 0:
                reason = wr[a0] if 0 <= a0 < len(wr) and wr[a0] else f"waitreason({a0})"
                self.procs.add(p)
                out.append(
                    self._instant(
                        ts, p, f"park G{g}: {reason}", "park", {"goid": g, "reason": reason}
                    )
                )

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
        for s, e in self.stw:
            d = e - s
            meta.append(
                f'{{"ph":"X","pid":{pid},"tid":{STW_TID},"ts":{self._us(s)},'
                f'"dur":{d // 1000}.{d % 1000:03d},"name":"STW","cat":"stw"}}'
            )
        return meta

    def render(self) -> bytes:
        return (_HEAD + ",\n".join(self._meta() + self.events) + _TAIL).encode()

    def write(self, path: str) -> None:
        items = self._meta() + self.events
        with open_private(path) as f:
            f.write(_HEAD.encode())
            for i in range(0, len(items), 20_000):
                sep = ",\n" if i else ""
                f.write((sep + ",\n".join(items[i : i + 20_000])).encode())
            f.write(_TAIL.encode())
