"""The quantity registry in every output, on recordings of real programs (issue 27).

One recording per mode (tests/data/README.md): sample (`demo-sample-kernel`), default
(`demo-runtime`), full (`sleeper`), each with the runtime counters and the census. For each,
the summary JSON's quantities, the text report's quantity lines, the /metrics exposition and
the headless `--interval` lines are compared with golden files in tests/data/golden/
(rewrite them, after reading the diff, with `GMPMON_UPDATE_GOLDEN=1`), and checked for what
must hold whatever the numbers: no 0 where nothing measured, and every value names its source.
"""

from __future__ import annotations

import json
import os
import re
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from gmpmon.export.json import summary
from gmpmon.fleet.discover import GoProcess
from gmpmon.fleet.metrics import families
from gmpmon.fleet.watch import make_reading
from gmpmon.model.quantities import QUANTITIES, best
from gmpmon.model.snapshot import Snapshot
from gmpmon.record import read_recording
from gmpmon.replay import replay_all
from gmpmon.report import text_report

DATA = Path(__file__).parents[1] / "data"
GOLDEN = DATA / "golden"
MODES = {"sample": "demo-sample-kernel", "default": "demo-runtime", "full": "sleeper"}
# Hot-probe quantities: measured in full and default mode, never in sample mode.
HOT = ("goroutines_created", "goroutines_exited", "steals", "parks", "gosched")


@cache
def replayed(name: str) -> Snapshot:
    return replay_all(read_recording(str(DATA / f"{name}.gmp")))


def json_extract(doc: dict[str, Any]) -> dict[str, Any]:
    """The top-level quantities of the summary (not the blocks other features own)."""
    lat = doc["sched_latency_ns"]
    steals = doc["steals"]
    return {
        "quantities": doc["quantities"],
        "block_sources": doc["block_sources"],
        "sched_latency_ns": None if lat is None else {k: v for k, v in lat.items()
                                                      if k != "histogram"},
        "goroutines": doc["goroutines"],
        "syscalls": doc["syscalls"],
        "preemptions": doc["preemptions"],
        "steals": None if steals is None else {k: v for k, v in steals.items()
                                               if k != "matrix"},
        "park_reasons": None if doc["park_reasons"] is None else len(doc["park_reasons"]),
        "procs": [{k: p[k] for k in ("id", "running_ns", "executes", "steals_in")}
                  for p in doc["procs"]],
        "gc_stw": {k: doc["gc_stw"][k] for k in ("count", "source", "coverage")},
        "mutex": {k: doc["mutex"][k] for k in ("contentions", "source", "coverage")},
    }


# The text report's lines that show the registry's quantities (P table to Goroutines).
TEXT_FROM = "P    now"
TEXT_TO = "Mutex contention"


def text_extract(text: str) -> str:
    body = text[text.index(TEXT_FROM):]
    body = body[:body.index("\n", body.index(TEXT_TO))]
    return "\n".join(ln for ln in body.splitlines() if "|" not in ln) + "\n"  # no bars


def metrics_text(snap: Snapshot) -> str:
    proc = GoProcess(pid=snap.pid, ns_pid=snap.pid, exe="/srv/demo", go_version=snap.go_version,
                     container="", uptime_s=1.0, exe_key=(1, 2, 3, 4, 5))
    ho = best(snap, "handoffs")
    reading = make_reading(proc, snap.runtime, None, (), gc=snap.gc,
                           handoffs_total=None if ho is None else ho.value)

    class C:
        def collect(self):  # type: ignore[no-untyped-def]
            return list(families([reading]))

    reg = CollectorRegistry(auto_describe=False)
    reg.register(C())  # type: ignore[arg-type]
    return generate_latest(reg).decode()


def golden(name: str, got: str) -> None:
    path = GOLDEN / name
    if os.environ.get("GMPMON_UPDATE_GOLDEN"):
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(got)
    assert path.exists(), f"{path} missing: GMPMON_UPDATE_GOLDEN=1 writes it"
    assert got == path.read_text(), f"{name} differs from its golden file"


