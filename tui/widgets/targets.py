"""The `T` target picker: with several targets (`gmpmon attach PID PID...`), pick which one
the views show. Every target keeps being captured while another is shown."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from gmpmon.source import SnapshotSource


def target_label(i: int, source: SnapshotSource, current: bool) -> Text:
    h = source.header
    exe = h.exe.rsplit("/", 1)[-1]
    line = f"{'*' if current else ' '} {i + 1}  pid {h.pid:<8} {exe:<20} {h.go_version:<10} "
    t = Text(line)
    t.append(source.status(), style="dim")
    return t


class TargetPicker(ModalScreen[int | None]):
    """Dismisses with the index of the chosen target, or None."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q,T", "dismiss_none", "Close"),
    ]

    def __init__(self, targets: Sequence[SnapshotSource], current: int) -> None:
        super().__init__()
        self.targets = list(targets)
        self.current = current

    def compose(self) -> ComposeResult:
        with Vertical(id="targets-box"):
            yield Static(Text("Targets (enter: show, esc: close)", style="bold"))
            yield OptionList(
                *(Option(target_label(i, s, i == self.current), id=str(i))
                  for i, s in enumerate(self.targets)),
                id="targets-list",
            )

    def on_mount(self) -> None:
        self.query_one(OptionList).highlighted = self.current

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(int(event.option.id or 0))

    def action_dismiss_none(self) -> None:
        self.dismiss(None)


def pick_target(app: Any) -> None:
    """The app's `T`: open the picker; a new choice ends the app with ``app.switch_to`` set
    (``gmpmon attach`` then opens the TUI on that target)."""
    if len(app.targets) < 2:
        app.notify("one target only (gmpmon attach PID PID... watches several)")
        return
    current = next(i for i, t in enumerate(app.targets) if t is app.source)

    def chosen(i: int | None) -> None:
        if i is not None and i != current:
            app._stop.set()
            app.switch_to = i
            app.exit()

    app.push_screen(TargetPicker(app.targets, current), chosen)
