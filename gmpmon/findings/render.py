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


def _label(key: str) -> str:
    """An evidence key in words: ``longest_ns`` -> "longest", ``max_local_p`` -> "max local p"."""
    return key.removesuffix("_ns").replace("_", " ")


def _word(key: str, v: object) -> str:
    """One evidence value in words: durations through fmt_ns, yes/no, frames leaf first."""
    if isinstance(v, bool):
        return "yes" if v else "no"
    if key.endswith("_ns") and isinstance(v, int | float):
        return fmt_ns(v)
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, list):
        if v and all(isinstance(x, list | tuple) and len(x) == 2 for x in v):
            return ", ".join(f"{a}: {b}" for a, b in v)  # a series: "0: 6579, 1: 3096"
        return ", ".join(_word(key, x) for x in v)
    if isinstance(v, dict):
        return ", ".join(f"{_label(a)} {_word(a, b)}" for a, b in v.items())
    return str(v)


def _table(rows: list[dict[str, object]], width: int) -> list[str]:
    """Rows of evidence as a small table: one column per scalar key, a row's stack (a list
    of frames) under it, its top frames only."""
    cols = [k for k in rows[0] if not isinstance(rows[0][k], list | dict)]
    for r in rows[1:]:
        cols += [k for k in r if k not in cols and not isinstance(r[k], list | dict)]
    cells = [[_word(k, r.get(k, "")) for k in cols] for r in rows]
    wide = [max(len(_label(k)), *(len(c[i]) for c in cells)) for i, k in enumerate(cols)]
    out = ["  " + "  ".join(_label(k).ljust(w) for k, w in zip(cols, wide, strict=True))]
    for r, c in zip(rows, cells, strict=True):
        out.append(("  " + "  ".join(v.ljust(w) for v, w in zip(c, wide, strict=True)))[:width])
        for k, v in r.items():
            if isinstance(v, list) and v:
                more = f" (+{len(v) - 3} more)" if len(v) > 3 else ""
                out.append(f"    {_label(k)}: {' < '.join(map(str, v[:3]))}{more}"[:width])
    return out


def evidence_lines(f: Finding, width: int = 80) -> list[str]:
    """The evidence in words: ``label: value`` lines, durations as durations, lists of
    goroutines or Ps as a small table, stacks as frames (leaf first)."""
    out: list[str] = []
    for k, v in f.evidence.items():
        if k in ("sources", "sampled") or v is None or v == "" or v == [] or v == {}:
            continue
        if isinstance(v, list) and v and isinstance(v[0], dict):
            out.append(f"{_label(k)}:")
            out.extend(_table(v[:5], width))
        elif isinstance(v, list) and v and isinstance(v[0], str):
            out.append(f"{_label(k)}:")
            out.extend(f"  {s}" for s in v[:8])
        else:
            out.append(f"{_label(k)}: {_word(k, v)}")
    src = f.evidence.get("sources") or {}
    if src:
        out.append("sources:")
        out.extend(f"  {_label(a)}: {b}" for a, b in src.items())
    sampled = f.evidence.get("sampled") or []
    out.append("sampled: " + (", ".join(_label(s) for s in sampled) if sampled
                              else "none (every event)"))
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
