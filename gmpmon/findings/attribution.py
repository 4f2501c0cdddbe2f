"""Latency attribution: what the Ps were doing while a tail-latency goroutine waited.

For every scheduling-latency sample (ready -> execute, with its times: events only) at or
above a threshold (the p99 of the samples by default), the wait is cut at every P state
change and each piece is put in one category, by the state of all Ps during it:

- ``stw``          the world was stopped (an STW span, or a P in GC stop);
- ``idle``         some P was idle or its M still searching: a P was free, no M took the G
                   (the wake-up did not reach an M, or the M woke too late);
- ``syscall``      no P free, some P held by an M in a syscall that was not handed off;
- ``all_running``  every P was running another goroutine: plain CPU saturation;
- ``unknown``      a P's state is not known then (before its first event, outside the kept
                   timeline, between duty-cycle windows).

The P timelines (Snapshot.procs[].timeline) and STW spans go into sortedcontainers lists
keyed by span end, so each wait finds its overlapping spans with one bisection per P.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence

from sortedcontainers import SortedKeyList

from gmpmon.findings.types import ATTRIBUTION_CATEGORIES, Attribution
from gmpmon.model.snapshot import PState, Snapshot, Span

_RUNNING, _SEARCHING, _IDLE, _SYSCALL, _GCSTOP = (
    PState.RUNNING,
    PState.SEARCHING,
    PState.IDLE,
    PState.SYSCALL,
    PState.GCSTOP,
)


def _end(s: Span) -> int:
    return s.end


def _end2(s: tuple[int, int]) -> int:
    return s[1]


def percentile(values: Sequence[int], q: float) -> int:
    if not values:
        return 0
    v = sorted(values)
    return v[min(len(v) - 1, max(0, -(-int(q * len(v) * 1000) // 1000) - 1))]


class SpanIndex:
    """Per-P spans and STW spans, for 'what was every P doing in [a, b)'."""

    def __init__(self, snap: Snapshot) -> None:
        self.procs: list[SortedKeyList] = []
        for p in snap.procs:
            self.procs.append(SortedKeyList(p.timeline, key=_end))
        self.stw: SortedKeyList = SortedKeyList(snap.stw_spans, key=_end2)

    @staticmethod
    def _overlap(sl: SortedKeyList, a: int, b: int) -> list[tuple[int, int, int]]:
        out: list[tuple[int, int, int]] = []
        i = sl.bisect_key_right(a)
        n = len(sl)
        while i < n:
            s = sl[i]
            start, end = (s.start, s.end) if isinstance(s, Span) else (s[0], s[1])
            if start >= b:
                break
            state = int(s.state) if isinstance(s, Span) else int(_GCSTOP)
            out.append((max(start, a), min(end, b), state))
            i += 1
        return out

    def breakdown(self, a: int, b: int) -> dict[str, int]:
        """ns of [a, b) in each category."""
        per_p = [self._overlap(sl, a, b) for sl in self.procs]
        stw = self._overlap(self.stw, a, b)
        cuts = {a, b}
        for spans in (*per_p, stw):
            for s, e, _st in spans:
                cuts.add(s)
                cuts.add(e)
        points = sorted(c for c in cuts if a <= c <= b)
        out: dict[str, int] = {}
        idx = [0] * len(per_p)
        si = 0
        for lo, hi in itertools.pairwise(points):
            if hi <= lo:
                continue
            while si < len(stw) and stw[si][1] <= lo:
                si += 1
            in_stw = si < len(stw) and stw[si][0] <= lo
            states = []
            for k, spans in enumerate(per_p):
                j = idx[k]
                while j < len(spans) and spans[j][1] <= lo:
                    j += 1
                idx[k] = j
                states.append(spans[j][2] if j < len(spans) and spans[j][0] <= lo else -1)
            cat = _category(in_stw, states)
            out[cat] = out.get(cat, 0) + (hi - lo)
        return out


def _category(in_stw: bool, states: Iterable[int]) -> str:
    st = list(states)
    if in_stw or _GCSTOP in st:
        return "stw"
    if _IDLE in st or _SEARCHING in st:
        return "idle"
    if _SYSCALL in st:
        return "syscall"
    if st and all(s == _RUNNING for s in st):
        return "all_running"
    return "unknown"


def attribute(
    snap: Snapshot,
    samples: Sequence[tuple[int, int, int, int]],
    *,
    threshold_ns: int | None = None,
    quantile: float = 0.99,
) -> Attribution:
    """Attribute the waits of ``samples`` (ready, execute, P, goid) at or above the
    threshold (default: their ``quantile``)."""
    if not samples:
        note = "no latency samples with their times: needs the hot probes (full or default mode)"
        return Attribution(0, 0, 0, {}, "", note)
    lats = [e - r for r, e, _p, _g in samples]
    thr = threshold_ns if threshold_ns is not None else percentile(lats, quantile)
    tail = [(r, e) for (r, e, _p, _g), lat in zip(samples, lats, strict=True) if lat >= thr > 0]
    if not tail:
        return Attribution(thr, 0, 0, {}, "events")
    index = SpanIndex(snap)
    total: dict[str, int] = dict.fromkeys(ATTRIBUTION_CATEGORIES, 0)
    wait = 0
    for r, e in tail:
        wait += e - r
        for cat, ns in index.breakdown(r, e).items():
            total[cat] += ns
    note = ""
    if snap.window == "windows":
        note = "from duty-cycle windows only"
    return Attribution(thr, len(tail), wait, total, "events", note)
