"""The screen of an app under test as plain text: what a user reads, for fact assertions next
to the SVG snapshots (a snapshot alone could store a contradiction)."""

from __future__ import annotations

import re

from textual.app import App


def screen_text(app: App[object]) -> str:
    strips = app.screen._compositor.render_strips()
    return "\n".join("".join(seg.text for seg in strip).rstrip() for strip in strips)


def proc_rows(text: str) -> list[str]:
    """The Procs view's per-P rows (not the folded idle line)."""
    return [ln for ln in text.splitlines()
            if re.match(r"^ +\d+ [a-z]", ln) and " idle Ps," not in ln]


def screen_colours(app: App[object]) -> list[list[tuple[str, str]]]:
    """Each screen line as (character, foreground colour as #rrggbb or "") pairs."""
    out = []
    for strip in app.screen._compositor.render_strips():
        line = []
        for seg in strip:
            colour = seg.style.color if seg.style is not None else None
            hexa = colour.get_truecolor().hex if colour is not None else ""
            line.extend((ch, hexa) for ch in seg.text)
        out.append(line)
    return out
