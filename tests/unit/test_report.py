"""Summary JSON, text report and interval lines from model snapshots of hand-made runs."""

from __future__ import annotations

import json
import re
from pathlib import Path

from gmpmon.events import Batch, Counter, EventTuple, Kind
from gmpmon.export.json import summary
from gmpmon.interval import interval_legend, interval_line
from gmpmon.model import Model
from gmpmon.model.snapshot import PState, Snapshot
from gmpmon.report import fmt_ns, text_report
from tests.unit.test_model_scenarios import CHANRECV, SLEEP, ev, header, run

SCHEMA_KEYS = {
    "schema_version",
    "target",
    "mode",
    "window",
    "windows",
    "cost",
    "duration_s",
    "events",
    "illegal_transitions",
    "procs",
    "steals",
    "park_reasons",
    "sched_latency_ns",
    "sched_latency_by_reason_ns",
    "syscalls",
    "preemptions",
    "gc_stw",
    "goroutines",
    "mutex",
    "waits_by_kind",
    "waits_top",
    "sources",
    "block_sources",
    "runtime",
    "census",
    "gc",
    "findings",
    "latency_attribution",
    "quantities",
}


def busy_run(nprocs: int = 4) -> list[EventTuple]:
    events: list[EventTuple] = []
    t = 0.0
    for i in range(400):
        p = i % nprocs
        g = 10 + i % 13
        events += [
            ev(t, Kind.EXECUTE, p=p, m=100 + p, g=g, a1=i % 5),
            ev(t + 3, Kind.PARK, p=p, m=100 + p, g=g, a0=SLEEP if i % 3 else CHANRECV),
            ev(t + 4, Kind.FIND_RUNNABLE, p=p, m=100 + p, a1=i % 7),
            ev(t + 5, Kind.STEAL, p=p, a0=(p + 1) % nprocs, a1=i % 2),
            ev(t + 6 + i % 50, Kind.READY, g=g, a1=SLEEP if i % 3 else CHANRECV),
        ]
        if i % 40 == 0:
            events += [
                ev(t + 7, Kind.MUTEX_ADDR, g=g, a0=0xC000001000, a1=1),
                ev(t + 7, Kind.MUTEX, g=g, a0=1000 * i, a1=i % 3),
            ]
        t += 10
    events.sort(key=lambda e: e[0])
    return events


def snapshot_of(events: list[EventTuple], nprocs: int = 4):  # type: ignore[no-untyped-def]
    model = Model(header(gomaxprocs=nprocs))
    model.feed(
        Batch(
            events,
            {
                i: (
                    "main.main",
                    f"main.worker{i}",
                    "pkg/very/long/path/to/a/package.(*Type).MethodWithAVeryLongNameIndeed",
                    "sync.(*Mutex).Lock",
                )
                for i in range(3)
            },
        )
    )
    model.flush()
    return model.snapshot()


def test_summary_schema_and_numbers() -> None:
    s = snapshot_of(busy_run())
    doc = summary(s)
    assert set(doc) == SCHEMA_KEYS
    json.dumps(doc)  # serialisable as is
    assert doc["target"]["pid"] == 42 and doc["target"]["gomaxprocs"] == 4
    # nothing thinned; its counts are the per-event records' (no COUNTER in this run)
    assert doc["events"] == {"total": s.events_total, "lost": 0, "late": 0, "dropped": {},
                             "ring": {}, "thinned": {"records": 0, "of": s.events_total,
                                                     "since_s": None, "counts": "events"}}
    assert [p["id"] for p in doc["procs"]] == [0, 1, 2, 3]
    assert sum(p["executes"] for p in doc["procs"]) == 400
    assert set(doc["procs"][0]) >= {
        "running_ns",
        "idle_ns",
        "spinning_ns",
        "syscall_ns",
        "executes",
        "steals_in",
        "steals_out",
    }
    assert doc["steals"]["attempts"] == 400 and doc["steals"]["count"] == 200
    assert {(m["thief"], m["victim"]) for m in doc["steals"]["matrix"]} == {
        (0, 1),
        (1, 2),
        (2, 3),
        (3, 0),
    }
    assert (
        doc["park_reasons"]["sleep"]["count"] + doc["park_reasons"]["chan receive"]["count"] == 400
    )
    lat = doc["sched_latency_ns"]
    assert lat["count"] == 400 - 13  # each G's last ready has no execute after it
    assert lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["max"]
    assert sum(n for _, n in lat["histogram"]) == lat["count"]
    assert doc["mutex"]["contentions"] == 10
    assert doc["mutex"]["top"][0]["wait_ns"] >= doc["mutex"]["top"][-1]["wait_ns"]


