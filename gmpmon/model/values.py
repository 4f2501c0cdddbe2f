"""The small value types Snapshot sections are made of. Below every part and the Snapshot:
a part's section type (in the part's module) imports these, never gmpmon.model.snapshot."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LatencyStats:
    count: int = 0
    p50: int = 0
    p90: int = 0
    p99: int = 0
    max: int = 0
    sum: int = 0
    histogram: tuple[tuple[int, int], ...] = ()  # (bucket lower bound ns, count), nonzero only
