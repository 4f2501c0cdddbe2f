"""Latency histograms in the shared ``lat_bucket`` layout (events.py).

Event-derived histograms and the kernel's COUNTER histograms use the same bucket index, so
both become the same :class:`LatencyStats` by the same code. Percentiles are the lower bound
of the bucket holding that rank (never above the exact max when one is known): a 25% relative
error at most, identical live and on replay.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from gmpmon.events import LAT_BUCKETS, LAT_SUB, lat_bucket_lo
from gmpmon.model.values import LatencyStats


def _lo(i: int) -> int:
    # lat_bucket never yields 4..7 (ns 4..7 land in 8..11), where lat_bucket_lo's shift
    # would be negative: give those empty buckets the bound of the next used one.
    return lat_bucket_lo(i) if i < LAT_SUB or i >= 2 * LAT_SUB else LAT_SUB


BUCKET_LO: tuple[int, ...] = tuple(_lo(i) for i in range(LAT_BUCKETS + 1))


def new_hist() -> list[int]:
    return [0] * LAT_BUCKETS


def quantile(hist: list[int], count: int, q: float) -> int:
    """Lower bound of the bucket holding rank ceil(q * count) (1-based)."""
    if count <= 0:
        return 0
    permille = round(q * 1000)
    rank = max(1, -(-permille * count // 1000))  # ceil without float error
    acc = 0
    for i, n in enumerate(hist):
        if n:
            acc += n
            if acc >= rank:
                return BUCKET_LO[i]
    return 0


def stats(
    hist: list[int], *, exact_max: int | None = None, exact_sum: int | None = None
) -> LatencyStats:
    """LatencyStats of a bucket list; ``exact_*`` when the values themselves were seen."""
    count = sum(hist)
    if count == 0:
        return LatencyStats()
    top = max(i for i, n in enumerate(hist) if n)
    mx = exact_max if exact_max is not None else BUCKET_LO[top]
    total = (
        exact_sum
        if exact_sum is not None
        else sum(BUCKET_LO[i] * n for i, n in enumerate(hist) if n)
    )

    def q(f: float) -> int:
        return min(quantile(hist, count, f), mx)

    return LatencyStats(
        count=count,
        p50=q(0.50),
        p90=q(0.90),
        p99=q(0.99),
        max=mx,
        sum=total,
        histogram=tuple((BUCKET_LO[i], n) for i, n in enumerate(hist) if n),
    )


_EDGES: tuple[int, ...] = tuple(sorted(set(BUCKET_LO)))


def upper_edge(value: int, edges: Sequence[int] | None = None) -> int | None:
    """When ``value`` is a bucket's lower edge (a percentile as this module computes it), the
    next edge: the true value lies below it. None for a value that is not an edge (measured).
    ``edges``: another sorted grid of lower edges (the runtime's own timeHistogram)."""
    grid = _EDGES if edges is None else edges
    if value < 8:
        return None
    i = bisect.bisect_left(grid, value)
    if i < len(grid) - 1 and grid[i] == value:
        return grid[i + 1]
    return None


def merge_into(acc: list[int], other: list[int]) -> None:
    """acc += other, bucket by bucket (the same lat_bucket layout)."""
    for i, n in enumerate(other):
        if n:
            acc[i] += n


def pow2_counts(ls: LatencyStats) -> dict[int, int]:
    """The histogram's sub-buckets summed into powers of two: k -> count in [2^k, 2^(k+1))
    (runqlat's layout; the text report and the TUI draw it)."""
    out: dict[int, int] = {}
    for lo, n in ls.histogram:
        k = max(lo, 1).bit_length() - 1
        out[k] = out.get(k, 0) + n
    return out
