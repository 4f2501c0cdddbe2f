"""The kernel sources' part of the summary JSON (key ``kernel``) and of the text report.

Pure, like gmpmon.report (which calls these): a KernelView in, dicts and lines out. Every
block carries ``source``: "samples" (perf-event samples: statistical, ``period_ns`` of CPU
per sample) or "tracepoints" (exact). docs/summary-schema.md documents the keys.
"""

from __future__ import annotations

from typing import Any

from gmpmon.model.kernel import LONG_RUN_NS
from gmpmon.model.kernelview import KernelView
from gmpmon.model.snapshot import LatencyStats


def _lat(ls: LatencyStats) -> dict[str, Any]:
    return {"count": ls.count, "p50": ls.p50, "p90": ls.p90, "p99": ls.p99, "max": ls.max,
            "sum": ls.sum, "histogram": [[lo, n] for lo, n in ls.histogram]}


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
            "source": "samples", "threshold_ns": LONG_RUN_NS, "count": k.long_runs_total,
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


def kernel_text(k: KernelView, fmt_ns: Any, *, top: int = 5) -> list[str]:
    """Lines for the text report (under 80 columns); ``fmt_ns`` formats a duration."""
    lines: list[str] = []
    src = k.sources
    if "samples" in src:
        s = k.samples
        lines.append("")
        if s.off:
            lines.append(s.off[:79])
        else:
            lines.append(
                f"CPU samples (perf, {1_000_000_000 // max(s.period_ns, 1)} Hz/CPU): {s.total}"
                f" = Go {s.go}, runtime g0 {s.g0}, kernel {s.kernel}, not in Go {s.not_go}")
            if k.cpu_by_p:
                lines.append("  per P: " + ", ".join(
                    f"P{p} {fmt_ns(n * s.period_ns)}" for p, n in k.cpu_by_p.items()))
            for g in k.cpu_by_goroutine[:top]:
                lines.append(f"  G{g.goid:<8} {fmt_ns(g.cpu_ns):>9}  {g.function}"[:79])
            if k.long_running:
                lines.append(f"Long-running goroutines (same G on a P >= "
                             f"{fmt_ns(LONG_RUN_NS)}, samples): {k.long_runs_total}")
                for r in k.long_running[:top]:
                    more = " (running)" if r.ongoing else ""
                    lines.append(f"  G{r.goid:<8} P{r.p} {fmt_ns(r.duration_ns):>9}  "
                                 f"{r.function}{more}"[:79])
    if k.runq_latency is not None and src.get("threads") == "tracepoints":
        ms = [t for t in k.threads if t.oncpu_ns or t.runq_ns]
        lq = k.runq_latency
        lines.append("")
        lines.append(f"Ms (tracepoints): {len(ms)} threads, on CPU "
                     f"{fmt_ns(sum(t.oncpu_ns for t in ms))}, kernel run-queue wait "
                     f"{fmt_ns(sum(t.runq_ns for t in ms))} in {lq.count} waits")
        lines.append(f"  run-queue delay p50 {fmt_ns(lq.p50)}  p90 {fmt_ns(lq.p90)}  "
                     f"p99 {fmt_ns(lq.p99)}  max {fmt_ns(lq.max)}")
    if "syscalls" in src:
        lines.append("")
        lines.append(f"Syscalls (tracepoints): {k.syscalls}, {fmt_ns(k.syscall_ns)} total; top: "
                     + ", ".join(f"{s.name} {s.count}" for s in k.syscalls_by_name[:4]))
        for p in k.syscalls_by_p:
            name = f"P{p.p}" if p.p >= 0 else "no P"
            lines.append(f"  {name:<5} {p.count:>8} {fmt_ns(p.ns):>9}  " + ", ".join(
                f"{s.name} {s.count}" for s in p.top[:3]))
    return lines
