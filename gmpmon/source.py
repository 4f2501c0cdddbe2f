"""What a view (the TUI, the headless printer) is handed: a source of Snapshots.

Two implementations: the live session (gmpmon.session: capture -> model in a background
thread) and replay (gmpmon.replay: a recording fed through the same model, seekable).
Views never touch capture, BPF or files: they poll ``latest()`` and call the controls.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from gmpmon.events import Header
from gmpmon.model.snapshot import Snapshot


@runtime_checkable
class SnapshotSource(Protocol):
    header: Header
    live: bool  # True: attached to a running process; False: a recording

    def latest(self) -> Snapshot | None:
        """The newest Snapshot (cheap: computed by the producer, not by this call)."""

    def close(self) -> None:
        """Stop producing; for a live source detach every probe and finish every output."""

    def status(self) -> str:
        """One short line about the producer: "attached", "window 200/1000ms", "target exited",
        "end of recording", ... (shown in the header)."""


@runtime_checkable
class RecordingControl(Protocol):
    """Live sources also implement this: the TUI's ``r`` key."""

    def start_recording(self, path: str) -> None: ...

    def stop_recording(self) -> str | None:
        """Returns the path written, or None if nothing was recording."""

    def recording_path(self) -> str | None: ...


@runtime_checkable
class SeekControl(Protocol):
    """Replay sources also implement this: pause, step and seek."""

    def paused(self) -> bool: ...

    def set_paused(self, paused: bool) -> None: ...

    def step(self, delta_ns: int) -> None:
        """Advance (or, negative, go back) the replay position by delta_ns and pause."""

    def seek(self, fraction: float) -> None:
        """Jump to a position between the recording's start (0.0) and end (1.0)."""

    def position(self) -> tuple[int, int, int]:
        """(start_ts, current_ts, end_ts) of the recording."""
