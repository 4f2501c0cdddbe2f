"""Golden scenarios for the findings engine: one per finding id, each written as the probes
(and the sampler, the cgroup reader) would emit it, plus a healthy workload in every mode
that must get no warning. Times in µs (``us``); expected values worked out by hand."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pytest

from gmpmon.events import U64_MAX, Batch, CgroupField, EventTuple, Header, Kind, LockKind
from gmpmon.export.json import summary
from gmpmon.findings.engine import FINDING_IDS, snapshot_with_findings
from gmpmon.model import Model
from gmpmon.model.findingtypes import Finding, Severity
from gmpmon.model.snapshot import Snapshot
from gmpmon.report import text_report

WAIT_REASONS = ("", "GC assist marking", "IO wait", "chan receive", "sleep", "sync.Mutex.Lock")
SLEEP, CHANRECV = 4, 3
T0 = 1_000_000_000_000
MS = 1000.0  # µs per ms
P_IDLE_ST, P_RUNNING_ST = 0, 1  # Header.p_status indices
G_RUNNING_ST, G_WAITING_ST = 2, 4


def us(n: float) -> int:
    return T0 + int(n * 1000)


def ev(t: float, kind: Kind, p: int = -1, m: int = 0, g: int = 0, a0: int = 0,
       a1: int = 0) -> EventTuple:
    return (us(t), int(kind), p, m, g, a0, a1)


def header(mode: str = "full", gomaxprocs: int = 2, go: str = "go1.27.3") -> Header:
    return Header(pid=42, exe="/bin/target", go_version=go, gomaxprocs=gomaxprocs, mode=mode,
                  start_ns=T0, wall_start=0.0, wait_reasons=WAIT_REASONS,
                  stw_reasons=("", "GC mark termination"),
                  p_status=("idle", "running", "syscall", "gcstop", "dead"))


def run(events: Iterable[EventTuple], *, mode: str = "full", gomaxprocs: int = 2,
        go: str = "go1.27.3", stacks: dict[int, tuple[str, ...]] | None = None) -> Snapshot:
    model = Model(header(mode, gomaxprocs, go))
    evs = sorted(events, key=lambda e: e[0])
    model.feed(Batch(evs, stacks or {}))
    model.flush()
    return snapshot_with_findings(model)


def by_id(s: Snapshot) -> dict[str, Finding]:
    return {f.id: f for f in s.findings}


def alarms(s: Snapshot) -> list[str]:
    return [f"{f.id}:{f.severity.label}" for f in s.findings if f.severity >= Severity.WARNING]


# ---------------------------------------------------------------- healthy, every mode

def sleeper_events(seconds: float = 3.0, gs: int = 10, mode: str = "full") -> list[EventTuple]:
    """``gs`` goroutines each sleeping 100 ms, running 50 µs; Ps idle in between. Hot events
    in full mode (and inside windows in default mode), P/SCHED samples in sample/default."""
    out: list[EventTuple] = []
    hot = mode in ("full", "default")
    t = 0.0
    while t < seconds * 1e6:
        for i in range(gs):
            wake = t + i * 7 * MS
            p = i % 2
            g = 10 + i
            in_window = mode == "full" or (wake % 1e6) < 200 * MS
            if hot and in_window:
                out += [
                    ev(wake, Kind.READY, m=90, g=g, a1=SLEEP),
                    ev(wake + 5, Kind.FIND_RUNNABLE, p=p, m=100 + p, a0=0, a1=0),
                    ev(wake + 20, Kind.EXECUTE, p=p, m=100 + p, g=g, a1=0),
                    ev(wake + 70, Kind.PARK, p=p, m=100 + p, g=g, a0=SLEEP),
                    ev(wake + 80, Kind.P_IDLE, p=p, m=100 + p),
                ]
        t += 100 * MS
    if mode in ("sample", "default"):
        t = 0.0
        while t < seconds * 1e6:
            for p in range(2):
                out.append(ev(t + 1, Kind.P_SAMPLE, p=p, a0=P_IDLE_ST, a1=1000 + int(t // 1e5)))
            out.append(ev(t + 2, Kind.SCHED_SAMPLE, a0=2, a1=0))
            t += 10 * MS
    if mode == "default":
        for sec in range(int(seconds) + 1):
            out.append(ev(sec * 1e6, Kind.WINDOW, a0=1))
            out.append(ev(sec * 1e6 + 200 * MS, Kind.WINDOW, a0=0))
    # A cgroup with no quota, read every 500 ms, never throttled.
    for k in range(int(seconds * 2) + 1):
        out += cgroup_events(k * 500 * MS, quota=-1, periods=0, throttled=0, throttled_ns=0)
    return out


@pytest.mark.parametrize("mode", ["full", "default", "sample"])
def test_healthy_sleeper_gets_no_warning_in_any_mode(mode: str) -> None:
    s = run(sleeper_events(mode=mode), mode=mode)
    assert alarms(s) == [], [f.to_json() for f in s.findings]
    assert "none: no scheduler pathology detected" in text_report(s)
    doc = summary(s)
    assert doc["findings"] == [f.to_json() for f in s.findings]


# ---------------------------------------------------------------- cpu-saturation

def saturated_events(seconds: float = 1.0) -> list[EventTuple]:
    """Both Ps run goroutines back to back, each preempted after 10 ms; the next one waited
    5 ms in a run queue of 3."""
    out: list[EventTuple] = []
    g = 100
    cur = {0: 0, 1: 0}
    t = 0.0
    while t < seconds * 1e6:
        for p in (0, 1):
            if cur[p]:
                out.append(ev(t, Kind.PREEMPTED, p=p, m=100 + p, g=cur[p], a0=1))
            g += 1
            out.append(ev(t - 5 * MS, Kind.READY, m=100 + p, g=g, a1=CHANRECV))
            out.append(ev(t + 1, Kind.EXECUTE, p=p, m=100 + p, g=g, a1=3))
            cur[p] = g
        t += 10 * MS
    return out


def test_cpu_saturation_all_ps_running_with_queued_goroutines() -> None:
    s = run(saturated_events())
    f = by_id(s)["cpu-saturation"]
    assert f.severity >= Severity.WARNING
    assert f.evidence["runq_max"] == 3 and f.evidence["runq_mean"] is None  # no samples
    assert f.evidence["sched_latency_p99_ns"] >= 4_000_000
    assert min(f.evidence["p_running_share"].values()) > 0.99
    assert f.evidence["tail_wait_all_running_share"] > 0.9
    att = s.latency_attribution
    assert att is not None and att.share("all_running") > 0.9
    assert "GOMAXPROCS" in f.advice


# ---------------------------------------------------------------- cpu-throttled

def cgroup_events(t: float, *, quota: int, periods: int, throttled: int, throttled_ns: int,
                  version: int = 1) -> list[EventTuple]:
    q = U64_MAX if quota < 0 else quota
    return [ev(t, Kind.CGROUP_CPU, g=int(f), a0=v, a1=version) for f, v in (
        (CgroupField.QUOTA_US, q), (CgroupField.PERIOD_US, 100_000),
        (CgroupField.NR_PERIODS, periods), (CgroupField.NR_THROTTLED, throttled),
        (CgroupField.THROTTLED_NS, throttled_ns), (CgroupField.USAGE_NS, 0))]


def throttled_events(quota: int = 50_000) -> list[EventTuple]:
    out = sleeper_events(seconds=2)
    out = [e for e in out if e[1] != Kind.CGROUP_CPU]
    for k in range(5):  # 10 periods per 500 ms read, 6 of them throttled
        out += cgroup_events(k * 500 * MS, quota=quota, periods=10 * k, throttled=6 * k,
                             throttled_ns=k * 150_000_000)
    return out


@pytest.mark.parametrize(("go", "reads_quota"), [("go1.24.11", False), ("go1.25.5", True)])
def test_cpu_throttled_counts_growing_and_says_which_go_reads_quotas(
        go: str, reads_quota: bool) -> None:
    s = run(throttled_events(), go=go)
    f = by_id(s)["cpu-throttled"]
    assert f.severity == Severity.CRITICAL  # 60% of periods throttled
    ev_ = f.evidence
    assert (ev_["nr_periods"], ev_["nr_throttled"], ev_["throttled_ns"]) == (40, 24, 600_000_000)
    assert ev_["quota_cpus"] == 0.5 and ev_["gomaxprocs"] == 2
    assert ev_["go_reads_quota"] is reads_quota
    assert ("ignores CPU quotas" in f.advice) is (not reads_quota)
    assert ("Go 1.25+" in f.advice)
    assert "throttled in 60% of CFS periods" in f.title
    assert s.cgroup_cpu is not None and s.cgroup_cpu.version == 1


def affinity_event(t: float, cpus: int) -> EventTuple:
    return ev(t, Kind.CGROUP_CPU, g=int(CgroupField.AFFINITY_CPUS), a0=cpus)


def test_gomaxprocs_over_quota_without_throttling_is_gomaxprocs_above_cpus() -> None:
    """3 Ps in a 1-CPU quota, never throttled: not cpu-throttled (nothing was throttled)
    but gomaxprocs-above-cpus, a warning (3 > Go 1.25's floor of 2, < 4x the CPUs)."""
    out = [e for e in sleeper_events(seconds=2) if e[1] != Kind.CGROUP_CPU]
    out += cgroup_events(0, quota=100_000, periods=0, throttled=0, throttled_ns=0, version=2)
    out.append(affinity_event(0, 2))
    s = run(out, gomaxprocs=3)
    assert "cpu-throttled" not in by_id(s)
    f = by_id(s)["gomaxprocs-above-cpus"]
    assert f.severity == Severity.WARNING
    assert f.evidence["usable_cpus"] == 1 and f.evidence["affinity_cpus"] == 2
    assert f.evidence["quota_cpus"] == 1.0 and f.evidence["gomaxprocs"] == 3
    # The recording has no leaf quota (made before it): Go 1.25 would read this one.
    assert f.evidence["go125_default"] == 2
    assert "GOMAXPROCS=3 but the process may use 1 CPUs" in f.title


def test_go_125s_own_floor_of_two_ps_is_only_info() -> None:
    """A 0.5-CPU quota: Go 1.25+ itself picks 2 Ps (ceil, then at least 2)."""
    out = [e for e in sleeper_events(seconds=2) if e[1] != Kind.CGROUP_CPU]
    out += cgroup_events(0, quota=50_000, periods=0, throttled=0, throttled_ns=0, version=2)
    f = by_id(run(out, gomaxprocs=2, go="go1.25.5"))["gomaxprocs-above-cpus"]
    assert f.severity == Severity.INFO


@pytest.mark.parametrize(("affinity", "leaf", "want"), [
    (8, 0.0, 8), (8, 0.5, 2), (8, 2.5, 3), (2, 16.0, 2), (1, 0.2, 1), (0, 1.0, 0)])
def test_go_125_default_gomaxprocs(affinity: int, leaf: float, want: int) -> None:
    from gmpmon.findings.rules_cpu import go_default_gomaxprocs
    assert go_default_gomaxprocs(affinity, leaf) == want


def test_gomaxprocs_above_cpus_is_first_before_its_symptoms() -> None:
    """64 Ps on 2 CPUs (the scale workload's shape): critical, and shown before the
    critical symptoms (here cpu-throttled, a long run) whatever the order of the rules."""
    out = [*throttled_events(quota=400_000), affinity_event(0, 2)]
    out += cpu_samples(9, 0, 0, 1500 * MS) + [
        ev(k * 10 * MS + 1, Kind.P_SAMPLE, p=0, m=100, g=9,
           a0=P_RUNNING_ST | (G_RUNNING_ST << 8), a1=5) for k in range(150)]
    s = run(out, gomaxprocs=64)
    ids = [f.id for f in s.findings]
    assert ids[0] == "gomaxprocs-above-cpus", ids
    assert s.findings[0].severity == Severity.CRITICAL
    assert s.findings[0].evidence["usable_cpus"] == 2
    assert "cpu-throttled" in ids


def test_quota_that_fits_gomaxprocs_and_no_throttling_is_silent() -> None:
    out = [e for e in sleeper_events(seconds=2) if e[1] != Kind.CGROUP_CPU]
    out += cgroup_events(0, quota=200_000, periods=0, throttled=0, throttled_ns=0)
    out += cgroup_events(1e6, quota=200_000, periods=10, throttled=0, throttled_ns=0)
    assert "cpu-throttled" not in by_id(run(out))


# ---------------------------------------------------------------- long-running-goroutine

def test_long_running_goroutine_from_events_names_the_goroutine() -> None:
    out = sleeper_events(seconds=1) + four_long_runs()  # no perf samples: not checked
    s = run(out, gomaxprocs=3)
    f = by_id(s)["long-running-goroutine"]
    assert f.severity == Severity.WARNING
    assert f.evidence["goroutines"][0] == {"goid": 7, "runs": 4, "longest_ns": 50_000_000,
                                           "preempt_requests": 4}
    assert f.evidence["sampled"] == []


def test_long_running_goroutine_from_samples_in_sample_mode() -> None:
    out = sleeper_events(seconds=1, mode="sample")
    out = [e for e in out if not (e[1] == Kind.P_SAMPLE and e[2] == 0 and e[0] < us(900 * MS))]
    for k in range(90):  # P0 runs G9 three times 300 ms with one schedtick each
        out.append(ev(k * 10 * MS + 1, Kind.P_SAMPLE, p=0, m=100, g=9,
                      a0=P_RUNNING_ST | (G_RUNNING_ST << 8), a1=5 + k // 30))
    # Without perf samples nothing says the thread was on a CPU: never critical.
    f = by_id(run(out, mode="sample"))["long-running-goroutine"]
    assert f.severity == Severity.WARNING
    assert "not checked against the kernel" in f.title and f.evidence["runs_not_checked"] == 3
    # The perf sampler saw G9 in Go code all along (999 Hz): the kernel agrees.
    s = run(out + cpu_samples(9, 0, 0, 900 * MS), mode="sample")
    f = by_id(s)["long-running-goroutine"]
    assert f.severity == Severity.CRITICAL  # >= 200 ms
    assert f.evidence["goroutines"][0]["goid"] == 9
    assert f.evidence["goroutines"][0]["runs"] == 3
    assert f.evidence["sampled"] == ["long_runs", "longest_ns"]
    assert "on a CPU in Go code" in f.title and f.evidence["runs_not_on_cpu"] == 0


SAMPLE_PERIOD_US = 1e6 / 999  # Header.sample_hz's default


def cpu_samples(g: int, p: int, t0: float, t1: float, outcome: int = 0,
                tid: int = 100) -> list[EventTuple]:
    """Perf samples of thread ``tid`` running G ``g`` on P ``p`` from t0 to t1 (µs), at the
    header's 999 Hz; outcome 0 = user mode (SAMPLE_GO), 3 = kernel mode (SAMPLE_KERNEL)."""
    n = int((t1 - t0) / SAMPLE_PERIOD_US)
    return [ev(t0 + k * SAMPLE_PERIOD_US, Kind.CPU_SAMPLE, p=p, m=tid, g=g,
               a0=outcome | (P_RUNNING_ST << 8)) for k in range(n)]


def four_long_runs(g: int = 7) -> list[EventTuple]:
    """G ``g`` holds P2 for 50 ms four times (EXECUTE .. PREEMPTED)."""
    out = []
    for k in range(4):
        t = 100 * MS + k * 200 * MS
        out += [ev(t, Kind.EXECUTE, p=2, m=102, g=g), ev(t + 30 * MS, Kind.PREEMPT_REQ, p=2, g=g),
                ev(t + 50 * MS, Kind.PREEMPTED, p=2, m=102, g=g, a0=1)]
    return out


@pytest.mark.parametrize("kernel", ["user", "syscall", "descheduled"])
def test_a_long_run_is_on_cpu_time_in_go_code_from_the_kernels_view(kernel: str) -> None:
    """The P was held 50 ms four times. Perf samples say where the thread was: in Go code
    (a long run), in the kernel (a syscall: not one), or nowhere (descheduled: not one)."""
    out = sleeper_events(seconds=1) + four_long_runs()
    out += cpu_samples(12, 0, 0, 900 * MS, tid=100)  # the sampler runs: another G on P0
    for k in range(4):
        t = 100 * MS + k * 200 * MS
        if kernel == "user":
            out += cpu_samples(7, 2, t, t + 50 * MS, tid=102)
        elif kernel == "syscall":
            out += cpu_samples(7, 2, t, t + 50 * MS, outcome=3, tid=102)
    found = by_id(run(out, gomaxprocs=3))
    if kernel != "user":
        # Four preemption requests alone are not worth a word.
        assert "long-running-goroutine" not in found
        return
    f = found["long-running-goroutine"]
    ev_ = f.evidence
    if kernel == "user":
        assert f.severity == Severity.WARNING and ev_["runs_not_on_cpu"] == 0
        assert ev_["goroutines"][0]["goid"] == 7 and ev_["goroutines"][0]["runs"] == 4
        assert 45_000_000 <= ev_["longest_ns"] <= 50_000_000
        assert "on a CPU in Go code" in f.title


def test_one_long_run_seen_only_by_samples_is_just_info() -> None:
    # A G woken into runnext inherits its time slice (same schedtick): samples alone cannot
    # tell one 60 ms run from many short ones, so one such "run" is no warning.
    out = sleeper_events(seconds=1, mode="sample")
    out = [e for e in out if not (e[1] == Kind.P_SAMPLE and e[2] == 0 and e[0] < us(60 * MS))]
    for k in range(6):
        out.append(ev(k * 10 * MS + 1, Kind.P_SAMPLE, p=0, m=100, g=9,
                      a0=P_RUNNING_ST | (G_RUNNING_ST << 8), a1=5))
    f = by_id(run(out, mode="sample"))["long-running-goroutine"]
    assert f.severity == Severity.INFO


# ---------------------------------------------------------------- syscall-handoff

def test_syscall_handoff_by_sysmon_retake_and_time_without_an_m() -> None:
    out = sleeper_events(seconds=1)
    for k in range(100):
        t = k * 10 * MS + 3 * MS
        out += [ev(t, Kind.EXECUTE, p=0, m=111, g=5),
                ev(t + 10, Kind.SYSCALL_ENTER, p=0, m=111, g=5),
                ev(t + 60, Kind.HANDOFF, p=0, m=99, g=5),  # sysmon's M
                ev(t + 1060, Kind.EXECUTE, p=0, m=112, g=6),
                ev(t + 1100, Kind.PARK, p=0, m=112, g=6, a0=CHANRECV),
                ev(t + 2000, Kind.SYSCALL_EXIT, m=111, g=5)]
    s = run(out)
    f = by_id(s)["syscall-handoff"]
    assert f.severity == Severity.WARNING
    assert f.evidence["handoffs"] == 100
    assert f.evidence["by_cause"] == {"syscall-retake": 100}
    assert 95_000_000 <= f.evidence["no_m_ns"] <= 100_000_000  # the sleeper uses P0 too
    assert f.evidence["goroutines"] == [{"goid": 5, "handoffs": 100}]
    assert "cgo-pinning" not in by_id(s)


@pytest.mark.parametrize("mode", ["full", "sample"])
def test_a_handed_off_p_that_goes_idle_no_longer_waits_for_an_m(mode: str) -> None:
    """handoffp with no work puts the P on the idle list at once (pidleput): from then on it
    is idle, not waiting for an M. 20 hand-offs of P1 in the first 200 ms, then P1 idles for
    2.8 s: the time without an M once ran to the end of the capture (47% of the P-time, a
    critical on an idle Caddy). Full mode sees the P_IDLE; sample mode P samples of an idle
    P (no M), which end the wait at an unknown time: not timed, not counted."""
    out = [e for e in sleeper_events(seconds=3, mode=mode) if e[2] != 1]
    for k in range(20):
        t = k * 10 * MS + 1 * MS
        out.append(ev(t + 60, Kind.HANDOFF, p=1, m=99, g=5))
        if mode == "full":
            out += [ev(t, Kind.SYSCALL_ENTER, p=1, m=111, g=5), ev(t + 70, Kind.P_IDLE, p=1, m=99),
                    ev(t + 5 * MS, Kind.SYSCALL_EXIT, m=111, g=5)]
    if mode == "sample":
        out += [ev(k * 10 * MS + 5, Kind.P_SAMPLE, p=1, a0=P_IDLE_ST, a1=7) for k in range(300)]
    model = Model(header(mode))
    model.feed(Batch(sorted(out, key=lambda e: e[0])))
    model.flush()
    s = snapshot_with_findings(model)
    ho = model.findings.inputs(s.now).handoffs
    assert ho.count == 20
    if mode == "full":
        assert ho.no_m_ns == 20 * 10_000 and ho.no_m_timed == 20  # 10 µs each
    else:
        assert ho.no_m_ns == 0 and ho.no_m_untimed == 20
    assert "syscall-handoff" not in by_id(s), by_id(s)["syscall-handoff"].title


# ---------------------------------------------------------------- cgo-pinning

def test_locked_thread_blocking_hands_its_p_off() -> None:
    out = sleeper_events(seconds=1)
    for k in range(50):
        t = k * 20 * MS + 4 * MS
        out += [ev(t, Kind.EXECUTE, p=1, m=121, g=9),
                ev(t + 100, Kind.PARK, p=1, m=121, g=9, a0=CHANRECV),
                ev(t + 120, Kind.HANDOFF, p=1, m=121, g=0),  # stoplockedm: the same M
                ev(t + 500, Kind.EXECUTE, p=1, m=122, g=11),
                ev(t + 520, Kind.PARK, p=1, m=122, g=11, a0=CHANRECV)]
    s = run(out)
    f = by_id(s)["cgo-pinning"]
    assert f.evidence["locked_handoffs"] == 50
    assert f.evidence["locked_goroutines"] == [{"goid": 9, "handoffs": 50}]
    assert "syscall-handoff" not in by_id(s)


def test_default_mode_hand_offs_outside_windows_split_like_those_seen_inside() -> None:
    out = sleeper_events(seconds=3, mode="default")
    for sec in range(3):
        for k in range(100):  # 100 hand-offs a second; only those in a window show a cause
            t = sec * 1e6 + k * 10 * MS + 4 * MS
            if (t % 1e6) < 200 * MS:
                out.append(ev(t, Kind.PARK, p=1, m=121, g=9, a0=CHANRECV))
            out.append(ev(t + 50, Kind.HANDOFF, p=1, m=121))
    s = run(out, mode="default")
    f = by_id(s)["cgo-pinning"]
    assert f.evidence["locked_handoffs"] == 300
    assert "split like" in f.evidence["cause_note"]
    assert f.evidence["sampled"] == ["locked_handoffs"]
    assert "syscall-handoff" not in by_id(s)


def test_a_park_then_another_goroutine_on_the_m_is_no_locked_thread() -> None:
    """G9 parks on M121, M121 runs G11, then M121 hands its P off (a blocking syscall of
    G11's whose SYSCALL_ENTER was not seen): G9's park is not the cause (Caddy's file
    server got cgo-pinning so, full mode, no LockOSThread anywhere)."""
    out = sleeper_events(seconds=1)
    for k in range(50):
        t = k * 20 * MS + 4 * MS
        out += [ev(t, Kind.EXECUTE, p=1, m=121, g=9),
                ev(t + 100, Kind.PARK, p=1, m=121, g=9, a0=CHANRECV),
                ev(t + 110, Kind.EXECUTE, p=1, m=121, g=11),
                ev(t + 120, Kind.HANDOFF, p=1, m=121, g=11),
                ev(t + 500, Kind.EXECUTE, p=1, m=122, g=12),
                ev(t + 520, Kind.PARK, p=1, m=122, g=12, a0=CHANRECV)]
    s = run(out)
    assert "cgo-pinning" not in by_id(s)


def test_a_park_then_another_goroutine_across_chunks_is_no_locked_thread() -> None:
    """The same, with the model's chunks cut between G11's EXECUTE and the HANDOFF (a GC
    worker's forEachP hand-off on Caddy, full mode under wrk, CI): the EXECUTE in the
    previous chunk's tail still ends G9's park as a cause."""
    model = Model(header("full", 2))
    for k in range(50):
        t = k * 20 * MS + 4 * MS
        model.feed(Batch([ev(t, Kind.EXECUTE, p=1, m=121, g=9),
                          ev(t + 100, Kind.PARK, p=1, m=121, g=9, a0=CHANRECV),
                          ev(t + 110, Kind.EXECUTE, p=1, m=121, g=11)], {}))
        model.flush()
        model.feed(Batch([ev(t + 600, Kind.HANDOFF, p=1, m=121, g=11)], {}))
        model.flush()
    s = snapshot_with_findings(model)
    assert "cgo-pinning" not in by_id(s)
    causes = model.findings.handoff_cause
    assert sum(causes.values()) == 50 and causes.get("locked-thread", 0) == 0, causes


@pytest.mark.parametrize("outside_go", [0, 20])
def test_cgo_pinning_only_with_evidence_of_pinning(outside_go: int) -> None:
    """Default mode, 100 hand-offs a second: in the windows 18 of every 20 follow a syscall
    and 2 a park of a locked M, but the windows saw only 6 locked-thread hand-offs (fewer
    than 10). The split infers ~30 locked ones outside: not evidence on its own (Prometheus
    got cgo-pinning with no sample outside Go). With 20 perf samples outside Go code (cgo)
    it is."""
    out = sleeper_events(seconds=3, mode="default")
    for sec in range(3):
        for k in range(100):
            t = sec * 1e6 + k * 10 * MS + 4 * MS
            if (t % 1e6) < 200 * MS:
                if k % 10 == 0:
                    out.append(ev(t, Kind.PARK, p=1, m=121, g=9, a0=CHANRECV))
                else:
                    out.append(ev(t, Kind.SYSCALL_ENTER, p=1, m=121, g=9, a0=1))
            out.append(ev(t + 50, Kind.HANDOFF, p=1, m=121))
    out += [ev(k * 100 * MS + 7, Kind.CPU_SAMPLE, p=-1, m=131, a0=2 | (5 << 32))
            for k in range(outside_go)]
    s = run(out, mode="default", stacks={5: ("main.main", "C.sqlite3_step")})
    f = by_id(s).get("cgo-pinning")
    if not outside_go:
        assert f is None, f.title
        return
    assert f is not None
    assert f.evidence["samples_outside_go"] == outside_go
    assert f.evidence["locked_handoffs_seen"] == 6
    assert f.evidence["outside_go_stack"] == ["C.sqlite3_step", "main.main"]


# ---------------------------------------------------------------- gc-stw-latency

def test_gc_stw_explains_the_tail_latency() -> None:
    out: list[EventTuple] = []
    g = 200
    for k in range(200):  # 200 quick wake-ups of 20 µs ...
        t = k * 5 * MS
        g += 1
        p = k % 2
        out += [ev(t, Kind.READY, m=90, g=g, a1=CHANRECV),
                ev(t + 20, Kind.EXECUTE, p=p, m=100 + p, g=g),
                ev(t + 60, Kind.PARK, p=p, m=100 + p, g=g, a0=CHANRECV)]
    for k in range(5):  # ... and five that wait out a 3 ms stop-the-world
        t = k * 200 * MS + 2 * MS
        g += 1
        out += [ev(t, Kind.READY, m=90, g=g, a1=CHANRECV),
                ev(t + 10, Kind.STW_START, m=90, a0=1),
                ev(t + 3010, Kind.STW_END, m=90, a0=1, a1=3_000_000),
                ev(t + 3050, Kind.EXECUTE, p=0, m=100, g=g),
                ev(t + 3100, Kind.PARK, p=0, m=100, g=g, a0=CHANRECV)]
    s = run(out)
    f = by_id(s)["gc-stw-latency"]
    assert f.evidence["tail_samples"] >= 3
    assert f.evidence["tail_stw_share"] > 0.9
    assert f.severity == Severity.CRITICAL
    assert f.evidence["by_reason"] == {"GC mark termination": {"count": 5,
                                                               "total_ns": 15_000_000}}


# ---------------------------------------------------------------- lock-contention

STACK = ("runtime.goexit.abi0", "main.worker", "main.(*ledger).record",
         "internal/sync.(*Mutex).lockSlow")


def test_lock_contention_one_address_names_the_site() -> None:
    out = sleeper_events(seconds=1)
    for k in range(50):  # 50 waits of 5 ms on one mutex, 2 of 1 µs on another
        t = k * 20 * MS
        out += [ev(t, Kind.MUTEX_ADDR, g=30 + k % 4, a0=0xC000100, a1=int(LockKind.MUTEX)),
                ev(t, Kind.MUTEX, g=30 + k % 4, a0=5_000_000, a1=1)]
    for k in range(2):
        out += [ev(k * MS + 1, Kind.MUTEX_ADDR, g=40, a0=0xC000200, a1=int(LockKind.MUTEX)),
                ev(k * MS + 1, Kind.MUTEX, g=40, a0=1000, a1=2)]
    s = run(out, stacks={1: STACK, 2: ("main.other",)})
    f = by_id(s)["lock-contention"]
    assert f.evidence["addr"] == "0xc000100"
    assert f.evidence["count"] == 50 and f.evidence["wait_ns"] == 250_000_000
    assert f.evidence["site"] == "main.(*ledger).record"
    assert f.evidence["contended_stack"][:2] == ["internal/sync.(*Mutex).lockSlow",
                                                  "main.(*ledger).record"]
    assert "main.(*ledger).record" in f.title


def test_lock_contention_names_the_locks_own_site() -> None:
    """The lock with the most wait (0xc000100: 12 waits of 25 ms, 8 from one stack, 4 from
    another) is named with its own heaviest stack (200 ms), not with another lock's one stack
    that waited longer (0xc000200: 10 waits, 240 ms): Prometheus in sample mode named its
    Tracer mutex at the index reader's site."""
    out = sleeper_events(seconds=1)
    for k in range(12):
        t = k * 40 * MS
        out += [ev(t, Kind.MUTEX_ADDR, g=30 + k, a0=0xC000100, a1=int(LockKind.MUTEX)),
                ev(t, Kind.MUTEX, g=30 + k, a0=25_000_000, a1=1 if k < 8 else 3)]
    for k in range(10):
        t = k * 40 * MS + 7
        out += [ev(t, Kind.MUTEX_ADDR, g=60, a0=0xC000200, a1=int(LockKind.MUTEX)),
                ev(t, Kind.MUTEX, g=60, a0=24_000_000, a1=2)]
    other = ("runtime.goexit.abi0", "main.index", "main.(*index).series",
             "internal/sync.(*Mutex).lockSlow")
    s = run(out, stacks={1: STACK, 2: other, 3: ("main.rare",)})
    f = by_id(s)["lock-contention"]
    assert f.evidence["addr"] == "0xc000100"
    assert s.mutex_stacks[0].stack == other  # the heaviest stack is the other lock's
    assert f.evidence["site"] == "main.(*ledger).record"


# ---------------------------------------------------------------- goroutine-leak

def test_goroutine_leak_steady_growth_and_the_wait_reason() -> None:
    out = sleeper_events(seconds=6)
    g = 1000
    for k in range(6 * 50):  # G1 creates 50 goroutines a second; each blocks for good
        t = k * 20 * MS + 11
        g += 1
        out += [ev(t, Kind.GO_CREATE, g=g, a0=1),
                ev(t + 30, Kind.EXECUTE, p=1, m=101, g=g),
                ev(t + 40, Kind.PARK, p=1, m=101, g=g, a0=CHANRECV)]
    s = run(out)
    f = by_id(s)["goroutine-leak"]
    assert f.evidence["growth"] >= 240
    assert f.evidence["wait_reason"] == "chan receive"
    assert f.evidence["creators"][0] == {"goid": 1, "live_created": 300}


def test_goroutines_that_come_and_go_are_no_leak() -> None:
    out = sleeper_events(seconds=6)
    for k in range(6 * 50):
        t = k * 20 * MS + 11
        out += [ev(t, Kind.GO_CREATE, g=5000 + k, a0=1), ev(t + 5000, Kind.GO_EXIT, g=5000 + k)]
    assert "goroutine-leak" not in by_id(run(out))


# ---------------------------------------------------------------- idle-spinning

def spin_events() -> list[EventTuple]:
    out: list[EventTuple] = []
    for k in range(1000):  # every ms on each P: 50 µs of work, 300 µs searching, then idle
        t = k * MS
        for p in (0, 1):
            g = 300 + p
            out += [ev(t + p, Kind.READY, m=90, g=g, a1=CHANRECV),
                    ev(t + p + 10, Kind.EXECUTE, p=p, m=100 + p, g=g),
                    ev(t + p + 60, Kind.PARK, p=p, m=100 + p, g=g, a0=CHANRECV),
                    ev(t + p + 360, Kind.P_IDLE, p=p, m=100 + p)]
    return out


@pytest.mark.parametrize("in_find_runnable", [0, 120])
def test_idle_spinning_needs_the_kernel_to_see_the_cpu(in_find_runnable: int) -> None:
    """The events say 60% of a CPU searching; the perf sampler ran (999 Hz, 1 s: 1,000
    samples of a goroutine) and saw 0 or 120 samples on g0 in findRunnable: 0% or 12% of a
    CPU. A searching M the kernel descheduled is not spinning: no finding without the
    kernel's share (Prometheus: 12% from the events, 1.7% in the samples)."""
    out = spin_events() + cpu_samples(300, 0, 0, 1000 * MS)
    stack = ("runtime.mstart", "runtime.schedule", "runtime.findRunnable")
    out += [ev(k * 8 * MS + 3, Kind.CPU_SAMPLE, p=1, m=101, a0=1 | (P_RUNNING_ST << 8)
               | (7 << 32)) for k in range(in_find_runnable)]
    f = by_id(run(out, stacks={7: stack})).get("idle-spinning")
    if not in_find_runnable:
        assert f is None, f.title
    else:
        assert f is not None and f.evidence["findrunnable_cpus"] >= 0.1


@pytest.mark.parametrize("stack,found", [
    (("runtime.mstart", "runtime.schedule", "runtime.findRunnable", "runtime.stealWork",
      "runtime.runqgrab", "runtime.usleep"), True),
    (("runtime.goexit.abi0", "main.main.func1", "syscall.Syscall"), False)])
def test_idle_spinning_counts_the_search_in_kernel_mode(stack: tuple[str, ...],
                                                        found: bool) -> None:
    """A spinning M's CPU is mostly syscalls (idlespin on 2 CPUs: 9 in 10 of its samples are
    kernel mode, runqgrab's usleep and futex wakes): 120 kernel-mode samples whose user stack
    is in findRunnable are search CPU; the same samples in a goroutine's syscall are not."""
    out = spin_events() + cpu_samples(300, 0, 0, 1000 * MS)
    out += [ev(k * 8 * MS + 3, Kind.CPU_SAMPLE, p=1, m=101, a0=3 | (P_RUNNING_ST << 8)
               | (7 << 32)) for k in range(120)]
    f = by_id(run(out, stacks={7: stack})).get("idle-spinning")
    assert (f is not None) == found
    if found:
        assert f is not None and f.evidence["findrunnable_cpus"] >= 0.1


def test_idle_spinning_searches_that_find_nothing() -> None:
    s = run(spin_events())  # no perf samples: the events alone
    f = by_id(s)["idle-spinning"]
    assert f.evidence["failed_searches"] >= 1300  # over the kept timeline (2,000 spans a P)
    assert 0.8 <= f.evidence["searching_share_of_busy"] <= 0.9  # 300 of 350 µs
    assert 0.55 <= f.evidence["searching_cpus"] <= 0.65  # 2 Ps x 30%


def test_idle_spinning_in_sample_mode_from_nmspinning() -> None:
    out = sleeper_events(seconds=2, mode="sample")
    out = [e for e in out if e[1] != Kind.SCHED_SAMPLE]
    out += [ev(k * 10 * MS + 2, Kind.SCHED_SAMPLE, a0=1 | (1 << 32), a1=0) for k in range(200)]
    f = by_id(run(out, mode="sample"))["idle-spinning"]
    assert f.evidence["nmspinning_sample_share"] == 1.0
    assert "nmspinning" in f.evidence["sampled"]


# ---------------------------------------------------------------- runq-overflow

def test_runq_overflow_local_at_limit_and_global_growing() -> None:
    out = sleeper_events(seconds=4)
    for k in range(40):
        t = k * 100 * MS + 50
        out.append(ev(t, Kind.FIND_RUNNABLE, p=0, m=100, a0=256, a1=300 + 50 * k))
    s = run(out)
    f = by_id(s)["runq-overflow"]
    assert f.severity == Severity.CRITICAL
    assert f.evidence["max_local"] == 256 and f.evidence["max_local_p"] == 0
    assert f.evidence["max_global"] == 300 + 50 * 39
    assert f.evidence["global_rising"] is True


def test_runq_overflow_from_p_samples_says_sampled() -> None:
    out = sleeper_events(seconds=1, mode="sample")
    out.append(ev(500 * MS + 3, Kind.P_SAMPLE, p=1, m=101, g=3,
                  a0=P_RUNNING_ST | (G_RUNNING_ST << 8) | (256 << 16), a1=7))
    f = by_id(run(out, mode="sample"))["runq-overflow"]
    assert f.evidence["sampled"] == ["runq"]


# ---------------------------------------------------------------- engine contract

def test_every_id_has_a_golden_scenario_above() -> None:
    names = " ".join(n for n in globals() if n.startswith("test_"))
    for fid in FINDING_IDS:
        key = fid.replace("-", "_").replace("gc_stw_latency", "gc_stw").replace(
            "cgo_pinning", "locked_thread").replace("long_running_goroutine", "long_running")
        assert key in names, fid


def test_findings_sorted_most_severe_first_and_json_shape() -> None:
    out = throttled_events() + [e for e in saturated_events() if e[1] != Kind.CGROUP_CPU]
    s = run(out)
    sev = [int(f.severity) for f in s.findings]
    assert len(sev) >= 2, s.findings  # an order and a shape to check, not a vacuous loop
    assert sev == sorted(sev, reverse=True)
    for d in summary(s)["findings"]:
        assert set(d) == {"id", "severity", "title", "evidence", "advice"}
        assert d["severity"] in ("info", "warning", "critical")
        assert "sources" in d["evidence"] and "sampled" in d["evidence"]


def test_short_runs_give_no_findings() -> None:
    s = run(saturated_events(seconds=0.2))
    assert s.findings == ()


def _split(events: Sequence[EventTuple], n: int) -> list[list[EventTuple]]:
    evs = sorted(events, key=lambda e: e[0])
    return [list(evs[i:i + n]) for i in range(0, len(evs), n)]


def test_same_findings_whatever_the_batching() -> None:
    events = saturated_events() + throttled_events()
    one = run(events)
    model = Model(header())
    for chunk in _split(events, 97):
        model.feed(Batch(chunk))
    model.flush()
    assert snapshot_with_findings(model).findings == one.findings


def test_a_goroutines_own_frame_is_the_programs_not_the_standard_librarys() -> None:
    """The site named for a goroutine (syscall-handoff's syscall_site, a row's function) is
    its innermost frame of main or of a module; the standard library only when it has
    nothing else. CI once named `time.now` (sampled around a nanosleep in main.main.func1)."""
    from gmpmon.findings.kernel_evidence import own_frame

    assert own_frame(("runtime.goexit.abi0", "main.main.func1", "time.Now", "time.now")) == \
        "main.main.func1"
    assert own_frame(("runtime.goexit", "net/http.(*conn).serve", "main.handler",
                      "encoding/json.Marshal")) == "main.handler"
    assert own_frame(("runtime.goexit", "github.com/a/b.(*T).Run", "sync.(*Mutex).Lock")) == \
        "github.com/a/b.(*T).Run"
    assert own_frame(("runtime.goexit", "net/http.(*conn).serve", "bufio.(*Reader).Read")) == \
        "bufio.(*Reader).Read"
    assert own_frame(("runtime.goexit", "runtime.gcBgMarkWorker")) == ""
    # CI: a sample on g0 in schedule(), symbolized with the bare assembly name on top.
    assert own_frame(("runtime.mcall", "runtime.park_m", "runtime.schedule", "gogo")) == ""


def test_attribution_sweeps_within_its_span_budget() -> None:
    """64 Ps with 3,000 spans each under every wait (the scale workload's shape): the sweep
    stops at MAX_SPANS spans, says so, and scales what it saw to the whole tail."""
    import dataclasses
    import time
    from pathlib import Path

    from gmpmon.findings import attribution
    from gmpmon.model.snapshot import PState, Span
    from gmpmon.record import read_recording
    from gmpmon.replay import replay_all

    base = replay_all(read_recording(str(Path(__file__).parent.parent / "data" / "sleeper.gmp")))
    t0 = base.now - 3_000_000
    # Every P alternates running / idle in step, 1 us each: half of each wait is idle.
    spans = tuple(Span(t0 + k * 1000, t0 + (k + 1) * 1000,
                       PState.RUNNING if k % 2 else PState.IDLE, 7) for k in range(3000))
    procs = tuple(dataclasses.replace(base.procs[0], id=i, timeline=spans) for i in range(64))
    snap = dataclasses.replace(base, procs=procs, stw_spans=())
    samples = [(t0, t0 + 3_000_000, 0, g) for g in range(100)]
    began = time.process_time()
    a = attribution.attribute(snap, samples, threshold_ns=1)
    took = time.process_time() - began
    assert a.samples == 100 and a.wait_ns == 100 * 3_000_000
    per_wait = 64 * 3000
    swept = max(1, -(-attribution.MAX_SPANS // per_wait))
    assert f"{swept} of the 100 waits swept" in a.note, a.note
    assert abs(a.share("idle") - 0.5) < 0.01 and abs(a.share("all_running") - 0.5) < 0.01
    assert sum(a.breakdown.values()) == pytest.approx(a.wait_ns, rel=1e-6)
    print(f"attribution of 100 waits over 64 Ps x 3,000 spans: {took:.2f} CPU-s")
