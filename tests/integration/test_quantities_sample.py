"""Sample mode's summary JSON: the top level takes the best source there is (issue 27).

Without hot probes the top-level scheduling latency, goroutine count, syscalls and executes
were 0 while the `runtime` and `census` blocks held the runtime's own numbers. The workload
(scripts/targets/rtcounters) runs a phase of scheduling, mutex contention and GCs, then
prints runtime.NumGoroutine at a quiet moment; gmpmon attaches in sample mode around it.
The top level must equal the runtime block (latency count and p50, syscalls, schedules) and
the census and NumGoroutine within churn (2%), say each value's source, and leave what
nothing measured null - on the default build and on a `-s -w` one.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.gotargets import modes
from tests.integration.test_attach import Proc, attach, copy_target
from tests.integration.test_capture import TIMEOUT, env


def ask(target: Proc, cmd: str, prefix: str) -> str:
    assert target.p.stdin is not None
    target.p.stdin.write(cmd + "\n")
    target.p.stdin.flush()
    return target.wait_line(prefix, timeout=60)[len(prefix):]


@pytest.mark.bpf
@pytest.mark.parametrize("build", modes())
def test_sample_mode_top_level_is_the_runtimes_own(tmp_path: Path, build: str) -> None:
    exe = copy_target(tmp_path, "rtcounters", "1.27", build)
    target = Proc([str(exe)], env=env(GOMAXPROCS="2"))
    out = tmp_path / "s.json"
    try:
        target.wait_line("ready")
        gm = attach(target.p.pid, "--mode", "sample", "--duration", "5",
                    "--summary-json", str(out))
        gm.wait_line("Tracing Go scheduler of PID", timeout=TIMEOUT)
        ask(target, "phase 1.5", "phase ")
        numgoroutine = int(ask(target, "count", "count "))
        assert gm.p.wait(timeout=TIMEOUT) == 0, gm.err
    finally:
        target.kill()
    assert "Traceback" not in gm.err, gm.err
    doc = json.loads(out.read_text())
    assert doc["schema_version"] == 4 and doc["mode"] == "sample"
    rt, census, q = doc["runtime"], doc["census"], doc["quantities"]

    lat = doc["sched_latency_ns"]
    assert lat["source"] == "runtime histogram", lat
    assert lat["count"] == rt["sched_latency_ns"]["count"] > 500
    assert lat["p50"] == rt["sched_latency_ns"]["p50"]
    assert lat["histogram"] == rt["sched_latency_ns"]["histogram"]

    g = doc["goroutines"]
    assert g["live"] == rt["goroutines"] and g["source"] == "runtime counters"
    assert abs(g["live"] - numgoroutine) <= 0.02 * numgoroutine, (g["live"], numgoroutine)
    assert abs(census["goroutines"] - numgoroutine) <= 0.02 * numgoroutine
    assert g["system"] == census["system_goroutines"] > 0
    # Nothing counted creations in sample mode: null, not 0.
    assert g["created"] is None and g["exited"] is None and q["goroutines_created"] is None

    assert doc["syscalls"]["count"] == sum(p["syscalls"] for p in rt["procs"]) > 0
    assert doc["syscalls"]["source"] == "runtime counters"
    schedules = {p["id"]: p["schedules"] for p in rt["procs"]}
    assert {p["id"]: p["executes"] for p in doc["procs"]} == schedules
    assert sum(schedules.values()) > 0

    # P running time: the 50 Hz status reads; at least what perf samples saw of Go on a P.
    running = sum(p["running_ns"] for p in doc["procs"])
    assert q["p_running_ns"] == {"source": "memory samples (50 Hz)", "coverage": "sampled"}
    dur_ns = doc["duration_s"] * 1e9
    assert 0 < running <= 2 * dur_ns * 1.05
    cpu = sum(p["cpu_ns"] for p in doc["kernel"]["cpu_by_p"]["procs"])
    print(f"{build}: latency count {lat['count']} p50 {lat['p50']} (runtime block "
          f"{rt['sched_latency_ns']['count']}, {rt['sched_latency_ns']['p50']}); goroutines "
          f"{g['live']} (gcount {rt['goroutines']}, census {census['goroutines']}, NumGoroutine "
          f"{numgoroutine}); syscalls {doc['syscalls']['count']}; P running {running / 1e9:.3f}"
          f" s, perf cpu on Ps {cpu / 1e9:.3f} s")
    assert running >= 0.5 * cpu, (running, cpu)

    # No hot probe: steals, parks and per-P latency are not measured, never 0.
    assert doc["steals"] is None and doc["park_reasons"] is None
    assert all(p["steals_in"] is None and p["sched_latency_ns"] is None for p in doc["procs"])
    for name, m in q.items():
        assert m is None or (m["source"] and m["coverage"]), name
