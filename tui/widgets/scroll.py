"""A view that scrolls from the keyboard: arrows, PgUp/PgDn, Home/End, and j/k/g/G as in
less, htop and k9s. Textual's scroll containers bind the first ones when focused; the app
focuses the visible view when it is switched to, so they work without a mouse click."""

from __future__ import annotations

from typing import ClassVar

from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll


class KeyScroll(VerticalScroll, can_focus=True):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("j", "scroll_down", "Down", show=False),
        Binding("k", "scroll_up", "Up", show=False),
        Binding("g", "scroll_home", "Top", show=False),
        Binding("G", "scroll_end", "Bottom", show=False),
        Binding("ctrl+f", "page_down", "Page down", show=False),
        Binding("ctrl+b", "page_up", "Page up", show=False),
    ]
