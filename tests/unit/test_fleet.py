"""gmpmon ps / serve, the pure parts: cgroup parsing, the listen address, the metric families
and the re-bucketing of the runtime's latency histogram onto Prometheus buckets."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gmpmon.errors import UsageError
from gmpmon.events import CgroupField, EventTuple, Header, Kind
from gmpmon.fleet.discover import GoProcess, parse_cgroup
from gmpmon.fleet.findings import FindingsWindow
from gmpmon.fleet.metrics import LATENCY_LE_NS, LatencyHistogram, ProcessReading, families
from gmpmon.fleet.server import parse_listen
from gmpmon.fleet.watch import latency_histogram
from gmpmon.model.runtime import bucket_bounds, hist_stats

V2 = "0::/system.slice/docker-4f2a.scope\n"
V1 = (
    "12:pids:/user.slice\n"
    "4:cpu,cpuacct:/kubepods/burstable/pod1/abc\n"
    "3:memory:/kubepods/burstable/pod1/abc\n"
    "0::/\n"
)
HYBRID_ROOT = "5:cpu,cpuacct:/\n0::/\n"


def test_cgroup_path_v2_v1_and_root() -> None:
    assert parse_cgroup(V2) == "/system.slice/docker-4f2a.scope"
    assert parse_cgroup(V1) == "/kubepods/burstable/pod1/abc"
    assert parse_cgroup(HYBRID_ROOT) == ""
    assert parse_cgroup("") == ""


@pytest.mark.parametrize(
    ("spec", "want"),
    [("127.0.0.1:9464", ("127.0.0.1", 9464)), ("[::1]:80", ("::1", 80)),
     (":9464", ("0.0.0.0", 9464)), ("localhost:0", ("localhost", 0))],
)
def test_parse_listen(spec: str, want: tuple[str, int]) -> None:
    assert parse_listen(spec) == want


@pytest.mark.parametrize("spec", ["9464", "host:port", "1.2.3.4:70000"])
def test_parse_listen_rejects(spec: str) -> None:
    with pytest.raises(UsageError):
        parse_listen(spec)


def _proc(pid: int = 42) -> GoProcess:
    return GoProcess(pid=pid, ns_pid=1, exe="/srv/api/server", go_version="go1.27.3",
                     container="/kubepods/x", uptime_s=5.0, exe_key=(1, 2, 3, 4, 5))


@pytest.mark.parametrize("n", [160, 720])
def test_rebucketing_is_exact_at_powers_of_two(n: int) -> None:
    # A histogram with one sample in every runtime bucket: the count at or below each
    # Prometheus edge must equal the number of runtime buckets lying entirely below it.
    counts = [0] + [1] * n + [0]  # underflow, n buckets, overflow
    stats = hist_stats(counts)
    h = latency_histogram(stats)
    bounds = bucket_bounds(n)
    for edge, got in zip(LATENCY_LE_NS, h.le_counts, strict=True):
        assert edge in bounds, f"{edge} is not a bucket edge of the {n}-bucket layout"
        want = sum(1 for i in range(n) if bounds[i + 1] <= edge)
        assert got == want, (edge, got, want)
    assert h.count == n


def test_families_render_valid_exposition() -> None:
    r = ProcessReading(
        proc=_proc(), up=True, gomaxprocs=4, goroutines=17,
        goroutines_by_state={"waiting": 12, "runnable": 3, "running": 2},
        latency=LatencyHistogram(le_counts=tuple(range(len(LATENCY_LE_NS))),
                                 count=len(LATENCY_LE_NS), sum_s=0.25),
        syscalls_total=99, gc_stw_seconds_total=0.002, mutex_wait_seconds_total=1.5,
        kernel_runq_delay_seconds_total=0.3, oncpu_seconds_total=2.0,
        p_state_seconds={(0, "running"): 1.0, (1, "idle"): 0.5},
        findings=(("cpu-saturation", "warning"),),
    )
    down = ProcessReading(proc=_proc(43), up=False)

    class C:
        def collect(self):  # type: ignore[no-untyped-def]
            return list(families([r, down], scrape_errors=1))

    reg = CollectorRegistry(auto_describe=False)
    reg.register(C())  # type: ignore[arg-type]
    text = generate_latest(reg).decode()
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    labels = {"pid": "42", "exe": "server", "go_version": "go1.27.3", "container": "/kubepods/x"}
    ups = {s.labels["pid"]: s.value for s in fams["gmpmon_up"].samples}
    assert ups == {"42": 1.0, "43": 0.0}
    lat = fams["gmpmon_sched_latency_seconds"]
    assert lat.type == "histogram"
    inf = [s for s in lat.samples if s.name.endswith("_bucket") and s.labels["le"] == "+Inf"]
    assert inf[0].value == len(LATENCY_LE_NS) and inf[0].labels["pid"] == "42"
    assert fams["gmpmon_syscalls"].type == "counter"
    assert [s.name for s in fams["gmpmon_syscalls"].samples] == ["gmpmon_syscalls_total"]
    states = {s.labels["state"]: s.value for s in fams["gmpmon_goroutines"].samples}
    assert states == {"all": 17, "waiting": 12, "runnable": 3, "running": 2}
    for s in fams["gmpmon_gomaxprocs"].samples:
        assert {k: s.labels[k] for k in labels} == labels
    pst = {(s.labels["p"], s.labels["state"]) for s in fams["gmpmon_p_state_seconds"].samples}
    assert pst == {("0", "running"), ("1", "idle")}
    # A down process exports only gmpmon_up: nothing stale under its labels.
    assert all(s.labels.get("pid") != "43" for n, f in fams.items() if n != "gmpmon_up"
               for s in f.samples)
    # No unbounded label: no goid anywhere.
    assert "goid" not in text


def test_findings_window_forgets_throttling_older_than_the_window() -> None:
    hdr = Header(pid=42, exe="/bin/target", go_version="go1.27.3", gomaxprocs=2,
                 mode="sample", start_ns=0, wall_start=0.0, wait_reasons=(),
                 p_status=("idle", "running", "syscall", "gcstop", "dead"))
    w = FindingsWindow(hdr, window_s=20)
    s = 1_000_000_000
    cg = int(Kind.CGROUP_CPU)
    throttled = 0

    def reading(i: int) -> list[EventTuple]:
        # What CgroupCpuReader emits: every field on the first read, then only changes.
        evs = [(i * s, cg, -1, 0, int(CgroupField.NR_PERIODS), 10 * i, 1),
               (i * s, cg, -1, 0, int(CgroupField.NR_THROTTLED), throttled, 1),
               (i * s, cg, -1, 0, int(CgroupField.THROTTLED_NS), throttled * 10**7, 1)]
        if i == 0:
            evs += [(0, cg, -1, 0, int(CgroupField.QUOTA_US), 200_000, 1),
                    (0, cg, -1, 0, int(CgroupField.PERIOD_US), 100_000, 1)]
        return evs

    # 10 s throttled in 8 periods of 10 (a 2-CPU quota, GOMAXPROCS 2: not over it) ...
    for i in range(11):
        throttled = 8 * i
        w.feed(i * s, reading(i), {})
    assert [f.id for f in w.evaluate()] == ["cpu-throttled"]
    # ... then never again. Over the whole run 80 of 300 periods (27%) would still raise
    # it; the window keeps only the last 10-20 s, which saw none.
    for i in range(11, 31):
        w.feed(i * s, reading(i), {})
        assert w.covered_ns(i * s) <= 20 * s
        if i == 15:
            assert [f.id for f in w.evaluate()] == ["cpu-throttled"], "inside the window"
    assert w.evaluate() == ()
    # Throttled again: the models started after the first reading know the quota (the
    # reader said it once) and see the new throttling.
    for i in range(31, 51):
        throttled += 9
        w.feed(i * s, reading(i), {})
    (f,) = w.evaluate()
    assert f.id == "cpu-throttled" and f.evidence["quota_us"] == 200_000
    assert f.evidence["nr_throttled"] >= 90
