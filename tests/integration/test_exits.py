"""How a run ends: every way must detach, write every requested file whole, and say why.

SIGHUP (an SSH session that drops), SIGQUIT (^\\) and a closed terminal end `attach` like
Ctrl-C: the summary JSON, the folded stacks and a recording with its end frame are all
written, no probe stays in the target, and one line on stderr says what happened. A failure
in a gmpmon thread (here: the recording's disk fills up, a real ENOSPC from a tiny tmpfs)
ends the run at once the same way, with a non-zero exit.
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import signal
import subprocess
import termios
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.test_attach import (
    Proc,
    attach,
    copy_target,
    eventually,
    int3_sites,
    probe_sites,
)
from tests.integration.test_capture import GM, TIMEOUT, env


def outputs(tmp_path: Path) -> tuple[Path, Path, Path, list[str]]:
    s, f, r = tmp_path / "s.json", tmp_path / "m.folded", tmp_path / "r.gmp"
    return s, f, r, ["--summary-json", str(s), "--folded", str(f), "--record", str(r)]


def assert_outputs_whole(summary: Path, folded: Path, rec: Path) -> None:
    from gmpmon.record import read_recording

    s = json.loads(summary.read_text())
    assert s["park_reasons"]["sleep"]["count"] > 0
    assert folded.exists()
    r = read_recording(str(rec))
    n = sum(len(b.events) for b in r)
    assert r.complete, "recording has no end frame"
    assert n > 0


@pytest.fixture
def sleeper(tmp_path: Path) -> Iterator[tuple[Proc, list[int]]]:
    exe = copy_target(tmp_path, "sleeper")
    hot, cold = probe_sites(exe)
    target = Proc([str(exe), "-n", "1000000", "-d", "1ms"])
    try:
        target.wait_line("ready")
        yield target, hot + cold
    finally:
        target.kill()


@pytest.mark.bpf
@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGQUIT], ids=["sighup", "sigquit"])
def test_attach_ends_on_hangup_and_quit_with_every_output(
    tmp_path: Path, sleeper: tuple[Proc, list[int]], sig: signal.Signals
) -> None:
    target, sites = sleeper
    summary, folded, rec, opts = outputs(tmp_path)
    gm = attach(target.p.pid, "--mode", "full", *opts)
    gm.wait_line("Tracing Go scheduler of PID")
    time.sleep(1.0)
    gm.p.send_signal(sig)
    assert gm.p.wait(timeout=30) == 0, gm.err
    assert "Traceback" not in gm.err
    why = [ln for ln in gm.err.splitlines() if sig.name in ln]
    assert len(why) == 1, gm.err
    assert_outputs_whole(summary, folded, rec)
    assert eventually(lambda: int3_sites(target.p.pid, sites) == [])
    assert target.p.poll() is None


def _controlling_tty(slave: int) -> None:
    """In the child: a new session whose controlling terminal is the pty's slave side."""
    os.setsid()
    fcntl.ioctl(slave, termios.TIOCSCTTY, 0)


@pytest.mark.bpf
def test_attach_survives_its_terminal_closing(
    tmp_path: Path, sleeper: tuple[Proc, list[int]]
) -> None:
    """The terminal goes away (master side closed): the kernel sends SIGHUP, and every later
    write to stdout/stderr fails with EIO. The files must be written all the same."""
    target, sites = sleeper
    summary, folded, rec, opts = outputs(tmp_path)
    master, slave = pty.openpty()
    p = subprocess.Popen(
        [*GM, "attach", str(target.p.pid), "--no-tui", "--mode", "full", "--interval", "0.2",
         *opts],
        stdin=slave, stdout=slave, stderr=slave, preexec_fn=lambda: _controlling_tty(slave),
        env=env(),
    )
    os.close(slave)
    seen = b""
    end = time.monotonic() + TIMEOUT
    while b"Tracing Go scheduler" not in seen and time.monotonic() < end:
        try:
            seen += os.read(master, 4096)
        except OSError:
            break
    assert b"Tracing Go scheduler" in seen, seen
    time.sleep(1.0)
    os.close(master)
    try:
        code = p.wait(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
    assert code == 0
    assert_outputs_whole(summary, folded, rec)
    assert eventually(lambda: int3_sites(target.p.pid, sites) == [])
    assert target.p.poll() is None


@pytest.mark.bpf
def test_run_ends_on_hangup_like_ctrl_c(tmp_path: Path) -> None:
    """`run`: the first SIGHUP, like the first ^C, goes to the program as SIGTERM; gmpmon
    writes everything once it has exited, and exits with its status."""
    exe = copy_target(tmp_path, "sleeper")
    summary, folded, rec, opts = outputs(tmp_path)
    gm = Proc([*GM, "run", "--no-tui", "--mode", "full", *opts, "--", str(exe), "-n",
               "1000000", "-d", "1ms"])
    gm.wait_line("Tracing Go scheduler of PID")
    time.sleep(1.0)
    gm.p.send_signal(signal.SIGHUP)
    assert gm.p.wait(timeout=30) == 128 + signal.SIGTERM, gm.err
    assert "Traceback" not in gm.err
    assert len([ln for ln in gm.err.splitlines() if "SIGHUP" in ln]) == 1, gm.err
    assert_outputs_whole(summary, folded, rec)


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    d = tmp_path / "tiny"
    d.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(d)],
                       capture_output=True, text=True)
    # Root mounts it (the BPF tests run as root); a failure is a failure, not a skip.
    assert r.returncode == 0, f"cannot mount a 64k tmpfs: {r.stderr.strip()}"
    try:
        yield d
    finally:
        subprocess.run(["umount", "-l", str(d)], check=False)


@pytest.mark.bpf
def test_a_failing_model_thread_ends_the_run_with_outputs_and_an_error(
    tmp_path: Path, sleeper: tuple[Proc, list[int]], tiny_disk: Path
) -> None:
    """The recording fills a 64 KiB disk after a moment (ENOSPC in the model thread): the
    run ends then, not at --duration, with one line, the summary written, probes detached
    and a non-zero exit."""
    from gmpmon.errors import CaptureError

    target, sites = sleeper
    summary = tmp_path / "s.json"
    t0 = time.monotonic()
    gm = attach(target.p.pid, "--mode", "full", "--duration", "60", "--summary-json",
                str(summary), "--record", str(tiny_disk / "r.gmp"))
    code = gm.p.wait(timeout=TIMEOUT)
    took = time.monotonic() - t0
    assert code == CaptureError.exit_code, (code, gm.err)
    assert took < 40, f"the run went on for {took:.0f} s after its model thread failed"
    assert "Traceback" not in gm.err
    lines = [ln for ln in gm.err.splitlines() if ln.startswith("gmpmon:")]
    assert len(lines) == 1 and "No space left" in lines[0], gm.err
    s = json.loads(summary.read_text())
    assert s["park_reasons"]["sleep"]["count"] > 0
    assert eventually(lambda: int3_sites(target.p.pid, sites) == [])
    assert target.p.poll() is None
