"""The runtime-counter and census parts of the summary JSON and of the text report.

Both read only ``Snapshot.runtime`` (gmpmon.model.runtime.RuntimeView). Every block says its
source: "runtime counters" (the runtime's own numbers in ``runtime.sched``/``allp``, read from
the target's memory) or "census" (a walk of ``allgs``).
"""

from __future__ import annotations

from typing import Any

from gmpmon.events import RT_FEATURE_NAMES, RtFeature
from gmpmon.model.runtime import CensusView, RuntimeView
from gmpmon.model.snapshot import LatencyStats, Snapshot

# Summary blocks filled by uprobes (hot ones only inside windows in default mode, not at all
# in sample mode; the cold ones - STW, handoff, preemption requests - always).
_PROBE_BLOCKS = (
    "steals", "park_reasons", "sched_latency_ns", "sched_latency_by_reason_ns", "syscalls",
    "preemptions", "goroutines", "mutex", "waits_by_kind", "waits_top",
)


def block_sources(snap: Snapshot) -> dict[str, str]:
    """Summary block -> where its numbers come from (schema v2)."""
    probes = {"full": "probes", "default": "probes (duty-cycle windows)"}.get(
        snap.mode, "probes (cold only)" if snap.mode == "sample" else "probes"
    )
    out = {b: probes for b in _PROBE_BLOCKS}
    out["procs"] = "memory samples (100 Hz)" if snap.window == "sampled" else probes
    out["gc_stw"] = "probes (cold)"
    if snap.runtime is not None:
        out["runtime"] = snap.runtime.source
        if snap.runtime.census is not None:
            out["census"] = snap.runtime.census.source
    return dict(sorted(out.items()))


def _fmt_ns(ns: float) -> str:
    if ns < 1_000:
        return f"{int(ns)}ns"
    if ns < 1_000_000:
        return f"{ns / 1e3:.1f}us"
    if ns < 1_000_000_000:
        return f"{ns / 1e6:.1f}ms"
    return f"{ns / 1e9:.2f}s"


def _lat(ls: LatencyStats | None) -> dict[str, Any] | None:
    if ls is None:
        return None
    return {
        "count": ls.count,
        "p50": ls.p50,
        "p90": ls.p90,
        "p99": ls.p99,
        "max": ls.max,
        "sum_estimate": ls.sum,
        "histogram": [[lo, n] for lo, n in ls.histogram],
    }


def census_summary(c: CensusView | None) -> dict[str, Any] | None:
    if c is None:
        return None
    return {
        "source": c.source,
        "number": c.seq,
        "complete": not c.cut,
        "cut_short": list(c.cut),
        "allglen": c.allglen,
        "walked": c.walked,
        "duration_ns": c.duration_ns,
        "goroutines": c.goroutines,
        "system_goroutines": c.system,
        "states": [
            {
                "state": r.state,
                "wait_reason": r.reason,
                "system": r.system,
                "count": r.count,
                "waited": r.waited,
                "wait_sum_ns": r.wait_sum_ns,
                "wait_max_ns": r.wait_max_ns,
            }
            for r in c.rows
        ],
        "creation_sites": [
            {"created_by": s.creator, "function": s.start, "count": s.count} for s in c.sites
        ],
    }


