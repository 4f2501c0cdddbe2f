"""gmpmon's durations against the runtime's own view of the same run (docs/accuracy.md).

The `oracle` workload (scripts/targets/oracle) traces its own measured phase with
runtime/trace and prints, for that phase, runtime/metrics deltas, MemStats (NumGC,
PauseTotalNs) and its mutex-profile delay. gmpmon runs it under `gmpmon run --mode full`,
so every number below comes from one run seen three ways. Each comparison prints both
numbers (``pytest -s`` shows them; a failure says them too).
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.gotargets import build
from tests.gotrace import TraceFacts, parse_trace
from tests.integration.test_capture import GM, TIMEOUT, env

# Go 1.21 is the oldest trace the 1.27 `go tool trace` reads; 1.21 and 1.27 are the versions
# issue #11 measured the gaps on. The others run with --full.
TRACE_VERSIONS = ("1.21", "1.22", "1.23", "1.24", "1.25", "1.26", "1.27")


def trace_versions() -> list[Any]:
    return [
        pytest.param(v, id=f"go{v}", marks=() if v in ("1.21", "1.27") else pytest.mark.slow)
        for v in TRACE_VERSIONS
    ]


@dataclass
class OracleRun:
    summary: dict[str, Any]
    oracle: dict[str, Any]
    trace: TraceFacts


def oracle_run(
    tmp_path: Path, go: str, *args: str, gomaxprocs: int = 2, record: bool = False,
    mode: str = "full", gm_args: tuple[str, ...] = (), extra_env: dict[str, str] | None = None,
) -> OracleRun:
    exe = tmp_path / "oracle"
    exe.write_bytes(build("oracle", go).read_bytes())
    exe.chmod(0o755)
    summary = tmp_path / "s.json"
    tr = tmp_path / "trace.out"
    p = subprocess.run(
        [*GM, "run", "--mode", mode, "--no-tui", "--summary-json", str(summary), *gm_args,
         *(("--record", str(tmp_path / "r.gmp")) if record else ()), "--",
         str(exe), "-trace-phase", str(tr), *args],
        capture_output=True, text=True, timeout=TIMEOUT,
        env=env(GOMAXPROCS=str(gomaxprocs), **(extra_env or {})),
    )
    assert p.returncode == 0, p.stderr[-2000:]
    line = next(ln for ln in p.stdout.splitlines() if ln.startswith("oracle "))
    return OracleRun(json.loads(summary.read_text()), json.loads(line[7:]), parse_trace(tr))


def compare(what: str, gmpmon: float, oracle: float, lo: float, hi: float) -> None:
    """Assert lo <= gmpmon/oracle <= hi, printing both numbers."""
    ratio = gmpmon / oracle if oracle else float("inf")
    print(f"{what}: gmpmon {gmpmon:.0f}, oracle {oracle:.0f}, ratio {ratio:.3f}")
    assert lo <= ratio <= hi, f"{what}: gmpmon {gmpmon:.0f} vs oracle {oracle:.0f} ({ratio:.3f})"


def hist_total_bounds(h: dict[str, Any]) -> tuple[float, float]:
    """(low, high) of the sum of a runtime/metrics histogram's values: every value lies
    between its bucket's edges."""
    b, c = h["buckets"], h["counts"]
    lo = sum(n * max(b[i], 0.0) for i, n in enumerate(c) if n)
    hi = sum(n * b[i + 1] for i, n in enumerate(c) if n)
    return lo * 1e9, hi * 1e9


