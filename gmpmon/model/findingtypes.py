"""The findings engine's vocabulary: what it is fed (small typed inputs) and what it says.

Nothing here imports the model: gmpmon.model.snapshot refers to these types, so that a
Snapshot carries its findings and the latency attribution as plain frozen data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from gmpmon.model.waitstacks import StackTrend


class Severity(IntEnum):
    INFO = 0
    WARNING = 1
    CRITICAL = 2

    @property
    def label(self) -> str:
        return self.name.lower()


@dataclass(frozen=True, slots=True)
class Finding:
    """One named pathology. ``evidence`` is JSON-ready (numbers, strings, lists, dicts) and
    always has ``sources`` (where each number came from) and ``sampled`` (which of them are
    samples rather than every event)."""

    id: str
    severity: Severity
    title: str
    evidence: dict[str, Any]
    advice: str

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "severity": self.severity.label,
            "title": self.title,
            "evidence": self.evidence,
            "advice": self.advice,
        }


@dataclass(frozen=True, slots=True)
class CgroupCpu:
    """The target's cgroup CPU controller (capture/cgroup.py, via CGROUP_CPU events): the
    first and the last reading of the run."""

    version: int  # 1 or 2
    quota_us: int  # -1: no limit
    period_us: int
    nr_periods: int  # deltas over the run (last - first)
    nr_throttled: int
    throttled_ns: int
    first_ts: int
    last_ts: int
    readings: int
    # The target's own cgroup's quota (the only one Go 1.25+ reads; ``quota_us`` is the most
    # restrictive on the path up): -1 none, -2 not read (recordings made before it).
    leaf_quota_us: int = -2
    leaf_period_us: int = 0

    @property
    def cpus(self) -> float:
        """The quota in CPUs (0.0 when there is none)."""
        return self.quota_us / self.period_us if self.quota_us > 0 and self.period_us > 0 else 0.0


@dataclass(frozen=True, slots=True)
class LongRun:
    """A goroutine that ran >= the long-run threshold on one P without leaving it."""

    goid: int
    p: int
    start: int
    ns: int
    sampled: bool  # from P samples (same G and schedtick across samples), not events
    # The kernel's view of the run (perf samples of that goroutine between its start and
    # end): in user mode (Go code, on the goroutine's stack or g0's for it) and in kernel
    # mode (a syscall, a fault). -1: not measured (no perf samples, or too old to be kept).
    user_samples: int = -1
    kernel_samples: int = -1


@dataclass(frozen=True, slots=True)
class HandoffStats:
    """P hand-offs (handoffp) and what preceded each on the M that made it."""

    count: int
    by_cause: dict[str, int]  # "syscall-retake" | "syscall-block" | "locked-thread" | "unknown"
    no_m_ns: int  # time Ps spent handed off, until an M picked them up again (seen)
    no_m_max_ns: int
    goroutines: dict[int, int]  # goid of the G in the syscall -> hand-offs
    locked_goroutines: dict[int, int]  # goid whose blocking took its locked M's P -> count
    no_m_timed: int = 0  # hand-offs whose end was timed by an event (no_m_ns sums those)
    no_m_untimed: int = 0  # hand-offs a P sample saw end (when: not known)


@dataclass(frozen=True, slots=True)
class RunqStats:
    max_local: int  # largest local runq seen (events or samples)
    max_local_p: int
    full_local: int  # times a local runq was seen at its 256 limit
    max_global: int
    global_series: tuple[tuple[int, int], ...]  # (second since start, max global runq)
    local_sum: int  # sum and count of local runq readings, for the mean
    local_n: int
    sampled: bool  # readings from P samples (sample/default mode), not events


@dataclass(frozen=True, slots=True)
class GrowthSeries:
    """Live goroutines over time, one point per second: (second since start, live)."""

    points: tuple[tuple[int, int], ...]
    source: str  # "events" (creates - exits) | "census"
    parents: dict[int, int] = field(default_factory=dict)  # creator goid -> live Gs it made


@dataclass(frozen=True, slots=True)
class CensusGrowth:
    """Between the first and the last complete goroutine census (runtime helper's allgs walk):
    how the waiting user goroutines per wait reason and the goroutines per creation site
    changed."""

    seconds: float
    by_reason: dict[str, int]  # wait reason -> change, largest growth first
    by_site: tuple[tuple[str, str, int], ...]  # (creator: the go statement's function,
    #                                             start function, change), largest first


@dataclass(frozen=True, slots=True)
class SpinStats:
    """nmspinning from SCHED samples: how often Ms were spinning, and how many."""

    samples: int
    spinning_samples: int  # samples with nmspinning > 0
    spinning_sum: int
    idle_ps_sum: int  # npidle summed over samples


@dataclass(frozen=True, slots=True)
class Attribution:
    """What the Ps were doing while tail-latency goroutines waited (runnable -> running)."""

    threshold_ns: int  # samples at or above this were attributed (the p99 by default)
    samples: int  # such samples
    wait_ns: int  # their total wait
    # category -> ns of those waits: "all_running", "stw", "syscall", "idle", "unknown"
    breakdown: dict[str, int]
    source: str  # "events" (every latency sample with its times) or "" when unavailable
    note: str = ""

    def share(self, cat: str) -> float:
        return self.breakdown.get(cat, 0) / self.wait_ns if self.wait_ns else 0.0


ATTRIBUTION_CATEGORIES = ("all_running", "stw", "syscall", "idle", "unknown")


@dataclass(frozen=True, slots=True)
class FindingsInputs:
    """Everything the engine needs beyond the Snapshot, collected by the tracker."""

    cgroup: CgroupCpu | None
    long_runs: tuple[LongRun, ...]  # longest first, bounded
    long_run_count: int  # every long run seen (the tuple is bounded)
    long_by_goid: dict[int, tuple[int, int]]  # goid -> (long runs, longest ns), every run
    preempt_by_goid: dict[int, int]  # PREEMPT_REQ per goid (sysmon/GC asked it to stop)
    handoffs: HandoffStats
    runq: RunqStats
    growth: GrowthSeries
    spin: SpinStats
    latency_samples: tuple[tuple[int, int, int, int], ...]  # (ready, execute, P, goid)
    gomaxprocs: int
    p_idles: int = 0  # P_IDLE (pidleput) events seen: searching vs idle is known
    census_growth: CensusGrowth | None = None
    # census wait-stack groups over complete walks, the most grown first (model/waitstacks.py)
    stack_trends: tuple[StackTrend, ...] = ()
    sample_period_ns: int = 0  # CPU time one perf sample stands for; 0: no perf samples
    cpus_allowed: int = 0  # CPUs in the target's sched_getaffinity mask; 0: not read
