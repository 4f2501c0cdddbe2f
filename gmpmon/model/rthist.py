"""The runtime's timeHistogram in metrics layout: its bucket bounds and percentiles.

Pure and small, apart from the model part (model/runtime.py, which re-exports these), so that
`gmpmon ps` reads a process's latency p99 without importing the model. Percentiles follow
gmpmon.model.hist: the lower bound of the bucket holding the rank. Bucket bounds are the
runtime's own (runtime/histogram.go:timeHistogramMetricsBuckets): on 1.19 16 linear buckets
per power of two, on 1.21+ 4, starting at 2^9 ns.
"""

from __future__ import annotations

from gmpmon.model.values import LatencyStats

# Counting buckets of the runtime's timeHistogram: 720 (go1.19), 160 (go1.21+).
HIST_BUCKETS = frozenset({160, 720})


def bucket_bounds(n: int) -> tuple[int, ...]:
    """Lower bounds (ns) of the metrics-layout buckets 1..n of a timeHistogram with n counting
    buckets (index 0 = underflow, n+1 = overflow), plus the upper bound of the last one."""
    lo: list[int] = []
    if n == 720:  # go1.19: 45 super-buckets x 16, the last bucket extends to infinity
        for b in range(n):
            s, j = divmod(b, 16)
            lo.append(j if s == 0 else (1 << (s + 3)) | (j << (s - 1)))
        return (*lo, 1 << 62)
    # go1.21+: timeHistMinBucketBits 9, timeHistMaxBucketBits 48, 4 sub-buckets
    for b in range(n):
        s, j = divmod(b, 4)
        lo.append(j << 6 if s == 0 else (1 << (s + 7)) | (j << (s + 5)))
    return (*lo, 1 << 47)


_BOUNDS: dict[int, tuple[int, ...]] = {}


def _bounds(n: int) -> tuple[int, ...]:
    b = _BOUNDS.get(n)
    if b is None:
        b = _BOUNDS[n] = bucket_bounds(n)
    return b


def hist_stats(counts: list[int]) -> LatencyStats:
    """LatencyStats of a metrics-layout timeHistogram (underflow, n buckets, overflow).
    ``sum`` is estimated from bucket midpoints; underflow counts as 0 ns, overflow as the
    top bound."""
    n = len(counts) - 2
    if n <= 0:
        return LatencyStats()
    total = sum(counts)
    if total == 0:
        return LatencyStats()
    bounds = _bounds(n)

    def lo(i: int) -> int:  # lower bound of metrics index i
        return 0 if i == 0 else bounds[min(i - 1, n)]

    def mid(i: int) -> int:
        if i == 0:
            return 0
        if i == n + 1:
            return bounds[n]
        return (bounds[i - 1] + bounds[i]) // 2

    def q(f: float) -> int:
        rank = max(1, -(-round(f * 1000) * total // 1000))
        acc = 0
        for i, c in enumerate(counts):
            if c:
                acc += c
                if acc >= rank:
                    return lo(i)
        return 0

    top = max(i for i, c in enumerate(counts) if c)
    return LatencyStats(
        count=total,
        p50=q(0.50),
        p90=q(0.90),
        p99=q(0.99),
        max=lo(top),
        sum=sum(mid(i) * c for i, c in enumerate(counts) if c),
        histogram=tuple((lo(i), c) for i, c in enumerate(counts) if c),
    )
