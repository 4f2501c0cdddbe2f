"""Every Message the TUI passes around, in one place (Textual convention)."""

from __future__ import annotations

from textual.message import Message

from gmpmon.model.snapshot import Snapshot


class SnapshotReady(Message):
    """The poller saw a new Snapshot (or a new status line).

    Posted several times a second; a newer one replaces an older one still in the queue, so a
    slow frame never builds a backlog of stale snapshots.
    """

    def __init__(
        self,
        snapshot: Snapshot | None,
        status: str,
        position: tuple[int, int, int] | None = None,
        ended: bool = False,
    ) -> None:
        super().__init__()
        self.snapshot = snapshot
        self.status = status
        self.position = position
        self.ended = ended  # a live source's target has exited: nothing more will come

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, SnapshotReady)


class SourceFailed(Message):
    """The source raised while being polled; shown once as an error notification."""

    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error
