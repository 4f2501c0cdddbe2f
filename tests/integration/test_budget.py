"""The overhead budget with real BPF: calibration measures a real trap, the controller keeps
windows to their plan even when the model hogs the GIL, and the cost it reports is sane."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from gmpmon.events import Kind
from gmpmon.record import read_recording
from tests.integration.test_attach import Proc, attach, copy_target, int3_sites, probe_sites
from tests.integration.test_capture import GM, TIMEOUT, env


@pytest.mark.bpf
def test_calibration_measures_one_emulated_trap() -> None:
    from gmpmon.capture.calibrate import calibrate_hit_cost

    cost = calibrate_hit_cost()
    # An emulated uprobe hit is a trap into the kernel and back: 0.1-20 us on any machine
    # this runs on (0.6-0.8 us idle here); 0 would mean the probe never fired.
    assert 1e-7 < cost < 2e-5, cost


def windows(rec: Path) -> list[tuple[int, int, int, int]]:
    """(open ts, close ts, planned ns, overstay ns reported) of every window recorded."""
    out = []
    opened: tuple[int, int] | None = None
    for b in read_recording(str(rec)):
        for e in b.events:
            if e[1] == Kind.WINDOW:
                if e[5]:
                    opened = (e[0], e[6])
                elif opened is not None:
                    out.append((opened[0], e[0], opened[1], e[6]))
                    opened = None
    return out


@pytest.mark.bpf
def test_windows_keep_their_plan_while_the_model_hogs_the_gil(tmp_path: Path) -> None:
    """The model holds the GIL 300 ms per batch (GMPMON_DEBUG_SLOW_MODEL_MS): a controller in
    the reader thread would overstay by seconds. Windows are checked twice: by the WINDOW
    events recorded, and from outside by the int3 bytes at the hot sites."""
    exe = copy_target(tmp_path, "pingpong")
    hot, _cold = probe_sites(exe)
    target = Proc([str(exe), "-t", "30s", "-wait-stdin"])
    rec = tmp_path / "r.gmp"
    summary = tmp_path / "s.json"
    try:
        target.wait_line("ready")
        target.send("\n")
        gm = Proc([*GM, "attach", str(target.p.pid), "--no-tui", "--duration", "4",
                   "--budget", "50", "--window-ms", "150", "--period-ms", "400",
                   "--record", str(rec),
                   "--summary-json", str(summary)],
                  env=env(GMPMON_DEBUG_SLOW_MODEL_MS="300"))
        gm.wait_line("Tracing Go scheduler of PID")
        stretches: list[float] = []
        on_since: float | None = None
        end = time.monotonic() + 3.0
        while time.monotonic() < end:
            now = time.monotonic()
            on = bool(int3_sites(target.p.pid, hot))
            if on and on_since is None:
                on_since = now
            elif not on and on_since is not None:
                stretches.append(now - on_since)
                on_since = None
            time.sleep(0.002)
        assert gm.p.wait(timeout=TIMEOUT) == 0, gm.err
    finally:
        target.kill()
    ws = windows(rec)
    assert len(ws) >= 4, ws
    for opened, closed, planned, over in ws:
        assert planned > 0
        # The controller's own measure: detached at most 50 ms after the plan, counted from
        # when the link was in. WINDOW 1 is stamped before the link is created, which takes
        # up to ~150 ms on this loaded box (the kernel patches each site in turn).
        assert over <= 50_000_000
        assert closed - opened <= planned + 50_000_000 + 150_000_000, (opened, closed, planned)
    # Seen from outside: no hot site stayed patched much longer than the longest plan. The
    # plan counts from when the link is in; the kernel patches the sites one by one before
    # (8-60 ms on this loaded box) and unpatches them at close: 150 ms of slack for both
    # and for this loop's own sampling. A controller starved by the GIL would show seconds.
    assert stretches, "the hot probes were never seen attached"
    assert max(stretches) <= max(p for _, _, p, _ in ws) * 1e-9 + 0.150, stretches
    s = json.loads(summary.read_text())
    assert s["cost"]["overstays"] == 0
    assert s["cost"]["windows"] == len(ws)


@pytest.mark.bpf
def test_default_mode_reports_its_cost_within_the_budget(tmp_path: Path) -> None:
    exe = copy_target(tmp_path, "pingpong")
    target = Proc([str(exe), "-t", "30s", "-wait-stdin"])
    summary = tmp_path / "s.json"
    try:
        target.wait_line("ready")
        target.send("\n")
        gm = attach(target.p.pid, "--duration", "4", "--summary-json", str(summary))
        assert gm.p.wait(timeout=TIMEOUT) == 0, gm.err
    finally:
        target.kill()
    c = json.loads(summary.read_text())["cost"]
    assert c["budget_pct"] == 1.0
    assert 0 < c["estimated_pct"] <= 1.5, c
    assert c["windows"] >= 2 and 0 < c["covered_s"] < 4 * 0.2, c
    assert c["target_cpu_ns"] > 1e9  # pingpong keeps more than one CPU busy for 4 s
    assert os.path.getsize(summary) > 0
