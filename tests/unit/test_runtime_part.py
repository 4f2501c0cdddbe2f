"""The runtime-counter / census model part, on hand-made RT_* and CENSUS_* streams."""

from __future__ import annotations

import itertools
from pathlib import Path

from gmpmon.events import (
    CENSUS_SITE_BASE,
    NO_P,
    Batch,
    CensusCut,
    EventTuple,
    Header,
    Kind,
    RtFeature,
    RtHist,
    RtTotal,
)
from gmpmon.export.json import summary
from gmpmon.model import Model
from gmpmon.model.runtime import bucket_bounds, hist_stats
from gmpmon.record import RecordingWriter, read_recording
from gmpmon.report import text_report

G_STATUS = ("idle", "runnable", "running", "syscall", "waiting", "moribund_unused", "dead")
REASONS = ("", "GC assist marking", "IO wait") + ("x",) * 11 + ("chan receive", "chan send")


def header(go: str = "go1.27.3") -> Header:
    return Header(
        pid=1, exe="/bin/x", go_version=go, gomaxprocs=2, mode="sample", start_ns=0,
        wall_start=0.0, wait_reasons=REASONS, g_status=G_STATUS,
    )


def test_bucket_bounds_are_the_runtimes() -> None:
    # go1.21+ (histogram.go): 0, 64, 128, 192 ns, then 256, 320, 384, 448, 512, 640, ...
    b = bucket_bounds(160)
    assert b[:10] == (0, 64, 128, 192, 256, 320, 384, 448, 512, 640)
    assert b[-2] == 7 << 44 and b[-1] == 1 << 47
    # go1.19: 0..15 ns one by one, then 16, 17, ..., 31, then 32, 34, ...
    b19 = bucket_bounds(720)
    assert b19[:18] == (*range(16), 16, 17)
    assert b19[32:35] == (32, 34, 36)
    assert all(x < y for x, y in itertools.pairwise(b19))


def test_hist_stats_percentiles_are_bucket_lower_bounds() -> None:
    counts = [0] * 162
    counts[1] = 50  # [0, 64)
    counts[9] = 49  # [512, 640)
    counts[21] = 1  # [4096, 5120)
    s = hist_stats(counts)
    assert (s.count, s.p50, s.p90, s.p99, s.max) == (100, 0, 512, 512, 4096)


def rt_stream() -> list[EventTuple]:
    t = 1_000
    ev: list[EventTuple] = [(t, Kind.RT_MISSING, NO_P, 0, 0, int(RtFeature.RUNTIME_LOCK_WAIT), 0)]
    for i in range(5):
        t += 50_000_000
        ev.append((t, Kind.RT_SCHED, NO_P, 0, 100 + i, 120 | 3 << 32, 1 | 2 << 16 | 2 << 40))
        ev.append((t, Kind.RT_HIST, NO_P, 160, int(RtHist.TIME_TO_RUN), 9, 10))
        ev.append((t, Kind.RT_HIST, NO_P, 160, int(RtHist.STW_TOTAL_GC), 40, 1))
        ev.append((t, Kind.RT_TOTAL, NO_P, 0, int(RtTotal.MUTEX_WAIT), 0, 1_000))
        ev.append((t, Kind.RT_PTICK, 1, 0, 0, 7, 2))
    t += 1
    ev.append((t, Kind.CENSUS_BEGIN, NO_P, 0, 0, 1, 130))
    ev.append((t, Kind.CENSUS_STATE, NO_P, 0, 0, 4 | 14 << 16, 300))
    ev.append((t, Kind.CENSUS_WAIT, NO_P, 300, 3_000, 4 | 14 << 16, 20))
    ev.append((t, Kind.CENSUS_STATE, NO_P, 0, 0, 4 | 2 << 16 | 1 << 32, 2))
    ev.append((t, Kind.CENSUS_SITE, NO_P, 0, 0, CENSUS_SITE_BASE + 1, 300))
    ev.append((t, Kind.CENSUS_END, NO_P, 0, 5_000, 310, 0))
    return ev


