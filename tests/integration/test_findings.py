"""The findings engine on real Go programs under real BPF: each workload in
scripts/targets/<name> has one pathology, and gmpmon must name it (with the function, stack
or site where the id says so) from the summary JSON; the healthy workload gets no warning in
any mode. One gmpmon run per (workload, mode) is shared by every test that reads it.

cpu-throttled runs its workload in a cgroup v1 CPU controller child it creates and removes
(go-runtime.md section 6.3); cgroup v2 parsing is tested on fixtures (tests/unit/test_cgroup.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.gotargets import build

GM = [sys.executable, "-m", "gmpmon"]
GO = "1.27"
_RUNS: dict[tuple[str, str, int, tuple[str, ...]], dict[str, Any]] = {}


def gm_run(tmp: Path, name: str, mode: str, gomaxprocs: int, *args: str,
           go: str = GO, opts: tuple[str, ...] = (), last: str = "done") -> dict[str, Any]:
    """``gmpmon run --mode M --record`` on a private copy of the workload; its summary JSON
    (cached: one run per workload, mode and arguments for the whole module). The recording
    is next to it (``recording(tmp, name, mode)``). ``last`` is what the workload prints when
    it ends well (``scale`` prints its ops and rate, not "done")."""
    key = (f"{name}@{go}", mode, gomaxprocs, (*opts, "--", *args))
    if key in _RUNS:
        return _RUNS[key]
    exe = tmp / f"{name}-{go}-{mode}"
    shutil.copy2(build(name, go), exe)
    out = tmp / f"{name}-{go}-{mode}.json"
    env = dict(os.environ, GOMAXPROCS=str(gomaxprocs))
    p = subprocess.run([*GM, "run", "--mode", mode, "--no-tui", "--summary-json", str(out),
                        "--record", str(out.with_suffix(".gmp")), *opts,
                        "--", str(exe), *args], capture_output=True, text=True, timeout=120,
                       env=env)
    assert p.returncode == 0, f"gmpmon run failed ({p.returncode}): {p.stderr[-2000:]}"
    assert "Traceback" not in p.stderr, p.stderr
    assert last in p.stdout, p.stdout[-500:]
    doc: dict[str, Any] = json.loads(out.read_text())
    assert "Findings:" in p.stdout  # the text report's section
    _RUNS[key] = doc
    return doc


@pytest.fixture(scope="module")
def tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("findings")


def finding(doc: dict[str, Any], fid: str) -> dict[str, Any]:
    got = {f["id"]: f for f in doc["findings"]}
    assert fid in got, f"{fid} not found; findings: {json.dumps(doc['findings'])[:1500]}"
    f = got[fid]
    assert set(f) == {"id", "severity", "title", "evidence", "advice"}
    assert "sources" in f["evidence"] and "sampled" in f["evidence"]
    return f


def alarms(doc: dict[str, Any]) -> list[str]:
    return [f"{f['id']}: {f['title']}" for f in doc["findings"]
            if f["severity"] in ("warning", "critical")]


# ---------------------------------------------------------------- no false alarms

@pytest.mark.bpf
@pytest.mark.parametrize("mode", ["full", "default", "sample"])
def test_healthy_workload_gets_no_warning(tmp: Path, mode: str) -> None:
    doc = gm_run(tmp, "healthy", mode, 2, "-t", "3s")
    assert alarms(doc) == []
    assert doc["events"]["lost"] == 0


@pytest.mark.bpf
@pytest.mark.parametrize("mode", ["full", "sample"])
def test_a_recording_replays_to_the_same_findings(tmp: Path, mode: str) -> None:
    live = gm_run(tmp, "lockhot", mode, 2, "-t", "3s")
    rec = tmp / f"lockhot-{GO}-{mode}.gmp"
    out = tmp / f"lockhot-{GO}-{mode}-replay.json"
    p = subprocess.run([*GM, "replay", str(rec), "--summary-json", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-1000:]
    replayed = json.loads(out.read_text())
    assert replayed["findings"] == live["findings"]
    assert replayed["latency_attribution"] == live["latency_attribution"]


# ---------------------------------------------------------------- one per id

@pytest.mark.bpf
def test_cpu_saturation_all_ps_busy_and_waits_behind_them(tmp: Path) -> None:
    doc = gm_run(tmp, "saturate", "full", 2, "-t", "3s", "-w", "8")
    f = finding(doc, "cpu-saturation")
    assert f["severity"] in ("warning", "critical")
    ev = f["evidence"]
    assert min(ev["p_running_share"].values()) >= 0.9
    assert ev["sched_latency_p99_ns"] >= 1_000_000
    # The tail waits were spent with every P running something else.
    att = doc["latency_attribution"]
    assert att["samples"] > 0
    assert att["breakdown_ns"]["all_running"] >= 0.5 * att["wait_ns"]
    assert ev["tail_wait_all_running_share"] >= 0.5


@pytest.mark.bpf
def test_long_running_goroutine_is_named(tmp: Path) -> None:
    doc = gm_run(tmp, "longrun", "full", 2, "-t", "3s")
    f = finding(doc, "long-running-goroutine")
    assert f["severity"] in ("warning", "critical")
    ev = f["evidence"]
    assert ev["longest_ns"] >= 20_000_000
    top = ev["goroutines"][0]
    assert top["runs"] >= 10 and top["preempt_requests"] >= 10
    # Only the hot loop runs that long: one goroutine holds (nearly) all the long runs, and
    # the perf sampler's stacks name its function.
    assert top["runs"] >= 0.8 * ev["long_runs"]
    assert ev["function"] == "main.hotLoop" and top["function"] == "main.hotLoop"
    assert "main.hotLoop" in f["title"] and ev["stack"][0] == "main.hotLoop"


@pytest.mark.bpf
def test_syscall_handoff_from_blocking_syscalls(tmp: Path) -> None:
    # The site comes from the perf samples' user stacks of goroutines that mostly sleep: at
    # the default 99 Hz a 3-s run has a handful of them, so this asks for 999 Hz.
    doc = gm_run(tmp, "blocksys", "full", 2, "-t", "3s",
                 opts=("--kernel", "samples,syscalls", "--sample-hz", "999"))
    f = finding(doc, "syscall-handoff")
    ev = f["evidence"]
    # 4 goroutines in 15 ms nanosleeps for 3 s: ~800 syscalls, nearly all retaken by sysmon.
    assert ev["handoffs"] >= 300 and ev["per_second"] >= 100
    assert ev["by_cause"].get("syscall-retake", 0) >= 0.9 * ev["handoffs"]
    assert ev["no_m_ns"] > 0
    # The four syscall goroutines, by goid, hold the hand-offs (main's one write may add one).
    top4 = sorted(g["handoffs"] for g in ev["goroutines"])[-4:]
    assert min(top4) >= 50 and sum(top4) >= 0.95 * ev["handoffs"]
    assert "cgo-pinning" not in {x["id"] for x in doc["findings"]}
    # Named: the syscall (tracepoints) and the code around it (perf samples' user stacks).
    assert next(iter(ev["syscalls_by_name"])) == "nanosleep"
    assert ev["syscall_site"].startswith("main."), ev["syscall_stack"]


@pytest.mark.bpf
def test_gc_stw_pauses(tmp: Path) -> None:
    doc = gm_run(tmp, "stwstorm", "full", 2, "-t", "3s")
    f = finding(doc, "gc-stw-latency")
    ev = f["evidence"]
    assert ev["stw_count"] >= 100
    assert "read mem stats" in ev["by_reason"]
    assert ev["stw_time_share"] >= 0.02 or ev["tail_stw_share"] >= 0.2


@pytest.mark.bpf
@pytest.mark.parametrize("mode", ["full", "sample"])
def test_lock_contention_names_the_site(tmp: Path, mode: str) -> None:
    doc = gm_run(tmp, "lockhot", mode, 2, "-t", "3s")
    f = finding(doc, "lock-contention")
    ev = f["evidence"]
    assert ev["site"] == "main.(*store).put"
    assert "main.(*store).put" in ev["contended_stack"]
    assert ev["share_of_mutex_wait"] >= 0.9
    assert ev["addr"] in {a["addr"] for a in doc["mutex"]["by_addr"]}


@pytest.mark.bpf
def test_goroutine_leak_in_sample_mode_names_site_and_wait_reason(tmp: Path) -> None:
    doc = gm_run(tmp, "leak", "sample", 2)
    f = finding(doc, "goroutine-leak")
    ev = f["evidence"]
    assert ev["growth"] >= 500  # 200/s for 7 s
    assert ev["wait_reason"] == "chan receive"
    assert ev["creation_sites"][0]["creator"] == "main.serve"
    assert ev["creation_site"].startswith("main.serve -> go main.")
    assert ev["sources"]["series"].startswith("runtime")


@pytest.mark.bpf
def test_idle_spinning_ping_pong(tmp: Path) -> None:
    # Two pairs with 50 us sleeps searched 0.024-0.047 CPUs on one machine and 0.052-0.055 on
    # another, against the rule's 0.05: a coin toss. Four pairs with 20 us sleeps search
    # 0.40-0.46 CPUs (busy share 0.50, ~400k failed steals) and, at the default 99 Hz, leave
    # 21-28 perf samples in findRunnable: both witnesses clear (measured 2026-12-02).
    doc = gm_run(tmp, "idlespin", "full", 4, "-t", "3s", "-pairs", "4", "-gap", "20us")
    f = finding(doc, "idle-spinning")
    ev = f["evidence"]
    assert ev["searching_share_of_busy"] >= 0.3
    assert ev["steal_failed"] >= 1000


@pytest.mark.bpf
def test_runq_overflow_on_a_spawn_burst(tmp: Path) -> None:
    doc = gm_run(tmp, "runqburst", "full", 2, "-t", "3s")
    f = finding(doc, "runq-overflow")
    ev = f["evidence"]
    assert ev["max_global"] >= 256 or ev["full_local"] > 0
    assert ev["max_local"] >= 128


@pytest.mark.bpf
def test_cgo_pinning_locked_thread_handoffs(tmp: Path) -> None:
    doc = gm_run(tmp, "lockedthread", "full", 2, "-t", "3s")
    f = finding(doc, "cgo-pinning")
    ev = f["evidence"]
    assert ev["locked_handoffs"] >= 1000  # two pinned goroutines, 1000 messages/s each
    top = ev["locked_goroutines"][:2]
    assert len(top) == 2 and all(g["handoffs"] >= 400 for g in top)
    assert ev["site"] == "main.pinned"  # the locked goroutine's function (perf samples)


# ---------------------------------------------------------------- cpu-throttled, own cgroup

def cpu_hierarchy(mountinfo: str | None = None) -> tuple[int, Path]:
    """(cgroup version, mount point) of the hierarchy holding the CPU controller: a v1
    ``cpu`` mount if there is one (hybrid hosts: gmpmon reads v1 there too), else the
    cgroup2 mount whose root offers ``cpu``. ``mountinfo``: /proc/self/mountinfo's text."""
    if mountinfo is None:
        mountinfo = Path("/proc/self/mountinfo").read_text()
    v2 = None
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        point, (fstype, *rest) = Path(left.split()[4]), right.split()
        if fstype == "cgroup" and "cpu" in rest[-1].split(","):
            return 1, point
        if fstype == "cgroup2" and v2 is None:
            v2 = point
    if v2 is not None and "cpu" in (v2 / "cgroup.controllers").read_text().split():
        return 2, v2
    raise AssertionError("no cgroup CPU controller mounted (neither v1 cpu nor cgroup2 cpu)")


