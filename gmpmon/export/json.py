"""The summary JSON (docs/summary-schema.md): its whole schema, owned here, and its exporter.

``summary(snapshot)`` is the versioned document (same Snapshot -> same dict: sorted, no
clock); the exporter writes it. Bump SCHEMA_VERSION and list the change in
docs/summary-schema.md when a field changes meaning or name. Every block says where its
numbers come from: ``block_sources`` for the probe blocks, ``source`` inside the runtime
("runtime counters", read from ``runtime.sched``/``allp``), census (a walk of ``allgs``) and
kernel ("samples": perf-event samples, ``period_ns`` of CPU per sample; "tracepoints":
exact) blocks. The text view of the same Snapshot is gmpmon/report.py's.
"""

from __future__ import annotations

import json
from typing import Any

from gmpmon.events import RT_FEATURE_NAMES, RtFeature
from gmpmon.export.base import Exporter
from gmpmon.model.findingtypes import ATTRIBUTION_CATEGORIES, Attribution
from gmpmon.model.gcheap import GcView
from gmpmon.model.kernel import long_run_ns
from gmpmon.model.kernelview import KernelView
from gmpmon.model.quantities import Measured, measure_all
from gmpmon.model.runtime import CensusView, RuntimeView
from gmpmon.model.snapshot import LatencyStats, Snapshot
from gmpmon.model.thinning import thinning
from gmpmon.record import Recording

SCHEMA_VERSION = 4
WAIT_STACKS_TOP = 20  # census.wait_stacks: the largest groups


def _lat(ls: LatencyStats, *, histogram: bool = True, sum_key: str = "sum") -> dict[str, Any]:
    """A latency block. The runtime's own histograms name their sum "sum_estimate" (bucket
    midpoints, not measured durations)."""
    d: dict[str, Any] = {
        "count": ls.count,
        "p50": ls.p50,
        "p90": ls.p90,
        "p99": ls.p99,
        "max": ls.max,
        sum_key: ls.sum,
    }
    if histogram:
        d["histogram"] = [[lo, n] for lo, n in ls.histogram]
    return d


# Summary block -> the quantity whose source the block's numbers follow (schema v4).
_BLOCK_QUANTITY = {
    "steals": "steals", "park_reasons": "parks", "sched_latency_ns": "sched_latency",
    "sched_latency_by_reason_ns": "parks", "syscalls": "syscalls", "preemptions": "preempted",
    "goroutines": "goroutines_live", "mutex": "mutex_waits", "procs": "p_running_ns",
    "gc_stw": "stw",
}


def block_sources(snap: Snapshot, qs: dict[str, Measured | None] | None = None) -> dict[str, str]:
    """Summary block -> where its main numbers come from (schema v2; v4: from the quantity
    registry, "not measured" when no source measured it)."""
    qs = measure_all(snap) if qs is None else qs
    out: dict[str, str] = {}
    for block, name in _BLOCK_QUANTITY.items():
        m = qs[name]
        out[block] = m.source if m is not None else "not measured"
    # sync.Mutex waits come from the cold lockSlow probe; the semaphore waits from hot ones.
    waits = out["park_reasons"] if qs["parks"] is not None else (
        f"{out['mutex']} (sync.Mutex only)" if qs["mutex_waits"] is not None else "not measured")
    out["waits_by_kind"] = out["waits_top"] = waits
    if snap.runtime is not None:
        out["runtime"] = snap.runtime.source
        if snap.runtime.census is not None:
            out["census"] = snap.runtime.census.source
    if snap.gc is not None:
        out["gc"] = snap.gc.source
    return dict(sorted(out.items()))


def quantities_json(qs: dict[str, Measured | None]) -> dict[str, Any]:
    """(v4) quantity -> {source, coverage} of the value the document shows; null: not
    measured in this mode (its keys are null too)."""
    return {name: None if m is None else {"source": m.source, "coverage": m.coverage}
            for name, m in qs.items()}


def _src(m: Measured | None) -> dict[str, Any]:
    return {"source": None, "coverage": None} if m is None else {
        "source": m.source, "coverage": m.coverage}


def _val(m: Measured | None) -> Any:
    return None if m is None else m.value


def _top_latency(m: Measured | None) -> dict[str, Any] | None:
    if m is None:
        return None
    ls: LatencyStats = m.value
    sum_key = "sum_estimate" if m.source == "runtime histogram" else "sum"
    return {**_lat(ls, sum_key=sum_key), **_src(m)}