def runtime_summary(rv: RuntimeView | None) -> dict[str, Any] | None:
    """The ``runtime`` block (schema v2): numbers since attach, gauges at the end."""
    if rv is None:
        return None
    lacks = set(rv.missing)

    def has(f: RtFeature) -> bool:
        return RT_FEATURE_NAMES[f] not in lacks and rv.reads > 0

    goroutines, sched = has(RtFeature.GOROUTINES), has(RtFeature.SCHED)
    return {
        "source": rv.source,
        "reads": rv.reads,
        "missing": list(rv.missing),
        "sched_latency_ns": (
            {"note": rv.latency_note, **(_lat(rv.latency) or {})}
            if has(RtFeature.LATENCY)
            else None
        ),
        "goroutines": rv.goroutines if goroutines else None,
        "allglen": rv.allglen if goroutines else None,
        "npidle": rv.npidle if sched else None,
        "nmspinning": rv.nmspinning if sched else None,
        "global_runq": rv.global_runq if sched else None,
        "gcwaiting": rv.gcwaiting if sched else None,
        "gomaxprocs": rv.gomaxprocs if has(RtFeature.P_TICKS) else None,
        "procs": [{"id": p.p, "schedules": p.schedules, "syscalls": p.syscalls}
                  for p in rv.procs],
        "gc_stw_ns": _lat(rv.stw_gc),
        "other_stw_ns": _lat(rv.stw_other),
        "gc_stopping_ns": _lat(rv.stopping_gc),
        "other_stopping_ns": _lat(rv.stopping_other),
        "mutex_wait_ns": rv.mutex_wait_ns,
        "runtime_lock_wait_ns": rv.runtime_lock_wait_ns,
    }


def runtime_lines(rv: RuntimeView | None, *, top: int = 5) -> list[str]:
    """Text-report section (empty when the capture had no runtime counters)."""
    if rv is None:
        return []
    out = ["", f"From the runtime's own counters (source: {rv.source}):"]
    ls = rv.latency
    lacks = set(rv.missing)  # never print zeros that were not read
    if RT_FEATURE_NAMES[RtFeature.LATENCY] not in lacks and rv.reads:
        out.append(f"  scheduling latency ({rv.latency_note}): {ls.count} samples")
        out.append(
            f"    p50 {_fmt_ns(ls.p50)}  p90 {_fmt_ns(ls.p90)}  p99 {_fmt_ns(ls.p99)}  "
            f"max {_fmt_ns(ls.max)}"
        )
    if RT_FEATURE_NAMES[RtFeature.GOROUTINES] not in lacks and rv.reads:
        out.append(f"  goroutines {rv.goroutines} (allglen {rv.allglen})")
    if RT_FEATURE_NAMES[RtFeature.SCHED] not in lacks and rv.reads:
        out.append(
            f"  idle Ps {rv.npidle}, spinning Ms {rv.nmspinning}, global runq {rv.global_runq}"
        )
    if rv.procs:
        per = " ".join(f"P{p.p}:{p.schedules}/{p.syscalls}" for p in rv.procs[:8])
        more = f" +{len(rv.procs) - 8} Ps" if len(rv.procs) > 8 else ""
        out.append(f"  schedules/syscalls per P: {per}{more}")
    if rv.stw_gc is not None:
        g = rv.stw_gc
        out.append(
            f"  GC stop-the-world (runtime's own): {g.count} pauses, "
            f"total ~{_fmt_ns(g.sum)}, max >= {_fmt_ns(g.max)}"
        )
    if rv.mutex_wait_ns is not None:
        lock = (
            f", runtime locks {_fmt_ns(rv.runtime_lock_wait_ns)}"
            if rv.runtime_lock_wait_ns is not None
            else ""
        )
        out.append(f"  mutex wait total {_fmt_ns(rv.mutex_wait_ns)}{lock}")
    for m in rv.missing:
        out.append(f"  not available: {m}")
    c = rv.census
    if c is not None:
        cut = f", cut short: {', '.join(c.cut)}" if c.cut else ""
        out.append("")
        out.append(
            f"Goroutine census #{c.seq} (source: {c.source}): {c.goroutines} goroutines "
            f"+ {c.system} runtime"
        )
        out.append(f"  {c.walked} G structs walked in {_fmt_ns(c.duration_ns)}{cut}")
        for r in [r for r in c.rows if not r.system][:top]:
            what = f"{r.state} ({r.reason})" if r.reason else r.state
            waited = (
                f"  {r.waited} waited avg {_fmt_ns(r.wait_sum_ns / r.waited)} "
                f"max {_fmt_ns(r.wait_max_ns)}"
                if r.waited
                else ""
            )
            out.append(f"  {r.count:>8} {what}{waited}"[:80])
        for s in c.sites[:top]:
            out.append(f"  {s.count:>8} {s.start} <- {s.creator}"[:80])
    return out
