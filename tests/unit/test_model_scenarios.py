"""Golden scenarios for the scheduler model, each named after the edge case it covers.

Events are written by hand as the probes would emit them (events.py), with times in µs for
readability (``us(n)``). Expected numbers are worked out from the scenario, not from a run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from gmpmon.events import U64_MAX, Batch, Counter, EventTuple, Header, Kind, LockKind
from gmpmon.model import Model
from gmpmon.model.snapshot import GState, PState, Snapshot, same_content

WAIT_REASONS = ("", "GC assist marking", "IO wait", "chan receive", "sleep", "sync.Mutex.Lock")
SLEEP = 4
CHANRECV = 3
T0 = 1_000_000_000_000


def us(n: float) -> int:
    return T0 + int(n * 1000)


def header(mode: str = "full", gomaxprocs: int = 2) -> Header:
    return Header(
        pid=42,
        exe="/bin/target",
        go_version="go1.27.3",
        gomaxprocs=gomaxprocs,
        mode=mode,
        start_ns=T0,
        wall_start=0.0,
        wait_reasons=WAIT_REASONS,
        stw_reasons=("", "GC mark termination"),
    )


def ev(
    t: float, kind: Kind, p: int = -1, m: int = 0, g: int = 0, a0: int = 0, a1: int = 0
) -> EventTuple:
    return (us(t), int(kind), p, m, g, a0, a1)


def run(
    events: Sequence[EventTuple],
    *,
    mode: str = "full",
    gomaxprocs: int = 2,
    split: int = 0,
    **kw: int,
) -> Snapshot:
    model = Model(header(mode, gomaxprocs), **kw)
    if split:
        for i in range(0, len(events), split):
            model.feed(Batch(list(events[i : i + split])))
    else:
        model.feed(Batch(list(events)))
    model.flush()
    return model.snapshot()


def proc(s: Snapshot, pid: int):  # type: ignore[no-untyped-def]
    return next(p for p in s.procs if p.id == pid)


def goroutine(s: Snapshot, goid: int):  # type: ignore[no-untyped-def]
    return next(g for g in s.goroutines if g.goid == goid)


def test_attach_mid_run_g_first_seen_running() -> None:
    # We attach while G7 runs on P0: its first event is its park. Nothing before is counted.
    s = run(
        [
            ev(10, Kind.PARK, p=0, m=100, g=7, a0=CHANRECV),
            ev(11, Kind.FIND_RUNNABLE, p=0, m=100),
            ev(30, Kind.READY, m=101, g=7, a1=CHANRECV),
            ev(35, Kind.EXECUTE, p=0, m=100, g=7),
            ev(40, Kind.FIND_RUNNABLE, p=1, m=101),
        ]
    )
    assert s.illegal_transitions == 0
    p0 = proc(s, 0)
    assert p0.running_ns == 5_000  # 35..40 only: the run before the park was never seen
    assert p0.spinning_ns == 25_000  # 10..35
    assert p0.state is PState.RUNNING and p0.goid == 7
    assert s.park_reasons[0].reason == "chan receive"
    assert s.park_reasons[0].count == 1 and s.park_reasons[0].wait_ns == 20_000
    assert s.sched_latency.count == 1 and s.sched_latency.max == 5_000
    assert proc(s, 1).state is PState.SEARCHING and proc(s, 1).spinning_ns == 0
    assert goroutine(s, 7).wait_ns == 20_000


def test_attach_mid_syscall() -> None:
    # G9 was already in a blocking syscall holding P1. sysmon retakes P1 (HANDOFF); the
    # syscall returns without a P; G9 later runs on P0. No entry was seen: no illegal move.
    s = run(
        [
            ev(5, Kind.HANDOFF, p=1, g=9),
            ev(6, Kind.FIND_RUNNABLE, p=1, m=102),
            ev(50, Kind.SYSCALL_EXIT, p=-1, m=101, g=9),
            ev(60, Kind.EXECUTE, p=0, m=100, g=9),
        ]
    )
    assert s.handoffs == 1
    assert s.syscalls == 0  # the entry happened before we attached
    assert s.illegal_transitions == 0
    assert proc(s, 1).spinning_ns == 54_000  # 6..60 (the handoff->sched gap is idle)
    assert proc(s, 1).idle_ns == 1_000
    assert goroutine(s, 9).p == 0 and goroutine(s, 9).state is GState.RUNNING
    assert s.sched_latency.count == 0  # we never saw it become runnable


def test_syscall_with_p_kept_and_syscall_steal_proc() -> None:
    s = run(
        [
            ev(0, Kind.EXECUTE, p=0, m=100, g=3),
            ev(10, Kind.SYSCALL_ENTER, p=0, m=100, g=3),
            ev(20, Kind.SYSCALL_EXIT, p=0, m=100, g=3),  # fast path: P kept
            ev(30, Kind.SYSCALL_ENTER, p=0, m=100, g=3, a0=0),
            ev(60, Kind.HANDOFF, p=0, g=3),  # sysmon took P0 (syscall-steal-proc)
            ev(61, Kind.FIND_RUNNABLE, p=0, m=104),
            ev(62, Kind.EXECUTE, p=0, m=104, g=4),
            ev(90, Kind.SYSCALL_EXIT, p=-1, m=100, g=3),
            ev(95, Kind.SYSCALL_ENTER, p=1, m=105, g=5, a0=1),
        ]
    )
    p0 = proc(s, 0)
    assert s.syscalls == 3 and s.syscalls_blocking == 1 and s.handoffs == 1
    assert p0.syscall_ns == 10_000 + 30_000
    assert p0.running_ns == 10_000 + 10_000 + 33_000  # 0..10, 20..30, 62..95 (now)
    assert p0.idle_ns == 1_000 and p0.spinning_ns == 1_000
    assert s.illegal_transitions == 0
    assert proc(s, 1).state is PState.SYSCALL and proc(s, 1).goid == 5


def test_syscall_exit_that_loses_its_p_to_a_retake_is_not_a_violation() -> None:
    """Seen in a fresh spawn recording: the exit probe read P0, but sysmon retook P0 before
    exitsyscall's CAS (HANDOFF P0 35 us later); the G was queued and another M executed it
    on P0. The G was not running in between: no violation."""
    s = run(
        [
            ev(0, Kind.EXECUTE, p=0, m=100, g=1),
            ev(10, Kind.SYSCALL_ENTER, p=0, m=100, g=1),
            ev(20, Kind.SYSCALL_EXIT, p=0, m=100, g=1),
            ev(55, Kind.HANDOFF, p=0, m=99, g=1),
            ev(100, Kind.EXECUTE, p=0, m=102, g=1),
        ]
    )
    assert s.illegal_transitions == 0, s.violations
    assert proc(s, 0).state is PState.RUNNING and proc(s, 0).goid == 1
    # A G that is running on another P when its old P is handed off stays running.
    s = run(
        [
            ev(0, Kind.EXECUTE, p=1, m=100, g=1),
            ev(10, Kind.HANDOFF, p=0, m=99),
            ev(20, Kind.EXECUTE, p=1, m=100, g=1),
        ]
    )
    assert s.illegal_transitions == 1  # running twice without leaving: still a violation


def test_steal_of_runnext() -> None:
    # G1 on P0 readies G2 into P0's runnext; idle P1 steals it (runqgrab returns 1).
    s = run(
        [
            ev(0, Kind.EXECUTE, p=0, m=100, g=1),
            ev(1, Kind.FIND_RUNNABLE, p=1, m=101),
            ev(10, Kind.READY, p=0, m=100, g=2, a0=1, a1=CHANRECV),
            ev(14, Kind.STEAL, p=1, m=101, a0=0, a1=0),  # first pass: runnext not yet
            ev(17, Kind.STEAL, p=1, m=101, a0=0, a1=1),  # last pass takes runnext
            ev(18, Kind.EXECUTE, p=1, m=101, g=2, a1=0),
        ]
    )
    assert s.steals.attempts == 2 and s.steals.count == 1 and s.steals.goroutines == 1
    assert s.steals.matrix == {(1, 0): (2, 1, 1)}
    assert proc(s, 1).steals_in == 1 and proc(s, 0).steals_out == 1
    assert proc(s, 0).steals_in == 0
    assert s.sched_latency.count == 1 and s.sched_latency.max == 8_000
    assert s.latency_by_reason["chan receive"].count == 1
    assert proc(s, 1).latency.count == 1 and proc(s, 0).latency.count == 0


def test_goroutine_migrating_between_ps() -> None:
    s = run(
        [
            ev(0, Kind.EXECUTE, p=0, m=100, g=8),
            ev(10_000, Kind.PREEMPT_REQ, p=0, g=8),
            ev(10_001, Kind.PREEMPTED, p=0, m=100, g=8, a0=1),
            ev(10_002, Kind.FIND_RUNNABLE, p=0, m=100),
            ev(10_003, Kind.EXECUTE, p=0, m=100, g=9),
            ev(10_010, Kind.FIND_RUNNABLE, p=1, m=101),
            ev(10_020, Kind.EXECUTE, p=1, m=101, g=8),
            ev(10_030, Kind.PARK, p=1, m=101, g=8, a0=SLEEP),
        ]
    )
    g8 = goroutine(s, 8)
    assert g8.p == 1 and g8.executes == 2 and g8.state is GState.WAITING
    assert g8.wait_reason == "sleep"
    assert s.preempt_requested == 1 and s.preempted == 1
    assert s.latency_by_reason["preempted"].count == 1
    assert s.latency_by_reason["preempted"].max == 19_000
    p0_g8 = [sp for sp in proc(s, 0).timeline if sp.goid == 8]
    p1_g8 = [sp for sp in proc(s, 1).timeline if sp.goid == 8]
    assert [(sp.start, sp.end) for sp in p0_g8] == [(us(0), us(10_001))]
    assert [(sp.start, sp.end, sp.state) for sp in p1_g8] == [
        (us(10_020), us(10_030), PState.RUNNING)
    ]
    assert s.illegal_transitions == 0


def test_stw_while_ps_spin() -> None:
    s = run(
        [
            ev(0, Kind.FIND_RUNNABLE, p=0, m=100),
            ev(0, Kind.FIND_RUNNABLE, p=1, m=101),
            ev(10, Kind.STW_START, p=0, a0=1),
            ev(12, Kind.FIND_RUNNABLE, p=1, m=101),  # a spinning M notices gcwaiting: still stopped
            ev(40, Kind.STW_END, p=0, a0=1, a1=30_000),
            ev(50, Kind.EXECUTE, p=0, m=100, g=5),
        ]
    )
    assert s.stw_count == 1 and s.stw_total_ns == 30_000 and s.stw_max_ns == 30_000
    assert s.stw_spans == ((us(10), us(40)),)
    assert s.stw_reasons == {"GC mark termination": (1, 30_000)}
    for pid in (0, 1):
        assert proc(s, pid).gcstop_ns == 30_000
    assert proc(s, 0).spinning_ns == 10_000 + 10_000  # before and after the pause
    assert proc(s, 1).state is PState.SEARCHING and proc(s, 1).spinning_ns == 20_000
    assert proc(s, 0).state is PState.RUNNING


def test_out_of_order_events_across_cpus() -> None:
    events = [
        ev(0, Kind.GO_CREATE, p=0, m=100, g=20, a0=1),
        ev(5, Kind.FIND_RUNNABLE, p=1, m=101),
        ev(9, Kind.EXECUTE, p=1, m=101, g=20),
        ev(30, Kind.PARK, p=1, m=101, g=20, a0=SLEEP),
    ]
    sorted_snap = run(events)
    # CPU 1's records arrive one batch late, behind CPU 0's newer ones.
    model = Model(header(), reorder_ns=100_000)
    model.feed(Batch([events[0], (us(31), int(Kind.FIND_RUNNABLE), 0, 100, 0, 0, 0)]))
    model.feed(Batch([events[1], events[2], events[3]]))
    model.flush()
    s = model.snapshot()
    assert s.illegal_transitions == 0 and s.late_events == 0
    assert s.sched_latency.max == sorted_snap.sched_latency.max == 9_000
    assert proc(s, 1).running_ns == 21_000
    # Beyond the reorder window the late events are still applied, and counted as late.
    model = Model(header(), reorder_ns=0)
    model.feed(Batch([events[0], events[3]]))
    model.feed(Batch([events[1], events[2]]))
    model.flush()
    assert model.snapshot().late_events == 2


def test_counters_vs_events_no_double_count() -> None:
    key = 1 << 16 | 0  # thief P1, victim P0
    s = run(
        [
            ev(0, Kind.STEAL, p=1, a0=0, a1=2),
            ev(1, Kind.COUNTER, p=1, g=Counter.STEAL_ATTEMPT, a0=key, a1=5),
            ev(2, Kind.COUNTER, p=1, g=Counter.STEAL_OK, a0=key, a1=3),
            ev(3, Kind.STEAL, p=1, a0=0, a1=1),  # after counters too: still not added
            ev(4, Kind.PARK, p=0, g=3, a0=SLEEP),
            ev(5, Kind.COUNTER, p=0, g=Counter.PARK_COUNT, a0=SLEEP, a1=10),
            ev(6, Kind.READY, g=3, a1=SLEEP),
            ev(7, Kind.EXECUTE, p=0, g=3),
            ev(8, Kind.COUNTER, p=0, g=Counter.SCHED_LAT, a0=40, a1=4),
        ]
    )
    # attempts and successes from counters, goroutines (no STEAL_GS counter) from events
    assert s.steals.matrix == {(1, 0): (5, 3, 3)}
    assert s.sources["steal_attempts"] == "counters" and s.sources["steal_goroutines"] == "events"
    # parks: count from counters only, wait from events (no PARK_WAIT_NS counter)
    assert [(r.reason, r.count, r.wait_ns) for r in s.park_reasons] == [("sleep", 10, 2_000)]
    # latency histogram from counters (4 in bucket 40), not 4 + the event-derived one
    assert s.sched_latency.count == 4
    assert proc(s, 0).latency.count == 4
    assert s.latency_by_reason["sleep"].count == 1  # per reason exists only from events


def test_lost_events_reset_state() -> None:
    s = run(
        [
            ev(0, Kind.EXECUTE, p=0, m=100, g=1),
            ev(1, Kind.READY, g=2, a1=SLEEP),
            ev(2, Kind.LOST, a0=17),
            ev(9, Kind.EXECUTE, p=1, m=101, g=2),  # its ready may be stale: no latency
            ev(9, Kind.READY, g=2),  # after a loss, anything goes once
            ev(10, Kind.EXECUTE, p=0, m=100, g=1),
        ]
    )
    assert s.events_lost == 17
    assert s.sched_latency.count == 0
    # 0..2 counts (the state was known until the loss was reported), 2..10 is unknown
    assert proc(s, 0).running_ns == 2_000
    assert s.illegal_transitions == 1  # READY of a running G (after the loss)


def test_illegal_transitions_are_counted_not_raised() -> None:
    s = run(
        [
            ev(0, Kind.READY, g=5, a1=SLEEP),
            ev(1, Kind.READY, g=5, a1=SLEEP),  # twice runnable
            ev(2, Kind.PARK, p=0, g=5, a0=SLEEP),  # parks without running
            ev(3, Kind.EXECUTE, p=0, g=6),
            ev(4, Kind.EXECUTE, p=0, g=7),  # G6 never left P0
            ev(5, Kind.GO_EXIT, p=0, g=99),  # unknown G exits: fine
        ]
    )
    assert s.illegal_transitions == 3
    assert s.goroutines_exited == 1


def test_sleep_parks_counted_per_reason() -> None:
    events: list[EventTuple] = []
    t = 0.0
    for _ in range(25):
        events += [
            ev(t, Kind.EXECUTE, p=0, m=100, g=11),
            ev(t + 1, Kind.PARK, p=0, m=100, g=11, a0=SLEEP),
            ev(t + 1001, Kind.READY, g=11, a1=SLEEP),
        ]
        t += 1002
    s = run(events)
    assert [(r.reason, r.count, r.wait_ns) for r in s.park_reasons] == [
        ("sleep", 25, 25 * 1_000_000)
    ]
    assert s.sched_latency.count == 24  # the last ready has no execute yet
    assert s.g_state_counts == {"runnable": 1}


def test_mutex_contention_per_stack_and_address() -> None:
    stack_a = ("main.main", "main.worker", "sync.(*Mutex).Lock")
    stack_b = ("main.main", "main.reader", "sync.(*RWMutex).RLock")
    model = Model(header())
    model.feed(
        Batch(
            [
                ev(0, Kind.MUTEX_ADDR, g=3, a0=0xC000010, a1=LockKind.MUTEX),
                ev(0, Kind.MUTEX, g=3, a0=5_000, a1=1),
                ev(1, Kind.MUTEX_ADDR, g=4, a0=0xC000010, a1=LockKind.MUTEX),
                ev(1, Kind.MUTEX, g=4, a0=7_000, a1=1),
                ev(2, Kind.MUTEX_ADDR, g=5, a0=0xC000020, a1=LockKind.RWMUTEX_R),
                ev(2, Kind.MUTEX, g=5, a0=100, a1=2),
                ev(3, Kind.MUTEX, g=6, a0=50, a1=3),  # stack id never defined
            ],
            {1: stack_a, 2: stack_b},
        )
    )
    model.flush()
    s = model.snapshot()
    # sync.Mutex only in mutex_*: the RWMutex wait is kept apart, by kind.
    assert s.mutex_contentions == 3 and s.mutex_wait_ns == 12_050
    assert [(m.stack, m.count, m.wait_ns) for m in s.mutex_stacks] == [
        (stack_a, 2, 12_000),
        (("[Missed User Stack]",), 1, 50),  # events.MISSED_STACK
    ]
    assert s.mutex_by_addr == {0xC000010: (2, 12_000)}
    assert s.waits_by_kind == {"sync.Mutex": (3, 12_050), "sync.RWMutex.RLock": (1, 100)}
    assert [(m.stack, m.count, m.wait_ns, m.kind) for m in s.wait_stacks] == [
        (stack_b, 1, 100, "sync.RWMutex.RLock"),
    ]


def test_semaphore_waits_by_kind_do_not_count_as_mutex_contention() -> None:
    s = run(
        [
            ev(0, Kind.MUTEX_ADDR, g=1, a0=0xC000100, a1=LockKind.SEMA),
            ev(0, Kind.MUTEX, g=1, a0=9_000, a1=7),
            ev(1, Kind.MUTEX_ADDR, g=2, a0=0xC000200, a1=LockKind.RWMUTEX_W),
            ev(1, Kind.MUTEX, g=2, a0=4_000, a1=7),
            ev(2, Kind.MUTEX_ADDR, g=3, a0=0xC000100, a1=LockKind.SEMA),
            ev(2, Kind.MUTEX, g=3, a0=1_000, a1=7),
        ]
    )
    assert s.mutex_contentions == 0 and s.mutex_stacks == () and s.mutex_by_addr == {}
    assert s.waits_by_kind == {"sync.RWMutex.Lock": (1, 4_000), "semacquire": (2, 10_000)}
    assert [(m.kind, m.count, m.wait_ns) for m in s.wait_stacks] == [
        ("semacquire", 2, 10_000),
        ("sync.RWMutex.Lock", 1, 4_000),
    ]


def test_default_mode_counts_only_inside_windows() -> None:
    idle = 0  # _Pidle
    running = 1 | (2 << 8) | (3 << 16)  # _Prunning, curg _Grunning, runq 3
    s = run(
        [
            ev(0, Kind.P_SAMPLE, p=0, m=100, g=1, a0=running),
            ev(0, Kind.P_SAMPLE, p=1, a0=idle),
            ev(0, Kind.SCHED_SAMPLE, a0=1 | (0 << 32), a1=4),
            ev(100, Kind.WINDOW, a0=1),
            ev(150, Kind.PARK, p=0, m=100, g=1, a0=SLEEP),
            ev(300, Kind.WINDOW, a0=0),
            ev(400, Kind.P_SAMPLE, p=0, m=100, g=2, a0=running),
        ],
        mode="default",
    )
    assert s.window == "windows" and s.windows == 1
    assert s.windows_covered_ns == 200_000
    p0, p1 = proc(s, 0), proc(s, 1)
    assert p0.running_ns == 50_000 and p0.spinning_ns == 150_000
    assert p1.idle_ns == 200_000  # sampled idle, counted from the window's start only
    assert p0.state is PState.RUNNING and p0.goid == 2 and p0.runq == 3  # shown, not counted
    assert s.global_runq == 4 and s.npidle == 1


def test_a_preemption_without_hot_probes_leaves_the_p_running() -> None:
    # Sample mode on Go 1.19, where preemption is a cold probe: the preempting P runs the
    # next G at once; only the next P status read says what it runs. With hot probes an
    # execute follows, and until then the P searches.
    running = 1 | (2 << 8)
    events = [
        ev(0, Kind.P_SAMPLE, p=0, m=100, g=1, a0=running),
        ev(100, Kind.PREEMPTED, p=0, m=100, g=1, a0=1),
        ev(300, Kind.P_SAMPLE, p=0, m=100, g=2, a0=running),
    ]
    p0 = proc(run(events, mode="sample"), 0)
    assert p0.running_ns == 300_000 and p0.spinning_ns == 0 and p0.goid == 2
    full = run([ev(0, Kind.EXECUTE, p=0, m=100, g=1), *events[1:2],
                ev(300, Kind.EXECUTE, p=0, m=100, g=2)])
    p0 = proc(full, 0)
    assert p0.running_ns == 100_000 and p0.spinning_ns == 200_000


def test_default_mode_drops_hot_events_after_the_window_closes() -> None:
    # Capture announces WINDOW 0 and then detaches the hot probes one by one: for a while
    # readies and parks still arrive, executes no longer. They must not count, nor be illegal.
    s = run(
        [
            ev(0, Kind.WINDOW, a0=1),
            ev(10, Kind.EXECUTE, p=0, m=100, g=5),
            ev(20, Kind.PARK, p=0, m=100, g=5, a0=SLEEP),
            ev(30, Kind.WINDOW, a0=0),
            ev(31, Kind.READY, g=5, a1=SLEEP),
            ev(32, Kind.PARK, p=1, m=101, g=5, a0=SLEEP),  # its execute was already detached
            ev(33, Kind.HANDOFF, p=1),  # cold probe: still counted
            ev(34, Kind.STW_START, a0=1),
            ev(35, Kind.STW_END, a0=1, a1=1_000),
        ],
        mode="default",
    )
    assert s.illegal_transitions == 0
    assert [(r.reason, r.count, r.wait_ns) for r in s.park_reasons] == [("sleep", 1, 0)]
    assert s.handoffs == 1 and s.stw_count == 1
    assert proc(s, 1).idle_ns == 0  # outside the window: shown, not counted
    assert proc(s, 0).running_ns == 10_000 and s.windows_covered_ns == 30_000


def test_idle_sample_ends_a_search_while_hot() -> None:
    running = 1 | (2 << 8)
    s = run(
        [
            ev(0, Kind.FIND_RUNNABLE, p=0, m=100),
            ev(10, Kind.P_SAMPLE, p=0, a0=0),  # _Pidle: findRunnable gave up (pidleput)
            ev(20, Kind.P_SAMPLE, p=0, m=100, g=3, a0=running),  # not trusted over events
            ev(30, Kind.EXECUTE, p=0, m=100, g=3),
            ev(40, Kind.P_SAMPLE, p=0, a0=0),  # stale read: a running P stays running
            ev(50, Kind.PARK, p=0, m=100, g=3, a0=SLEEP),
        ]
    )
    p0 = proc(s, 0)
    assert (p0.spinning_ns, p0.idle_ns, p0.running_ns) == (10_000, 20_000, 20_000)


def test_sample_mode_state_times_from_samples() -> None:
    running = 1 | (2 << 8)
    syscall = 1 | (3 << 8)  # 1.26+: P stays _Prunning, curg is _Gsyscall
    s = run(
        [
            ev(0, Kind.P_SAMPLE, p=0, m=100, g=1, a0=running),
            ev(10_000, Kind.P_SAMPLE, p=0, m=100, g=1, a0=running),
            ev(20_000, Kind.P_SAMPLE, p=0, m=100, g=1, a0=syscall),
            ev(30_000, Kind.P_SAMPLE, p=0, a0=0),
            ev(40_000, Kind.P_SAMPLE, p=0, m=100, a0=1),  # running, no curg: in schedule
            ev(50_000, Kind.P_SAMPLE, p=0, a0=0),
        ],
        mode="sample",
    )
    p0 = proc(s, 0)
    assert s.window == "sampled"
    assert p0.running_ns == 20_000_000 and p0.syscall_ns == 10_000_000
    assert p0.idle_ns == 10_000_000 and p0.spinning_ns == 10_000_000


def test_batch_split_does_not_change_the_answer() -> None:
    events = [
        ev(0, Kind.GO_CREATE, p=0, g=2, a0=1),
        ev(1, Kind.EXECUTE, p=0, m=100, g=2),
        ev(2, Kind.SYSCALL_ENTER, p=0, m=100, g=2),
        ev(3, Kind.FIND_RUNNABLE, p=1, m=101, a1=U64_MAX),
        ev(4, Kind.HANDOFF, p=0, g=2),
        ev(5, Kind.STEAL, p=1, a0=0, a1=0),
        ev(6, Kind.SYSCALL_EXIT, p=-1, m=100, g=2),
        ev(7, Kind.EXECUTE, p=1, m=101, g=2),
        ev(8, Kind.GO_EXIT, p=1, m=101, g=2),
    ]
    whole = run(events)
    for split in (1, 2, 3, 5):
        assert same_content(run(events, split=split), whole)
    assert whole.goroutines_created == whole.goroutines_exited == 1
    assert whole.goroutines_live == 0


def test_goroutine_table_is_bounded_and_counts_stay_exact() -> None:
    events = [ev(i, Kind.GO_CREATE, p=0, g=1000 + i, a0=1) for i in range(500)]
    events += [ev(600 + i, Kind.GO_EXIT, p=0, g=1000 + i) for i in range(0, 500, 2)]
    s = run(events, max_goroutines=100, goroutine_view=20)
    assert s.goroutines_created == 500 and s.goroutines_exited == 250
    assert s.goroutines_live == 250
    assert len(s.goroutines) == 20


def test_timeline_is_bounded_by_the_window() -> None:
    events: list[EventTuple] = []
    for i in range(2000):
        events.append(ev(i * 10, Kind.EXECUTE, p=0, g=1 + i % 7))
        events.append(ev(i * 10 + 5, Kind.PREEMPTED, p=0, g=1 + i % 7))
    s = run(events, window_ns=1_000_000)  # 1 ms of 20 ms
    spans = proc(s, 0).timeline
    assert s.now - spans[0].start <= 1_000_000 + 10_000
    assert 150 <= len(spans) <= 210
    assert proc(s, 0).running_ns == 2000 * 5_000  # totals cover everything


def test_p_goes_idle_after_failed_search() -> None:
    # pidleput after a failed findRunnable: the P is idle, not spinning, until its next event.
    s = run(
        [
            ev(0, Kind.EXECUTE, p=0, m=100, g=5),
            ev(0, Kind.FIND_RUNNABLE, p=1, m=101),
            ev(5, Kind.P_IDLE, p=1, m=101),  # M 101 found nothing: P 1 idle, M stops
            ev(10, Kind.PARK, p=0, m=100, g=5, a0=SLEEP),  # M 100 searches with P 0 ...
            ev(15, Kind.P_IDLE, p=0, m=100),  # ... and gives up
            ev(80, Kind.FIND_RUNNABLE, p=1, m=101),  # woken to spin (wakep): searching again
            ev(90, Kind.P_IDLE, p=1, m=101),
            ev(100, Kind.EXECUTE, p=0, m=100, g=6),  # a timer's G: the idle span ends
            ev(120, Kind.PARK, p=0, m=100, g=6, a0=SLEEP),
        ]
    )
    p0, p1 = proc(s, 0), proc(s, 1)
    assert (p0.running_ns, p0.spinning_ns, p0.idle_ns) == (30_000, 5_000, 85_000)
    assert (p1.running_ns, p1.spinning_ns, p1.idle_ns) == (0, 15_000, 105_000)
    assert p1.state is PState.IDLE and p1.m == 0
    assert p0.state is PState.SEARCHING
    assert s.illegal_transitions == 0


def test_p_idle_during_stw_resumes_idle_and_running_p_idle_is_illegal() -> None:
    s = run(
        [
            ev(0, Kind.FIND_RUNNABLE, p=0, m=100),
            ev(0, Kind.EXECUTE, p=1, m=101, g=7),
            ev(10, Kind.STW_START, a0=1),
            ev(20, Kind.P_IDLE, p=0, m=101),  # procresize while the world is stopped
            ev(30, Kind.STW_END, a0=1, a1=20_000),
            ev(40, Kind.P_IDLE, p=1, m=101),  # g 7 still running on P 1 as far as we saw
            ev(50, Kind.EXECUTE, p=1, m=101, g=7),  # not illegal again: g 7 became unknown
        ]
    )
    p0, p1 = proc(s, 0), proc(s, 1)
    assert (p0.spinning_ns, p0.gcstop_ns, p0.idle_ns) == (10_000, 20_000, 20_000)
    assert (p1.running_ns, p1.gcstop_ns, p1.idle_ns) == (20_000, 20_000, 10_000)
    assert s.illegal_transitions == 1


def test_p_idle_outside_a_window_is_dropped() -> None:
    s = run(
        [
            ev(0, Kind.WINDOW, a0=1),
            ev(0, Kind.FIND_RUNNABLE, p=0, m=100),
            ev(10, Kind.WINDOW, a0=0),
            ev(11, Kind.P_IDLE, p=0, m=100),  # hot probe still detaching
        ],
        mode="default",
    )
    p0 = proc(s, 0)
    assert p0.spinning_ns == 10_000 and p0.idle_ns == 0 and p0.state is PState.UNKNOWN


def test_p_status_spellings_old_and_new_decode_alike() -> None:
    # Headers say "idle", "running"... (BinaryInfo.p_status); recordings made before carry
    # the runtime's constant names "_Pidle"...: both replay the same.
    running = 1 | (2 << 8)
    events = [
        ev(0, Kind.P_SAMPLE, p=0, m=100, g=3, a0=running),
        ev(0, Kind.P_SAMPLE, p=1, a0=0),
        ev(10, Kind.P_SAMPLE, p=0, a0=0),
        ev(20, Kind.P_SAMPLE, p=1, a0=4),  # dead: beyond GOMAXPROCS, ignored
    ]
    out = []
    for names in (
        ("idle", "running", "syscall", "gcstop", "dead"),
        ("_Pidle", "_Prunning", "_Psyscall", "_Pgcstop", "_Pdead"),
    ):
        model = Model(dataclasses.replace(header("sample"), p_status=names))
        model.feed(Batch(list(events)))
        model.flush()
        s = model.snapshot()
        out.append([(p.id, p.state, p.running_ns, p.idle_ns) for p in s.procs])
    assert out[0] == out[1]
    assert out[0][0] == (0, PState.IDLE, 10_000, 10_000)
    assert out[0][1][1] is PState.IDLE
