"""The per-site perf-event uprobes, for kernels without uprobe_multi links (< 6.6; the README
claims 5.8+): forced here with GMPMON_NO_UPROBE_MULTI=1 on a newer kernel. A full capture
counts exactly what the uprobe_multi path counts, and detaching leaves no probe behind.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.integration.test_attach import (
    Proc,
    bpf_prog_ids,
    copy_target,
    eventually,
    int3_sites,
    probe_sites,
    prog_exists,
)
from tests.integration.test_capture import GM, TIMEOUT, env


def attach_env(pid: int, extra: dict[str, str], *opts: str) -> Proc:
    return Proc([*GM, "attach", str(pid), "--no-tui", *opts], env=env(**extra))


@pytest.mark.bpf
def test_perf_uprobe_fallback_full_capture_and_detach(tmp_path: Path) -> None:
    exe = copy_target(tmp_path, "sleeper")
    hot, cold = probe_sites(exe, multi=False)
    target = Proc([str(exe), "-n", "150", "-d", "2ms", "-wait-stdin"], env=env(GOMAXPROCS="1"))
    try:
        target.wait_line("ready")
        summary = tmp_path / "s.json"
        gm = attach_env(target.p.pid, {"GMPMON_NO_UPROBE_MULTI": "1"}, "--mode", "full",
                        "--summary-json", str(summary))
        gm.wait_line("Tracing Go scheduler of PID", timeout=TIMEOUT)
        progs = bpf_prog_ids(gm.p.pid)
        assert len(progs) > 1  # one program per site: the fallback, not one multi link
        assert int3_sites(target.p.pid, hot + cold) == hot + cold
        target.send("\n")
        assert target.p.wait(timeout=TIMEOUT) == 0
        assert gm.p.wait(timeout=TIMEOUT) == 0, gm.err
    finally:
        target.kill()
    assert "Traceback" not in gm.err
    s = json.loads(summary.read_text())
    assert s["park_reasons"]["sleep"]["count"] == 150
    assert eventually(lambda: not any(prog_exists(i) for i in progs))


@pytest.mark.bpf
def test_perf_uprobe_fallback_detaches_from_a_running_target(tmp_path: Path) -> None:
    exe = copy_target(tmp_path, "sleeper")
    hot, cold = probe_sites(exe, multi=False)
    target = Proc([str(exe), "-n", "1000000", "-d", "1ms"])
    try:
        target.wait_line("ready")
        gm = attach_env(target.p.pid, {"GMPMON_NO_UPROBE_MULTI": "1"}, "--mode", "full",
                        "--duration", "1")
        gm.wait_line("Tracing Go scheduler of PID", timeout=TIMEOUT)
        assert gm.p.wait(timeout=TIMEOUT) == 0, gm.err
        assert eventually(lambda: int3_sites(target.p.pid, hot + cold) == [])
        time.sleep(0.2)
        assert target.p.poll() is None
    finally:
        target.kill()
