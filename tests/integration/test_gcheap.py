"""The GC and heap panel against the runtime's own runtime/metrics of the same run.

The workload (scripts/targets/gcheap) reads runtime/metrics (and MemStats) inside itself on
command, and allocates only while told to ("churn S"). gmpmon takes its baseline before the
churn and its last read after it, when nothing allocates, so both sides cover the same GC
cycles. Checked (within 2%, or exactly where the runtime's value cannot move):

- /gc/cycles/total:gc-cycles (the cycles of the churn), MemStats.PauseTotalNs;
- /gc/heap/live:bytes (1.21+), /gc/heap/goal:bytes, /gc/gogc:percent, /gc/gomemlimit:bytes;
- /cpu/classes/gc/{mark/assist,mark/dedicated,mark/idle,pause}:cpu-seconds (1.21+); on Go
  1.19, which has no cumulative GC CPU, these are None and the view says "not measured".

The no-BPF tests use the capture's own reader (RuntimeSources, with its live layout check)
and the model part; the BPF one runs ``gmpmon attach --summary-json`` end to end.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gmpmon.binary import load_pid
from gmpmon.capture.runtime_sources import RuntimeSources
from gmpmon.events import EventTuple
from gmpmon.model.gcheap import GcPart, GcView
from tests import gotargets

GM = [sys.executable, "-m", "gmpmon"]
A = "/cpu/classes/gc/mark/assist:cpu-seconds"
CHURN_S = 1.5
NS = 1e9


@dataclass
class Target:
    proc: subprocess.Popen[str]
    version: str

    def ask(self, cmd: str, prefix: str) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()
        while True:
            line = self.proc.stdout.readline()
            assert line, f"workload exited before answering {cmd!r}"
            if line.startswith(prefix + " "):
                return line[len(prefix) + 1 :]

    def metrics(self) -> dict[str, Any]:
        got: dict[str, Any] = json.loads(self.ask("metrics", "metrics"))
        return got


def start(exe: Path, version: str, env: dict[str, str] | None = None) -> Target:
    proc = subprocess.Popen(
        [str(exe)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env={"GOMAXPROCS": "2", "PATH": "/usr/bin:/bin", **(env or {})},
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    return Target(proc, version)


# Default settings; GOGC/GOMEMLIMIT set with the limit far above the heap (the goal stays
# GOGC's); and a limit just above the live heap, where the memory limit's goal is the lower.
SETTINGS = {"default": {}, "gogc75": {"GOGC": "75", "GOMEMLIMIT": "4GiB"},
            "memlimit": {"GOMEMLIMIT": "40MiB"}}
LIMITS = {"4GiB": 4 << 30, "40MiB": 40 << 20}


@pytest.fixture(params=[(*vm, s) for vm in gotargets.matrix() for s in SETTINGS
                        if s == "default" or vm[1] == "default"],
                ids=lambda p: f"{p[0]}-{p[1]}-{p[2]}")
def target(request: pytest.FixtureRequest) -> Iterator[tuple[Target, dict[str, str]]]:
    version, mode, setting = request.param
    t = start(gotargets.build("gcheap", go=version, mode=mode), version, SETTINGS[setting])
    try:
        yield t, SETTINGS[setting]
    finally:
        t.proc.kill()
        t.proc.wait()


def fold(events: list[EventTuple]) -> GcView:
    part = GcPart()
    table = dict(part.handlers())
    for e in sorted(events, key=lambda e: e[0]):
        fn = table.get(e[1])
        if fn is not None:
            fn(e)
    view = part.view()
    assert view is not None
    return view


def within(got: float, want: float, rel: float = 0.02) -> bool:
    return abs(got - want) <= rel * max(abs(want), 1)


def minor(version: str) -> int:
    return int(version.split(".")[1])


def check_against_metrics(gc: dict[str, Any], m0: dict[str, Any], m1: dict[str, Any],
                          version: str, env: dict[str, str]) -> None:
    """gc: the summary's gc block (or the view as such a dict); m0/m1: the workload's
    metrics before and after the churn."""
    cycles = m1["/gc/cycles/total:gc-cycles"] - m0["/gc/cycles/total:gc-cycles"]
    print(f"gcheap {version}: cycles {gc['cycles']} vs {cycles}; pause {gc['pause_ns']} vs "
          f"{m1['MemStats.PauseTotalNs'] - m0['MemStats.PauseTotalNs']} ns; goal "
          f"{gc['heap_goal_bytes']} vs {m1['/gc/heap/goal:bytes']}; live "
          f"{gc['heap_live_bytes']} vs {m1.get('/gc/heap/live:bytes', 'no metric')}; assist "
          f"{gc['mark_assist_cpu_ns']} vs " + (
              f"{(m1[A] - m0[A]) * NS:.0f} ns" if A in m1 else "no metric"))
    assert cycles >= 3, f"the churn made too few GC cycles to compare ({cycles})"
    assert within(gc["cycles"], cycles), (gc["cycles"], cycles)
    pause = m1["MemStats.PauseTotalNs"] - m0["MemStats.PauseTotalNs"]
    assert within(gc["pause_ns"], pause), (gc["pause_ns"], pause)
    goal = m1["/gc/heap/goal:bytes"]
    if env.get("GOMEMLIMIT") == "40MiB":
        # Under a tight limit the goal follows mappedReady and heapFree, which the metrics
        # read itself moves (it allocates; the scavenger works): within 2% (even
        # metrics.Read and ReadMemStats, one after the other, give goals ~0.2% apart).
        # No cycle runs between the reads: the churn ends with runtime.GC.
        assert within(gc["heap_goal_bytes"], goal), (gc["heap_goal_bytes"], goal)
        assert gc["heap_goal_bytes"] < 40 << 20  # the limit's goal, not GOGC's
        assert abs(gc["cycles_total"] - m1["MemStats.NumGC"]) <= 1
    else:
        assert gc["heap_goal_bytes"] == goal == m1["MemStats.NextGC"]
        assert gc["cycles_total"] == m1["MemStats.NumGC"]
    assert gc["gogc"] == int(env.get("GOGC", "100"))
    limit = env.get("GOMEMLIMIT")
    assert gc["memory_limit_bytes"] == (LIMITS[limit] if limit else None)
    assert gc["heap_goal_note"] == ""
    if minor(version) >= 21:
        assert gc["heap_live_bytes"] == m1["/gc/heap/live:bytes"]
        assert m1["/gc/gogc:percent"] == gc["gogc"]
        assert m1["/gc/gomemlimit:bytes"] == (gc["memory_limit_bytes"] or (1 << 63) - 1)
        for key, metric in (("mark_assist_cpu_ns", "mark/assist"),
                            ("mark_dedicated_cpu_ns", "mark/dedicated"),
                            ("mark_idle_cpu_ns", "mark/idle"), ("pause_cpu_ns", "pause")):
            name = f"/cpu/classes/gc/{metric}:cpu-seconds"
            want = (m1[name] - m0[name]) * NS
            assert abs(gc[key] - want) <= max(0.02 * want, 1000), (key, gc[key], want)
    else:
        for key in ("mark_assist_cpu_ns", "mark_dedicated_cpu_ns", "mark_idle_cpu_ns",
                    "pause_cpu_ns", "cpu_total_ns"):
            assert gc[key] is None, key  # not measured, never 0
        assert any("work.cpuStats" in m for m in gc["missing"])


def test_gc_panel_matches_runtime_metrics(target: tuple[Target, dict[str, str]]) -> None:
    t, env = target
    pid = t.proc.pid
    rs = RuntimeSources(load_pid(pid), pid, census_s=0)
    try:
        assert rs.gc is not None, rs.errors
        events: list[EventTuple] = []
        stacks: dict[int, tuple[str, ...]] = {}
        m0 = t.metrics()
        rs.poll(time.monotonic_ns(), events, stacks, final=True)
        t.ask(f"churn {CHURN_S}", "churned")
        rs.poll(time.monotonic_ns(), events, stacks, final=True)
        m1 = t.metrics()
    finally:
        rs.close()
    from gmpmon.export.json import gc_summary

    gc = gc_summary(fold(events))
    assert gc is not None and gc["source"] == "runtime memory"
    check_against_metrics(gc, m0, m1, t.version, env)


@pytest.mark.bpf
def test_summary_json_gc_block_matches_runtime_metrics(tmp_path: Path) -> None:
    """End to end: ``gmpmon attach`` (sample mode) on Go 1.27; the summary's gc block and
    the text report against the workload's own metrics over the same cycles."""
    exe = tmp_path / "gcheap"
    shutil.copy(gotargets.build("gcheap", go="1.27"), exe)  # private inode for uprobes
    t = start(exe, "1.27")
    out = tmp_path / "s.json"
    gm: subprocess.Popen[str] | None = None
    try:
        m0 = t.metrics()
        gm = subprocess.Popen(
            [*GM, "attach", str(t.proc.pid), "--mode", "sample", "--no-tui",
             "--summary-json", str(out)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        assert gm.stdout is not None
        for line in gm.stdout:
            if line.startswith("Tracing Go scheduler"):
                break
        else:
            pytest.fail(f"gmpmon did not attach: {gm.stderr.read() if gm.stderr else ''}")
        time.sleep(0.5)  # the first runtime read (the baseline) is taken at 10 Hz
        t.ask(f"churn {CHURN_S}", "churned")
        time.sleep(0.5)
        m1 = t.metrics()
        gm.send_signal(signal.SIGINT)
        report, err = gm.communicate(timeout=60)
        assert gm.returncode == 0, err[-2000:]
    finally:
        if gm is not None and gm.poll() is None:
            gm.kill()
            gm.wait()
        t.proc.kill()
        t.proc.wait()
    summary = json.loads(out.read_text())
    gc = summary["gc"]
    assert summary["block_sources"]["gc"] == "runtime memory"
    check_against_metrics(gc, m0, m1, "1.27", {})
    assert "GC and heap (source: runtime memory)" in report
