"""The findings on committed recordings of real programs (tests/data/README.md says how each
was made): Caddy under wrk and after it, the scale workload's 64 Ps on 2 CPUs."""

from __future__ import annotations

from pathlib import Path

from gmpmon.findings.engine import snapshot_with_findings
from gmpmon.model import Model
from gmpmon.model.findingtypes import Finding, FindingsInputs, Severity
from gmpmon.model.snapshot import Snapshot
from gmpmon.record import read_recording

DATA = Path(__file__).parent.parent / "data"


def replayed(name: str) -> tuple[Snapshot, FindingsInputs]:
    rec = read_recording(str(DATA / name))
    model = Model(rec.header)
    for batch in rec:
        model.feed(batch)
    model.flush()
    snap = snapshot_with_findings(model)
    return snap, model.findings.inputs(snap.now)


def by_id(s: Snapshot) -> dict[str, Finding]:
    return {f.id: f for f in s.findings}


def test_scale_64_ps_on_2_cpus_first_finding_is_gomaxprocs_above_cpus() -> None:
    """scale sets GOMAXPROCS=64 itself after start (the header says 2): the runtime's own
    value and the affinity mask (2 CPUs) make it critical, first, and its symptoms are no
    critical long run."""
    s, inp = replayed("scale64-default.gmp")
    assert s.gomaxprocs == 2 and s.runtime is not None and s.runtime.gomaxprocs == 64
    first = s.findings[0]
    assert first.id == "gomaxprocs-above-cpus", [f.id for f in s.findings]
    assert first.severity == Severity.CRITICAL
    assert first.evidence["usable_cpus"] == inp.cpus_allowed == 2
    assert first.evidence["gomaxprocs"] == 64 and first.evidence["go125_default"] == 2
    long = by_id(s).get("long-running-goroutine")
    assert long is None or long.severity < Severity.CRITICAL, long.title


def test_caddy_under_wrk_long_runs_held_the_p_but_not_a_cpu() -> None:
    """Caddy (go1.26.8) under wrk on a 2-CPU host wrk saturates, default mode: P samples saw
    goroutines hold their P 20-40 ms, but the perf samples of those goroutines inside those
    runs are not 10 ms of Go code: in the kernel (read, write) or descheduled. No warning."""
    s, inp = replayed("caddy-wrk-default.gmp")
    assert s.go_version == "go1.26.8"
    held = list(inp.long_runs)
    assert held, "no run of 10 ms seen: re-capture"
    assert all(r.user_samples >= 0 for r in held)  # every run checked against the kernel
    period = inp.sample_period_ns
    assert any(r.user_samples * period < r.ns for r in held)
    f = by_id(s).get("long-running-goroutine")
    assert f is None or f.severity == Severity.INFO, f.title
    assert [x.id for x in s.findings if x.severity == Severity.CRITICAL] == []


def test_caddy_after_the_load_no_time_without_an_m_grows() -> None:
    """Caddy in sample mode: 3 s of wrk, then idle. The Ps handed off during the load went
    idle after it; their time without an M no longer grows to the end of the capture."""
    s, inp = replayed("caddy-wrk-then-idle-sample.gmp")
    ho = inp.handoffs
    assert ho.count >= 20  # the load made hand-offs
    assert ho.no_m_ns == 0 and ho.no_m_untimed > 0  # sample mode: ended by P samples
    assert "syscall-handoff" not in by_id(s) or by_id(s)["syscall-handoff"].severity < 2
