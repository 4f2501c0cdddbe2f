"""Stop-the-world pauses: how many, total and longest, by reason, and their spans.

A pause is STW_START (stopTheWorldWithSema entry) to STW_END (the Ps handed back in
startTheWorldWithSema); STW_END carries the kernel-measured length when it saw the start.
The state machine puts the Ps in GCSTOP meanwhile (gmpmon.model.sched).
Count and total by reason are a Counted: the kernel's STW / STW_NS tables (the same pauses,
counted by the STW_END handler) once seen; the longest pause and the spans are the events'.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Any

from gmpmon.events import Counter, EventTuple, Kind
from gmpmon.model.part import Context, Counted, Handler, Part, View, add_row

# Pauses kept for the timeline's window at most (a GC every millisecond makes ~20k in 10 s;
# a recording whose timestamps barely move would otherwise keep every one).
MAX_SPANS = 1 << 15


class Stw(Part):
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.window_ns = ctx.window_ns
        self.start = -1
        self.reason = 0
        self.max_ns = 0
        self.spans: deque[tuple[int, int]] = deque(maxlen=MAX_SPANS)
        self.by_reason: dict[int, list[int]] = {}
        # reason -> [count, ns] from the kernel's STW / STW_NS (the events' is by_reason)
        self.kernel: Counted[dict[int, list[int]]] = Counted("stw", Counter.STW, dict)

    def handlers(self) -> Iterable[tuple[int, Handler]]:
        return ((Kind.STW_START, self.on_start), (Kind.STW_END, self.on_end))

    def counters(self) -> Iterable[tuple[int, Handler]]:
        return ((Counter.STW, self.on_counter), (Counter.STW_NS, self.on_counter))

    def on_counter(self, e: EventTuple) -> None:
        self.kernel.seen = True
        add_row(self.kernel.kernel, e[5], e[6] if e[4] == Counter.STW else 0,
                e[6] if e[4] == Counter.STW_NS else 0)

    def sources(self) -> Iterable[Counted[Any]]:
        return (self.kernel,)

    def on_start(self, e: EventTuple) -> None:
        if self.start >= 0:
            return  # nested starts do not happen; keep the first
        self.start = e[0]
        self.reason = e[5]

    def on_end(self, e: EventTuple) -> None:
        ts, a0, a1 = e[0], e[5], e[6]
        start = self.start
        if start < 0:
            if not a1:
                return  # attached mid-STW and no kernel-side length: nothing known
            start = ts - a1
            reason = a0
        else:
            reason = self.reason or a0
        pause = a1 if a1 else ts - start
        if pause > self.max_ns:
            self.max_ns = pause
        add_row(self.by_reason, reason, 1, pause)
        spans = self.spans
        spans.append((start, ts))
        while spans[0][1] < ts - self.window_ns:
            spans.popleft()
        self.start = -1

    def reason_name(self, idx: int) -> str:
        sr = self.ctx.header.stw_reasons
        if 0 <= idx < len(sr) and sr[idx]:
            return sr[idx]
        return f"stw({idx})"

    def section(self, at: View) -> dict[str, object]:
        spans = tuple(s for s in self.spans if s[1] >= at.cutoff)
        if self.start >= 0:
            spans += ((self.start, at.now),)
        rows = self.kernel.kernel if self.kernel.seen else self.by_reason
        return {
            "stw_count": sum(v[0] for v in rows.values()),
            "stw_total_ns": sum(v[1] for v in rows.values()),
            "stw_max_ns": self.max_ns,
            "stw_spans": spans,
            "stw_reasons": {
                self.reason_name(k): (v[0], v[1]) for k, v in sorted(rows.items())
            },
        }
