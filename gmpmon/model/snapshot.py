"""Snapshot: the model's frozen answer at one instant. Views and exporters read only this.

Field names follow the summary JSON schema (docs/summary-schema.md); ``summary()`` in
gmpmon.export.json turns a Snapshot into that JSON, gmpmon.report into the text report.
Times are ns; timestamps are the kernel's monotonic ns (same clock as events).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from gmpmon.model.cost import CostSummary

# The value types the parts' sections are made of live below the Snapshot (values.py), and
# each part's section type in the part's module: a Snapshot field per part, no cycle.
from gmpmon.model.findingtypes import Attribution, CgroupCpu, Finding
from gmpmon.model.gcheap import GcView
from gmpmon.model.kernelview import KernelView
from gmpmon.model.phistory import History
from gmpmon.model.runtime import RuntimeView
from gmpmon.model.values import GState, LatencyStats, PState, Span

__all__ = [
    "LOCK_KIND_NAMES",
    "GState",
    "GoroutineView",
    "LatencyStats",
    "MutexStack",
    "PState",
    "ParkReason",
    "ProcView",
    "RuntimeView",
    "Snapshot",
    "Span",
    "StealStats",
    "same_content",
]


@dataclass(frozen=True, slots=True)
class ProcView:
    id: int
    state: PState
    goid: int  # current goroutine (0 if none)
    m: int  # tid of the M holding it (0 if none/unknown)
    runq: int  # local runq length (last known)
    running_ns: int
    idle_ns: int
    searching_ns: int  # SEARCHING time: its M in findRunnable (spinning or not)
    syscall_ns: int
    gcstop_ns: int
    executes: int
    steals_in: int  # goroutines this P stole (thief)
    steals_out: int  # goroutines stolen from this P (victim)
    latency: LatencyStats
    timeline: tuple[Span, ...]  # its last spans within the snapshot's window, oldest first
    # Before them (a busy P's older spans), its time per state in buckets (model/phistory.py)
    history: History | None = None

    @property
    def spinning_ns(self) -> int:
        """The old name of searching_ns (an M is "spinning" only with m.spinning set)."""
        return self.searching_ns


@dataclass(frozen=True, slots=True)
class GoroutineView:
    goid: int
    state: GState
    p: int  # last P (-1 if none)
    wait_reason: str  # last wait reason ("" if none)
    since: int  # ts of the last state change
    parent: int  # creator goid (0 unknown)
    executes: int
    wait_ns: int  # total time parked, seen
    start: str = ""  # start function (g.startpc), "" unknown
    created_at: str = ""  # go statement: creating function and file:line, "" unknown
    # A row of Snapshot.census_goroutines: the state and wait reason are the newest census's,
    # ``census_state`` its word for the state (Go's: "preempted" and "copystack" too).
    census_state: str = ""
    # The probes saw this goroutine: p, since, parent, executes and wait_ns are what they
    # measured (in default mode, in the windows only); False: none of them is measured.
    probed: bool = True


@dataclass(frozen=True, slots=True)
class ParkReason:
    reason: str
    count: int
    wait_ns: int  # total park->ready ns for parks that ended


@dataclass(frozen=True, slots=True)
class StealStats:
    attempts: int
    count: int  # successful steals
    goroutines: int
    # matrix[(thief, victim)] = (attempts, successes, goroutines)
    matrix: dict[tuple[int, int], tuple[int, int, int]] = field(default_factory=dict)


# events.LockKind value -> the name views and the summary use.
LOCK_KIND_NAMES: dict[int, str] = {
    1: "sync.Mutex",
    2: "sync.RWMutex.RLock",
    3: "sync.RWMutex.Lock",
    4: "semacquire",
}


@dataclass(frozen=True, slots=True)
class MutexStack:
    stack: tuple[str, ...]  # root first
    count: int
    wait_ns: int
    kind: str = "sync.Mutex"  # LOCK_KIND_NAMES: what was waited for


@dataclass(frozen=True, slots=True, eq=False)
class Snapshot:
    """The model's answer at one instant. Compared by identity (``eq=False``): the producer
    hands out a new object only when something changed, and a field-by-field compare of two
    Snapshots costs more than drawing one. Built by gmpmon.model.view from the model's parts;
    each part fills its own fields (a new part adds one defaulted field here)."""

    now: int  # ts of the newest event seen
    start: int  # ts of the first event
    pid: int
    exe: str
    go_version: str
    gomaxprocs: int
    mode: str
    window: str  # "exact" | "windows" (numbers from duty-cycle windows) | "sampled"
    events_total: int
    events_lost: int
    event_rate: float  # events/s over the last second
    procs: tuple[ProcView, ...]
    global_runq: int
    npidle: int
    nmspinning: int
    goroutines: tuple[GoroutineView, ...]  # bounded (most recent first), see live count
    goroutines_live: int
    goroutines_created: int
    goroutines_exited: int
    g_state_counts: dict[str, int]
    sched_latency: LatencyStats
    latency_by_reason: dict[str, LatencyStats]  # wake reason (the wait reason it parked with)
    park_reasons: tuple[ParkReason, ...]  # sorted by count desc
    steals: StealStats
    syscalls: int
    syscalls_blocking: int
    handoffs: int
    preempt_requested: int
    preempted: int
    stw_count: int
    stw_total_ns: int
    stw_max_ns: int
    stw_spans: tuple[tuple[int, int], ...]  # (start, end) within the window
    mutex_contentions: int
    mutex_wait_ns: int
    mutex_stacks: tuple[MutexStack, ...]  # sorted by wait_ns desc
    mutex_by_addr: dict[int, tuple[int, int]]  # addr -> (count, wait_ns)
    illegal_transitions: int
    # Added by the model (defaulted so older constructors keep working):
    window_ns: int = 0  # length of the timeline window kept (Span lists cover at most this)
    windows: int = 0  # default mode: duty-cycle windows seen (WINDOW a0=1)
    windows_covered_ns: int = 0  # time with hot probes attached (whole run in full mode)
    # default mode: the last duty-cycle windows (start, end), the open one ending at now
    window_spans: tuple[tuple[int, int], ...] = ()
    gosched: int = 0  # voluntary runtime.Gosched (PREEMPTED with a0=0)
    syscall_exits: int = 0  # exitsyscall entries
    late_events: int = 0  # events older than ones already applied (beyond the reorder window)
    unseen_wakes: int = 0  # parked Gs that ran with no READY/WAKE seen
    stw_reasons: dict[str, tuple[int, int]] = field(default_factory=dict)  # name -> (count, ns)
    probe_hits: dict[int, int] = field(default_factory=dict)  # capture's probe id -> hits
    ring: dict[str, int] = field(default_factory=dict)  # Counter.RING ledger (RING_KEYS names)
    sources: dict[str, str] = field(default_factory=dict)  # table -> "counters" | "events"
    # (wake reason, P of the execute) -> (count, total latency ns); from events only
    latency_by_reason_proc: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)
    # Blocking waits by kind (LOCK_KIND_NAMES), sync.Mutex included: name -> (count, wait ns).
    # The mutex_* fields above are sync.Mutex only; the other kinds' stacks are here:
    waits_by_kind: dict[str, tuple[int, int]] = field(default_factory=dict)
    # sync.Mutex: the stack with the most wait at each of the locks with the most wait (a
    # label: over the whole run, also in an interval's delta)
    mutex_addr_stack: dict[int, tuple[str, ...]] = field(default_factory=dict)
    wait_stacks: tuple[MutexStack, ...] = ()  # RWMutex / semaphore waits, by wait_ns desc
    # sync.Mutex waits traced 1 in N > 1 while the cold probes were over the budget (each
    # counted N times in the mutex_* fields), and the largest N (1: never sampled)
    mutex_sampling: tuple[int, int] = (0, 1)
    # The runtime's own counters and the goroutine census (gmpmon.model.runtime); None when
    # the capture had neither (older recordings).
    runtime: RuntimeView | None = None
    # The GC and heap values of the runtime's memory (gmpmon.model.gcheap); None when not read.
    gc: GcView | None = None
    cost: CostSummary | None = None  # default mode's budget controller (COST events)
    dropped: dict[str, int] = field(default_factory=dict)  # user-space drops by stage (DROP)
    thinned_since: int = -1  # ts of the first record the model missed (LOST or DROP), -1 none
    triggers: tuple[tuple[int, int], ...] = ()  # (ts, --trigger index) of each trigger fired
    # The findings engine (gmpmon.findings): most severe first; see docs/findings.md.
    findings: tuple[Finding, ...] = ()
    latency_attribution: Attribution | None = None
    cgroup_cpu: CgroupCpu | None = None  # the target's cgroup CPU quota and throttling
    # Perf-event samples and kernel tracepoints (model/kernelview.py); None when neither ran.
    kernel: KernelView | None = None
    # The census's user goroutines (at most CENSUS_ROWS, model/view.py), each in its state as
    # of the newest walk, with what the probes saw of it; None when the census told no
    # goroutine's state (sample of an older recording, or no go-site reader for the binary).
    census_goroutines: tuple[GoroutineView, ...] | None = None
    # illegal_transitions by kind: "g" (LEGAL_G), "p" (LEGAL_P), "corrupt_id" (P id beyond
    # any runtime's); their sum is illegal_transitions
    violations: dict[str, int] = field(default_factory=dict)


def same_content(a: Snapshot, b: Snapshot) -> bool:
    """Field-by-field equality (Snapshots themselves compare by identity); for tests."""
    return all(getattr(a, f.name) == getattr(b, f.name) for f in fields(Snapshot))
