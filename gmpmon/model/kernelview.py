"""What the kernel sources tell (perf-event samples, raw tracepoints), as plain frozen data.

``Snapshot.kernel`` holds one :class:`KernelView` (None when neither source ran). Every block
names its source in ``KernelView.sources``: "samples" (cpu-clock samples, 99 Hz by default:
statistical, a sample stands for ``SampleStats.period_ns`` of CPU) or "tracepoints" (exact
counts and times from sched_switch/sched_wakeup and sys_enter/sys_exit).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gmpmon.model.values import LatencyStats, Span


@dataclass(frozen=True, slots=True)
class SampleStats:
    total: int = 0  # samples of the target's threads (exact, from the kernel's counter)
    go: int = 0  # user mode, a goroutine ran (R14 validated as m.curg)
    g0: int = 0  # user mode, runtime on the system stack (R14 = m.g0)
    not_go: int = 0  # user mode, R14 not a g of the thread (cgo, assembly)
    kernel: int = 0  # kernel mode (G/P from the thread's last user-mode sample)
    records: int = 0  # sample records seen (total minus the ring buffer's drops)
    period_ns: int = 0  # CPU time one sample stands for (1e9 / sampling Hz)
    off: str = ""  # why the sampler was turned off ("" = it was not)


@dataclass(frozen=True, slots=True)
class LongRun:
    """The same goroutine on the same P across consecutive samples for ``duration_ns``."""

    goid: int
    p: int
    start: int  # ts of the first sample
    end: int  # ts of the last sample
    samples: int
    function: str  # the deepest non-runtime frame of its most frequent stack
    stack: tuple[str, ...]  # that stack, root first
    ongoing: bool = False  # still running at the snapshot
    user_samples: int = -1  # of ``samples``, those in user mode (Go code); -1 not counted

    @property
    def duration_ns(self) -> int:
        return self.end - self.start


@dataclass(frozen=True, slots=True)
class GoroutineCpu:
    goid: int
    samples: int
    cpu_ns: int  # samples x period_ns
    function: str  # where most of its samples were
    procs: tuple[int, ...]  # Ps it was sampled on


@dataclass(frozen=True, slots=True)
class ThreadView:
    """One M (OS thread) of the target."""

    tid: int
    samples: int = 0  # source: samples
    oncpu_ns: int = 0  # source: tracepoints (sched_switch)
    offcpu_ns: int = 0
    runq_ns: int = 0  # runnable, waiting for a CPU (kernel run queue)
    runq_waits: int = 0
    voluntary: int = 0  # switched out blocked
    involuntary: int = 0  # switched out by the kernel while runnable
    syscalls: int = 0  # source: tracepoints (sys_enter/exit)
    syscall_ns: int = 0


@dataclass(frozen=True, slots=True)
class SyscallStat:
    name: str
    nr: int
    count: int
    ns: int


@dataclass(frozen=True, slots=True)
class ProcSyscalls:
    p: int  # -1: made without a P (sysmon, an M that lost its P, not Go code)
    count: int
    ns: int
    top: tuple[SyscallStat, ...]  # by count, at most TOP_SYSCALLS


@dataclass(frozen=True, slots=True)
class KernelView:
    samples: SampleStats = field(default_factory=SampleStats)
    # P -> spans of the goroutine seen running there, from consecutive samples ("sampled")
    timeline: dict[int, tuple[Span, ...]] = field(default_factory=dict)
    cpu_by_p: dict[int, int] = field(default_factory=dict)  # P -> samples (Go + g0 + kernel)
    cpu_by_goroutine: tuple[GoroutineCpu, ...] = ()  # by samples desc, bounded
    long_running: tuple[LongRun, ...] = ()  # by duration desc, bounded
    long_runs_total: int = 0  # runs >= LONG_RUN_NS seen (closed ones)
    # On-CPU profile: (Batch stack id, goid, P, SAMPLE_* outcome, samples); the ids' frames
    # are in ``stacks`` (root first)
    profile: tuple[tuple[int, int, int, int, int], ...] = ()
    stacks: dict[int, tuple[str, ...]] = field(default_factory=dict)
    # Digests of ``profile`` kept as the samples come (the findings read these, not the
    # whole profile, at every snapshot): goid -> (samples, stack id) of its most sampled
    # stack that reaches the program's own code (``own_frame``; SAMPLE_GO and SAMPLE_G0
    # rows; ties: the lowest stack id); stack id -> samples outside Go code (SAMPLE_NOT_GO
    # rows); g0 samples in runtime.findRunnable (Ms looking for work); goroutine samples.
    own_stacks: dict[int, tuple[int, int]] = field(default_factory=dict)
    not_go_sites: dict[int, int] = field(default_factory=dict)
    search_samples: int = 0
    run_samples: int = 0
    threads: tuple[ThreadView, ...] = ()  # by tid
    runq_latency: LatencyStats | None = None  # kernel run-queue delay of Ms (tracepoints)
    syscalls: int = 0
    syscall_ns: int = 0
    syscalls_by_name: tuple[SyscallStat, ...] = ()  # by count desc
    syscalls_by_p: tuple[ProcSyscalls, ...] = ()  # by P id
    syscalls_by_g: tuple[tuple[int, int, int], ...] = ()  # (goid, count, ns) by count desc
    sources: dict[str, str] = field(default_factory=dict)  # block -> "samples"|"tracepoints"


RUNTIME_PREFIXES = ("runtime.", "internal/", "syscall.", "sync.", "[")


def _is_program(frame: str) -> bool:
    """A frame of the program (main, or a module: github.com/x/y.F), not of Go's standard
    library (time.now, net/http.(*conn).serve): a standard package's path has no dot in its
    first element."""
    slash = frame.rfind("/")
    pkg = frame[: slash + 1] + frame[slash + 1 :].split(".", 1)[0]
    first = pkg.split("/", 1)[0]
    return pkg == "main" or "." in first


def own_frame(stack: tuple[str, ...]) -> str:
    """The innermost frame of the program's own code (stacks are root first): of main or a
    module if there is one, else of the standard library; "" if none (runtime.goexit and the
    like are not the program's). A goroutine sampled in time.now inside main.poll is at
    main.poll. (The findings' rule: the model keeps, per goroutine, its most sampled stack
    for which this is not "", KernelView.own_stacks.)"""
    fallback = ""
    for f in reversed(stack):
        # A name without a package ("gogo", "mcall": assembly, symbolized bare) is the
        # runtime's too: a sample on g0 in schedule() is not the goroutine's code.
        if f.startswith(RUNTIME_PREFIXES) or "." not in f:
            continue
        if _is_program(f):
            return f
        fallback = fallback or f
    return fallback


def in_find_runnable(stack: tuple[str, ...]) -> bool:
    """The stack is inside the scheduler's search for work (runtime.findRunnable)."""
    return any(f.startswith("runtime.findRunnable") for f in stack)