@pytest.mark.parametrize("mode", list(MODES))
def test_summary_quantities_golden(mode: str) -> None:
    snap = replayed(MODES[mode])
    assert snap.mode == mode
    golden(f"{mode}-summary.json",
           json.dumps(json_extract(summary(snap)), indent=1, ensure_ascii=False) + "\n")


@pytest.mark.parametrize("mode", list(MODES))
def test_text_report_quantities_golden(mode: str) -> None:
    golden(f"{mode}-report.txt", text_extract(text_report(replayed(MODES[mode]), width=None)))


@pytest.mark.parametrize("mode", list(MODES))
def test_metrics_golden(mode: str) -> None:
    golden(f"{mode}-metrics.txt", metrics_text(replayed(MODES[mode])))


@pytest.mark.parametrize("mode", list(MODES))
def test_no_zero_where_nothing_measured_and_every_value_names_its_source(mode: str) -> None:
    snap = replayed(MODES[mode])
    doc = summary(snap)
    q = doc["quantities"]
    for name, m in q.items():
        assert m is None or (m["source"] and m["coverage"]), name
    hot = {n: q[n] for n in HOT}
    if mode == "sample":
        assert all(m is None for m in hot.values()), hot
        assert doc["steals"] is None and doc["park_reasons"] is None
        g = doc["goroutines"]
        assert g["created"] is None and g["exited"] is None and g["seen_live"] is None
        assert doc["preemptions"]["gosched"] is None
        assert all(p["steals_in"] is None and p["sched_latency_ns"] is None
                   for p in doc["procs"])
        assert doc["sched_latency_ns"]["source"] == "runtime histogram"
        assert doc["sched_latency_ns"]["count"] == doc["runtime"]["sched_latency_ns"]["count"]
    else:
        cov = "exact" if mode == "full" else re.compile(r"windows, \d+% of the time")
        for n, m in hot.items():
            assert m is not None, n
            assert m["coverage"] == cov if isinstance(cov, str) else cov.fullmatch(
                m["coverage"]), (n, m)
    # Measured by the runtime in every mode: goroutines as NumGoroutine counts them.
    rt = doc["runtime"]
    assert doc["goroutines"]["live"] == rt["goroutines"] == doc["census"]["goroutines"]
    assert doc["goroutines"]["system"] == doc["census"]["system_goroutines"]

    text = text_extract(text_report(snap, width=None))
    for line in text.splitlines():
        if re.match(r"(Syscalls|Preempted|Goroutines|GC stop|Work stealing|  created)", line):
            assert re.search(r"\((probes|runtime|census|not measured)", line) or (
                "not measured" in line), line
    if mode == "sample":
        assert "created -, exited - (not measured)" in text
        assert re.search(r"^Work stealing: not measured", text, re.M)
        assert " 0 created" not in text and "Syscalls 0" not in text


def test_metrics_have_no_series_for_what_nothing_measured() -> None:
    """/metrics: the hand-off counter needs its cold probe; a trap-free reading has none."""
    snap = replayed(MODES["sample"])
    proc = GoProcess(pid=1, ns_pid=1, exe="/x", go_version=snap.go_version, container="",
                     uptime_s=1.0, exe_key=(1, 2, 3, 4, 5))
    reading = make_reading(proc, snap.runtime, None, ())
    names = {m.name for m in families([reading]) if m.samples}
    assert "gmpmon_handoffs" not in names
    assert {"gmpmon_goroutines", "gmpmon_syscalls", "gmpmon_sched_latency_seconds"} <= names
    assert "gmpmon_handoffs_total" in metrics_text(snap)  # with the probe, it is there


def test_schema_doc_lists_every_quantity_and_its_sources_in_order() -> None:
    doc = (Path(__file__).parents[2] / "docs" / "summary-schema.md").read_text()
    for q in QUANTITIES.values():
        src = "; ".join(f"{i + 1}. `{s.name}` ({s.when})" for i, s in enumerate(q.sources))
        row = f"| `{q.name}` | {q.meaning} | {src} |"
        assert row in doc, f"docs/summary-schema.md lacks or differs on: {row}"


