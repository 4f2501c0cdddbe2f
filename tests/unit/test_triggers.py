"""Trigger conditions (gmpmon.capture.triggers) on hand-made event streams."""

from __future__ import annotations

import pytest

from gmpmon.capture.triggers import Flight, TriggerEngine, parse_trigger
from gmpmon.errors import UsageError
from gmpmon.events import Kind, RtHist

MS = 1_000_000
S = 1_000_000_000


def test_parse() -> None:
    assert parse_trigger("latency.p99>5ms").threshold == 5 * MS
    assert parse_trigger("stw>500us").threshold == 500_000
    assert parse_trigger("runq>256").threshold == 256
    assert parse_trigger("goroutines+>1000/s").threshold == 1000
    assert parse_trigger("SIGUSR1").metric == "sigusr1"
    assert parse_trigger("latency.p99>5ms").slug == "latency.p99-gt-5ms"
    assert parse_trigger("goroutines+>1000/s").slug == "goroutines-gt-1000-s"
    for bad in ("latency>5ms", "runq>5ms", "stw>3/s", "p99", "goroutines+>5ms"):
        with pytest.raises(UsageError):
            parse_trigger(bad)


def hist(ts: int, bucket: int, n: int, kind: int = RtHist.TIME_TO_RUN) -> tuple[int, ...]:
    return (ts, int(Kind.RT_HIST), -1, 160, kind, bucket, n)


def test_latency_p99_from_the_runtime_histogram() -> None:
    e = TriggerEngine([parse_trigger("latency.p99>5ms")])
    # 160-bucket layout (model.runtime.bucket_bounds): metrics bucket 40 starts at ~115 us,
    # 64 at ~7.3 ms.
    assert e.scan([hist(1 * S, 40, 1000)]) == []
    assert e.scan([hist(1 * S + 50 * MS, 64, 5)]) == []  # 0.5% slow: p99 still fast
    assert e.scan([hist(1 * S + 100 * MS, 64, 30)]) == [0]  # 3.4% slow
    assert e.scan([hist(1 * S + 200 * MS, 64, 30)]) == []  # cooldown
    assert e.latency_p99(3 * S) is None  # the window moved on: too few samples


def test_runq_adds_the_global_and_local_queues() -> None:
    e = TriggerEngine([parse_trigger("runq>256")])
    p_sample = [(S, int(Kind.P_SAMPLE), p, 0, 0, 1 | (100 << 16), 0) for p in range(2)]
    assert e.scan(p_sample) == []
    assert e.scan([(S + 1, int(Kind.SCHED_SAMPLE), -1, 0, 0, 0, 57)]) == [0]


def test_stw_from_the_probe_and_from_the_runtime() -> None:
    e = TriggerEngine([parse_trigger("stw>10ms")], cooldown_s=0)
    assert e.scan([(S, int(Kind.STW_END), 0, 0, 0, 0, 3 * MS)]) == []
    assert e.scan([(S, int(Kind.STW_END), 0, 0, 0, 0, 12 * MS)]) == [0]
    assert e.scan([hist(2 * S, 67, 1, RtHist.STW_TOTAL_GC)]) == [0]  # the ~12.6 ms bucket


def test_goroutine_growth_per_second() -> None:
    e = TriggerEngine([parse_trigger("goroutines+>1000/s")])
    rt = [(t * 100 * MS, int(Kind.RT_SCHED), -1, 0, 100 + 50 * t, 0, 0) for t in range(12)]
    assert e.scan(rt) == []  # 500/s
    rt = [(2 * S + t * 100 * MS, int(Kind.RT_SCHED), -1, 0, 1000 + 300 * t, 0, 0)
          for t in range(12)]
    assert e.scan(rt) == [0]


def test_manual_triggers_ask_for_a_burst_and_mark_the_stream() -> None:
    asked: list[tuple[float, str]] = []
    f = Flight([parse_trigger("runq>256"), parse_trigger("sigusr1")], burst_ms=250)
    assert not f.request("key")  # not asked for
    assert f.request("sigusr1")
    out = f.check([(5 * S, int(Kind.SCHED_SAMPLE), -1, 0, 0, 0, 3)],
                  lambda ms, name: asked.append((ms, name)))
    assert asked == [(250, "sigusr1")]
    assert out == [(5 * S, int(Kind.TRIGGER), -1, 0, 1, 250 * MS, 0)]
