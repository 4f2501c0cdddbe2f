"""The external flight recorder with real BPF: a latency spike fires `latency.p99>5ms`
(read from the runtime's own histogram, no probe), the hot probes get a burst, and the dump
replays with the spike in it; SIGUSR1 fires its trigger too."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from gmpmon.events import Kind
from gmpmon.record import read_recording
from tests.integration.test_attach import Proc, attach, copy_target, eventually
from tests.integration.test_capture import GM, TIMEOUT, env


def dumps_in(d: Path) -> list[Path]:
    return sorted(d.glob("gmpmon-*.gmp"))


@pytest.mark.bpf
def test_latency_spike_fires_a_trigger_and_the_dump_replays_with_it(tmp_path: Path) -> None:
    exe = copy_target(tmp_path, "spike")
    dump_dir = tmp_path / "dumps"
    dump_dir.mkdir()
    target = Proc([str(exe), "-calm", "3s", "-spike", "1s", "-t", "6s", "-wait-stdin"],
                  env=env(GOMAXPROCS="2"))
    try:
        target.wait_line("ready")
        gm = attach(target.p.pid, "--duration", "5", "--trigger", "latency.p99>5ms",
                    "--burst", "300", "--dump-dir", str(dump_dir))
        gm.wait_line("Tracing Go scheduler of PID")
        target.send("\n")
        assert gm.p.wait(timeout=TIMEOUT) == 0, gm.err
    finally:
        target.kill()
    assert "spike start" in target.lines
    files = dumps_in(dump_dir)
    assert len(files) == 1, (files, gm.err)  # once: the cooldown holds the rest back
    assert files[0].name.endswith("-latency.p99-gt-5ms.gmp")
    assert eventually(lambda: f"dump {files[0]}" in gm.err), gm.err
    # The dump: the seconds before the trigger, the TRIGGER, and a burst of hot probes.
    kinds: list[int] = []
    windows = []
    trig_ts = 0
    for b in read_recording(str(files[0])):
        for e in b.events:
            kinds.append(e[1])
            if e[1] == Kind.TRIGGER:
                trig_ts = e[0]
            if e[1] == Kind.WINDOW and e[5]:
                windows.append(e)
    assert kinds.count(Kind.TRIGGER) == 1
    assert (Kind.RT_HIST in kinds or Kind.RT_HISTS in kinds) and Kind.EXECUTE in kinds
    # The burst opened a window (WINDOW 1) or, landing in an open one, extended it (WINDOW 2).
    assert any(w[0] >= trig_ts and w[6] == 300_000_000 for w in windows), (windows, gm.err)
    summary = tmp_path / "replay.json"
    r = subprocess.run([*GM, "replay", str(files[0]), "--summary-json", str(summary)],
                       capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr
    lat = json.loads(summary.read_text())["runtime"]["sched_latency_ns"]
    slow = sum(n for lo, n in lat["histogram"] if lo >= 5_000_000)
    assert slow > 0, lat  # the spike is in the dump, as the runtime measured it
    assert lat["max"] >= 5_000_000


def sigusr1_dumps(tmp_path: Path, after_s: float, *args: str) -> tuple[Proc, list[Path]]:
    """A sleeper attached with ``--trigger sigusr1`` and ``args``; SIGUSR1 ``after_s`` after
    the first line; gmpmon (ended, exit 0) and the dumps it wrote."""
    exe = copy_target(tmp_path, "sleeper")
    dump_dir = tmp_path / "dumps"
    dump_dir.mkdir()
    target = Proc([str(exe), "-n", "100000", "-d", "1ms"])
    try:
        target.wait_line("ready")
        gm = attach(target.p.pid, "--trigger", "sigusr1", "--dump-dir", str(dump_dir), *args)
        gm.wait_line("Tracing Go scheduler of PID")
        time.sleep(after_s)
        os.kill(gm.p.pid, signal.SIGUSR1)
        assert gm.p.wait(timeout=TIMEOUT) == 0, gm.err
    finally:
        target.kill()
    return gm, dumps_in(dump_dir)


@pytest.mark.bpf
def test_sigusr1_fires_its_trigger(tmp_path: Path) -> None:
    gm, files = sigusr1_dumps(tmp_path, 1.0, "--duration", "3", "--burst", "200")
    assert [f.name.endswith("-sigusr1.gmp") for f in files] == [True], (files, gm.err)
    r = subprocess.run([*GM, "replay", str(files[0]), "--no-tui"], capture_output=True,
                       text=True, timeout=TIMEOUT)
    assert r.returncode == 0 and "sleep" in r.stdout, r.stderr


@pytest.mark.bpf
def test_a_burst_in_an_open_window_extends_it_and_is_recorded(tmp_path: Path) -> None:
    """Windows of 950 ms every second: the SIGUSR1 burst nearly always lands in an open one.
    The dump must show it (WINDOW 2, a1 = the burst) and the probes must stay on to its end;
    landing in a gap, it opens a window of its own (WINDOW 1, a1 = the burst)."""
    gm, files = sigusr1_dumps(tmp_path, 1.5, "--duration", "4", "--burst", "700",
                              "--window-ms", "950", "--period-ms", "1000", "--budget", "20")
    assert len(files) == 1, (files, gm.err)
    trig_ts = 0
    wins: list[tuple[int, int, int]] = []
    for b in read_recording(str(files[0])):
        for e in b.events:
            if e[1] == Kind.TRIGGER:
                trig_ts = e[0]
            elif e[1] == Kind.WINDOW:
                wins.append((e[0], e[5], e[6]))
    assert trig_ts
    burst = [w for w in wins if w[0] >= trig_ts and w[1] in (1, 2) and w[2] == 700_000_000]
    assert len(burst) == 1, (wins, trig_ts, gm.err)
    # The window the burst is in closes no earlier than the burst's end (less the trigger's
    # way to the controller); not a plain 950 ms window's end.
    closes = [w[0] for w in wins if w[1] == 0 and w[0] > burst[0][0]]
    assert closes and closes[0] >= burst[0][0] + 700_000_000 - 5_000_000, (wins, burst)
