"""`gmpmon attach PID PID...` / `--match`: several targets, one session each, real BPF.

Two copies of the rtcounters workload (Go 1.27 and 1.22) are attached together headless:
every interval prints a line per target, the end a summary block per target, and the
per-target summary JSON (``{pid}`` in the path) holds each target's own goroutine count,
checked against the workload's runtime.NumGoroutine().
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests import gotargets
from tests.integration.test_capture import GM, TIMEOUT, env
from tests.integration.test_fleet import Workload


def _copy(go: str, tmp: Path, name: str) -> Path:
    dst = tmp / name
    shutil.copy(gotargets.build("rtcounters", go=go), dst)
    return dst


@pytest.mark.bpf
def test_attach_two_targets_headless_with_per_target_files(tmp_path: Path) -> None:
    a = Workload(_copy("1.27", tmp_path, "many-a"))
    b = Workload(_copy("1.22", tmp_path, "many-b"))
    try:
        counts = {a.pid: int(a.ask("count", "count")), b.pid: int(b.ask("count", "count"))}
        out = tmp_path / "s-{pid}.json"
        p = subprocess.run(
            [*GM, "attach", str(a.pid), str(b.pid), "999999999", "--mode", "sample",
             "--no-tui", "-d", "2", "--summary-json", str(out)],
            capture_output=True, text=True, timeout=TIMEOUT, env=env(),
        )
        assert p.returncode == 0, p.stderr
        assert "Traceback" not in p.stderr
        assert "process 999999999:" in p.stderr and "not attached" in p.stderr
        for pid, want in counts.items():
            assert re.search(rf"^\[{pid}\] Tracing Go scheduler of PID {pid}", p.stdout, re.M)
            assert re.search(rf"^\[{pid}\]\s+\d+\.\ds P0:", p.stdout, re.M), p.stdout
            assert f"=== PID {pid} " in p.stdout
            s = json.loads(Path(str(out).replace("{pid}", str(pid))).read_text())
            assert s["target"]["pid"] == pid
            got = s["runtime"]["goroutines"]
            assert abs(got - want) <= max(1, 0.02 * want), (pid, got, want)
    finally:
        a.stop()
        b.stop()


@pytest.mark.bpf
def test_attach_match_finds_the_targets(tmp_path: Path) -> None:
    a = Workload(_copy("1.27", tmp_path, "match-me-1"))
    b = Workload(_copy("1.27", tmp_path, "match-me-2"))
    try:
        p = subprocess.run(
            [*GM, "attach", "--match", re.escape(str(tmp_path)) + "/match-me-", "--mode",
             "sample", "--no-tui", "-d", "1"],
            capture_output=True, text=True, timeout=TIMEOUT, env=env(),
        )
        assert p.returncode == 0, p.stderr
        assert f"[{a.pid}] Tracing" in p.stdout and f"[{b.pid}] Tracing" in p.stdout
    finally:
        a.stop()
        b.stop()


def test_attach_many_refuses_shared_output_paths(tmp_path: Path) -> None:
    p = subprocess.run(
        [*GM, "attach", "1", "2", "--no-tui", "--summary-json", str(tmp_path / "s.json")],
        capture_output=True, text=True, timeout=60, env=env(),
    )
    assert p.returncode == 2, p
    assert p.stderr.count("\n") == 1 and "{pid}" in p.stderr
    p = subprocess.run([*GM, "attach", "--match", "no-such-program-xyz", "--no-tui"],
                       capture_output=True, text=True, timeout=60, env=env())
    assert p.returncode == 3 and "no Go process matches" in p.stderr, p
