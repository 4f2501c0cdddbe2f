"""Folded stacks (``f1;f2;f3 N``, root first) for flamegraph.pl, inferno and speedscope.

``what="mutex"``: one line per contended stack, weight = wait ns (or the count with
``weight="count"``). ``what="latency"``: scheduling latency as pseudo-stacks
``sched_latency;<wake reason>;P<n> N`` (weight = total runnable->running ns, or the count).
``what="waits"``: where the goroutines wait, from the last census's wait stacks: the parked
stack, root first, then its wait reason as a leaf ``[chan receive]``; weight = the goroutines'
summed wait ns (``g.waitsince``: only goroutines parked across a GC have one) or the count.
Frame names are made safe for the format: no ``;``, no whitespace, never empty
(``[unknown]`` stands in), so every line parses.
"""

from __future__ import annotations

import re

from gmpmon.events import UNKNOWN_FRAME, Header
from gmpmon.export.base import Exporter
from gmpmon.model.snapshot import Snapshot

LINE_RE = re.compile(r"^[^;\s]+(;[^;\s]+)* [0-9]+$")
_BAD = re.compile(r"[;\s]+")


def frame(name: str) -> str:
    name = _BAD.sub("_", name.strip())
    return name or UNKNOWN_FRAME


class FoldedExporter(Exporter):
    def __init__(self, header: Header, *, what: str = "mutex", weight: str = "wait") -> None:
        super().__init__(header)
        if what not in ("mutex", "latency", "waits"):
            raise ValueError(f"unknown folded content {what!r}")
        if weight not in ("wait", "count"):
            raise ValueError(f"unknown weight {weight!r}")
        self.what = what
        self.weight = weight
        self.lines: dict[str, int] = {}

    def _put(self, frames: list[str], value: int) -> None:
        if value <= 0:
            return
        key = ";".join(frame(f) for f in frames) or UNKNOWN_FRAME
        self.lines[key] = self.lines.get(key, 0) + value

    def add(self, snapshot: Snapshot) -> None:
        by_count = self.weight == "count"
        if self.what == "mutex":
            for ms in snapshot.mutex_stacks:
                self._put(list(ms.stack), ms.count if by_count else ms.wait_ns)
        elif self.what == "waits":
            census = snapshot.runtime.census if snapshot.runtime is not None else None
            for w in (census.stacks or ()) if census is not None else ():
                if w.system:
                    continue
                leaf = f"[{w.reason or w.state}]"
                self._put([*w.frames, leaf], w.count if by_count else w.wait_sum_ns)
        else:
            for (reason, p), (count, total) in snapshot.latency_by_reason_proc.items():
                where = f"P{p}" if p >= 0 else "[no P]"
                self._put(["sched_latency", reason, where], count if by_count else total)

    def text(self) -> str:
        ordered = sorted(self.lines.items(), key=lambda kv: kv[0])
        return "".join(f"{k} {v}\n" for k, v in ordered)

    def render(self) -> bytes:
        return self.text().encode()
