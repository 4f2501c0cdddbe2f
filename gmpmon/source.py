"""What a view (the TUI, the headless printer) is handed: a source of Snapshots.

Two implementations: the live session (gmpmon.session: capture -> model in a background
thread) and replay (gmpmon.replay: a recording fed through the same model, seekable).
Views never touch capture, BPF or files: they poll ``latest()`` and ``state()`` and call the
controls; commands read the same ``state()`` (target exited and why, which inputs run).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from gmpmon.events import Header
from gmpmon.model.snapshot import Snapshot

# InputState.state values
ON, OFF, WINDOWED, DEFERRED, FAILED = "on", "off", "windowed", "deferred", "failed"


@dataclass(frozen=True, slots=True)
class InputState:
    """One capture input of a live session (its reader lives in gmpmon/capture): "probes"
    (the uprobes: hot and cold tiers), "sampler" (P states from memory), "runtime" (the
    runtime's counters and census), and whatever a new capture source adds."""

    name: str
    state: str  # ON | OFF | WINDOWED (duty-cycled) | DEFERRED (until exec) | FAILED
    detail: str = ""  # why it is off or failed, what it covers


@dataclass(frozen=True, slots=True)
class DutyCycle:
    """default mode: the hot probes are attached ``window_ms`` in every ``period_ms``."""

    window_ms: int
    period_ms: int
    hot: bool  # attached right now


@dataclass(frozen=True, slots=True)
class Cost:
    """What watching costs the target (filled by the budget / cost controller; None fields
    are not measured)."""

    overhead: float | None = None  # estimated fraction of the target's CPU time
    budget: float | None = None  # the budget it is held to
    state: str = ""  # the controller's state, in its words
    detail: str = ""


@dataclass(frozen=True, slots=True)
class SourceStatus:
    """Everything a view or a command needs to know about a source besides its Snapshots."""

    line: str  # the one short line shown in the header (what status() returns)
    live: bool
    target_exited: bool = False
    exit_reason: str = ""  # "exited", "exec'd another program" (target_exited)
    finished: bool = False  # the stream ended: detached, target gone, end of recording
    error: str = ""  # the producer failed (model error)
    inputs: tuple[InputState, ...] = ()
    notes: tuple[str, ...] = ()  # one line each: an input left out or turned off, and why
    # one line each: a reader that stopped mid-run (an implausible value in the target)
    failures: tuple[str, ...] = ()
    duty: DutyCycle | None = None
    cost: Cost | None = None

    def input(self, name: str) -> InputState | None:
        return next((i for i in self.inputs if i.name == name), None)


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

    def state(self) -> SourceStatus:
        """The producer's whole status (``line`` is ``status()``)."""


@runtime_checkable
class RecordingControl(Protocol):
    """Live sources also implement this: the TUI's ``r`` key."""

    def start_recording(self, path: str) -> None: ...

    def stop_recording(self) -> str | None:
        """Returns the path written, or None if nothing was recording."""

    def recording_path(self) -> str | None: ...


@runtime_checkable
class TriggerControl(Protocol):
    """Live sources also implement this: the TUI's trigger key (``--trigger key``)."""

    def trigger(self, metric: str = "key") -> bool:
        """Fire the manual trigger; False if the user gave no such ``--trigger``."""


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
