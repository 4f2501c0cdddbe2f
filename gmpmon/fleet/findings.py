"""Findings of a watched process, over a sliding window, from trap-free events only.

The findings engine (gmpmon/findings) runs over a model Snapshot: every rule looks at what
the model and its FindingsTracker accumulated since they started. An exporter runs for days,
so a model fed since ``serve`` started would keep a throttling burst of last week raised
(and its per-second series would grow without end). Two models are fed the same events,
started half a window apart; the findings come from the older one, which always holds
between ``window_s / 2`` and ``window_s`` of the process's recent life, and is replaced by
a fresh one when it reaches ``window_s``. Feeding is cheap (a few dozen events a second per
process: the runtime's counters, a census, cgroup readings, P samples with ``--per-p``); a
Snapshot (and the rules) is built once per ``evaluate()``, on the older model only.
"""

from __future__ import annotations

import dataclasses
import time

from gmpmon.binary.info import BinaryInfo
from gmpmon.events import Batch, EventTuple, Header, Kind
from gmpmon.findings.engine import snapshot_with_findings
from gmpmon.model import Model
from gmpmon.model.findingtypes import Finding

WINDOW_S = 60.0


def sample_header(info: BinaryInfo, pid: int, gomaxprocs: int, start_ns: int) -> Header:
    """The header of a model fed without probes (mode "sample": P states, if any, from
    memory samples; no hot events)."""
    return Header(
        pid=pid,
        exe=info.path,
        go_version=info.go_version,
        gomaxprocs=gomaxprocs,
        mode="sample",
        start_ns=start_ns,
        wall_start=time.time(),
        wait_reasons=info.wait_reasons,
        stw_reasons=info.stw_reasons,
        g_status=info.g_status,
        p_status=info.p_status,
        features=("sample",),
    )


class FindingsWindow:
    def __init__(self, header: Header, *, window_s: float = WINDOW_S) -> None:
        self.header = header
        self.window_ns = int(window_s * 1e9)
        self._stacks: dict[int, tuple[str, ...]] = {}
        self._sticky: dict[tuple[int, int], EventTuple] = {}  # (kind, field) -> latest
        self._models: list[tuple[int, Model]] = []  # (start ts, model), oldest first
        self.findings: tuple[Finding, ...] = ()

    def _new(self, ts: int) -> Model:
        m = Model(dataclasses.replace(self.header, start_ns=ts), reorder_ns=0, history=False)
        # What the readers say only when it changes (the cgroup's quota and counters, a
        # feature this process lacks) or once (census site names): a model started later
        # is told the latest of each at its start.
        state = [(ts, *e[1:]) for e in self._sticky.values()]
        if state or self._stacks:
            m.feed(Batch(state, dict(self._stacks)))
        return m

    def feed(self, ts: int, events: list[EventTuple], stacks: dict[int, tuple[str, ...]]
             ) -> None:
        models = self._models
        # The second model starts half a window after the first.
        if not models or (len(models) == 1 and ts - models[0][0] >= self.window_ns // 2):
            models.append((ts, self._new(ts)))
        if len(models) == 2 and ts - models[0][0] >= self.window_ns:
            models.pop(0)
            models.append((ts, self._new(ts)))
        if not events and not stacks:
            return
        events = sorted(events, key=_ts)
        batch = Batch(events, dict(stacks))
        for _t0, m in models:
            m.feed(batch)
        self._stacks.update(stacks)
        for e in events:
            if e[1] in _STICKY:
                self._sticky[(e[1], e[4] if e[1] == _CGROUP_CPU else e[5])] = e

    def evaluate(self) -> tuple[Finding, ...]:
        """The older model's findings now (most severe first)."""
        if self._models:
            self.findings = snapshot_with_findings(self._models[0][1]).findings
        return self.findings

    def covered_ns(self, now: int) -> int:
        """How much of the process's recent life the findings cover."""
        return max(0, now - self._models[0][0]) if self._models else 0


_CGROUP_CPU = int(Kind.CGROUP_CPU)
_STICKY = frozenset({_CGROUP_CPU, int(Kind.RT_MISSING)})


def _ts(e: EventTuple) -> int:
    return e[0]
