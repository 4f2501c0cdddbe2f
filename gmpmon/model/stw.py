"""Stop-the-world pauses: how many, total and longest, by reason, and their spans.

A pause is STW_START (stopTheWorldWithSema entry) to STW_END (the Ps handed back in
startTheWorldWithSema); STW_END carries the kernel-measured length when it saw the start.
The state machine puts the Ps in GCSTOP meanwhile (gmpmon.model.sched).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from gmpmon.events import EventTuple, Kind
from gmpmon.model.part import Context, Handler, Part, View, add_row


class Stw(Part):
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.window_ns = ctx.window_ns
        self.start = -1
        self.reason = 0
        self.count = 0
        self.total_ns = 0
        self.max_ns = 0
        self.spans: deque[tuple[int, int]] = deque()
        self.by_reason: dict[int, list[int]] = {}

    def handlers(self) -> Iterable[tuple[int, Handler]]:
        return ((Kind.STW_START, self.on_start), (Kind.STW_END, self.on_end))

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
        self.count += 1
        self.total_ns += pause
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
        return {
            "stw_count": self.count,
            "stw_total_ns": self.total_ns,
            "stw_max_ns": self.max_ns,
            "stw_spans": spans,
            "stw_reasons": {
                self.reason_name(k): (v[0], v[1]) for k, v in sorted(self.by_reason.items())
            },
        }