def _procs(snap: Snapshot, qs: dict[str, Measured | None]) -> list[dict[str, Any]]:
    ex, run = qs["executes"], qs["p_running_ns"]
    probes_run = run is not None and run.source != "perf samples"
    hot = qs["steals"] is not None
    out = []
    for p in snap.procs:
        out.append({
            "id": p.id,
            "running_ns": (p.running_ns if probes_run
                           else None if run is None else run.value.get(p.id)),
            "idle_ns": p.idle_ns if probes_run else None,
            "spinning_ns": p.searching_ns if probes_run else None,  # (name kept in the schema)
            "syscall_ns": p.syscall_ns if probes_run else None,
            "gcstop_ns": p.gcstop_ns if probes_run else None,
            "executes": None if ex is None else ex.value.get(p.id),
            "steals_in": p.steals_in if hot else None,
            "steals_out": p.steals_out if hot else None,
            "sched_latency_ns": (_lat(p.latency, histogram=False)
                                 if qs["sched_latency"] is not None
                                 and qs["sched_latency"].source != "runtime histogram"
                                 else None),
        })
    return out


def _cost(snap: Snapshot) -> dict[str, Any] | None:
    c = snap.cost
    if c is None:
        return None
    return {"estimated_pct": round(c.estimated_pct, 4), "budget_pct": c.budget_pct,
            "windows": snap.windows, "covered_s": round(snap.windows_covered_ns / 1e9, 6),
            "cost_ns": c.cost_ns, "watch_ns": c.watch_ns, "target_cpu_ns": c.target_cpu_ns,
            "overstays": c.overstays,
            "bursts": c.bursts, "cut_short": c.cut_short, "triggers": len(snap.triggers),
            # cold probe groups the governor cut back to stay in the budget, and what that
            # cost in coverage
            "cut_back": [{"probes": k.probes, "every": k.every, "every_max": k.every_max,
                          "sampled_ns": k.sampled_ns, "traps_over": k.traps_over,
                          "duty": k.duty, "paused_ns": k.paused_ns,
                          "text": k.text()} for k in c.cut_back]}


