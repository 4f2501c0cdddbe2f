"""`--mode sample` on -s -w builds sees what it sees on the default build of the same program.

The stripped build has no .symtab: its allp, sched and gomaxprocs come from the disassembly
finders, its offsets from the table, and both are validated on the process before the first
sample. The workload (scripts/targets/runq) keeps every P running with a known number of
goroutines waiting (g - GOMAXPROCS) for the whole run, so both builds must show the same
picture: GOMAXPROCS, P states and the run queues (local + global) within sampling noise, and
the runtime's own counters and the goroutine census the same goroutines and states.
"""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path
from typing import Any

import pytest

from tests.gotargets import versions
from tests.integration.test_attach import Proc, attach, copy_target
from tests.integration.test_capture import TIMEOUT, env

PROCS = 2
SPINNERS = 6  # so 4 goroutines wait in run queues at any time
SECONDS = 2.0
LINE = re.compile(r"^\s*[\d.]+s (?P<ps>(P\d+:\S+ ?)+) grq=(?P<grq>-?\d+)")


def sample_run(tmp_path: Path, go: str, mode: str) -> dict[str, Any]:
    exe = copy_target(tmp_path, "runq", go, mode)
    target = Proc([str(exe), "-g", str(SPINNERS), "-t", "30s"], env=env(GOMAXPROCS=str(PROCS)))
    try:
        target.wait_line("ready")
        summary = tmp_path / f"{mode}.json"
        gm = attach(target.p.pid, "--mode", "sample", "--duration", str(SECONDS),
                    "--interval", "0.25", "--summary-json", str(summary))
        start = gm.wait_line("Tracing Go scheduler of PID")
        assert gm.p.wait(timeout=TIMEOUT) == 0, gm.err
    finally:
        target.kill()
    assert "Traceback" not in gm.err and "no sampler" not in gm.err, gm.err
    states: list[str] = []
    queued: list[int] = []
    for line in gm.lines:
        m = LINE.match(line)
        if not m:
            continue
        cells = [c.split(":")[1] for c in m.group("ps").split()]
        states += [c[0] for c in cells]
        queued.append(sum(int(c[1:]) for c in cells) + int(m.group("grq")))
    assert len(queued) >= 6, gm.lines
    return {"start": start, "summary": json.loads(summary.read_text()), "states": states,
            "queued": queued}


@pytest.mark.bpf
@pytest.mark.parametrize("go", [pytest.param(v, id=f"go{v}") for v in versions()])
def test_sample_mode_on_stripped_matches_the_default_build(tmp_path: Path, go: str) -> None:
    runs = {mode: sample_run(tmp_path, go, mode) for mode in ("default", "stripped")}
    for mode, r in runs.items():
        s = r["summary"]
        assert s["target"]["gomaxprocs"] == PROCS, mode
        assert f"GOMAXPROCS={PROCS}," in r["start"], r["start"]
        # Every P is busy for the whole capture: never idle. (Go 1.19's preemption is a cold
        # probe: it once ended a P's running span until the next P status read, a third of
        # the time read as "searching"; a preempting P runs the next G at once.)
        assert len(s["procs"]) == PROCS
        for p in s["procs"]:
            assert p["idle_ns"] < 0.05 * (p["running_ns"] + p["idle_ns"] + p["spinning_ns"]), (
                mode, p)
        assert r["states"].count("I") == 0, (mode, r["states"])
        # SPINNERS - PROCS goroutines wait, in local runqs or the global one.
        assert abs(statistics.median(r["queued"]) - (SPINNERS - PROCS)) <= 1, (mode, r["queued"])
    d, b = runs["default"], runs["stripped"]
    run_frac = [
        sum(p["running_ns"] for p in r["summary"]["procs"])
        / sum(p["running_ns"] + p["idle_ns"] + p["spinning_ns"] for p in r["summary"]["procs"])
        for r in (d, b)
    ]
    # Both builds read 0.99-1.0 on every version.
    assert min(run_frac) > 0.95 and abs(run_frac[0] - run_frac[1]) < 0.05, run_frac
    assert abs(statistics.mean(d["queued"]) - statistics.mean(b["queued"])) <= 1.0, (
        d["queued"], b["queued"])
    # The runtime's own counters and the goroutine census (issue 11) read the same globals:
    # the same goroutines, the same states, a latency histogram on both.
    for mode, r in runs.items():
        rt, census = r["summary"]["runtime"], r["summary"]["census"]
        assert rt["missing"] == d["summary"]["runtime"]["missing"], (mode, rt["missing"])
        assert not [m for m in rt["missing"] if "not found" in m], (mode, rt["missing"])
        assert rt["goroutines"] == SPINNERS + 1, (mode, rt)  # + main
        assert rt["gomaxprocs"] == PROCS
        assert rt["sched_latency_ns"]["count"] > 0, (mode, rt["sched_latency_ns"])
        assert census["goroutines"] == SPINNERS + 1, (mode, census)
        busy = sum(x["count"] for x in census["states"] if x["state"] in ("running", "runnable")
                   and not x["system"])
        assert busy == SPINNERS, (mode, census["states"])
    p50 = [r["summary"]["runtime"]["sched_latency_ns"]["p50"] for r in (d, b)]
    assert max(p50) <= 3 * min(p50), p50  # tens of ms each (6 goroutines on 2 Ps); noisy