@pytest.mark.bpf
@pytest.mark.parametrize("go", trace_versions())
def test_gc_stop_the_world_matches_memstats_metrics_and_trace(tmp_path: Path, go: str) -> None:
    """GC pauses from the stop request to the restarted world, as the trace measures them:
    count = 2 x NumGC = the trace's GC STW ranges = /sched/pauses/total/gc:seconds' count
    (1.22+); the total within 10% of the trace's (or 5 us a pause: gmpmon's own traps), at
    least 0.9x MemStats.PauseTotalNs and 0.9x the metric's bucket low edges."""
    r = oracle_run(tmp_path, go, "-phase", "1s", "-net=false", "-mutex", "0", "-sleepers", "2",
                   "-gc-every", "20ms")
    gc = {k: v for k, v in r.summary["gc_stw"]["by_reason"].items() if k.startswith("GC ")}
    count = sum(v["count"] for v in gc.values())
    total = sum(v["total_ns"] for v in gc.values())
    numgc = r.oracle["numgc"]
    print(f"GC STW count: gmpmon {count}, MemStats 2 x {numgc}, trace {len(r.trace.gc_stw)}")
    assert numgc >= 10
    assert count == 2 * numgc == len(r.trace.gc_stw)
    # Within 10%, or 5 us a pause where that is more: gmpmon's range holds its own two traps
    # (the entry probe's handler and return run before the trace's STWStart; the `call wakep`
    # probe fires after STWDone), a fixed 2-3.7 us a pause measured on Go 1.21-1.27. At Go
    # 1.22-1.25's ~37 us pauses that alone is 1.08-1.12x.
    slack = max(0.10, 5_000 * count / max(r.trace.gc_stw_ns, 1))
    compare("GC STW total ns vs runtime/trace", total, r.trace.gc_stw_ns, 1 - slack, 1 + slack)
    # One-sided: MemStats ends mark termination's pause before its clean-up, which gmpmon
    # and the trace include, and on a loaded machine that clean-up can be descheduled.
    compare("GC STW total ns vs MemStats.PauseTotalNs", total, r.oracle["pause_total_ns"],
            0.90, float("inf"))
    h = r.oracle["metrics"].get("/sched/pauses/total/gc:seconds")
    if h is not None:
        lo, hi = hist_total_bounds(h)
        print(f"GC STW total ns: gmpmon {total}, /sched/pauses/total/gc in [{lo:.0f}, {hi:.0f}]")
        assert sum(h["counts"]) == count
        # One-sided, as MemStats: the runtime reuses mark termination's MemStats `now` for
        # this metric (gcMarkTermination, "consistent with the value in memstats"), so it
        # too ends before the restart that gmpmon and the trace include. At Go 1.22-1.25's
        # ~40 us pauses that restart (futex wakes of the Ms) made gmpmon 1.04-1.35x the
        # buckets' high edges; at 1.26-1.27's ~110 us, 0.98x. The upper side is the trace's.
        assert 0.9 * lo <= total


def replayed_model(rec: Path, since: int = 0, until: int = 1 << 63) -> Any:
    """The recording through gmpmon's model; with since/until, only the per-event records of
    that time span (the same clock as runtime/trace's): the in-kernel counters' deltas are
    stamped when read (every 100 ms) and cannot be cut at the span's edges, so a span's
    totals are the records' (the whole run's are the counters')."""
    from gmpmon.events import Batch, Kind
    from gmpmon.model import Model
    from gmpmon.record import read_recording

    r = read_recording(str(rec))
    m = Model(r.header)
    whole = since == 0 and until == 1 << 63
    for b in r:
        m.feed(Batch([e for e in b.events if since <= e[0] <= until
                      and (whole or e[1] != Kind.COUNTER)], b.stacks))
    m.flush()
    return m


@pytest.mark.bpf
@pytest.mark.parametrize("go", trace_versions())
def test_kernel_and_event_latency_histograms_are_the_same(tmp_path: Path, go: str) -> None:
    """The in-kernel histogram (COUNTER SCHED_LAT, what the summary shows) and the one the
    model derives from READY/EXECUTE events must be the same numbers. They differed by one
    bucket at p90/p99 (tests/data/sleeper.gmp: 32.8/49.2 vs 28.7/41.0 µs): events were
    stamped after the handler's map updates, 2-4 µs after the kernel's stamp."""
    from gmpmon.model import hist

    exe = tmp_path / "oracle"
    exe.write_bytes(build("oracle", go).read_bytes())
    exe.chmod(0o755)
    rec = tmp_path / "r.gmp"
    p = subprocess.run(
        [*GM, "run", "--mode", "full", "--no-tui", "--record", str(rec), "--", str(exe),
         "-phase", "1s", "-net=false", "-mutex", "2", "-hold", "5us", "-gc-every", "0",
         "-sleepers", "8", "-sleep", "1ms"],
        capture_output=True, text=True, timeout=TIMEOUT, env=env(GOMAXPROCS="2"),
    )
    assert p.returncode == 0, p.stderr[-2000:]
    m = replayed_model(rec)
    # Model internals on purpose: the snapshot shows only one of the two paths.
    lat = m.latency  # the latency part keeps both (part.Counted)
    ev = hist.stats(lat.hist.events, exact_max=lat.max, exact_sum=lat.sum)
    kern = hist.stats(lat.hist.kernel)
    for q in ("count", "p50", "p90", "p99"):
        print(f"sched latency {q}: events {getattr(ev, q)}, kernel {getattr(kern, q)}")
    assert ev.count >= 1000
    assert abs(ev.count - kern.count) <= ev.count // 1000
    assert (ev.p50, ev.p90, ev.p99) == (kern.p50, kern.p90, kern.p99)
    diff = sum(abs(a - b) for a, b in zip(lat.hist.events, lat.hist.kernel, strict=True))
    print(f"sched latency: {diff} of {ev.count} samples differ by bucket (events vs kernel)")
    assert diff <= ev.count // 100, f"{diff} of {ev.count} samples in another bucket"