def summary(snap: Snapshot, *, top: int = 10) -> dict[str, Any]:
    """The versioned --summary-json document. Same Snapshot -> same dict (sorted, no clock).
    The top-level quantities take the best source the mode had (gmpmon.model.quantities);
    what nothing measured is null, never 0."""
    thin = thinning(snap)
    qs = measure_all(snap)
    steals, parks, lat = qs["steals"], qs["parks"], qs["sched_latency"]
    by_reason = lat is not None and lat.source != "runtime histogram"
    live = qs["goroutines_live"]
    census = snap.runtime.census if snap.runtime else None
    return {
        "schema_version": SCHEMA_VERSION,
        "target": {
            "pid": snap.pid,
            "exe": snap.exe,
            "go_version": snap.go_version,
            "gomaxprocs": snap.gomaxprocs,
        },
        "mode": snap.mode,
        # "exact" only when it is: full mode with per-event records thinned says "thinned"
        "window": "thinned" if snap.window == "exact" and thin.thinned else snap.window,
        "windows": {"count": snap.windows, "covered_ns": snap.windows_covered_ns},
        "cost": _cost(snap),
        "duration_s": round(max(0, snap.now - snap.start) / 1e9, 6),
        "events": {"total": snap.events_total, "lost": snap.events_lost, "late": snap.late_events,
                   "dropped": dict(snap.dropped), "ring": dict(snap.ring),
                   "thinned": {"records": thin.missed, "of": thin.written,
                               "since_s": None if thin.since_s is None
                               else round(thin.since_s, 3),
                               "counts": "counters" if thin.counts_whole else "events"}},
        "illegal_transitions": snap.illegal_transitions,
        "procs": _procs(snap, qs),
        "steals": None if steals is None else {
            "attempts": snap.steals.attempts,
            "count": snap.steals.count,
            "goroutines": snap.steals.goroutines,
            "matrix": [
                {"thief": t, "victim": v, "attempts": a, "count": c, "goroutines": g}
                for (t, v), (a, c, g) in sorted(snap.steals.matrix.items())
            ],
            **_src(steals),
        },
        "park_reasons": None if parks is None else {
            r.reason: {"count": r.count, "wait_ns": r.wait_ns} for r in snap.park_reasons
        },
        "sched_latency_ns": _top_latency(lat),
        "sched_latency_by_reason_ns": None if not by_reason else {
            name: _lat(ls, histogram=False) for name, ls in sorted(snap.latency_by_reason.items())
        },
        "syscalls": {
            "count": _val(qs["syscalls"]),
            "blocking": _val(qs["syscalls_blocking"]),
            "handoffs": _val(qs["handoffs"]),
            **_src(qs["syscalls"]),
        },
        "preemptions": {
            "requested": _val(qs["preempt_requested"]),
            "preempted": _val(qs["preempted"]),
            "gosched": _val(qs["gosched"]),
            **_src(qs["preempted"]),
        },
        "gc_stw": {
            "count": snap.stw_count,
            "total_ns": snap.stw_total_ns,
            "max_ns": snap.stw_max_ns,
            "by_reason": {k: {"count": c, "total_ns": t} for k, (c, t) in snap.stw_reasons.items()},
            **_src(qs["stw"]),
        },
        "goroutines": {
            "live": _val(live),  # as runtime.NumGoroutine counts
            "system": None if census is None else census.system,  # runtime goroutines, apart
            "created": _val(qs["goroutines_created"]),
            "exited": _val(qs["goroutines_exited"]),
            "states": _val(qs["goroutines_by_state"]),
            "seen_live": snap.goroutines_live if qs["goroutines_created"] else None,
            "seen_states": dict(snap.g_state_counts) if qs["goroutines_created"] else None,
            "wakes_without_ready": snap.unseen_wakes if parks is not None else None,
            **_src(live),
        },
        "mutex": {
            "contentions": snap.mutex_contentions,
            "wait_ns": snap.mutex_wait_ns,
            "top": [
                {"stack": list(s.stack), "count": s.count, "wait_ns": s.wait_ns}
                for s in snap.mutex_stacks[:top]
            ],
            "by_addr": [
                {"addr": f"0x{a:x}", "count": c, "wait_ns": w}
                for a, (c, w) in sorted(
                    snap.mutex_by_addr.items(), key=lambda kv: (-kv[1][1], kv[0])
                )[:top]
            ],
            # traced 1 in N while over the budget: how many waits were so weighed (each
            # counted N times above), the largest N; null when every wait was traced
            "sampled": ({"waits": snap.mutex_sampling[0], "every_max": snap.mutex_sampling[1]}
                        if snap.mutex_sampling[0] else None),
            **_src(qs["mutex_waits"]),
        },
        # Every blocking wait gmpmon measured, by what it waited for (sync.Mutex included;
        # RWMutex, WaitGroup and other semaphores from semacquire1).
        "waits_by_kind": {
            k: {"count": c, "wait_ns": w} for k, (c, w) in snap.waits_by_kind.items()
        },
        "waits_top": [
            {"kind": s.kind, "stack": list(s.stack), "count": s.count, "wait_ns": s.wait_ns}
            for s in snap.wait_stacks[:top]
        ],
        "sources": dict(sorted(snap.sources.items())),
        # schema v2: where each block's numbers come from, and the trap-free blocks.
        "block_sources": block_sources(snap, qs),
        # schema v4: each quantity's source and coverage (gmpmon.model.quantities).
        "quantities": quantities_json(qs),
        "runtime": runtime_summary(snap.runtime),
        "census": census_summary(snap.runtime.census if snap.runtime else None),
        "gc": gc_summary(snap.gc),
        "findings": [f.to_json() for f in snap.findings],  # gmpmon.findings, most severe first
        "latency_attribution": attribution_json(snap.latency_attribution),
        **({"kernel": kernel_summary(snap.kernel, top=top)} if snap.kernel else {}),
    }


def attribution_json(att: Attribution | None) -> dict[str, Any] | None:
    if att is None:
        return None
    return {
        "threshold_ns": att.threshold_ns,
        "samples": att.samples,
        "wait_ns": att.wait_ns,
        "breakdown_ns": {c: att.breakdown.get(c, 0) for c in ATTRIBUTION_CATEGORIES},
        "source": att.source,
        "note": att.note,
    }


def _rt_lat(ls: LatencyStats | None) -> dict[str, Any] | None:
    return None if ls is None else _lat(ls, sum_key="sum_estimate")


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
        "skipped": c.skipped,
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
        "wait_stacks": None if c.stacks is None else [
            {
                "state": w.state,
                "wait_reason": w.reason,
                "count": w.count,
                "waited": w.waited,
                "wait_sum_ns": w.wait_sum_ns,
                "wait_max_ns": w.wait_max_ns,
                "created_by": w.creator,
                "function": w.start,
                "frames": list(w.leaf_first),
            }
            for w in c.stacks if not w.system
        ][:WAIT_STACKS_TOP],
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
        "stopped": list(rv.stopped),
        "failed": [{"part": n.part, "stopped": n.stopped, "skipped_reads": n.skipped,
                    "why": n.why} for n in rv.failed],
        "sched_latency_ns": (
            {"note": rv.latency_note, **(_rt_lat(rv.latency) or {})}
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
        "gc_stw_ns": _rt_lat(rv.stw_gc),
        "other_stw_ns": _rt_lat(rv.stw_other),
        "gc_stopping_ns": _rt_lat(rv.stopping_gc),
        "other_stopping_ns": _rt_lat(rv.stopping_other),
        "mutex_wait_ns": rv.mutex_wait_ns,
        "runtime_lock_wait_ns": rv.runtime_lock_wait_ns,
    }


