"""The census whole at 100k goroutines through `gmpmon attach` (issue 25: ">= 99.5%, in sample
and default modes"), not only the Census class in a thread (test_census_scale.py).

One `scale` workload (64 Ps, 64 wakers waking random goroutines of 100,000 parked, 2 CPUs)
prints its own runtime.NumGoroutine() every 250 ms (-count). `gmpmon attach --no-tui -d 20
--summary-json` runs on it in sample mode, then in default mode; each summary's last census
must count >= 99.5% of the smallest count the workload printed while that gmpmon ran (the
goroutines alive all along), and no more than the largest plus 0.5% (none counted twice).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests import gotargets

GM = [sys.executable, "-m", "gmpmon"]
N = 100_000


class Counts:
    """The workload's "goroutines N" lines, with the time each was read."""

    def __init__(self, p: subprocess.Popen[str]) -> None:
        self.seen: list[tuple[float, int]] = []
        self.ready = threading.Event()
        self._t = threading.Thread(target=self._read, args=(p,), daemon=True)
        self._t.start()

    def _read(self, p: subprocess.Popen[str]) -> None:
        assert p.stdout is not None
        for line in p.stdout:
            word = line.split()
            if word[:1] == ["goroutines"]:
                self.seen.append((time.monotonic(), int(word[1])))
            elif word == ["ready"]:
                self.ready.set()

    def between(self, t0: float, t1: float) -> list[int]:
        return [n for t, n in self.seen if t0 <= t <= t1]


@pytest.mark.bpf
def test_census_through_attach_at_100k_in_sample_and_default_modes(tmp_path: Path) -> None:
    exe = gotargets.build("scale", go="1.27", mode="default")
    p = subprocess.Popen([str(exe), "-g", str(N), "-t", "600s", "-count", "250ms"],
                         stdout=subprocess.PIPE, text=True)
    counts = Counts(p)
    results = {}
    try:
        assert counts.ready.wait(60), "the scale workload never printed ready"
        for mode in ("sample", "default"):
            summary = tmp_path / f"{mode}.json"
            t0 = time.monotonic()
            r = subprocess.run([*GM, "attach", str(p.pid), "--no-tui", "-d", "20", "--mode", mode,
                                "--summary-json", str(summary)],
                               capture_output=True, text=True, timeout=120)
            time.sleep(0.3)  # the workload's next line: a count after gmpmon's last read
            t1 = time.monotonic()
            assert r.returncode == 0, r.stderr
            results[mode] = (json.loads(summary.read_text())["census"], counts.between(t0, t1))
    finally:
        p.kill()
        p.wait()
    for mode, (census, own) in results.items():
        assert census is not None, f"{mode}: no census in the summary"
        assert own, f"{mode}: the workload printed no count meanwhile"
        print(f"{mode}: census #{census['number']} counted {census['goroutines']} "
              f"(+{census['system_goroutines']} system) in {census['duration_ns'] / 1e9:.2f} s;"
              f" NumGoroutine {min(own)}..{max(own)}")
        assert census["complete"], (mode, census["cut_short"])
        assert min(own) >= N, (mode, own)  # the workload's own count holds every parked one
        assert census["goroutines"] >= 0.995 * min(own), (mode, census["goroutines"], own)
        assert census["goroutines"] <= 1.005 * max(own), (mode, census["goroutines"], own)
