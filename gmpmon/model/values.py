"""The small value types Snapshot sections are made of. Below every part and the Snapshot:
a part's section type (in the part's module) imports these, never gmpmon.model.snapshot."""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum


@dataclass(frozen=True, slots=True)
class LatencyStats:
    count: int = 0
    p50: int = 0
    p90: int = 0
    p99: int = 0
    max: int = 0
    sum: int = 0
    histogram: tuple[tuple[int, int], ...] = ()  # (bucket lower bound ns, count), nonzero only


class PState(IntEnum):
    """What a P is doing, as the timeline shows it. Starts UNKNOWN (attached mid-flight)."""

    UNKNOWN = 0
    RUNNING = 1  # running goroutine ``goid`` of the span
    SEARCHING = 2  # its M is in findRunnable looking for work (m.spinning or not)
    IDLE = 3  # no M (pidleput) / parked M
    SYSCALL = 4  # its G is in a syscall (P still attached, or being handed off)
    GCSTOP = 5  # stopped for a stop-the-world


class GState(IntEnum):
    UNKNOWN = 0
    RUNNABLE = 1
    RUNNING = 2
    WAITING = 3
    SYSCALL = 4
    DEAD = 5


@dataclass(frozen=True, slots=True)
class Span:
    start: int
    end: int  # == Snapshot.now for the still-open span
    state: PState
    goid: int = 0  # for RUNNING / SYSCALL