def near(what: str, gmpmon: int, trace: int) -> None:
    """A percentile: gmpmon reports its bucket's lower bound (buckets are 25% wide), and its
    stamps sit a few hundred ns before the trace's (at the probes, ahead of casgstatus)."""
    print(f"{what}: gmpmon {gmpmon} ns, trace {trace} ns")
    assert abs(gmpmon - trace) <= 0.25 * trace + 1000, what


@pytest.mark.bpf
@pytest.mark.parametrize("go", trace_versions())
def test_sched_latency_matches_runtime_trace(tmp_path: Path, go: str) -> None:
    """Every wake-up gets a latency, with or without ready(): timer wake-ups (ready) and a
    TCP ping-pong's netpoll wake-ups (findRunnable's and injectglist's bare casgstatus).
    Samples within 3% of the trace's Runnable->Running count; p50/p90/p99 within a bucket.
    Before WAKE, the ping-pong's wake-ups had none: 606 samples against the trace's 16,098."""
    from gmpmon.events import lat_bucket, lat_bucket_lo
    from gmpmon.model import hist
    from tests.gotrace import quantile

    r = oracle_run(tmp_path, go, "-phase", "1s", "-mutex", "0", "-gc-every", "0",
                   "-sleepers", "4", "-sleep", "1ms", record=True)
    assert r.oracle["pings"] > 1000 and r.oracle["sleeps"] > 200
    tl = r.trace.latency_ns()
    whole = r.summary["sched_latency_ns"]
    compare("sched latency samples (whole run) vs runtime/trace", whole["count"], len(tl),
            0.97, 1.03)
    # The traced span only (trace start and stop have long latencies of their own).
    m = replayed_model(tmp_path / "r.gmp", r.oracle["start_mono"], r.oracle["stop_mono"])
    lat = hist.stats(m.latency.hist.events, exact_max=m.latency.max, exact_sum=m.latency.sum)
    compare("sched latency samples (traced span) vs runtime/trace", lat.count, len(tl),
            0.98, 1.02)
    for q in (0.5, 0.9, 0.99):
        t = lat_bucket_lo(lat_bucket(quantile(tl, q)))  # the trace's value, as gmpmon shows it
        near(f"sched latency p{round(q * 100)}", getattr(lat, f"p{round(q * 100)}"), t)


@pytest.mark.bpf
@pytest.mark.parametrize("go", trace_versions())
def test_mutex_wait_matches_the_mutex_profile(tmp_path: Path, go: str) -> None:
    """sync.Mutex waits against Go's own mutex profile (SetMutexProfileFraction(1): every
    contention event). The waits that parked are the profile's sync.Mutex records one for one
    (from 1.22 the profile also holds the runtime's own contended locks, some released inside
    Mutex.Unlock: the oracle leaves out every record with runtime.unlock on its stack). Their
    time: within 0.75-1.15x of the profile's delay from Go 1.22 (gmpmon times lockSlow entry to
    return, spinning included; the profile from the semaphore sleep to the hand-over). Go 1.21's
    profile counts only part of each release's waiters' delay (a lower bound there), and
    /sync/mutex/wait/total:seconds samples 1 wait in 8: within 0.5-2x."""
    minor = int(go.split(".")[1])
    r = oracle_run(tmp_path, go, "-phase", "1s", "-net=false", "-mutex", "4", "-hold", "50us",
                   "-gc-every", "0", "-sleepers", "0")
    mu = r.summary["mutex"]
    parked = r.summary["park_reasons"]["sync.Mutex.Lock"]["count"]
    profiled = r.oracle["mutex_profile_count"]
    print(f"mutex waits that parked: gmpmon {parked}, mutex profile {profiled} (and "
          f"{r.oracle['runtime_lock_records']} records of the runtime's own locks left out)")
    assert parked == profiled > 500
    if minor >= 22:
        # The profile estimates the queue's other waiters from its head's and tail's times
        # ((dtail + dt0) / 2 x waiters per hand-over): measured 0.81-0.96x of gmpmon's sum.
        compare("mutex wait ns vs mutex profile delay", mu["wait_ns"],
                r.oracle["mutex_profile_delay_ns"], 0.75, 1.15)
    else:
        # 1.21's release resets the other waiters' start to its own time: its profile sums
        # how long the lock stayed contended, at most the waits' sum. The metric samples one
        # wait in eight and scales it (measured 0.94x, 1.01x and 1.55x of gmpmon's: noisy).
        compare("mutex wait ns vs mutex profile delay (a lower bound on 1.21)", mu["wait_ns"],
                r.oracle["mutex_profile_delay_ns"], 1.0, float("inf"))
        metric = r.oracle["metrics"]["/sync/mutex/wait/total:seconds"] * 1e9
        compare("mutex wait ns vs /sync/mutex/wait/total", mu["wait_ns"], metric, 0.5, 2.0)