def gc_summary(gc: GcView | None) -> dict[str, Any] | None:
    """The ``gc`` block (schema v2, gmpmon 2026-12): the GC and heap from the runtime's own
    memory. Gauges at the last read; ``*_ns`` and ``cycles`` since attach; null = not
    measured (``missing`` says what the version lacks)."""
    if gc is None:
        return None
    return {
        "source": gc.source,
        "missing": list(gc.missing),
        "heap_live_bytes": gc.heap_live_bytes,
        "heap_in_use_bytes": gc.heap_in_use_bytes,
        "heap_goal_bytes": gc.heap_goal_bytes,
        "heap_goal_note": gc.goal_note,
        "gogc": gc.gogc,
        "memory_limit_bytes": gc.memory_limit_bytes,
        "cycles": gc.cycles,
        "cycles_total": gc.cycles_total,
        "cycles_per_s": round(gc.cycles_per_s, 3) if gc.cycles_per_s is not None else None,
        "pause_ns": gc.pause_ns,
        "pause_total_ns": gc.pause_total_ns,
        "pause_per_cycle_ns": gc.pause_per_cycle_ns,
        "mark_assist_cpu_ns": gc.assist_cpu_ns,
        "mark_dedicated_cpu_ns": gc.dedicated_cpu_ns,
        "mark_idle_cpu_ns": gc.idle_cpu_ns,
        "pause_cpu_ns": gc.pause_cpu_ns,
        "cpu_total_ns": gc.cpu_total_ns,
    }


def kernel_summary(k: KernelView, *, top: int = 10) -> dict[str, Any]:
    out: dict[str, Any] = {}
    src = k.sources
    if "samples" in src:
        s = k.samples
        per = s.period_ns
        out["samples"] = {
            "source": "samples", "total": s.total, "go": s.go, "g0": s.g0,
            "not_go": s.not_go, "kernel": s.kernel, "records": s.records, "period_ns": per,
            "off": s.off,
        }
        out["cpu_by_p"] = {"source": "samples", "procs": [
            {"p": p, "samples": n, "cpu_ns": n * per} for p, n in sorted(k.cpu_by_p.items())]}
        out["cpu_by_goroutine"] = {"source": "samples", "top": [
            {"goid": g.goid, "samples": g.samples, "cpu_ns": g.cpu_ns, "function": g.function,
             "procs": list(g.procs)} for g in k.cpu_by_goroutine[:top]]}
        out["long_running"] = {
            "source": "samples", "threshold_ns": long_run_ns(k.samples.period_ns),
            "count": k.long_runs_total,
            "top": [
                {"goid": r.goid, "p": r.p, "duration_ns": r.duration_ns, "samples": r.samples,
                 "function": r.function, "stack": list(r.stack), "ongoing": r.ongoing}
                for r in k.long_running[:top]
            ],
        }
    if k.threads:
        out["threads"] = {"source": src.get("threads", "samples"), "ms": [
            {"tid": t.tid, "samples": t.samples, "oncpu_ns": t.oncpu_ns,
             "offcpu_ns": t.offcpu_ns, "runq_ns": t.runq_ns, "runq_waits": t.runq_waits,
             "voluntary": t.voluntary, "involuntary": t.involuntary,
             "syscalls": t.syscalls, "syscall_ns": t.syscall_ns} for t in k.threads]}
    if k.runq_latency is not None:
        out["runq_latency_ns"] = {"source": "tracepoints", **_lat(k.runq_latency)}
    if "syscalls" in src:
        out["syscalls"] = {
            "source": "tracepoints", "count": k.syscalls, "ns": k.syscall_ns,
            "top": [{"name": s.name, "nr": s.nr, "count": s.count, "ns": s.ns}
                    for s in k.syscalls_by_name[:top]],
            "by_p": [{"p": p.p, "count": p.count, "ns": p.ns,
                      "top": [{"name": s.name, "count": s.count, "ns": s.ns} for s in p.top]}
                     for p in k.syscalls_by_p],
            "by_goroutine": [{"goid": g, "count": n, "ns": ns}
                             for g, n, ns in k.syscalls_by_g[:top]],
        }
    return out


class JsonExporter(Exporter):
    doc: dict[str, object] | None = None

    def add(self, snapshot: Snapshot) -> None:
        self.doc = summary(snapshot)

    def recording_read(self, rec: Recording) -> None:
        if self.doc is not None and rec.error is not None:
            self.doc["recording"] = {"stopped_at": rec.stopped_at, "error": rec.error,
                                     "batches_used": rec.batches_read}

    def render(self) -> bytes:
        return (json.dumps(self.doc, indent=2, sort_keys=False) + "\n").encode()
