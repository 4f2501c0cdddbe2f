"""How gmpmon writes a number for people: one spelling everywhere (report, TUI, hints)."""

from __future__ import annotations


def fmt_ns(ns: int | float) -> str:
    """A duration in at most ~6 characters: 850ns, 12.3µs, 4.1ms, 2.50s, 3m20s."""
    ns = float(ns)
    if ns < 1_000:
        return f"{ns:.0f}ns"
    for unit, scale in (("µs", 1e3), ("ms", 1e6)):
        if ns < scale * 1_000:
            v = ns / scale
            return f"{v:.1f}{unit}" if v < 100 else f"{v:.0f}{unit}"
    s = ns / 1e9
    if s < 60:
        return f"{s:.2f}s" if s < 10 else f"{s:.1f}s"
    m, s = divmod(int(s), 60)
    if m < 60:
        return f"{m}m{s:02d}s"
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m"


def fmt_count(n: int | float) -> str:
    """A count in at most ~5 characters: 999, 12.3k, 4.56M."""
    n = float(n)
    if abs(n) < 1_000:
        return f"{n:.0f}"
    for unit, scale in (("k", 1e3), ("M", 1e6), ("G", 1e9)):
        if abs(n) < scale * 1_000:
            v = n / scale
            return f"{v:.2f}{unit}" if v < 10 else f"{v:.1f}{unit}" if v < 100 else f"{v:.0f}{unit}"
    return f"{n / 1e12:.1f}T"
