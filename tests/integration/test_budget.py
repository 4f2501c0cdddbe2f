"""The overhead budget with real BPF: calibration measures a real trap, the controller keeps
windows to their plan even when the model hogs the GIL, and the cost it reports is sane."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
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
                if e[5] == 1:  # attached (2: a burst extended the open one: same window)
                    opened = (e[0], e[6])
                elif e[5] == 0 and opened is not None:
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


@contextlib.contextmanager
def pingpong_attached(tmp_path: Path, seconds: int, *opts: str) -> Iterator[tuple[Proc, Path]]:
    """gmpmon attached (in default mode, unless ``opts`` say) for ``seconds`` to a running
    ping-pong: (gmpmon's process, its summary's path); the ping-pong is killed on the way
    out."""
    exe = copy_target(tmp_path, "pingpong")
    target = Proc([str(exe), "-t", "30s", "-wait-stdin"])
    summary = tmp_path / "s.json"
    try:
        target.wait_line("ready")
        target.send("\n")
        yield attach(target.p.pid, "--duration", str(seconds), "--summary-json",
                     str(summary), *opts), summary
    finally:
        target.kill()


@pytest.mark.bpf
def test_default_mode_reports_its_cost_within_the_budget(tmp_path: Path) -> None:
    with pingpong_attached(tmp_path, 6) as (gm, summary):
        assert gm.p.wait(timeout=TIMEOUT) == 0, gm.err
    c = json.loads(summary.read_text())["cost"]
    assert c["budget_pct"] == 1.0
    assert 0 < c["estimated_pct"] <= 1.5, c
    # The ping-pong is the worst case: a window of a few ms costs it ~1% of a CPU-second
    # (every thread's time goes to traps while the sites are in), so a 6-s run at 1% affords
    # one to three, later on a loaded machine; the promise is the estimate above.
    assert c["windows"] >= 1 and 0 < c["covered_s"] < 4 * 0.2, c
    assert c["target_cpu_ns"] > 1e9  # pingpong keeps about one CPU busy for 6 s
    assert os.path.getsize(summary) > 0


@pytest.mark.bpf
def test_duty_cycle_measured_by_the_probes_own_hits(tmp_path: Path) -> None:
    """Default mode with a budget that allows the whole plan (window 200 ms every second):
    the hot probes' own records (kernel timestamps, on a ping-pong that hits them every few
    microseconds) say when they were really attached, independently of the WINDOW marks.
    - No window's hot records span more than its plan + the overstay the controller
      reported + 100 ms. The kernel patches the sites one by one when the link is created
      and unpatches them inside the close: spans were at most +16 ms at load 6-10, and up to
      +78 ms at load 20-30 (the close waits for the target's mm). Before the plan counted
      from when the link began, they were +28-43 ms at load ~10.
    - No window overstays its plan by more than 50 ms.
    - The share of the windows' periods the hot records cover is at most window/period + 7%.
    - The windows come every period (median gap within 10 ms, at most 1 in 4 skipped).
    - The recording's windows (WINDOW 1 to 0) are each within 10 ms of their plan, unless
      cut short for cost (counted in the summary).
    - Polled from outside (int3 at the hot sites every ~2 ms), the sites are patched for the
      recorded windows' share of the time, and for window/period, within 7%.
    A span may be shorter than its plan: on a loaded machine the target itself does not run
    the whole window (that is not gmpmon's cost)."""
    import bisect

    from gmpmon.probetable import PROBES

    hot_kinds = {k for p in PROBES if p.hot for k in p.kinds}
    exe = copy_target(tmp_path, "pingpong")
    hot, _cold = probe_sites(exe)
    target = Proc([str(exe), "-t", "30s", "-wait-stdin"])
    rec = tmp_path / "r.gmp"
    summary = tmp_path / "s.json"
    # 200 ms windows: the kernel's patching lags WINDOW 1 by 1-14 ms (measured by these polls
    # at load 2-4), 7% of a 100 ms window but 3.5% of this one.
    duration, window, period = 10.0, 0.200, 1.000
    polls: list[tuple[int, bool]] = []  # (CLOCK_MONOTONIC ns, a hot site is patched)
    try:
        target.wait_line("ready")
        target.send("\n")
        gm = attach(target.p.pid, "--duration", str(duration), "--budget", "100",
                    "--window-ms", str(int(window * 1000)), "--period-ms",
                    str(int(period * 1000)), "--record", str(rec),
                    "--summary-json", str(summary))
        # From outside: the int3 bytes at the hot sites, every ~2 ms, until gmpmon ends.
        while gm.p.poll() is None:
            polls.append((time.monotonic_ns(), bool(int3_sites(target.p.pid, hot))))
            time.sleep(0.002)
        assert gm.p.wait(timeout=TIMEOUT) == 0, gm.err
    finally:
        target.kill()
    # The full windows (not the first, 5 ms probe window), but the last: at the end a full
    # ring is counted and not decoded (CUT_AT_END), so its records may be missing.
    every = windows(rec)
    full = [w for w in every if w[2] >= window * 1e9]
    ws = full[:-1]
    # A window whose plan the budget shortened (a loaded machine makes hits dearer) is not
    # checked, but its records are its own: each window's records end where the next opens.
    opens = [w[0] for w in every]
    print("windows planned (ms):", [round(w[2] / 1e6, 1) for w in every])
    hot_ts = sorted(e[0] for b in read_recording(str(rec)) for e in b.events
                    if e[1] in hot_kinds and e[0] > 0)
    spans = []
    for opened, closed, planned, over in ws:
        assert over <= 50_000_000, (opened, closed, planned, over)
        lo = bisect.bisect_left(hot_ts, opened)
        # Every hot record up to the next window (or the end): none may come late.
        hi = bisect.bisect_left(hot_ts, opens[bisect.bisect_right(opens, opened)])
        assert hi > lo, "a window without hot records"
        spans.append((hot_ts[hi - 1] - hot_ts[lo], planned, over))
    print("window spans by hot records vs plan, overstay (ms):",
          [(round(sp / 1e6, 1), round(p / 1e6, 1), round(o / 1e6, 1)) for sp, p, o in spans])
    assert len(ws) >= 4, ws
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(ws)]
    print("window starts apart (ms):", [round(g / 1e6, 1) for g in gaps])
    # A window comes every period (a starved controller may skip one: not more than 1 in 4).
    assert abs(sorted(gaps)[len(gaps) // 2] - period * 1e9) <= 10_000_000, gaps
    assert len(ws) >= 0.75 * ((ws[-1][0] - ws[0][0]) / (period * 1e9) + 1), gaps
    for span, planned, over in spans:
        assert span <= planned + over + 100_000_000, (span, planned, over)
    share = sum(sp for sp, _, _ in spans) / (ws[-1][0] - ws[0][0] + period * 1e9)
    want = window / period
    print(f"share of the windows' periods covered by hot records: {share:.3f} (plan {want:.3f})")
    assert share <= want * 1.07, (share, want)
    # The recording's own windows (WINDOW 1 .. WINDOW 0): each within 10 ms of its plan,
    # unless the controller cut it short for cost, which the summary counts.
    cut_short = json.loads(summary.read_text())["cost"]["cut_short"]
    errs = [(closed - opened - planned) / 1e6 for opened, closed, planned, _ in ws]
    print("recorded window length - plan (ms):", [round(e, 1) for e in errs],
          "cut short:", cut_short)
    assert sum(e < -10 for e in errs) <= cut_short, errs
    assert all(e <= 10 for e in errs), errs
    # Presence seen from outside, over whole periods from the first full window's start: the
    # share of polls that found a hot site patched is the recorded windows' share within 7%
    # of it, and window/period within 7% when no window was cut short. The kernel patches
    # after WINDOW 1 and unpatches inside the close: both shift the stretch, neither changes
    # its length much.
    t0, t1 = ws[0][0], ws[-1][0] + int(period * 1e9)
    seen = [(t, on) for t, on in polls if t0 <= t < t1]
    # Time-weighted (a poll's state holds until the next): the poller gets less CPU inside
    # the windows, where the target's traps compete with it.
    present = (sum((b[0] - a[0]) * a[1] for a, b in itertools.pairwise(seen))
               / (seen[-1][0] - seen[0][0]))
    recorded = sum(closed - opened for opened, closed, _, _ in ws) / (t1 - t0)
    print(f"polls with the hot sites patched: {present:.3f} of {len(seen)}; recorded windows "
          f"{recorded:.3f}; plan {want:.3f}")
    assert len(seen) > 200, len(seen)
    assert abs(present - recorded) <= 0.07 * recorded, (present, recorded)
    # Against the plan of every window in the stretch: the budget may have planned one
    # shorter (a loaded machine makes hits dearer: one of 53.6 ms in a CI rehearsal).
    # (The next window opens at t1 itself, give or take the clocks' jitter: not in it.)
    plan = sum(w[2] for w in every if t0 <= w[0] < t1 - period * 1e9 / 2) / (t1 - t0)
    print(f"planned share of the stretch: {plan:.3f}")
    if not cut_short:
        assert abs(present - plan) <= 0.07 * plan, (present, plan)


@pytest.mark.bpf
@pytest.mark.parametrize("mode", ["default", "sample"])
def test_the_cold_mutex_probes_are_cut_back_and_it_is_said(tmp_path: Path, mode: str) -> None:
    """lockhot contends on one sync.Mutex ~50k times a second: with every contention traced
    the cold probes alone cost the target ~10x the budget. Default mode cuts them back (1 in
    N traced, the sites linked part of the time) and says so in the summary, the report and
    the recording (a replay says the same). The waits traced 1 in N, each counted N times,
    add up to the lockSlow entries the probes counted while linked (an estimate). Sample
    mode has no hot window but the same cold probes: its controller governs them alone,
    under the same budget, and says the same."""
    from gmpmon.events import Counter, LockKind
    from gmpmon.probetable import HANDLERS
    from tests.gotargets import build

    exe = tmp_path / "lockhot"
    exe.write_bytes(build("lockhot", "1.22").read_bytes())
    exe.chmod(0o755)
    rec, summary = tmp_path / "r.gmp", tmp_path / "s.json"
    p = subprocess.run([*GM, "run", "--mode", mode, "--no-tui", "--record", str(rec),
                        "--summary-json", str(summary), "--", str(exe), "-t", "4s"],
                       capture_output=True, text=True, timeout=TIMEOUT, env=env(GOMAXPROCS="2"))
    assert p.returncode == 0, p.stderr[-2000:]
    s = json.loads(summary.read_text())
    cut = s["cost"]["cut_back"]
    assert [c["probes"] for c in cut] == ["mutex contention"], s["cost"]
    assert cut[0]["every_max"] > 1 and cut[0]["sampled_ns"] > 0
    assert "while over budget" in cut[0]["text"]
    assert f"cut back to stay in the budget: {cut[0]['text']}" in p.stdout
    mu = s["mutex"]
    assert mu["sampled"]["waits"] > 50 and mu["sampled"]["every_max"] == cut[0]["every_max"]
    assert mu["coverage"].startswith(f"sampled 1 in up to {cut[0]['every_max']} while over")
    # Go 1.22 keeps its own account of the wait: it comes first once the probes were cut
    assert s["quantities"]["mutex_wait_ns"]["source"] == "runtime counters"

    lock_enter = HANDLERS.index("lock_enter")
    entries = weighed = traced = 0
    for b in read_recording(str(rec)):
        for e in b.events:
            if e[1] == Kind.COUNTER and e[4] == Counter.PROBE_HITS and e[5] == lock_enter:
                entries += e[6]
            elif e[1] == Kind.MUTEX_ADDR and e[6] & 0xFFFF == LockKind.MUTEX:
                weighed += max(e[6] >> 16, 1)
                traced += 1
            elif e[1] == Kind.MUTEX_ROWS and e[3] & 0xFFFF == LockKind.MUTEX:
                # waits summed in the kernel, keyed by the same word: n of them, each N
                weighed += (e[6] >> 32) * max(e[3] >> 16, 1)
                traced += e[6] >> 32
    print(f"lockSlow entries {entries}, waits traced {traced}, weighed {weighed}, "
          f"summary {mu['contentions']}; {cut[0]['text']}")
    # (the waits before the controller's first decision, ~0.1 s after it starts, were all
    # traced: ~1/3 of them on this workload)
    assert traced < 0.8 * entries
    assert weighed == mu["contentions"]
    assert 0.7 * entries <= weighed <= 1.3 * entries

    out = tmp_path / "replay.json"
    r = subprocess.run([*GM, "replay", str(rec), "--summary-json", str(out)],
                       capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr[-1000:]
    replayed = json.loads(out.read_text())
    assert replayed["cost"]["cut_back"] == cut
    assert replayed["mutex"] == mu
    if mode == "sample":  # its controller governs the cold probes and opens no window
        assert s["cost"]["windows"] == 0 and s["mode"] == "sample", s["cost"]


def controller_of(pid: int) -> int | None:
    """The pid of gmpmon ``pid``'s controller process (gmpmon.capture.hotctl), if it runs."""
    for child in Path(f"/proc/{pid}/task").glob("*/children"):
        with contextlib.suppress(OSError):
            for c in child.read_text().split():
                if b"gmpmon.capture.hotctl" in Path(f"/proc/{c}/cmdline").read_bytes():
                    return int(c)
    return None


@pytest.mark.bpf
def test_sample_mode_starts_no_governor_where_no_lock_contends(tmp_path: Path) -> None:
    """Sample mode's cold-probe governor is a process of its own, and costs a little of a
    core: it starts only when the sync.Mutex probes' hits warrant it (LazyGovernor). The
    ping-pong contends on no sync.Mutex: in 4 s none starts, and the summary has no cost
    (nothing was governed); lockhot's does (test_the_cold_mutex_probes_are_cut_back...)."""
    with pingpong_attached(tmp_path, 4, "--mode", "sample") as (gm, summary):
        seen = []
        while gm.p.poll() is None:
            with contextlib.suppress(OSError):  # gmpmon may be gone between the two
                seen.append(controller_of(gm.p.pid))
            time.sleep(0.05)
        assert gm.p.wait(timeout=TIMEOUT) == 0, gm.err
    s = json.loads(summary.read_text())
    assert len(seen) > 40 and not any(seen), seen
    assert s["mode"] == "sample" and s["cost"] is None, s["cost"]
    assert s["mutex"]["contentions"] == 0, s["mutex"]


@pytest.mark.bpf
def test_a_controller_that_dies_mid_run_is_said_and_the_exit_code_says_so(tmp_path: Path) -> None:
    """The window controller is a child process: when it dies (here SIGKILL, as the OOM
    killer would), default mode goes on with no hot window, and the user is told in one line
    at the end, with the capture's exit code (10), not left with a quiet sample mode."""
    with pingpong_attached(tmp_path, 5) as (gm, summary):
        ctl = None
        end = time.monotonic() + 20
        while ctl is None and time.monotonic() < end:
            ctl = controller_of(gm.p.pid)
            time.sleep(0.1)
        assert ctl is not None, "no controller process under gmpmon"
        time.sleep(1.0)
        os.kill(ctl, signal.SIGKILL)
        assert gm.p.wait(timeout=TIMEOUT) == 10, gm.err
    lines = [ln for ln in gm.err.splitlines() if "hot-window controller stopped" in ln]
    assert len(lines) == 1, gm.err
    assert "exited with status -9" in lines[0] and "no hot window opens" in lines[0], lines
    assert json.loads(summary.read_text())["cost"]["budget_pct"] == 1.0  # outputs written
