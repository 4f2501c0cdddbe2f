"""Target safety under churn: gmpmon attached and detached many times (every mode in turn)
to a busy Go workload never crashes it, never changes what it computes, and never leaves a
uprobe, perf event or BPF program behind.

`churn` does a fixed amount of work and prints a checksum that depends only on its flags.
It is run back to back while gmpmon processes come and go on it (a run that ends while a
gmpmon is attached is part of the test: gmpmon must notice and exit cleanly); every run's
checksum must equal the unwatched one. Cycles per Go version: GMPMON_CHURN_CYCLES, else 10
(CI: ~90 s for the four CI versions here, a cycle being ~2.5 s, mostly BPF compile), 100
with --full / GMPMON_FULL_MATRIX=1 (~4 min per version).
"""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.gotargets import build, full_matrix, versions
from tests.integration.test_hardening_common import (
    alive,
    assert_nothing_left,
    bpf_fds,
    need_bpftool,
    private_copy,
    start_gmpmon,
    start_target,
    uprobes_on,
)

pytestmark = pytest.mark.bpf

MODES = ("default", "full", "sample")
ITERS = "6000"  # ~5 s unwatched: a run spans a cycle or two


def cycles() -> int:
    env = os.environ.get("GMPMON_CHURN_CYCLES")
    if env:
        return int(env)
    return 100 if full_matrix() else 10


@pytest.mark.parametrize("go", versions())
def test_attach_detach_churn_leaves_the_target_intact(go: str) -> None:
    need_bpftool()
    exe = private_copy(build("churn", go), f"go{go}")
    want = subprocess.run(
        [str(exe), "-iters", ITERS], capture_output=True, text=True, timeout=120, check=True
    ).stdout.splitlines()[-1]
    assert want.startswith("checksum ")

    target = start_target(exe, "-iters", ITERS)
    runs = 0
    gmpmon_pids: list[int] = []
    try:
        for i in range(cycles()):
            if target.proc.poll() is not None:
                target.wait_line("checksum")
                assert target.proc.returncode == 0, target.lines[-5:]
                assert target.lines[-1][1] == want, f"run {runs}: {target.lines[-1]} != {want}"
                runs += 1
                target = start_target(exe, "-iters", ITERS)
            mode = MODES[i % len(MODES)]
            g = start_gmpmon("attach", str(target.pid), "--no-tui", "--mode", mode,
                             "-d", "0.7", "--interval", "0.25")
            gmpmon_pids.append(g.pid)
            _out, err = g.communicate(timeout=120)
            assert "Traceback" not in err, err
            # 0, or the target finished while attached (gmpmon says so and still succeeds),
            # or it finished before the attach (no such process).
            assert g.returncode == 0 or (g.returncode == 3 and not alive(target.pid)), (
                mode, g.returncode, err)
            # Nothing of that gmpmon remains in the target, which is still fine.
            assert uprobes_on(target.pid, str(exe)) == [], f"cycle {i}: uprobes left"
            assert bpf_fds(target.pid) == []
            assert target.proc.poll() in (None, 0), f"cycle {i} ({mode}): target died"
        target.proc.wait(300)
        target.wait_line("checksum")
        assert target.proc.returncode == 0
        assert target.lines[-1][1] == want
        runs += 1
        assert_nothing_left(target.pid, gmpmon_pids, str(exe))
    finally:
        target.stop()
    print(f"go{go}: {cycles()} attach/detach cycles over {runs} churn runs, checksums equal")
