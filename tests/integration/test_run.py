"""`gmpmon run -- CMD`: probes in place before the first goroutine; the program's exit code."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.gotargets import build
from tests.integration.test_attach import Proc
from tests.integration.test_capture import GM, TIMEOUT, env, gm_run


@pytest.mark.bpf
def test_run_sees_a_short_program_whole(tmp_path: Path) -> None:
    # spawn -n 20 lives a few ms: everything it does is seen, from its first goroutine.
    summary = tmp_path / "s.json"
    r = subprocess.run(
        [*GM, "run", "--mode", "full", "--no-tui", "--summary-json", str(summary), "--",
         str(build("spawn")), "-n", "20"],
        capture_output=True, text=True, timeout=TIMEOUT, env=env(GOMAXPROCS="2"),
    )
    assert r.returncode == 0, r.stderr
    assert "spawned 20" in r.stdout
    s = json.loads(summary.read_text())
    assert s["goroutines"]["exited"] == 20
    # main (goid 1) runs from the start: its first EXECUTE is seen, so every P has executes.
    assert sum(p["executes"] for p in s["procs"]) > 20


@pytest.mark.bpf
def test_run_exits_with_the_programs_exit_code() -> None:
    # Go's flag package exits 2 on an unknown flag.
    r = subprocess.run(
        [*GM, "run", "--mode", "sample", "--no-tui", "--", str(build("sleeper")), "-bogus"],
        capture_output=True, text=True, timeout=TIMEOUT,
    )
    assert r.returncode == 2, r.stderr
    assert "flag provided but not defined" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.bpf
def test_run_forwards_sigterm_and_reports_the_signal() -> None:
    gm = Proc([*GM, "run", "--mode", "full", "--no-tui", "--", str(build("sleeper")),
               "-n", "100000", "-d", "1ms"])
    try:
        gm.wait_line("Tracing Go scheduler of PID")
        time.sleep(0.5)
        gm.p.send_signal(signal.SIGTERM)
        code = gm.p.wait(timeout=30)
    finally:
        gm.kill()
    assert code == 128 + signal.SIGTERM, gm.err
    assert "Traceback" not in gm.err


def test_run_rejects_a_missing_program() -> None:
    from gmpmon.errors import TargetError, UsageError

    r = subprocess.run([*GM, "run", "--", "/nonexistent/prog"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == TargetError.exit_code
    assert r.stderr.startswith("gmpmon: ") and len(r.stderr.strip().splitlines()) == 1
    r = subprocess.run([*GM, "run"], capture_output=True, text=True, timeout=60)
    assert r.returncode == UsageError.exit_code


@pytest.mark.bpf
@pytest.mark.parametrize("build_mode", ["stripped", "nodwarf"])
def test_run_of_a_table_offsets_program_that_ends_at_once(tmp_path: Path,
                                                         build_mode: str) -> None:
    """A program that has exited before its layout could be checked is no wrong table:
    `run` reports what it captured and exits 0 (it used to say "the offsets table does not
    fit this process" and exit 5, whenever the program was quicker than the check)."""
    exe = tmp_path / "quick"
    shutil.copy(build("sleeper", "1.27", build_mode), exe)
    for _ in range(3):
        p, s = gm_run(tmp_path, exe, "-n", "0")
        assert "offsets table does not fit" not in p.stderr, p.stderr
        assert s["target"]["go_version"].startswith("go1.27")
