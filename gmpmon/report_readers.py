"""The text report's lines about the readers of the target's memory that met a bad value
(gmpmon/capture/targetmem.py): one that stopped, and one that skipped reads and went on, each
with its one-line reason. A report never lacks a part without saying which and why."""

from __future__ import annotations

import textwrap

from gmpmon.fmt import fmt_ns
from gmpmon.model.runtime import CensusView, RuntimeView

_STOPPED = "the target's memory held an implausible value"


def reader_lines(rv: RuntimeView) -> list[str]:
    """``not available: ...`` for each feature the target lacks, then for those whose reader
    stopped, with why (one reason once, its features under it), then ``...: N reads
    skipped`` for each reader that went on past bad values."""
    notes = {n.part: n for n in rv.failed}
    out = [f"  not available: {m}" for m in rv.missing if m not in rv.stopped]
    by_why: dict[str, list[str]] = {}
    for m in rv.stopped:
        note = notes.get(m)
        by_why.setdefault(note.why if note is not None and note.why else _STOPPED, []).append(m)
    for why, parts in by_why.items():
        if len(parts) == 1:
            out.extend(_wrapped(f"  not available: {parts[0]} (its reader stopped: {why})"))
        else:
            out.extend(_wrapped(f"  not available, their reader stopped ({why}):"))
            out.extend(f"    {part}" for part in parts)
    for n in rv.failed:
        if n.skipped and not n.stopped:
            reads = "read" if n.skipped == 1 else "reads"
            out.extend(_wrapped(f"  {n.part}: {n.skipped} {reads} of the target's memory "
                                f"skipped, the reader went on (first: {n.why or '?'})"))
    return out


def walk_line(c: CensusView) -> str:
    """The census's walk: how many G structs, how long, cut short or Gs skipped, why."""
    cut = f", cut short: {', '.join(c.cut)}" if c.cut else ""
    skipped = f"; {c.skipped} unreadable, skipped (not counted)" if c.skipped else ""
    return f"  {c.walked} G structs walked in {fmt_ns(c.duration_ns)}{cut}{skipped}"


def _wrapped(line: str) -> list[str]:
    # Never cut: the reason is the point. Wrapped under 80 columns, continuation indented.
    return textwrap.wrap(line, 78, subsequent_indent="      ", break_long_words=False,
                         break_on_hyphens=False) or [line]