def test_summary_is_deterministic() -> None:
    a = summary(snapshot_of(busy_run()))
    b = summary(snapshot_of(busy_run()))
    assert json.dumps(a) == json.dumps(b)


def test_counter_histogram_percentiles() -> None:
    # 100 samples: 90 in bucket of 1000ns, 9 in 10000ns, 1 in 1ms -> p50/p90 at 1us bucket.
    from gmpmon.events import lat_bucket, lat_bucket_lo

    events = [
        ev(0, Kind.COUNTER, p=0, g=Counter.SCHED_LAT, a0=lat_bucket(1000), a1=90),
        ev(1, Kind.COUNTER, p=1, g=Counter.SCHED_LAT, a0=lat_bucket(10_000), a1=9),
        ev(2, Kind.COUNTER, p=1, g=Counter.SCHED_LAT, a0=lat_bucket(1_000_000), a1=1),
    ]
    s = run(events)
    lat = s.sched_latency
    assert lat.count == 100
    assert lat.p50 == lat.p90 == lat_bucket_lo(lat_bucket(1000))
    assert lat.p99 == lat_bucket_lo(lat_bucket(10_000))
    assert lat.max == lat_bucket_lo(lat_bucket(1_000_000))


def test_text_report_fits_80_columns() -> None:
    for nprocs in (1, 4, 16):
        s = snapshot_of(busy_run(nprocs), nprocs)
        text = text_report(s)
        lines = text.splitlines()
        assert max(len(line) for line in lines) <= 80, [ln for ln in lines if len(ln) > 80]
        assert "Scheduling latency" in text and "Top park reasons" in text
        assert "Mutex contention: 10 waits" in text
        bars = [ln for ln in lines if re.search(r" : \d+ +\|\**\s*\|$", ln)]
        assert bars, text
    small = text_report(snapshot_of(busy_run(4), 4))
    assert "thief" in small and "P3" in small


def test_text_report_of_an_empty_run() -> None:
    text = text_report(run([]))
    assert "no scheduling-latency samples" in text
    assert max(len(line) for line in text.splitlines()) <= 80


