"""The model on small recordings that gmpmon captured from the real Go workloads.

tests/data/README.md says how each file was made (workload, flags, Go version, mode). The
expected numbers are facts of those workloads (N sleeps -> N "sleep" parks, ...), not
numbers copied from a run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gmpmon.export.base import export_recording
from gmpmon.export.folded import LINE_RE
from gmpmon.export.json import summary
from gmpmon.export.registry import make_exporter
from gmpmon.findings.engine import snapshot_with_findings
from gmpmon.model import Model
from gmpmon.model.snapshot import PState, Snapshot
from gmpmon.record import read_recording
from gmpmon.replay import replay_all
from gmpmon.report import text_report

DATA = Path(__file__).resolve().parent.parent / "data"
ALL = sorted(p.stem for p in DATA.glob("*.gmp"))


def replay(name: str) -> Snapshot:
    rec = read_recording(str(DATA / f"{name}.gmp"))
    snap = replay_all(rec)
    assert rec.error is None and rec.complete, rec.error
    return snap


def test_fixtures_are_small_and_present() -> None:
    assert {
        "sleeper",
        "mutex",
        "gc",
        "spawn",
        "fanout",
        "syscall",
        "demo-sample",
        "demo-default",
    } <= set(ALL)
    for p in DATA.glob("*.gmp"):
        assert p.stat().st_size < 200_000, p


def test_sleeper_n_sleeps_give_n_sleep_parks() -> None:
    s = replay("sleeper")  # sleeper -n 100 -d 10ms
    parks = {r.reason: r for r in s.park_reasons}
    assert parks["sleep"].count == 100
    assert parks["sleep"].wait_ns >= 100 * 10_000_000  # each sleep lasts at least 10 ms
    assert s.illegal_transitions == 0 and s.events_lost == 0
    assert s.latency_by_reason["sleep"].count >= 99
    assert s.gomaxprocs == 2 and s.go_version == "go1.27.3"


def test_mutex_contention_names_the_contending_function() -> None:
    s = replay("mutex")  # mutex -g 4 -n 200: 4 goroutines lock one sync.Mutex 200 times
    assert s.goroutines_created == 4 and s.goroutines_exited == 4
    assert s.mutex_contentions > 0 and s.mutex_wait_ns > 0
    top = s.mutex_stacks[0]
    assert "main.contend" in top.stack
    assert top.stack[-1].endswith("lockSlow")  # root first: the lock's slow path is the leaf
    assert {r.reason for r in s.park_reasons} >= {"sync.Mutex.Lock"}
    assert len(s.mutex_by_addr) == 1  # one mutex
    assert s.illegal_transitions == 0


def test_gc_calls_give_two_stw_pauses_each() -> None:
    s = replay("gc")  # gc -n 20: runtime.GC() 20 times
    assert s.stw_count >= 40
    assert s.stw_reasons["GC sweep termination"][0] >= 20
    assert s.stw_reasons["GC mark termination"][0] >= 20
    assert 0 < s.stw_max_ns <= s.stw_total_ns
    assert all(p.gcstop_ns > 0 for p in s.procs)
    assert s.illegal_transitions == 0
    assert s.unseen_wakes > 0  # GC workers are started without ready()


def test_spawn_creates_and_exits_every_goroutine() -> None:
    s = replay("spawn")  # spawn -n 1000
    assert s.goroutines_created == 1000 and s.goroutines_exited == 1000
    assert s.latency_by_reason["created"].count >= 999
    assert s.illegal_transitions == 0


def test_fanout_is_stolen_from_mains_p() -> None:
    s = replay("fanout")  # fanout -k 16: main spawns 16 CPU-bound goroutines on its P
    assert s.goroutines_created == 16 and s.goroutines_exited == 16
    assert s.steals.count >= 1 and s.steals.goroutines >= 1
    for (thief, victim), (_att, ok, _gs) in s.steals.matrix.items():
        if ok:
            assert thief != victim
    assert sum(p.steals_in for p in s.procs) == s.steals.goroutines
    assert s.illegal_transitions == 0


def test_blocking_syscalls_are_handed_off() -> None:
    s = replay("syscall")  # syscall -n 100 -d 1ms while 2 goroutines compute
    assert s.syscalls >= 100
    assert s.handoffs >= 1
    assert sum(p.syscall_ns for p in s.procs) >= 100 * 1_000_000 // 2
    assert s.illegal_transitions == 0


def test_sample_mode_times_come_from_samples() -> None:
    s = replay("demo-sample")  # demo, --mode sample, 3 s
    assert s.window == "sampled" and s.mode == "sample"
    dur = s.now - s.start
    for p in s.procs:
        total = p.running_ns + p.spinning_ns + p.idle_ns + p.syscall_ns + p.gcstop_ns
        assert 0.8 * dur <= total <= dur
        assert p.executes == 0  # no hot probes in sample mode
    assert any(p.running_ns > 0 for p in s.procs)
    assert s.mutex_contentions > 0  # the cold lockSlow probe is on in every mode


def test_default_mode_counts_timeline_inside_windows_only() -> None:
    s = replay("demo-default")  # demo, --mode default (200 ms of every 1 s), 4 s
    assert s.window == "windows" and s.mode == "default"
    assert 3 <= s.windows <= 6
    assert 0.5 * 200e6 * s.windows <= s.windows_covered_ns <= 1.1 * 200e6 * s.windows
    for p in s.procs:
        total = p.running_ns + p.spinning_ns + p.idle_ns + p.syscall_ns + p.gcstop_ns
        assert total <= s.windows_covered_ns
    assert s.illegal_transitions == 0  # no partial streams from half-detached windows
    assert s.stw_count > 0 and s.mutex_contentions > 0  # cold probes count all the time


@pytest.mark.parametrize("name", ALL)
def test_every_recording_replays_deterministically_and_exports(name: str, tmp_path: Path) -> None:
    a, b = replay(name), replay(name)
    assert summary(a) == summary(b)
    assert max(len(line) for line in text_report(a).splitlines()) <= 80
    # The same events in one batch give the same answer (the model does not depend on
    # how capture cut its batches).
    rec = read_recording(str(DATA / f"{name}.gmp"))
    model = Model(rec.header)
    events, stacks = [], {}
    for batch in rec:
        events.extend(batch.events)
        stacks.update(batch.stacks)
    from gmpmon.events import Batch

    model.feed(Batch(events, stacks))
    model.flush()
    assert summary(snapshot_with_findings(model)) == summary(a)
    for fmt in ("folded", "perfetto", "pprof"):
        ex = make_exporter(fmt, rec.header)
        export_recording(read_recording(str(DATA / f"{name}.gmp")), ex)
        out = tmp_path / f"{name}.{fmt}"
        ex.write(str(out))
        assert out.stat().st_size > 0 or (fmt == "folded" and not a.mutex_stacks)
    folded = (tmp_path / f"{name}.folded").read_text().splitlines()
    assert all(LINE_RE.match(line) for line in folded)
    assert len(folded) == len({ms.stack for ms in a.mutex_stacks if ms.wait_ns})
    assert all(p.state in PState for p in a.procs)


@pytest.mark.parametrize("name", ["sleeper"])
def test_kernel_and_event_latency_paths_agree_on_the_recordings(name: str) -> None:
    """Full-mode recordings carry both latency paths: the in-kernel histogram (COUNTER
    SCHED_LAT) and READY/EXECUTE events, stamped with the same clock reading
    (docs/accuracy.md). They must give the same distribution: <= 1% of the samples in
    another bucket, the same p50/p90/p99 buckets. sleeper.gmp, recorded before the stamps
    were unified, gave p90/p99 28.7/41.0 µs from events against 32.8/49.2 µs; re-captured
    (scripts/record-fixtures sleeper), 0 of 100 differ. The other full-mode files predate
    the fix (34 of 181 differ on mutex.gmp): re-capturing them changes the TUI goldens'
    pictures, and is left for a change of its own; add each here when it is re-captured."""
    from gmpmon.model import hist

    rec = read_recording(str(DATA / f"{name}.gmp"))
    m = Model(rec.header)
    for b in rec:
        m.feed(b)
    m.flush()
    lat = m.latency
    assert lat.hist.seen, "no in-kernel histogram in this recording"
    ev = hist.stats(lat.hist.events, exact_max=lat.max, exact_sum=lat.sum)
    kern = hist.stats(lat.hist.kernel)
    diff = sum(abs(a - b) for a, b in zip(lat.hist.events, lat.hist.kernel, strict=True))
    print(f"{name}: events {ev.count} p50/p90/p99 {ev.p50}/{ev.p90}/{ev.p99}, kernel "
          f"{kern.count} {kern.p50}/{kern.p90}/{kern.p99}, {diff} in another bucket")
    assert ev.count >= 50
    assert abs(ev.count - kern.count) <= max(ev.count // 100, 1)
    assert diff <= max(ev.count // 100, 2), (diff, ev.count)
    assert (ev.p50, ev.p90, ev.p99) == (kern.p50, kern.p90, kern.p99)
