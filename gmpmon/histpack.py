"""RT_HISTS: runtime-histogram bucket deltas packed four to an event, and read back
(gmpmon/events.py documents the layout). Under load ~190 of Go 1.19's 722 buckets move at a
read; one RT_HIST each was ~20% of the records on Prometheus."""

from __future__ import annotations

from gmpmon.events import NO_P, EventTuple, Kind

_HIST_COUNT_MAX = 1 << 22  # RT_HISTS' count per bucket: 22 bits (the index takes 10)


def pack_hist(now: int, n: int, kind: int, idx: list[int], counts: list[int],
              out: list[EventTuple]) -> None:
    """Append the bucket deltas (``idx``, ``counts``: index in RT_HIST's a0 layout, count
    added) of histogram ``kind`` with ``n`` counting buckets, four to an RT_HISTS event; one
    that does not fit in its 32 bits (an index of 1024 or more, a count of 2^22) as an
    RT_HIST."""
    fits = [0 < c < _HIST_COUNT_MAX and 0 <= i < 1024 for i, c in zip(idx, counts, strict=True)]
    bs = [i | c << 10 for i, c, f in zip(idx, counts, fits, strict=True) if f]
    if len(bs) < len(idx):
        out += [(now, _RT_HIST, NO_P, n, kind, i, c)
                for i, c, f in zip(idx, counts, fits, strict=True) if not f]
    bs += [0] * (-len(bs) % 4)
    out += [(now, _RT_HISTS, NO_P, n, kind, bs[j] | bs[j + 1] << 32, bs[j + 2] | bs[j + 3] << 32)
            for j in range(0, len(bs), 4)]


def hist_buckets(e: EventTuple) -> list[tuple[int, int]]:
    """(bucket index, count added) of an RT_HIST or RT_HISTS event."""
    if e[1] == _RT_HIST:
        return [(e[5], e[6])]
    return [(b & 0x3FF, b >> 10) for b in (e[5] & 0xFFFFFFFF, e[5] >> 32,
                                           e[6] & 0xFFFFFFFF, e[6] >> 32) if b]


_RT_HIST, _RT_HISTS = int(Kind.RT_HIST), int(Kind.RT_HISTS)
