"""What thinning took from a capture, said where the numbers are (issue 30).

Per-event records can miss the model three ways: the kernel ring refused them (LOST), the
reader thinned them when the model fell behind, or they were cut unread at the end (DROP,
gmpmon/capture/pipeline.py). They take detail: the timelines, the P time shares, the
per-goroutine rows, latency by wake reason. They take no count an in-kernel counter holds
(starts, creations, exits, syscalls, hand-offs, preemptions, parks, steals, STWs, latency
samples: gmpmon/model/counts.py and the parts' Counted). "exact" is printed only for what is:
``fidelity()`` says "counts exact" beside a thinning only when every such count came from its
counter (Snapshot.sources) and the counters hash refused no update.
"""

from __future__ import annotations

from dataclasses import dataclass

from gmpmon.model.snapshot import Snapshot


@dataclass(frozen=True, slots=True)
class Thinning:
    missed: int  # per-event records the model did not get (LOST + DROP)
    written: int  # records the probes wrote (the ring ledger), else the model's + missed
    since_s: float | None  # seconds into the capture of the first one missed
    counts_whole: bool  # every count from its in-kernel counter, none refused

    @property
    def thinned(self) -> bool:
        return self.missed > 0


def _counts(snap: Snapshot) -> dict[str, int]:
    """Snapshot.sources name -> the count it feeds (0: nothing to be short of)."""
    return {
        "goroutine_starts": sum(p.executes for p in snap.procs),
        "goroutines_created": snap.goroutines_created,
        "goroutines_exited": snap.goroutines_exited,
        "syscalls": snap.syscalls,
        "syscall_exits": snap.syscall_exits,
        "handoffs": snap.handoffs,
        "yields": snap.preempted + snap.gosched,
        "preempt_requests": snap.preempt_requested,
        "park_count": sum(r.count for r in snap.park_reasons),
        "sched_latency": snap.sched_latency.count,
        "steal_ok": snap.steals.count,
        "steal_attempts": snap.steals.attempts,
        "steal_goroutines": snap.steals.goroutines,
        "stw": snap.stw_count,
    }


def thinning(snap: Snapshot) -> Thinning:
    missed = snap.events_lost + sum(snap.dropped.values())
    written = snap.ring.get("written", 0) or snap.events_total + missed
    since = ((snap.thinned_since - snap.start) / 1e9
             if missed and snap.thinned_since >= snap.start else None)
    whole = not snap.ring.get("counters_full", 0) and all(
        snap.sources.get(name) == "counters" or n == 0 for name, n in _counts(snap).items())
    return Thinning(missed, max(written, missed), since, whole)


def fmt_k(n: int) -> str:
    """554k, 2.18M: a record count at a glance."""
    if n >= 1_000_000:
        return f"{n / 1e6:.3g}M"
    if n >= 10_000:
        return f"{n / 1e3:.0f}k"
    return f"{n:,}"


def thinned_part(t: Thinning) -> str:
    """'554k of 2.18M records from 2.1 s' (what was missed, of what, since when)."""
    since = f" from {t.since_s:.1f} s" if t.since_s is not None else ""
    return f"{fmt_k(t.missed)} of {fmt_k(t.written)} records{since}"


def fidelity(snap: Snapshot, t: Thinning | None = None) -> str:
    """How whole the numbers are, in a few words for a header: "exact" (full mode, nothing
    missed), the mode's word otherwise ("windows", "sampled"), and whether records were
    thinned ("counts exact; thinned": the counts are still whole, the detail is not)."""
    t = t or thinning(snap)
    if not t.thinned:
        return snap.window
    if snap.window == "exact":
        return "counts exact; thinned" if t.counts_whole else "thinned; counts short"
    return f"{snap.window}; thinned"


def thinning_line(t: Thinning) -> str:
    """"per-event detail thinned: 554k of 2.18M records from 2.1 s"; "" when none."""
    return f"per-event detail thinned: {thinned_part(t)}" if t.thinned else ""
