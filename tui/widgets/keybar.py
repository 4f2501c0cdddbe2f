"""The key bar at the bottom: every key the current view offers, on as many lines as it takes
(at most :data:`MAX_LINES`).

Textual's Footer is one line that scrolls sideways: at 80 columns it cut a replay's keys after
"e Export" and a live view's after "t Recent" (issue 27). This one wraps between keys instead,
never inside one, from the same active bindings the Footer reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import groupby

from rich.text import Text
from textual.screen import Screen
from textual.widgets import Static

KEY_STYLE = "bold #d29922"
MAX_LINES = 3


def key_items(screen: Screen[object]) -> list[tuple[str, str]]:
    """(key as shown, what it does) for each shown binding of the screen, one per action (the
    first key of it), a group of several (the views' 1-5) as one item, as the Footer does."""
    first: dict[str, tuple[object, str, str]] = {}  # action -> (group, key shown, description)
    for _node, binding, enabled, _tip in screen.active_bindings.values():
        if binding.show and enabled and binding.action not in first:
            first[binding.action] = (binding.group, screen.app.get_key_display(binding),
                                     binding.description)
    items: list[tuple[str, str]] = []
    for group, run in groupby(first.values(), key=lambda v: v[0]):
        members = list(run)
        if group is not None and len(members) > 1:
            items.append(("".join(k for _, k, _ in members), getattr(group, "description", "")))
        else:
            items.extend((k, d) for _, k, d in members)
    return items


def key_lines(items: Sequence[tuple[str, str]], width: int, max_lines: int = MAX_LINES) -> Text:
    """The items, two spaces apart (one if two would need another line), wrapped between items
    to ``width``; an item wider than a whole line is cut."""
    for gap in (2, 1):
        lines: list[list[tuple[str, str]]] = [[]]
        used = 0
        for key, desc in items:
            n = len(key) + (1 + len(desc) if desc else 0)
            need = n + (gap if lines[-1] else 0)
            if lines[-1] and used + need > width:
                lines.append([])
                used, need = 0, n
            lines[-1].append((key, desc))
            used += need
        if len(lines) <= max_lines or gap == 1:
            break
    text = Text(no_wrap=True, overflow="crop")
    for i, line in enumerate(lines[:max_lines]):
        if i:
            text.append("\n")
        for j, (key, desc) in enumerate(line):
            if j:
                text.append(" " * gap)
            text.append(key, style=KEY_STYLE)
            if desc:
                text.append(f" {desc}")
    return text


class KeyBar(Static):
    """Redrawn when the screen's bindings change (a view switched, paused) or the width does."""

    def on_mount(self) -> None:
        self.screen.bindings_updated_signal.subscribe(self, self._bindings_changed)
        self.call_after_refresh(self._draw)

    def _bindings_changed(self, screen: Screen[object]) -> None:
        if self.is_attached and screen is self.screen:
            self.call_after_refresh(self._draw)

    def on_resize(self) -> None:
        self._draw()

    def _draw(self) -> None:
        width = self.size.width or self.app.size.width
        self.update(key_lines(key_items(self.screen), max(width, 1)))
