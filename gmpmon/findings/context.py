"""What every rule reads: the Snapshot, the tracker's inputs, the attribution, thresholds."""

from __future__ import annotations

from dataclasses import dataclass, field

from gmpmon.model.findingtypes import Attribution, FindingsInputs
from gmpmon.model.snapshot import Snapshot

NS = 1_000_000_000


@dataclass(frozen=True, slots=True)
class Thresholds:
    """Every number a rule compares against; docs/findings.md says why each is what it is."""

    busy: float = 0.90  # cpu-saturation: every P running at least this share of its time
    busy_critical: float = 0.97
    sat_runq_mean: float = 1.0  # ... and goroutines queue: mean local runq
    sat_p99_ns: int = 1_000_000  # ... or scheduling latency p99
    sat_p99_critical_ns: int = 10_000_000
    throttle_ratio: float = 0.05  # cpu-throttled: throttled periods / periods
    throttle_ratio_critical: float = 0.25
    throttle_min: int = 3
    long_run_ns: int = 10_000_000  # sysmon's forcePreemptNS
    long_run_warn_ns: int = 20_000_000
    long_run_critical_ns: int = 200_000_000
    long_run_warn_count: int = 3
    preempt_only_info: int = 10  # preemption requests for one G, with no long run seen
    handoff_rate: float = 20.0  # syscall-handoff: per second ...
    handoff_min: int = 20
    handoff_rate_critical: float = 500.0
    handoff_share: float = 0.05  # ... and (syscalls counted) this share of the syscalls
    no_m_share: float = 0.10  # ... or Ps without an M this share of P-time
    no_m_critical: float = 0.25
    no_m_min_timed: int = 50  # ... from this many hand-offs timed by events, at least
    stw_tail_share: float = 0.20  # gc-stw-latency: STW share of the tail waits
    stw_tail_share_critical: float = 0.50
    stw_tail_min_samples: int = 3
    stw_time_share: float = 0.02  # ... or pauses this share of wall time
    stw_max_ns: int = 10_000_000
    stw_min_count: int = 10  # ... from this many pauses (5 GC cycles) at least
    stw_min_slow: int = 3  # ... or this many pauses of stw_max_ns or more (one is no pattern)
    lock_share: float = 0.5  # lock-contention: one address this share of all mutex wait
    lock_wait_share: float = 0.05  # ... and that wait this share of wall time
    lock_wait_critical: float = 1.0  # on average this many goroutines a P waiting on it
    lock_min: int = 10
    leak_min: int = 100  # goroutine-leak: net growth over the run ...
    leak_min_seconds: int = 5  # ... over at least this many seconds of points
    leak_steady: float = 0.7  # ... rising in this share of the seconds
    leak_critical: int = 10_000
    # goroutine-leak from the census's wait stacks: one group (same stack, wait reason and
    # creation site) grows by this many goroutines ...
    leak_stack_min: int = 50
    leak_stack_passes: int = 5  # ... over at least this many complete census walks ...
    leak_stack_rises: float = 2.0  # ... rising at least this many times as often as it falls
    leak_stack_wait_ns: int = 60 * NS  # ... and its oldest has waited this long (waitsince),
    #                                       or the group was followed this long and never fell
    spin_cpu: float = 0.05  # idle-spinning: Ps searching for work this many CPUs on average
    spin_busy: float = 0.30  # ... and this share of the Ps' busy (running + searching) time
    spin_sample_share: float = 0.30  # sample mode: SCHED samples with nmspinning > 0
    spin_min_samples: int = 100
    # ... or CPU samples in findRunnable worth this much CPU time (100 samples at 999 Hz),
    # and at least spin_min_cpu_samples of them (10 at the default 99 Hz is too few)
    spin_min_sampled_ns: int = 100_000_000
    spin_min_cpu_samples: int = 20
    spin_cpu_kernel: float = 0.025  # ... and, perf samples on, the kernel sees this much CPU
    runq_limit: int = 256  # runq-overflow: len(p.runq)
    global_runq: int = 256
    locked_min: int = 10  # cgo-pinning: hand-offs by locked Ms ...
    locked_rate: float = 5.0  # ... per second
    cgo_min_samples: int = 10  # ... seen as such, or this many perf samples outside Go code
    procs_over_critical: int = 4  # gomaxprocs-above-cpus: Ps >= this many times the CPUs
    min_duration_ns: int = NS // 2  # below this no rule speaks (too little to judge)


@dataclass(frozen=True, slots=True)
class Context:
    snap: Snapshot
    inputs: FindingsInputs
    attribution: Attribution
    th: Thresholds = field(default_factory=Thresholds)

    @property
    def duration_ns(self) -> int:
        return max(0, self.snap.now - self.snap.start)

    @property
    def seconds(self) -> float:
        return max(self.duration_ns, 1) / NS

    @property
    def sampled_mode(self) -> bool:
        return self.snap.window == "sampled"

    @property
    def timeline_source(self) -> str:
        """Where P state times come from: every event, duty-cycle windows, or P samples."""
        return {"exact": "events", "windows": "events (windows)", "sampled": "samples"}.get(
            self.snap.window, self.snap.window
        )

    def go_minor(self) -> int:
        v = self.snap.go_version.removeprefix("go").split(".")
        try:
            return int(v[1]) if len(v) > 1 else 0
        except ValueError:
            return 0
