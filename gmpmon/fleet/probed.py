"""Watching one Go process with probes: ``serve --mode sample|default|full``.

The same capture and model as ``gmpmon attach --mode M --budget PCT`` (gmpmon.session's
LiveSession: cold probes, and in ``default`` mode the hot ones in budgeted windows held to
PCT% of the target's CPU time by the window controller, docs/modes.md), without the kernel
perf samples. What probes add to the trap-free readings: P hand-offs (the cold ``handoffp``
probe, counted whether a window is open or not) and the findings that need events. The
probes are detached by ``close()`` (every exit path of serve ends in it), and by the capture
itself as soon as the target exits or execs.
"""

from __future__ import annotations

from gmpmon.binary import BinaryInfo
from gmpmon.capture.sampler import gate_layout
from gmpmon.fleet.discover import GoProcess
from gmpmon.fleet.metrics import ProcessReading
from gmpmon.fleet.threads import SchedstatTotals
from gmpmon.fleet.watch import make_reading
from gmpmon.model.snapshot import Snapshot
from gmpmon.session import LiveSession


class ProbedWatch:
    def __init__(
        self,
        proc: GoProcess,
        info: BinaryInfo,
        *,
        mode: str,
        budget_pct: float = 1.0,
        census_s: float = 5.0,
    ) -> None:
        self.proc = proc
        self.mode = mode
        self.down_reason: str | None = None
        self.missing: list[str] = []
        self.threads = SchedstatTotals(proc.pid)
        info = gate_layout(info, proc.pid)
        if "layout" in info.missing_optional:
            self.missing.append(info.missing_optional["layout"])
        self.info = info
        self.session = LiveSession(info, proc.pid, mode=mode, budget_pct=budget_pct,
                                   census_s=census_s, kernel=())
        try:
            self.session.start()  # compiles and attaches: seconds
        except BaseException:
            self.session.close()
            raise
        cap = self.session.capture
        self.missing.extend(cap.notes())
        self.has_handoffs = "handoffp" not in cap.plan.missing
        if not self.has_handoffs:
            self.missing.append(f"P hand-offs not counted: {cap.plan.missing['handoffp']}")
        self._snap: Snapshot | None = None
        self._failed: list[str] = []

    def close(self) -> None:
        """Detach every probe (idempotent)."""
        self.session.close()

    def refresh(self, now: int | None = None) -> None:
        if self.down_reason is not None:
            return
        s = self.session
        if s.target_exited:
            self.down_reason = f"target {s.capture.exit_reason or 'exited'}"
        elif s.error is not None:
            self.down_reason = f"model failed: {s.error}"
        elif s.finished.is_set():
            self.down_reason = "capture ended"
        elif self.threads.read() is None:
            self.down_reason = "target exited"
        if self.down_reason is not None:
            self.session.close()  # the probes go now, not at the next rescan
            return
        for line, _ in s.capture.failures()[len(self._failed):]:  # a reader stopped mid-run
            self._failed.append(line)
            self.missing.append(line)
        self.missing.extend(s.capture.readers.new_skips())  # one bad pointer: said once
        self._snap = s.latest()

    def sample_ps(self, now: int) -> None:
        """No separate P sampling: the capture's own sampler runs at 50 Hz."""

    def finding_labels(self) -> tuple[tuple[str, str], ...] | None:
        if self._snap is None:
            return None
        return tuple((f.id, f.severity.label) for f in self._snap.findings)

    def reading(self) -> ProcessReading:
        if self.down_reason is not None:
            return ProcessReading(proc=self.proc, up=False, missing=(self.down_reason,))
        snap = self._snap
        return make_reading(
            self.proc, snap.runtime if snap is not None else None, self.threads.read(),
            tuple(self.missing), findings=self.finding_labels(),
            handoffs_total=snap.handoffs if snap is not None and self.has_handoffs else None,
            gc=snap.gc if snap is not None else None,
        )
