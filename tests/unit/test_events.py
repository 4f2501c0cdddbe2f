"""The event vocabulary's shared pieces: record layout and latency buckets (mirrored in BPF C)."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from gmpmon.events import LAT_BUCKETS, RECORD, RECORD_SIZE, lat_bucket, lat_bucket_lo

REPO = Path(__file__).resolve().parents[2]


def test_record_is_48_bytes_like_struct_gm_event() -> None:
    assert RECORD_SIZE == 48
    header = (REPO / "probes" / "gmpmon.h").read_text()
    body = re.search(r"struct gm_event \{(.*?)\};", header, re.S)
    assert body is not None
    sizes = {"u64": 8, "s64": 8, "u32": 4, "s32": 4}
    fields = re.findall(r"\b(u64|s64|u32|s32)\s+\w+;", body.group(1))
    assert sum(sizes[f] for f in fields) == RECORD.size


@given(st.integers(min_value=0, max_value=(1 << 62)))
def test_every_latency_lands_in_the_bucket_that_covers_it(ns: int) -> None:
    b = lat_bucket(ns)
    assert 0 <= b < LAT_BUCKETS
    assert lat_bucket_lo(b) <= ns < lat_bucket_lo(b + 1)


def test_bucket_bounds_are_monotonic_and_within_25_percent() -> None:
    los = [lat_bucket_lo(i) for i in range(LAT_BUCKETS)]
    assert los == sorted(los)
    for i in range(8, LAT_BUCKETS - 1):
        assert (los[i + 1] - los[i]) <= los[i] // 4 + 1


def test_every_kind_and_counter_is_unique_and_inside_its_reserved_range() -> None:
    from gmpmon.events import COUNTER_RANGES, KIND_RANGES, Counter, Kind

    for enum, ranges in ((Kind, KIND_RANGES), (Counter, COUNTER_RANGES)):
        # an IntEnum silently makes a second name with a taken value an alias: catch it
        assert len(enum.__members__) == len(list(enum)), f"{enum.__name__} has a duplicate value"
        spans = sorted(ranges.values(), key=lambda r: r.start)
        assert all(a.stop <= b.start for a, b in itertools.pairwise(spans)), "ranges overlap"
        for member in enum:
            assert any(member.value in r for r in spans), f"{member!r} is outside every range"
