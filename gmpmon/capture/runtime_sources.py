"""The trap-free readers of the target's memory, driven from capture's reader thread.

:class:`RuntimeSources` owns one /proc/PID/mem handle and two readers: the runtime's counters
(capture/runtime_counters.py, every ``counters_s``) and the goroutine census
(capture/census.py, every ``census_s``, backed off so that its walks take at most
``CENSUS_DUTY`` of the time on programs with very many goroutines).
"""

from __future__ import annotations

import time

from gmpmon.binary.info import BinaryInfo
from gmpmon.capture.census import Census
from gmpmon.capture.runtime_counters import RuntimeCounters
from gmpmon.capture.targetmem import TargetMemory
from gmpmon.events import EventTuple

COUNTERS_S = 0.05  # 20 Hz
CENSUS_S = 1.0
CENSUS_DUTY = 0.02


class RuntimeSources:
    def __init__(
        self,
        info: BinaryInfo,
        pid: int,
        *,
        counters_s: float = COUNTERS_S,
        census_s: float = CENSUS_S,
    ) -> None:
        self.mem = TargetMemory(pid)
        self.counters_ns = int(counters_s * 1e9)
        self.census_ns = int(census_s * 1e9)
        self.errors: list[str] = []
        self.counters: RuntimeCounters | None = None
        self.census: Census | None = None
        try:
            self.counters = RuntimeCounters(info, self.mem)
        except (KeyError, ValueError) as e:
            self.errors.append(f"runtime counters disabled: {e}")
        if census_s > 0:
            try:
                self.census = Census(info, self.mem)
            except (KeyError, ValueError) as e:
                self.errors.append(f"goroutine census disabled: {e}")
        now = time.monotonic_ns()
        self._next_counters = now
        self._next_census = now
        self.failed_reads = 0

    def close(self) -> None:
        self.mem.close()

    def poll(
        self, now: int, out: list[EventTuple], stacks: dict[int, tuple[str, ...]], *,
        final: bool = False,
    ) -> None:
        """Read what is due (everything counter-like when ``final``: the last deltas)."""
        if self.counters is not None and (final or now >= self._next_counters):
            try:
                self.counters.read(now, out)
            except OSError:
                self.failed_reads += 1  # the target is gone: capture's liveness check says so
            self._next_counters = now + self.counters_ns
        if self.census is not None and not final and now >= self._next_census:
            self.census.walk(out, stacks)
            back_off = int(self.census.last_duration_s / CENSUS_DUTY * 1e9)
            self._next_census = time.monotonic_ns() + max(self.census_ns, back_off)
