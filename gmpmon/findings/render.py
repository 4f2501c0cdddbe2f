"""Findings and the latency attribution as report lines (the TUI's Findings view and the
text report use them; their summary JSON is gmpmon/export/json.py's). Pure."""

from __future__ import annotations

from gmpmon.fmt import fmt_ns
from gmpmon.model.findingtypes import ATTRIBUTION_CATEGORIES, Attribution, Finding, Severity
from gmpmon.model.snapshot import Snapshot

CATEGORY_LABELS = {
    "all_running": "all Ps running other goroutines",
    "stw": "stopped for STW",
    "syscall": "a P in a syscall, not handed off",
    "idle": "a P idle/searching, no M took the G",
    "unknown": "P states unknown",
}
_MARK = {Severity.CRITICAL: "!!", Severity.WARNING: "! ", Severity.INFO: "  "}


def attribution_lines(att: Attribution | None) -> list[str]:
    if att is None or not att.samples:
        why = att.note if att is not None and att.note else "no samples above the threshold"
        return [f"  (latency attribution: {why})"]
    out = [f"Tail latency attribution: {att.samples} waits >= {fmt_ns(att.threshold_ns)} "
           f"(p99), {fmt_ns(att.wait_ns)} in all; while they waited:"]
    for c in ATTRIBUTION_CATEGORIES:
        ns = att.breakdown.get(c, 0)
        if ns:
            out.append(f"  {100 * ns / att.wait_ns:5.1f}%  {CATEGORY_LABELS[c]}")
    if att.note:
        out.append(f"  ({att.note})")
    return out


def evidence_lines(f: Finding, width: int = 80) -> list[str]:
    """The evidence as indented ``key: value`` lines (lists of dicts one per line)."""
    out: list[str] = []
    for k, v in f.evidence.items():
        if k in ("sources", "sampled") or v is None or v == "" or v == [] or v == {}:
            continue
        if isinstance(v, list) and v and isinstance(v[0], dict):
            out.append(f"{k}:")
            out.extend("  " + ", ".join(f"{a}={b}" for a, b in row.items()) for row in v[:5])
        elif isinstance(v, list) and v and isinstance(v[0], str):
            out.append(f"{k}:")
            out.extend(f"  {s}" for s in v[:8])
        elif isinstance(v, dict):
            out.append(f"{k}: " + ", ".join(f"{a}={b}" for a, b in v.items()))
        else:
            out.append(f"{k}: {v}")
    src = f.evidence.get("sources") or {}
    if src:
        out.append("sources: " + ", ".join(f"{a}={b}" for a, b in src.items()))
    sampled = f.evidence.get("sampled") or []
    out.append("sampled: " + (", ".join(sampled) if sampled else "none (every event)"))
    return [line[:width] for line in out]


def text_lines(snap: Snapshot, *, width: int = 80) -> list[str]:
    """The report's Findings section."""
    out = ["Findings:"]
    if not snap.findings:
        out.append("  none: no scheduler pathology detected")
    for f in snap.findings:
        out.append(f"{_MARK[f.severity]}{f.severity.label.upper():<8} {f.id}: {f.title}"[:width])
        out.extend("      " + line for line in evidence_lines(f, width - 6))
        words = f.advice.split()
        line = "    try:"
        for w in words:
            if len(line) + 1 + len(w) > width:
                out.append(line)
                line = "        "
            line += " " + w
        out.append(line)
    out.append("")
    out.extend(attribution_lines(snap.latency_attribution))
    return out