def test_default_mode_without_a_window_falls_back_to_the_runtime_and_says_so() -> None:
    """caddy-wrk-default.gmp: Caddy under wrk, default mode, no window ever opened (the
    budget never allowed one). Nothing counted by windows is printed as a windowed 0."""
    snap = replayed("caddy-wrk-default")
    assert snap.mode == "default" and snap.windows_covered_ns == 0
    doc = summary(snap)
    q = doc["quantities"]
    assert q["sched_latency"]["source"] == "runtime histogram"
    assert doc["sched_latency_ns"]["count"] == doc["runtime"]["sched_latency_ns"]["count"] > 0
    assert q["syscalls"]["source"] == "runtime counters"
    assert q["p_running_ns"] == {"source": "perf samples", "coverage": "sampled"}
    assert all(p["idle_ns"] is None and p["running_ns"] > 0 for p in doc["procs"])
    assert q["steals"] is None and q["parks"] is None and doc["steals"] is None
    text = text_report(snap, width=None)
    assert "Work stealing: not measured (no duty-cycle window opened)" in text


def test_metrics_leave_out_what_the_target_lacks() -> None:
    """A runtime-counter feature the Go version or binary lacks was not read: its series is
    absent from /metrics, not a 0 (the reading said 0 goroutines and 0 syscalls before)."""
    import dataclasses

    from gmpmon.events import RT_FEATURE_NAMES, RtFeature

    snap = replayed(MODES["sample"])
    assert snap.runtime is not None
    lacks = tuple(RT_FEATURE_NAMES[f] for f in (RtFeature.GOROUTINES, RtFeature.LATENCY,
                                                 RtFeature.P_TICKS))
    rv = dataclasses.replace(snap.runtime, missing=lacks)
    proc = GoProcess(pid=1, ns_pid=1, exe="/x", go_version=snap.go_version, container="",
                     uptime_s=1.0, exe_key=(1, 2, 3, 4, 5))
    names = {m.name for m in families([make_reading(proc, rv, None, ())]) if m.samples}
    assert not names & {"gmpmon_syscalls", "gmpmon_sched_latency_seconds"}, names
    gor = next(m for m in families([make_reading(proc, rv, None, ())])
               if m.name == "gmpmon_goroutines")
    assert all(s.labels["state"] != "all" for s in gor.samples)  # the census's states stay


def headless_lines(name: str) -> str:
    """What `gmpmon replay NAME.gmp --no-tui --interval 1` prints before its report: the
    legend and one line a second of recording (the live printer's lines, same function)."""
    from gmpmon.commands.replay import _replay

    out: list[str] = []
    _replay(read_recording(str(DATA / f"{name}.gmp")), 1.0, out.append)
    return "".join(out)


@pytest.mark.parametrize("mode", list(MODES))
def test_headless_lines_golden(mode: str) -> None:
    text = headless_lines(MODES[mode])
    golden(f"{mode}-headless.txt", text)
    legend, lines = text.split("\n    ", 1)
    # every value names its source: the legend says where steal, park and p99 come from
    assert f"({mode} mode: steal" in legend and "p99" in legend.split(f"({mode} mode")[1]
    assert lines.count(" | last ") >= 1
    if mode == "sample":
        assert "steal=0" not in lines and "park=0" not in lines
        assert all(" steal=- park=- " in ln for ln in lines.splitlines())


@pytest.mark.parametrize("name", ["caddy-wrk-default", "prometheus-wrk-default"])
def test_headless_lines_say_not_measured_where_no_window_opened(name: str) -> None:
    """Default mode on a busy server: a second no duty-cycle window touched printed
    steal=0 park=0 p99=- (issue 27); it says '-' for what the probes did not see, and the
    runtime's own p99 (a bucket bound)."""
    lines = headless_lines(name).splitlines()[5:]  # after the legend
    assert lines and all(" | last " in ln for ln in lines), lines
    for ln in lines:
        assert "steal=0 park=0" not in ln and "p99=-" not in ln, ln
    snap = replayed(name)
    if snap.windows_covered_ns == 0:  # Caddy: no window ever opened
        assert all(" steal=- park=- p99=≤" in ln for ln in lines), lines
    else:  # Prometheus: one window, in one second of four
        windowed = [ln for ln in lines if " steal=- " not in ln]
        assert len(windowed) == 1 and len(lines) > 1, lines