@pytest.fixture
def cpu_cgroup() -> Iterator[Path]:
    """A child cgroup limited to 0.2 CPU (v1 cfs quota, or v2 cpu.max); removed afterwards.
    v2: the child hangs off the mount's root, which may enable +cpu for its children while
    holding processes (the root is exempt from the no-internal-processes rule)."""
    version, root = cpu_hierarchy()
    cg = root / f"gmpmon-test-{uuid.uuid4().hex[:8]}"
    if version == 2 and "cpu" not in (root / "cgroup.subtree_control").read_text().split():
        (root / "cgroup.subtree_control").write_text("+cpu\n")
    cg.mkdir()
    try:
        if version == 1:
            (cg / "cpu.cfs_period_us").write_text("100000\n")
            (cg / "cpu.cfs_quota_us").write_text("20000\n")
        else:
            (cg / "cpu.max").write_text("20000 100000\n")
        yield cg
    finally:
        for pid in (cg / "cgroup.procs").read_text().split():
            with contextlib.suppress(ProcessLookupError):  # it may have exited meanwhile
                (root / "cgroup.procs").write_text(pid + "\n")  # back to the root
        for _ in range(50):
            try:
                cg.rmdir()
                break
            except OSError:
                time.sleep(0.1)


@pytest.mark.bpf
def test_cpu_throttled_in_its_own_cgroup(tmp_path: Path, cpu_cgroup: Path) -> None:
    exe = tmp_path / "saturate"
    shutil.copy2(build("saturate", GO), exe)
    procs = str(cpu_cgroup / "cgroup.procs")

    def enter_cgroup() -> None:  # in the child, before exec: only the workload is limited
        with open(procs, "w") as f:
            f.write(str(os.getpid()))

    # Long enough to outlive a slow BPF compile (seconds on a loaded machine); killed after.
    target = subprocess.Popen([str(exe), "-t", "120s", "-w", "2"], stdout=subprocess.PIPE,
                              text=True, preexec_fn=enter_cgroup,
                              env=dict(os.environ, GOMAXPROCS="2"))
    try:
        assert target.stdout is not None and target.stdout.readline().strip() == "ready"
        out = tmp_path / "s.json"
        p = subprocess.run([*GM, "attach", str(target.pid), "--mode", "sample", "--no-tui",
                            "-d", "3", "--summary-json", str(out)],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr[-2000:]
        doc = json.loads(out.read_text())
    finally:
        target.kill()
        target.wait()
    f = finding(doc, "cpu-throttled")
    ev = f["evidence"]
    assert ev["cgroup_version"] == (2 if (cpu_cgroup / "cpu.max").exists() else 1)
    assert (ev["quota_us"], ev["period_us"], ev["quota_cpus"]) == (20000, 100000, 0.2)
    assert ev["gomaxprocs"] == 2 and ev["go_reads_quota"] is True  # 1.27 reads quotas...
    # 2 Ps in 0.2 CPU: what Go 1.25+ picks itself (a quota rounds up to at least 2 Ps).
    over = finding(doc, "gomaxprocs-above-cpus")
    assert over["severity"] == "info" and over["evidence"]["usable_cpus"] == 1
    assert over["evidence"]["quota_cpus"] == 0.2 and over["evidence"]["go125_default"] == 2
    assert over["evidence"]["affinity_cpus"] == len(os.sched_getaffinity(0))
    # Two CPU-bound goroutines in 0.2 CPU: throttled in most periods (the rest: periods where
    # this shared machine did not even give it its 20 ms).
    assert ev["nr_periods"] >= 15 and ev["nr_throttled"] >= 0.5 * ev["nr_periods"]
    assert ev["throttled_ns"] >= 300_000_000
    assert f["severity"] == "critical"


@pytest.mark.bpf
def test_scale_64_ps_on_the_cpus_first_finding_is_gomaxprocs_above_cpus(tmp: Path) -> None:
    """scale sets GOMAXPROCS=64 itself; on this machine's CPUs (fewer than 16: 4x) that is
    critical and the first finding, before its symptoms (long runs, saturation)."""
    cpus = len(os.sched_getaffinity(0))
    assert cpus * 4 <= 64, f"{cpus} CPUs: 64 Ps are not 4x them here"
    doc = gm_run(tmp, "scale", "default", 2, "-t", "6s", opts=("-d", "4"), last="ops ")
    first = doc["findings"][0]
    assert first["id"] == "gomaxprocs-above-cpus", [f["id"] for f in doc["findings"]]
    assert first["severity"] == "critical"
    ev = first["evidence"]
    assert ev["gomaxprocs"] == 64 and ev["usable_cpus"] <= cpus
    assert ev["affinity_cpus"] == cpus and ev["sources"]["gomaxprocs"].startswith("runtime")
    assert not [f for f in doc["findings"]
                if f["id"] == "long-running-goroutine" and f["severity"] == "critical"]
