"""Test-only SnapshotSources: they serve Snapshots, the app under test cannot tell them apart
from a live session or a replay (same protocols)."""

from __future__ import annotations

import threading

from gmpmon.events import Header
from gmpmon.model.snapshot import Snapshot
from gmpmon.source import SourceStatus


class ListSource:
    """Serves ``snapshots[i]``; ``advance()`` moves to the next one (a live source ticking)."""

    live = True
    target_exited = False

    def __init__(self, header: Header, snapshots: list[Snapshot]) -> None:
        self.header = header
        self.snapshots = snapshots
        self.index = 0
        self.closed = 0
        self.recording: str | None = None
        self.recordings: list[str] = []
        self.armed: tuple[str, ...] = ()  # the --trigger metrics given
        self.fired: list[str] = []
        self._lock = threading.Lock()

    def latest(self) -> Snapshot | None:
        with self._lock:
            return self.snapshots[self.index] if self.snapshots else None

    def advance(self) -> None:
        with self._lock:
            self.index = min(self.index + 1, len(self.snapshots) - 1)

    def close(self) -> None:
        self.closed += 1

    def status(self) -> str:
        return "attached"

    def state(self) -> SourceStatus:
        return SourceStatus(line=self.status(), live=self.live, target_exited=self.target_exited)

    # RecordingControl
    def start_recording(self, path: str) -> None:
        self.recording = path
        with open(path, "wb") as f:
            f.write(b"")

    def stop_recording(self) -> str | None:
        done, self.recording = self.recording, None
        if done:
            self.recordings.append(done)
        return done

    def recording_path(self) -> str | None:
        return self.recording

    # TriggerControl: as LiveSession.trigger, True only for a trigger the user asked for
    def trigger(self, metric: str = "key") -> bool:
        self.fired.append(metric)
        return metric in self.armed


class SeekListSource(ListSource):
    """A replay-like source: position = index over the list, seek/step move the index."""

    live = False

    def __init__(self, header: Header, snapshots: list[Snapshot]) -> None:
        super().__init__(header, snapshots)
        self._paused = False
        self.steps: list[int] = []

    def status(self) -> str:
        return "replay paused" if self._paused else "replaying"

    def paused(self) -> bool:
        return self._paused

    def set_paused(self, paused: bool) -> None:
        self._paused = paused

    def step(self, delta_ns: int) -> None:
        self.steps.append(delta_ns)
        self._paused = True
        with self._lock:
            self.index = min(max(self.index + (1 if delta_ns > 0 else -1), 0),
                             len(self.snapshots) - 1)

    def seek(self, fraction: float) -> None:
        with self._lock:
            self.index = round(fraction * (len(self.snapshots) - 1))

    def position(self) -> tuple[int, int, int]:
        snaps = self.snapshots
        return (snaps[0].now, snaps[self.index].now, snaps[-1].now)
