"""Overload: when events come faster than gmpmon reads them, the kernel drops them (the ring
buffer is full: bpf_ringbuf_reserve fails and the probe counts a loss), gmpmon reports how
many (LOST), its memory stays bounded, and the target does not slow down for it.

gmpmon's reader is starved for real: the gmpmon process is SIGSTOPped for a few seconds
while every hot probe (--mode full) fires on a channel ping-pong.
"""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
from pathlib import Path

import pytest

from tests.gotargets import build
from tests.integration.test_hardening_common import (
    assert_nothing_left,
    need_bpftool,
    private_copy,
    sigkill,
    start_gmpmon,
    start_target,
    wait_attached,
)

pytestmark = pytest.mark.bpf

STOP_S = 3.0
RSS_LIMIT_MB = 600  # absolute; the growth limit below is the real test
RSS_GROWTH_MB = 150  # from the end of the starvation to the end of the run


def rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


class RssWatch(threading.Thread):
    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.samples: list[tuple[float, float]] = []
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.2):
            mb = rss_mb(self.pid)
            if mb:
                self.samples.append((time.monotonic(), mb))


def test_starved_reader_drops_in_kernel_reports_lost_and_target_runs_on(tmp_path: Path) -> None:
    need_bpftool()
    exe = private_copy(build("lifecycle", "1.27"), "overload")
    t = start_target(exe, env={"GOMAXPROCS": "1"})
    summary = tmp_path / "s.json"
    g = start_gmpmon(
        "attach",
        str(t.pid),
        "--no-tui",
        "--mode",
        "full",
        "-d",
        "14",
        "--interval",
        "0.5",
        "--summary-json",
        str(summary),
    )
    watch = RssWatch(g.pid)
    try:
        wait_attached(t.pid)
        watch.start()
        time.sleep(0.5)
        attached = t.rates(1.5)
        os.kill(g.pid, signal.SIGSTOP)
        try:
            starved = t.rates(STOP_S)
        finally:
            os.kill(g.pid, signal.SIGCONT)
        resumed_at = time.monotonic()
        out, err = g.communicate(timeout=120)
    finally:
        watch.done.set()
        if g.poll() is None:
            sigkill(g)
        t.stop()
    assert g.returncode == 0, err
    assert "Traceback" not in err

    # The target did not slow down while gmpmon was not reading.
    print(
        f"ops per target CPU-second: gmpmon reading {attached[1]:,.0f}, "
        f"gmpmon stopped {starved[1]:,.0f}"
    )
    assert starved[1] >= 0.7 * attached[1], (attached, starved)

    # Dropped in the kernel, counted, and shown: summary JSON, the report, interval lines.
    s = json.loads(summary.read_text())
    lost = s["events"]["lost"]
    print(f"events {s['events']['total']:,}, lost {lost:,}")
    assert lost > 0
    # The ledger adds up: every record the probes tried to write was read, cut unread at
    # the end, or refused by the full ring (counted in the kernel), and LOST is what the
    # kernel refused (ring records and counter updates).
    ring = s["events"]["ring"]
    print(f"ring ledger: {ring}")
    print(f"illegal transitions {s['illegal_transitions']}, violations {s.get('violations')}, "
          f"latency max {s['sched_latency_ns']['max']}, events late {s['events']['late']}")
    marks = ring.get("lost_marks", 0)
    assert ring["written"] + marks == ring.get("read", 0) + ring.get("cut_at_end", 0) + ring.get(
        "refused", 0
    ), ring
    # The losses are marked in the stream where they happened (in-band LOST records, one
    # per CPU and gap), and the model picks up after each (its state machine resets there):
    # illegal transitions stay a small fraction of the losses. Measured 0-780 per ~1.2M
    # losses with in-band marks, 605 per 818k when LOST came only at the next 100 ms poll;
    # on 2026-12-02 0-3,950 per ~1.8M (0.22%), the same at 6a3c0a4 and at 7c1d29c (3 runs
    # each: 2822, 0, 2671 and 3366, 956, 2647), where 0.2% failed a rehearsal.
    assert marks > 0, ring
    assert s["illegal_transitions"] <= 0.004 * lost + 50, (s["illegal_transitions"], lost)
    # No latency spans the gap: the reader was stopped STOP_S, and the ring lost the middle
    # of many ready -> execute pairs. A model that kept a ready across the loss would count
    # a latency as long as the gap (the ping-pong's own are microseconds). The by-reason
    # latencies are the model's, from events; the overall one the kernel's (it saw them all).
    by_reason = s["sched_latency_by_reason_ns"]
    longest = max(b["max"] for b in by_reason.values())
    print(f"longest latency from events {longest:,} ns, kernel histogram's max "
          f"{s['sched_latency_ns']['max']:,} ns; the gap {STOP_S} s")
    assert by_reason and longest < 0.25 * STOP_S * 1e9, by_reason
    assert s["sched_latency_ns"]["max"] < 0.25 * STOP_S * 1e9, s["sched_latency_ns"]
    assert lost == ring.get("refused", 0) + ring.get("counters_full", 0), (lost, ring)
    assert ring.get("refused", 0) > 0.1 * ring["written"], ring  # 3 s unread of a hot ping-pong
    assert f"{lost} LOST" in out, out[-2000:]
    assert any(int(n) > 0 for n in re.findall(r"\blost=(\d+)", out)), out[:2000]

    # Memory: bounded, and flat once the backlog is read.
    after = [mb for ts, mb in watch.samples if ts >= resumed_at + 2.0]
    peak = max(mb for _, mb in watch.samples)
    print(
        f"gmpmon RSS: peak {peak:.0f} MB, from 2 s after the starvation "
        f"{min(after):.0f}..{max(after):.0f} MB"
    )
    assert peak < RSS_LIMIT_MB
    assert after and max(after) - min(after) < RSS_GROWTH_MB
    assert_nothing_left(t.pid, [g.pid], str(exe))


def test_a_full_counters_hash_is_counted_never_silent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The in-kernel counters hash, made 8 keys small (GMPMON_COUNTERS_MAX), fills on a
    sleeper: each refused update is counted (ring ledger `counters_full`) and reported as
    lost, and what did fit is still counted."""
    from tests.integration.test_capture import gm_run

    monkeypatch.setenv("GMPMON_COUNTERS_MAX", "8")
    n = 200
    p, s = gm_run(tmp_path, build("sleeper", "1.27"), "-n", str(n), "-d", "1ms")
    assert f"done {n}" in p.stdout
    ring = s["events"]["ring"]
    print(f"ring ledger: {ring}, lost {s['events']['lost']}")
    assert ring.get("counters_full", 0) > 0, ring
    assert s["events"]["lost"] == ring.get("refused", 0) + ring["counters_full"]
    assert ring["written"] + ring.get("lost_marks", 0) == ring["read"] + ring.get(
        "cut_at_end", 0
    ) + ring.get("refused", 0)
    # Counts the kernel aggregates lost updates: they may be short, never more, and the
    # summary says so through `lost`.
    assert 0 <= s["park_reasons"].get("sleep", {}).get("count", 0) <= n
    assert f"{ring['counters_full']} in-kernel counter updates lost" in p.stdout + p.stderr