STACKS = {CENSUS_SITE_BASE + 1: ("main.main", "main.main.func1")}


def test_model_folds_counters_and_census() -> None:
    m = Model(header())
    m.feed(Batch([], STACKS))
    m.feed(Batch(rt_stream()))
    m.flush()
    rv = m.snapshot().runtime
    assert rv is not None
    assert (rv.reads, rv.goroutines, rv.allglen, rv.global_runq) == (5, 104, 120, 3)
    assert (rv.npidle, rv.nmspinning, rv.gomaxprocs) == (1, 2, 2)
    assert rv.latency.count == 50 and rv.latency.p50 == 512
    assert rv.stw_gc is not None and rv.stw_gc.count == 5
    assert rv.mutex_wait_ns == 5_000 and rv.runtime_lock_wait_ns is None
    assert [(p.p, p.schedules, p.syscalls) for p in rv.procs] == [(1, 35, 10)]
    assert rv.missing == ("runtime lock wait (sched.totalRuntimeLockWaitTime, Go 1.22+)",)
    c = rv.census
    assert c is not None and c.cut == () and (c.goroutines, c.system) == (300, 2)
    row = c.rows[0]
    assert (row.state, row.reason, row.count, row.waited, row.wait_max_ns) == (
        "waiting", "chan receive", 300, 300, 20)
    assert (c.sites[0].creator, c.sites[0].start, c.sites[0].count) == (
        "main.main", "main.main.func1", 300)
    doc = summary(m.snapshot())
    assert doc["schema_version"] >= 2  # v2 added runtime/census (v3: kernel)
    assert doc["runtime"]["source"] == "runtime counters"
    assert doc["census"]["source"] == "census" and doc["census"]["complete"]
    assert doc["block_sources"]["runtime"] == "runtime counters"
    report = text_report(m.snapshot())
    assert "runtime histogram, ~1 in 8 sampled" in report
    assert "300 waiting (chan receive)" in report
    assert all(len(line) <= 80 for line in report.splitlines())


def test_census_cut_short_keeps_its_rows() -> None:
    m = Model(header())
    ev = [e for e in rt_stream() if e[1] != Kind.CENSUS_END]
    t = ev[-1][0]
    ev.append((t, Kind.CENSUS_END, NO_P, 0, 5_000, 200, int(CensusCut.TARGET_GONE)))
    m.feed(Batch(ev, STACKS))
    m.flush()
    rv = m.snapshot().runtime
    assert rv is not None and rv.census is not None
    assert rv.census.cut == ("target exited",) and rv.census.goroutines == 300


def test_older_recordings_have_no_runtime_section() -> None:
    m = Model(header())
    m.feed(Batch([(1, Kind.SCHED_SAMPLE, NO_P, 0, 0, 0, 0)]))
    m.flush()
    snap = m.snapshot()
    assert snap.runtime is None
    assert summary(snap)["runtime"] is None


def test_recording_replays_to_the_same_view(tmp_path: Path) -> None:
    path = str(tmp_path / "rt.gmp")
    w = RecordingWriter(path, header())
    w.write(Batch([], STACKS))
    w.write(Batch(rt_stream()))
    w.close()
    live = Model(header())
    live.feed(Batch([], STACKS))
    live.feed(Batch(rt_stream()))
    live.flush()
    rec = read_recording(path)
    replay = Model(rec.header)
    for b in rec:
        replay.feed(b)
    replay.flush()
    assert replay.snapshot().runtime == live.snapshot().runtime


def test_an_empty_census_after_the_exit_keeps_the_last_one() -> None:
    m = Model(header())
    ev = rt_stream()
    t = ev[-1][0] + 1_000_000_000
    ev += [(t, Kind.CENSUS_BEGIN, NO_P, 0, 0, 2, 0),
           (t, Kind.CENSUS_END, NO_P, 0, 10, 0, int(CensusCut.TARGET_GONE))]
    m.feed(Batch(ev, STACKS))
    m.flush()
    rv = m.snapshot().runtime
    assert rv is not None and rv.census is not None
    assert rv.census.seq == 1 and rv.census.goroutines == 300
