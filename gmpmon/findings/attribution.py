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

from collections.abc import Callable, Sequence

from sortedcontainers import SortedKeyList

from gmpmon.model.findingtypes import ATTRIBUTION_CATEGORIES, Attribution
from gmpmon.model.snapshot import PState, Snapshot, Span

_UNKNOWN, _RUNNING, _SEARCHING, _IDLE, _SYSCALL, _GCSTOP = (
    PState.UNKNOWN,
    PState.RUNNING,
    PState.SEARCHING,
    PState.IDLE,
    PState.SYSCALL,
    PState.GCSTOP,
)


MAX_TAIL = 64
# And at most this many P spans swept in all: on 64 Ps a long wait overlaps thousands of
# spans of each P, and 64 such waits took 15-20 s of the model thread per snapshot (scale
# workload). The waits are swept in their picked order until the budget is spent.
MAX_SPANS = 100_000


class Cancelled(Exception):
    """The caller gave up on this attribution (its snapshot is not wanted any more)."""


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
        self.swept = 0

    def breakdown(self, a: int, b: int) -> dict[str, int]:
        """ns of [a, b) in each category: a sweep over the state changes of all Ps,
        keeping how many Ps are in each state. ``self.swept`` counts the spans looked at.

        Written for speed (the final snapshot of 64 Ps spent ~0.35 s here, past
        --duration): one walk per P from a bisection, plain ints in the sort, the
        category inlined."""
        changes: list[tuple[int, int, int]] = []  # (time, state, +1/-1); state -1 = STW
        add = changes.append
        for sl in self.procs:
            # Spans ending after a, in end order (one bisection, then a plain walk).
            for sp in sl.irange_key(min_key=a, inclusive=(False, True)):
                start = sp.start
                if start >= b:
                    break
                st = int(sp.state)
                add((start if start > a else a, st, 1))
                end = sp.end
                add((end if end < b else b, st, -1))
        for start, end in self.stw.irange_key(min_key=a, inclusive=(False, True)):
            if start >= b:
                break
            add((start if start > a else a, -1, 1))
            add((end if end < b else b, -1, -1))
        self.swept += len(changes) // 2
        add((b, int(_UNKNOWN), 0))  # closes the last piece, [last change, b), in the loop below
        changes.sort()
        nprocs = len(self.procs)
        count = [0] * 7  # index state + 1: 0 = STW, 1.. = PState values
        out = dict.fromkeys(ATTRIBUTION_CATEGORIES, 0)
        stw_i, gc_i, idle_i, search_i, sys_i, run_i = (
            0, _GCSTOP + 1, _IDLE + 1, _SEARCHING + 1, _SYSCALL + 1, _RUNNING + 1)
        t = a
        for when, st, d in changes:
            if when > t:
                if count[stw_i] or count[gc_i]:
                    out["stw"] += when - t
                elif count[idle_i] or count[search_i]:
                    out["idle"] += when - t
                elif count[sys_i]:
                    out["syscall"] += when - t
                elif nprocs and count[run_i] >= nprocs:
                    out["all_running"] += when - t
                else:
                    out["unknown"] += when - t
                t = when
            count[st + 1] += d
        return {c: ns for c, ns in out.items() if ns}


def attribute(
    snap: Snapshot,
    samples: Sequence[tuple[int, int, int, int]],
    *,
    threshold_ns: int | None = None,
    quantile: float = 0.99,
    cancelled: Callable[[], bool] | None = None,
) -> Attribution:
    """Attribute the waits of ``samples`` (ready, execute, P, goid) at or above the
    threshold (default: their ``quantile``). ``cancelled`` is asked before each wait's
    sweep: True raises Cancelled (the sweeps are most of a large snapshot's time)."""
    if not samples:
        note = "no latency samples with their times: needs the hot probes (full or default mode)"
        return Attribution(0, 0, 0, {}, "", note)
    # Only the waits that the kept P timelines cover (Snapshot.procs[].timeline holds the
    # last ~2,000 spans of each P): older ones would all be "unknown".
    starts = [p.timeline[0].start for p in snap.procs if p.timeline]
    if starts:
        covered = [s for s in samples if s[0] >= max(starts)]  # every P's timeline
        if len(covered) < 50:
            covered = [s for s in samples if s[0] >= min(starts)]  # at least one P's
        samples = covered
    if not samples:
        return Attribution(0, 0, 0, {}, "events", "no latency samples within the kept timeline")
    lats = [e - r for r, e, _p, _g in samples]
    thr = threshold_ns if threshold_ns is not None else percentile(lats, quantile)
    tail = [(r, e) for (r, e, _p, _g), lat in zip(samples, lats, strict=True) if lat >= thr > 0]
    if not tail:
        return Attribution(thr, 0, 0, {}, "events")
    # Each wait costs a sweep over the spans it overlaps: attribute at most MAX_TAIL of them
    # (every k-th, oldest first: deterministic), scaled to the whole tail's wait.
    step = -(-len(tail) // MAX_TAIL)
    picked = tail[::step]
    index = SpanIndex(snap)
    got: dict[str, int] = dict.fromkeys(ATTRIBUTION_CATEGORIES, 0)
    swept = 0
    for r, e in picked:
        if cancelled is not None and cancelled():
            raise Cancelled
        for cat, ns in index.breakdown(r, e).items():
            got[cat] += ns
        swept += 1
        if index.swept >= MAX_SPANS:
            break
    wait = sum(e - r for r, e in tail)
    seen = sum(got.values())
    total = {c: (ns * wait // seen if seen else 0) for c, ns in got.items()}
    notes = []
    if swept < len(tail):
        notes.append(f"{swept} of the {len(tail)} waits swept, scaled")
    if snap.window == "windows":
        notes.append("from duty-cycle windows only")
    return Attribution(thr, len(tail), wait, total, "events", "; ".join(notes))
