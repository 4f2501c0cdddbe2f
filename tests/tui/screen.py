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
