"""A goroutine dump (gmpmon/capture/goroutines.py) as text and JSON.

``debug2_text``: Go's own ``/debug/pprof/goroutine?debug=2`` format (runtime/traceback.go
``goroutineheader``, ``traceback2``, ``printcreatedby`` at go1.21+), so the tools that read
Go's dumps read this one:

    goroutine 20 [chan receive, 5 minutes]:
    main.recvOuter(...)
        gmpmon/targets/stacks/main.go:37
    main.recvLeaf(...)
        gmpmon/targets/stacks/main.go:40 +0x25
    created by main.main in goroutine 1
        gmpmon/targets/stacks/main.go:115 +0x33b

Arguments are not read: every frame prints ``(...)`` (Go's form for an inlined frame).
A goroutine running at the moment of the read has no saved stack: with ``--sample`` its
frames come from the last perf sample that caught it (``...stack from a perf sample: running
on P n...``), else ``stack not taken: running on P n``. One whose stack moved under every
read says ``changed while read`` in its header; one whose unwind stopped early ends with
``...stack not complete: <why>...``.

``grouped_text`` folds identical stacks (state, frames, creation site) with their counts,
largest first, like ``debug=1`` and panicparse; ``to_json`` is either, structured.
"""

from __future__ import annotations

from typing import Any

from gmpmon.binary.unwind import OK, Frame
from gmpmon.capture.goroutines import SAMPLED, Dump, Goroutine

JSON_SCHEMA = 1
INNER, OUTER = 50, 50  # the runtime prints at most 50 innermost + 50 outermost frames


def wait_minutes(g: Goroutine) -> int:
    return 0 if g.wait_ns is None else int(g.wait_ns // 60_000_000_000)


def header_state(g: Goroutine) -> str:
    s = g.state
    if g.scan:
        s += " (scan)"
    if wait_minutes(g) >= 1:
        s += f", {wait_minutes(g)} minutes"
    if g.locked:
        s += ", locked to thread"
    if g.changed:
        s += ", changed while read"
    return s


def _frame_lines(f: Frame) -> str:
    pos = f"\t{f.file}:{f.line}"
    if not f.inlined and f.offset is not None:
        pos += f" +{f.offset:#x}"
    return f"{f.func}(...)\n{pos}\n"


def _created_lines(g: Goroutine) -> str:
    c = g.created_by
    if c is None:
        return ""
    who = f" in goroutine {g.creator}" if g.creator else ""
    pos = f"\t{c.file}:{c.line}" + (f" +{c.offset:#x}" if c.offset is not None else "")
    return f"created by {c.func}{who}\n{pos}\n"


def stack_text(g: Goroutine) -> str:
    """The lines after the header."""
    out = []
    where = f" on P {g.p}" if g.p is not None else ""
    if g.status_code == 2 and g.unwind == SAMPLED:
        out += [_frame_lines(f) for f in g.shown[:INNER + OUTER]]
        out.append(f"...stack from a perf sample: running{where}...\n")
    elif g.status_code == 2:
        out.append(f"\tstack not taken: running{where}\n")
    else:
        frames = g.shown
        if len(frames) > INNER + OUTER:
            skipped = len(frames) - INNER - OUTER
            out += [_frame_lines(f) for f in frames[:INNER]]
            out.append(f"...{skipped} frames elided...\n")
            out += [_frame_lines(f) for f in frames[-OUTER:]]
        else:
            out += [_frame_lines(f) for f in frames]
        if g.unwind != OK:
            out.append(f"...stack not complete: {g.unwind}...\n")
    out.append(_created_lines(g))
    return "".join(out)


def debug2_text(dump: Dump) -> str:
    return "\n".join(f"goroutine {g.goid} [{header_state(g)}]:\n{stack_text(g)}"
                     for g in dump.goroutines)


def group_key(g: Goroutine) -> tuple[Any, ...]:
    """What makes two goroutines one group: state, frames and creation site."""
    c = g.created_by
    return (g.state, g.status_code == 2,
            tuple((f.func, f.file, f.line) for f in g.shown),
            None if c is None else (c.func, c.file, c.line))


def groups(dump: Dump) -> list[list[Goroutine]]:
    """Goroutines with identical stacks together, largest group first."""
    by: dict[tuple[Any, ...], list[Goroutine]] = {}
    for g in dump.goroutines:
        by.setdefault(group_key(g), []).append(g)
    return sorted(by.values(), key=lambda gs: (-len(gs), gs[0].goid))


def grouped_text(dump: Dump, ids: int = 8) -> str:
    out = []
    for gs in groups(dump):
        g = gs[0]
        mins = [wait_minutes(x) for x in gs]
        state = g.state + (f", {min(mins)}-{max(mins)} minutes" if max(mins) >= 1 else "")
        some = " ".join(str(x.goid) for x in gs[:ids]) + (" ..." if len(gs) > ids else "")
        out.append(f"{len(gs)} goroutines [{state}]: {some}\n{stack_text(g)}")
    return "\n".join(out)


def _frame_json(f: Frame) -> dict[str, Any]:
    return {"func": f.func, "file": f.file, "line": f.line, "inlined": f.inlined,
            "offset": None if f.inlined else f.offset}


def goroutine_json(g: Goroutine) -> dict[str, Any]:
    return {
        "goid": g.goid,
        "status": g.status,
        "wait_reason": g.wait_reason or None,
        "wait_seconds": None if g.wait_ns is None else round(g.wait_ns / 1e9, 3),
        "locked_to_thread": g.locked,
        "p": g.p,
        "frames": [_frame_json(f) for f in g.shown],
        "stack": "complete" if g.unwind == OK else g.unwind,
        "changed_while_read": g.changed,
        "created_by": None if g.created_by is None else _frame_json(g.created_by),
        "creator_goid": g.creator or None,
    }


def to_json(dump: Dump, grouped: bool = False) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "schema": JSON_SCHEMA,
        "go_version": dump.go_version,
        "seconds": round(dump.seconds, 4),
        "allglen": dump.allglen,
        "goroutines_shown": len(dump.goroutines),
        # allgs entries that could not be read (a hostile or damaged target), not shown
        "unreadable": {"count": dump.skipped, "first": dump.skipped_why or None},
    }
    if grouped:
        doc["groups"] = [
            {"count": len(gs), "goids": [g.goid for g in gs]} | {
                k: v for k, v in goroutine_json(gs[0]).items()
                if k in ("status", "wait_reason", "frames", "created_by")
            }
            for gs in groups(dump)
        ]
    else:
        doc["goroutines"] = [goroutine_json(g) for g in dump.goroutines]
    return doc