def test_interval_line_fits_and_counts_the_interval() -> None:
    events = busy_run(8)
    model = Model(header(gomaxprocs=8))
    model.feed(Batch(events[: len(events) // 2]))
    first = model.snapshot()
    model.feed(Batch(events[len(events) // 2 :]))
    model.flush()
    second = model.snapshot()
    a = interval_line(first, None)
    b = interval_line(second, first)
    for line in (a, b):
        assert len(line) <= 80
        assert re.search(r"grq=\d+ \| last [\d.]+s: steal=\d+ park=\d+ p99=\S+ lost=0$", line), line
    parks_a = int(re.search(r"park=(\d+)", a).group(1))  # type: ignore[union-attr]
    parks_b = int(re.search(r"park=(\d+)", b).group(1))  # type: ignore[union-attr]
    assert parks_a + parks_b == 400
    # "last Ns" is the span since the previous line's snapshot (since the start for the first)
    assert f"last {(first.now - first.start) / 1e9:.1f}s:" in a
    assert f"last {(second.now - first.now) / 1e9:.1f}s:" in b
    wide = interval_line(snapshot_of(busy_run(64), 64), None)
    assert len(wide) <= 80
    legend = interval_legend(1.0, "default").splitlines()
    assert "the last 1s only" in legend[0] and "counts the whole capture" in legend[1]
    assert "from the probes inside the" in legend[2] and max(map(len, legend)) <= 80
    assert re.search(r" steal=- park=- ", interval_line(run([], mode="sample"), None))


def test_illegal_transitions_only_with_what_they_mean() -> None:
    clean = text_report(run([ev(0, Kind.EXECUTE, p=0, g=7), ev(5, Kind.PARK, p=0, g=7, a0=SLEEP)]))
    assert "illegal" not in clean and "Model check" not in clean
    assert clean.splitlines()[1].startswith("events 2; every number below counts the whole")
    # G7 parks twice without running in between: the second PARK breaks LEGAL_G
    bad = run([ev(0, Kind.EXECUTE, p=0, g=7), ev(5, Kind.PARK, p=0, g=7, a0=SLEEP),
               ev(6, Kind.PARK, p=0, g=7, a0=SLEEP)])
    assert bad.illegal_transitions == 1
    text = text_report(bad)
    assert "illegal" not in text.splitlines()[1]
    tail = text[text.index("Model check"):]
    assert tail.startswith("Model check: 1 event did not fit the G/P state machine (g 1).")
    assert "missed or came out of order" in tail


def test_fmt_ns() -> None:
    assert [fmt_ns(x) for x in (0, 999, 1500, 2_500_000, 3_210_000_000)] == [
        "0ns",
        "999ns",
        "1.5µs",  # one fmt_ns for the report and the TUI (#10)
        "2.5ms",
        "3.21s",
    ]


def _replayed(name: str) -> Snapshot:
    from gmpmon.record import read_recording
    from gmpmon.replay import replay_all

    return replay_all(read_recording(str(Path(__file__).parents[1] / "data" / f"{name}.gmp")))


def test_text_report_says_what_windowed_and_sampled_numbers_cover() -> None:
    """#17 items 1-2 headless: a windowed count is never printed as a total, an unmeasured
    one is '-' not 0."""
    windows = text_report(_replayed("demo-default"))
    assert re.search(r"Syscalls \d+ \(probes \(duty-cycle windows\): windows, \d+% of the "
                     r"time\)", windows), windows
    # demo-sample.gmp has no runtime counters: nothing measured goroutines or syscalls.
    sampled = text_report(_replayed("demo-sample"))
    assert "not measured: no hot probes in sample mode" in sampled
    assert re.search(r"Goroutines: - live \(not measured\)", sampled), sampled
    assert re.search(r"created -, exited - \(not measured\)", sampled), sampled
    assert re.search(r"Syscalls - \(not measured\)", sampled)
    full = text_report(_replayed("fanout"))
    # Every count of a full-mode capture is measured; only a finding's evidence may say what
    # this recording lacks (fanout.gmp has no perf samples: a long run's on-CPU time).
    counts, found, findings = full.partition("\nFindings:")
    assert found and "not totals" not in counts and "not measured" not in counts
    assert re.search(r"^ +on cpu: not measured$", findings, re.M), findings


def test_text_report_percentiles_are_bucket_bounds_and_units_match_the_tui() -> None:
    """#17 items 8-9, #27: '≤ edge' for a bucketed percentile; µs as in the TUI; full import paths
    for frames, as in the folded and pprof exports."""
    snap = _replayed("mutex")
    out = text_report(snap)
    line = next(ln for ln in out.splitlines() if ln.startswith("  p50 "))
    assert re.search(r"p99 ≤ \d", line), line
    assert "us" not in re.sub(r"\w+us\b", "", line.replace("µs", ""))  # no ASCII "us" units
    assert "internal/sync.(*Mutex).lockSlow" in out  # not cut to "sync.(*Mutex).lockSlow"


def test_an_interval_line_at_64_ps_counts_the_ps_it_leaves_out() -> None:
    """wide64.gmp (64 Ps): the letters that fit, then every P left out counted by state; the
    counts add up to the Ps, and the line fits 80 columns."""
    from gmpmon.record import read_recording

    r = read_recording(str(Path(__file__).resolve().parent.parent / "data" / "wide64.gmp"))
    m = Model(r.header)
    for b in r:
        m.feed(b)
    m.flush()
    snap = m.snapshot()
    line = interval_line(snap, None)
    assert len(line) <= 80, line
    got = re.search(r"\[([RSIYG?]*) \+(\d+): ((?:\d+[RSIYG?] ?)+)\]", line)
    assert got is not None, line
    shown, rest, counts = got.group(1), int(got.group(2)), got.group(3).split()
    assert len(shown) + rest == len(snap.procs) == 64, line
    assert sum(int(c[:-1]) for c in counts) == rest, line
    letters = {PState.RUNNING: "R", PState.SEARCHING: "S", PState.IDLE: "I",
               PState.SYSCALL: "Y", PState.GCSTOP: "G", PState.UNKNOWN: "?"}
    left_out = [letters[PState(p.state)] for p in snap.procs[len(shown):]]
    assert sorted(f"{left_out.count(c[-1])}{c[-1]}" for c in counts) == sorted(counts), line
