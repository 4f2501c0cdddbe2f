"""The runtime-counter and census readers against the runtime's own view of the same run.

No BPF: the readers only pread /proc/PID/mem. The workload (scripts/targets/rtcounters)
reads runtime/metrics before and after a phase and prints the deltas; gmpmon's readers take
their baseline before the phase and their last read after it, and the model turns the
events into a RuntimeView. Each test checks gmpmon's numbers against the runtime's:

- /sched/latencies:seconds: counts within 3%, the same p50 bucket, the same bucket bounds;
- NumGoroutine at a quiet moment: within 2% of gcount from the counters;
- the census: exactly 300 goroutines in "chan receive" and 200 in "sleep" (the parked sets);
  each goroutine's state told once, in the state the walk counted, then only its changes;
- /sched/pauses/total/gc:seconds (1.22+): same pause count, buckets within 3%;
- /sync/mutex/wait/total:seconds (1.21+): within 3% of totalMutexWaitTime +
  totalRuntimeLockWaitTime.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gmpmon.binary import load_pid
from gmpmon.capture.census import Census
from gmpmon.capture.censusstacks import census_unwinder
from gmpmon.capture.gosites import GoSites
from gmpmon.capture.runtime_counters import RuntimeCounters
from gmpmon.capture.targetmem import TargetMemory
from gmpmon.events import CENSUS_G_STATE, CensusCut, EventTuple, Header, Kind
from gmpmon.model.runtime import RuntimePart, RuntimeView, bucket_bounds
from tests import gotargets

PHASE_S = 1.5


@dataclass
class Target:
    proc: subprocess.Popen[str]
    info: Any

    def ask(self, cmd: str, prefix: str) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()
        while True:
            line = self.proc.stdout.readline()
            assert line, f"workload exited before answering {cmd!r}"
            if line.startswith(prefix + " "):
                return line[len(prefix) + 1 :]


@pytest.fixture(params=gotargets.matrix(), ids=lambda vm: f"{vm[0]}-{vm[1]}")
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Target]:
    version, mode = request.param
    exe = gotargets.build("rtcounters", go=version, mode=mode)
    proc = subprocess.Popen(
        [str(exe)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env={"GOMAXPROCS": "2", "PATH": "/usr/bin:/bin"},
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        yield Target(proc, load_pid(proc.pid))
    finally:
        proc.kill()
        proc.wait()


def header(info: Any) -> Header:
    return Header(
        pid=0, exe="", go_version=info.go_version, gomaxprocs=2, mode="sample", start_ns=0,
        wall_start=0.0, wait_reasons=info.wait_reasons, g_status=info.g_status,
    )


def require_globals(target: Target, *names: str) -> None:
    """The loader found these globals, on every build mode: a stripped build's finders
    failing is a failure here, never a quiet pass (test_missing_globals_are_said below
    covers what the readers do without them)."""
    missing = [n for n in names if n not in target.info.globals]
    assert not missing, (f"{target.info.go_version}: globals not found: {missing} "
                         f"(how the others were found: {target.info.global_how})")


def model_view(info: Any, events: list[EventTuple], stacks: dict[int, tuple[str, ...]]
               ) -> RuntimeView:
    part = RuntimePart(info.g_status, info.wait_reasons, stacks)
    table = dict(part.handlers())
    for e in sorted(events, key=lambda e: e[0]):
        fn = table.get(e[1])
        if fn is not None:
            fn(e)
    view = part.view()
    assert view is not None
    return view


def metrics_hist_stats(counts: list[int]) -> tuple[int, int]:
    """(total, index of the p50 bucket) of a runtime/metrics histogram."""
    total = sum(counts)
    rank = -(-total // 2)
    acc = 0
    for i, c in enumerate(counts):
        acc += c
        if acc >= rank:
            return total, i
    return total, -1


def test_latency_stw_mutex_match_runtime_metrics(target: Target) -> None:
    require_globals(target, "runtime.sched")
    info = target.info
    mem = TargetMemory(target.proc.pid)
    rc = RuntimeCounters(info, mem)
    events: list[EventTuple] = []
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            rc.read(time.monotonic_ns(), events)
            time.sleep(0.05)

    rc.read(time.monotonic_ns(), events)  # the baseline, before the phase
    t = threading.Thread(target=poll)
    t.start()
    try:
        got = json.loads(target.ask(f"phase {PHASE_S}", "phase"))
    finally:
        stop.set()
        t.join()
    rc.read(time.monotonic_ns(), events)
    view = model_view(info, events, {})

    lat = got["/sched/latencies:seconds"]
    n = len(lat["counts"]) - 2 if info.go_minor >= 21 else len(lat["counts"]) - 1
    # The runtime's own bucket bounds (seconds) are gmpmon's, in ns.
    bounds = bucket_bounds(n)
    for i, b in enumerate(lat["buckets"][1:n + 1]):
        assert round(float(b) * 1e9) == bounds[i], (i, b)
    total, p50_idx = metrics_hist_stats(lat["counts"])
    assert total > 500, "the phase should make plenty of latency samples"
    assert abs(view.latency.count - total) <= 0.03 * total, (view.latency.count, total)
    p50_lo = 0 if p50_idx == 0 else bounds[p50_idx - 1]
    assert view.latency.p50 == p50_lo

    mutex = got.get("/sync/mutex/wait/total:seconds")
    if info.go_minor >= 21:
        assert mutex is not None and view.mutex_wait_ns is not None
        ours = view.mutex_wait_ns + (view.runtime_lock_wait_ns or 0)
        theirs = mutex * 1e9
        assert theirs > 1e6, "the phase should contend its mutex"
        assert abs(ours - theirs) <= 0.03 * theirs, (ours, theirs)
    else:
        assert view.mutex_wait_ns is None
        assert any("mutex wait" in m for m in view.missing)

    stw = got.get("/sched/pauses/total/gc:seconds")
    if info.go_minor >= 22:
        assert stw is not None and view.stw_gc is not None
        gcs = sum(stw["counts"])
        assert gcs >= 2, "the phase asks for a GC every 100 ms"
        assert abs(view.stw_gc.count - gcs) <= max(1, 0.03 * gcs), (view.stw_gc.count, gcs)
        ours_h = dict(view.stw_gc.histogram)
        for i, c in enumerate(stw["counts"]):
            if c and 0 < i <= n:
                assert abs(ours_h.get(bounds[i - 1], 0) - c) <= max(1, 0.03 * c)
    else:
        assert view.stw_gc is None
        assert any("stop-the-world" in m for m in view.missing)
    mem.close()


def test_goroutine_count_and_census_of_parked_sets(target: Target) -> None:
    require_globals(target, "runtime.sched", "runtime.allgs", "runtime.allglen")
    info = target.info
    mem = TargetMemory(target.proc.pid)
    count = int(target.ask("count", "count"))
    rc = RuntimeCounters(info, mem)
    events: list[EventTuple] = []
    rc.read(time.monotonic_ns(), events)
    census = Census(info, mem)
    stacks: dict[int, tuple[str, ...]] = {}
    census.walk(events, stacks)
    view = model_view(info, events, stacks)
    assert abs(view.goroutines - count) <= 0.02 * count, (view.goroutines, count)
    c = view.census
    assert c is not None and not c.cut
    by = {(r.state, r.reason): r for r in c.rows if not r.system}
    assert by[("waiting", "chan receive")].count == 300
    assert by[("waiting", "sleep")].count == 200
    # Parked across the workload's two GCs: the runtime set waitsince on every one of them.
    assert by[("waiting", "chan receive")].waited == 300
    assert by[("waiting", "chan receive")].wait_max_ns > 0
    assert abs(c.goroutines - count) <= 0.02 * count, (c.goroutines, count)
    from_main = sorted(s.count for s in c.sites if s.creator == "main.main")
    assert from_main[-2:] == [200, 300], c.sites
    assert all(s.start.startswith("main.main.func") for s in c.sites if s.count >= 200)
    mem.close()


def test_census_tells_each_goroutines_state_and_then_its_changes(target: Target) -> None:
    """Per goroutine (CENSUS_G, the Goroutines table's rows): the first walk tells every live
    goroutine in the state that walk counted it in (the per-state counts are the walk's own,
    the parked ones unwound for their stacks included); the next walk tells only what
    changed: the 500 parked goroutines did not."""
    require_globals(target, "runtime.allgs")
    info = target.info
    mem = TargetMemory(target.proc.pid)
    census = Census(info, mem, sites=GoSites(info), unwind=census_unwinder(info, mem))
    stacks: dict[int, tuple[str, ...]] = {}
    first: list[EventTuple] = []
    census.walk(first, stacks)
    told = {e[4]: e[6] for e in first if e[1] == Kind.CENSUS_G}
    assert all(a1 & CENSUS_G_STATE for a1 in told.values())
    counted = Counter({e[5]: e[6] for e in first if e[1] == Kind.CENSUS_STATE})
    assert Counter(a1 & ~CENSUS_G_STATE for a1 in told.values()) == counted
    assert sum(counted.values()) >= 500
    again: list[EventTuple] = []
    census.walk(again, stacks)
    changed = [e for e in again if e[1] == Kind.CENSUS_G]
    assert len(changed) < 50, changed
    mem.close()


def test_census_cut_short_keeps_what_it_had(target: Target) -> None:
    require_globals(target, "runtime.allgs")
    mem = TargetMemory(target.proc.pid)
    census = Census(target.info, mem, max_goroutines=100)
    events: list[EventTuple] = []
    stacks: dict[int, tuple[str, ...]] = {}
    census.walk(events, stacks)
    view = model_view(target.info, events, stacks)
    assert view.census is not None and "limit" in view.census.cut
    assert 0 < sum(r.count for r in view.census.rows) <= 100
    # The target exits: the next walk ends at once, says so, and never raises.
    target.proc.kill()
    target.proc.wait()
    events.clear()
    census.walk(events, stacks)
    end = [e for e in events if e[1] == Kind.CENSUS_END]
    assert len(end) == 1 and end[0][6] & CensusCut.TARGET_GONE
    with pytest.raises(OSError):
        RuntimeCounters(target.info, mem).read(time.monotonic_ns(), [])
    mem.close()


def test_a_layout_that_does_not_fit_turns_the_counters_off(target: Target) -> None:
    """Wrong offsets (here p.id shifted) fail the live layout checks: the counters are off,
    said in one line and as missing features, and nothing is read through them."""
    import dataclasses

    from gmpmon.capture.runtime_sources import RuntimeSources

    o = dict(target.info.offsets)
    # +8: p.link, a pointer or 0, never P1's id. (+4 read p.status, and with P0 idle (0)
    # and P1 running (1) that passed for ids: 3 of 6 runs on 2026-12-02, at 8c4b239 too.)
    o["runtime.p.id"] += 8
    bad = dataclasses.replace(target.info, offsets=o)
    rs = RuntimeSources(bad, target.proc.pid, census_s=0)
    try:
        assert rs.counters is None
        assert len(rs.errors) == 1 and "layout check failed" in rs.errors[0], rs.errors
        events: list[EventTuple] = []
        rs.poll(time.monotonic_ns(), events, {})
        # The GC panel reads its own globals, through its own checks (validate.py: gc).
        assert {e[1] for e in events} - {Kind.RT_GC} == {Kind.RT_MISSING}
    finally:
        rs.close()


def test_missing_globals_are_said_per_feature(target: Target) -> None:
    """Without runtime.sched, allgs and allglen (as a stripped build whose finders failed
    would be), the readers say so per feature and read only what needs none of them."""
    import dataclasses

    gone = ("runtime.sched", "runtime.allgs", "runtime.allglen")
    info = dataclasses.replace(
        target.info, globals={k: v for k, v in target.info.globals.items() if k not in gone})
    rc = RuntimeCounters(info, TargetMemory(target.proc.pid))
    census = Census(info, TargetMemory(target.proc.pid))
    said = {*rc.missing.values(), *census.missing.values()}
    for n in gone:
        assert any(n in why for why in said), (n, said)
    events: list[EventTuple] = []
    rc.read(time.monotonic_ns(), events)
    census.walk(events, {})
    kinds = {e[1] for e in events}
    assert Kind.RT_MISSING in kinds and kinds <= {Kind.RT_MISSING, Kind.RT_PTICK, Kind.RT_SCHED}
