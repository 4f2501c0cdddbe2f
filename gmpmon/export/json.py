"""The summary JSON (docs/summary-schema.md): its schema, owned here, and its exporter.

``summary(snapshot)`` is the versioned document (same Snapshot -> same dict: sorted, no
clock); the exporter writes it. Bump SCHEMA_VERSION and list the change in
docs/summary-schema.md when a field changes meaning or name.
"""

from __future__ import annotations

import json
from typing import Any

from gmpmon.export.base import Exporter
from gmpmon.findings.render import attribution_json, findings_json
from gmpmon.kernelreport import kernel_summary
from gmpmon.model.snapshot import LatencyStats, Snapshot
from gmpmon.report_runtime import block_sources, census_summary, runtime_summary

SCHEMA_VERSION = 3


def _lat(ls: LatencyStats, *, histogram: bool = True) -> dict[str, Any]:
    d: dict[str, Any] = {
        "count": ls.count,
        "p50": ls.p50,
        "p90": ls.p90,
        "p99": ls.p99,
        "max": ls.max,
        "sum": ls.sum,
    }
    if histogram:
        d["histogram"] = [[lo, n] for lo, n in ls.histogram]
    return d


def _cost(snap: Snapshot) -> dict[str, Any] | None:
    c = snap.cost
    if c is None:
        return None
    return {"estimated_pct": round(c.estimated_pct, 4), "budget_pct": c.budget_pct,
            "windows": snap.windows, "covered_s": round(snap.windows_covered_ns / 1e9, 6),
            "cost_ns": c.cost_ns, "target_cpu_ns": c.target_cpu_ns, "overstays": c.overstays,
            "bursts": c.bursts, "cut_short": c.cut_short, "triggers": len(snap.triggers)}


def summary(snap: Snapshot, *, top: int = 10) -> dict[str, Any]:
    """The versioned --summary-json document. Same Snapshot -> same dict (sorted, no clock)."""
    return {
        "schema_version": SCHEMA_VERSION,
        "target": {
            "pid": snap.pid,
            "exe": snap.exe,
            "go_version": snap.go_version,
            "gomaxprocs": snap.gomaxprocs,
        },
        "mode": snap.mode,
        "window": snap.window,
        "windows": {"count": snap.windows, "covered_ns": snap.windows_covered_ns},
        "cost": _cost(snap),
        "duration_s": round(max(0, snap.now - snap.start) / 1e9, 6),
        "events": {"total": snap.events_total, "lost": snap.events_lost, "late": snap.late_events,
                   "dropped": dict(snap.dropped)},
        "illegal_transitions": snap.illegal_transitions,
        "procs": [
            {
                "id": p.id,
                "running_ns": p.running_ns,
                "idle_ns": p.idle_ns,
                "spinning_ns": p.searching_ns,  # (name kept in the schema)
                "syscall_ns": p.syscall_ns,
                "gcstop_ns": p.gcstop_ns,
                "executes": p.executes,
                "steals_in": p.steals_in,
                "steals_out": p.steals_out,
                "sched_latency_ns": _lat(p.latency, histogram=False),
            }
            for p in snap.procs
        ],
        "steals": {
            "attempts": snap.steals.attempts,
            "count": snap.steals.count,
            "goroutines": snap.steals.goroutines,
            "matrix": [
                {"thief": t, "victim": v, "attempts": a, "count": c, "goroutines": g}
                for (t, v), (a, c, g) in sorted(snap.steals.matrix.items())
            ],
        },
        "park_reasons": {
            r.reason: {"count": r.count, "wait_ns": r.wait_ns} for r in snap.park_reasons
        },
        "sched_latency_ns": _lat(snap.sched_latency),
        "sched_latency_by_reason_ns": {
            name: _lat(ls, histogram=False) for name, ls in sorted(snap.latency_by_reason.items())
        },
        "syscalls": {
            "count": snap.syscalls,
            "blocking": snap.syscalls_blocking,
            "handoffs": snap.handoffs,
        },
        "preemptions": {
            "requested": snap.preempt_requested,
            "preempted": snap.preempted,
            "gosched": snap.gosched,
        },
        "gc_stw": {
            "count": snap.stw_count,
            "total_ns": snap.stw_total_ns,
            "max_ns": snap.stw_max_ns,
            "by_reason": {k: {"count": c, "total_ns": t} for k, (c, t) in snap.stw_reasons.items()},
        },
        "goroutines": {
            "created": snap.goroutines_created,
            "exited": snap.goroutines_exited,
            "live": snap.goroutines_live,
            "states": dict(snap.g_state_counts),
            "wakes_without_ready": snap.unseen_wakes,
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
        "block_sources": block_sources(snap),
        "runtime": runtime_summary(snap.runtime),
        "census": census_summary(snap.runtime.census if snap.runtime else None),
        "findings": findings_json(snap),  # gmpmon.findings, most severe first
        "latency_attribution": attribution_json(snap.latency_attribution),
        **({"kernel": kernel_summary(snap.kernel, top=top)} if snap.kernel else {}),
    }


class JsonExporter(Exporter):
    doc: dict[str, object] | None = None

    def add(self, snapshot: Snapshot) -> None:
        self.doc = summary(snapshot)

    def render(self) -> bytes:
        return (json.dumps(self.doc, indent=2, sort_keys=False) + "\n").encode()
