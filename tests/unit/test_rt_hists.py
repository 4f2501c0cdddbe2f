"""RT_HISTS (four runtime-histogram bucket deltas to an event, gmpmon.histpack.pack_hist) make
the numbers and the triggers that the same deltas make as one RT_HIST each."""

from __future__ import annotations

import random
from collections import Counter

from gmpmon.capture.triggers import TriggerEngine, parse_trigger
from gmpmon.events import (
    NO_P,
    Batch,
    EventTuple,
    Header,
    Kind,
    RtHist,
)
from gmpmon.histpack import hist_buckets, pack_hist
from gmpmon.model import Model

S = 1_000_000_000


def singles(now: int, n: int, kind: int, idx: list[int], counts: list[int]) -> list[EventTuple]:
    return [(now, int(Kind.RT_HIST), NO_P, n, kind, i, c) for i, c in zip(idx, counts, strict=True)]


def packed(now: int, n: int, kind: int, idx: list[int], counts: list[int]) -> list[EventTuple]:
    out: list[EventTuple] = []
    pack_hist(now, n, kind, idx, counts, out)
    return out


def reads(n: int, seed: int) -> list[tuple[int, list[int], list[int]]]:
    """Ten reads a second for 3 s of a histogram of n counting buckets: (ts, buckets that
    grew, by how much), a few counts too large for RT_HISTS."""
    rng = random.Random(seed)
    out = []
    for r in range(30):
        idx = sorted(rng.sample(range(n + 2), rng.randrange(0, min(n, 190))))
        counts = [rng.choice((1, 2, 7, 300, 1 << 22, 5 << 30)) if rng.random() < 0.01
                  else rng.randrange(1, 2000) for _ in idx]
        out.append((S + r * S // 10, idx, counts))
    return out


def test_pack_and_unpack_keep_every_bucket() -> None:
    for n in (160, 720):
        for ts, idx, counts in reads(n, n):
            ev = packed(ts, n, int(RtHist.TIME_TO_RUN), idx, counts)
            got = Counter(bc for e in ev for bc in hist_buckets(e))
            assert got == Counter(zip(idx, counts, strict=True))
            assert len([e for e in ev if e[1] == Kind.RT_HISTS]) == -(-sum(
                c < 1 << 22 for c in counts) // 4)
            assert all((e[0], e[3], e[4]) == (ts, n, RtHist.TIME_TO_RUN) for e in ev)
    big = packed(S, 160, 1, [3, 2000], [5, 9])  # an index past 10 bits: an RT_HIST
    assert sorted((e[1], *hist_buckets(e)) for e in big) == [
        (Kind.RT_HIST, (2000, 9)), (Kind.RT_HISTS, (3, 5))]


def model_of(events: list[EventTuple]) -> object:
    h = Header(pid=1, exe="/bin/x", go_version="go1.19.8", gomaxprocs=2, mode="sample",
               start_ns=S, wall_start=0.0, wait_reasons=("",))
    m = Model(h)
    sched = (S, int(Kind.RT_SCHED), NO_P, 0, 10, 12, 2 << 40)
    m.feed(Batch([sched, *events]))
    m.flush()
    rv = m.snapshot().runtime
    assert rv is not None
    return rv.latency, rv.stw_gc, rv.stw_other


def test_the_model_adds_rt_hists_as_rt_hist() -> None:
    for n in (160, 720):
        one: list[EventTuple] = []
        four: list[EventTuple] = []
        for kind in (RtHist.TIME_TO_RUN, RtHist.STW_TOTAL_GC):
            for ts, idx, counts in reads(n, 7 * n + kind):
                one += singles(ts, n, int(kind), idx, counts)
                four += packed(ts, n, int(kind), idx, counts)
        one.sort(key=lambda e: e[0])
        four.sort(key=lambda e: e[0])
        assert len(four) < len(one) / 3
        got, want = model_of(four), model_of(one)
        assert got == want and want[0].count > 100_000  # type: ignore[index]


def test_triggers_read_rt_hists_as_rt_hist() -> None:
    for spec in ("latency.p99>5ms", "stw>1ms"):
        fired = []
        for make in (singles, packed):
            e = TriggerEngine([parse_trigger(spec)], cooldown_s=0)
            fired.append([(ts, e.scan(make(ts, 160, int(k), idx, counts)))
                          for k in (RtHist.TIME_TO_RUN, RtHist.STW_TOTAL_GC)
                          for ts, idx, counts in reads(160, 3)])
        assert fired[0] == fired[1]
        assert any(f for _ts, f in fired[0])