@pytest.mark.bpf
@pytest.mark.parametrize("go", trace_versions())
def test_p_running_time_is_bounded_by_the_threads_cpu_time(tmp_path: Path, go: str) -> None:
    """P time (running + searching, full mode, over the measured phase) against the
    workload's own threads (/proc/self/task/*/schedstat): a P is busy while its M's thread is
    on a CPU or waiting for one on the kernel's run queue, so the sum lies between the threads'
    CPU time and CPU + run-queue wait (within 10% / 5%: threads that hold no P, sysmon and
    idle Ms, add CPU and wait of their own). Two spinners keep both Ps busy all along."""
    r = oracle_run(tmp_path, go, "-phase", "1s", "-net=false", "-mutex", "0", "-gc-every",
                   "0", "-sleepers", "0", "-spin", "2", record=True)
    m = replayed_model(tmp_path / "r.gmp", r.oracle["start_mono"], r.oracle["stop_mono"])
    procs = m.snapshot().procs
    busy = sum(p.running_ns + p.spinning_ns for p in procs)
    cpu, wait = r.oracle["schedstat_cpu_ns"], r.oracle["schedstat_wait_ns"]
    print(f"P busy ns: gmpmon {busy}; threads: cpu {cpu}, cpu + run-queue wait {cpu + wait}")
    assert len(procs) == 2
    assert busy >= 0.9 * cpu, (busy, cpu)
    assert busy <= 1.05 * (cpu + wait), (busy, cpu + wait)
    assert busy >= 0.9 * 2 * r.oracle["phase_ns"]  # both Ps busy the whole phase


@pytest.mark.bpf
@pytest.mark.parametrize("gomaxprocs", [8, 64])
def test_many_ps_against_runtime_trace(tmp_path: Path, gomaxprocs: int) -> None:
    """GOMAXPROCS 8 and 64 on this 2-CPU machine: every P is seen, goroutine starts per P add
    up to the trace's, GC pauses are exact, nothing is lost and no in-kernel counter is
    dropped (the 16384-entry counters hash: a failed insert would show as fewer latency
    samples than events)."""
    r = oracle_run(tmp_path, "1.27", "-phase", "1s", "-mutex", "4", "-gc-every", "50ms",
                   "-sleepers", "8", "-sleep", "1ms", "-spin", "2", gomaxprocs=gomaxprocs,
                   record=True)
    s = r.summary
    assert s["target"]["gomaxprocs"] == gomaxprocs
    seen = {p["id"] for p in s["procs"]}
    print(f"Ps seen: gmpmon {len(seen)}, GOMAXPROCS {gomaxprocs}")
    assert seen == set(range(gomaxprocs))
    assert s["events"]["lost"] == 0
    gc = sum(v["count"] for k, v in s["gc_stw"]["by_reason"].items() if k.startswith("GC "))
    assert gc == 2 * r.oracle["numgc"] == len(r.trace.gc_stw)
    m = replayed_model(tmp_path / "r.gmp", r.oracle["start_mono"], r.oracle["stop_mono"])
    starts = sum(p.executes for p in m.snapshot().procs)
    compare("goroutine starts (traced span) vs runtime/trace", starts,
            sum(r.trace.starts_by_p.values()), 0.98, 1.02)
    whole = replayed_model(tmp_path / "r.gmp")
    events, kernel = whole.latency.hist.events, whole.latency.hist.kernel
    print(f"latency samples: events {sum(events)}, kernel {sum(kernel)}")
    assert abs(sum(events) - sum(kernel)) <= sum(events) // 1000
