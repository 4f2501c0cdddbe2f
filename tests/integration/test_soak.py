"""A 10-minute soak at the highest event rate this machine sustains: memory stays bounded
(scripts/test --full). ``full`` mode on the ping-pong is gmpmon's worst case: every hot probe
all the time, ~0.7 M records/s offered, more than the model takes (drops are counted)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from tests.integration.test_attach import Proc, attach, copy_target

SOAK_S = float(os.environ.get("GMPMON_SOAK_S", "600"))


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


@pytest.mark.bpf
@pytest.mark.slow
def test_memory_stays_bounded_over_a_soak_at_the_highest_rate(tmp_path: Path) -> None:
    exe = copy_target(tmp_path, "pingpong")
    target = Proc([str(exe), "-t", f"{SOAK_S + 120:.0f}s", "-wait-stdin"])
    summary = tmp_path / "s.json"
    try:
        target.wait_line("ready")
        target.send("\n")
        gm = attach(target.p.pid, "--mode", "full", "--duration", f"{SOAK_S:.0f}",
                    "--summary-json", str(summary))
        gm.wait_line("Tracing Go scheduler of PID", timeout=60)
        start = time.monotonic()
        samples: list[tuple[float, float]] = []
        while gm.p.poll() is None:
            samples.append((time.monotonic() - start, rss_mb(gm.p.pid)))
            time.sleep(5)
        assert gm.p.returncode == 0, gm.err
    finally:
        target.kill()
    early = max(r for t, r in samples if t <= min(120, SOAK_S / 5))
    late = max(r for t, r in samples if t >= SOAK_S / 2)
    assert late <= max(early * 1.25, early + 40), samples  # no growth after warm-up
    assert late <= 300, samples
    s = json.loads(summary.read_text())
    ev = s["events"]
    assert ev["total"] > 1_000_000  # it really was the highest rate
