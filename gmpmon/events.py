"""The one event vocabulary shared by capture, recording, replay and the model.

Every event is a 7-tuple ``(ts, kind, p, m, g, a0, a1)``:

- ``ts``   kernel CLOCK_MONOTONIC nanoseconds (``bpf_ktime_get_ns``; equals
  ``time.monotonic_ns()`` in user space).
- ``kind`` a :class:`Kind`.
- ``p``    P id, or ``NO_P`` (-1) when no P is involved or it is unknown.
- ``m``    the OS thread id (``m.procid``), or ``NO_M`` (0).
- ``g``    goroutine id (``g.goid``), or ``NO_G`` (0; goid 0 is never a user goroutine).
- ``a0``, ``a1``  kind-specific unsigned 64-bit arguments (see the table below).

The BPF side emits exactly this layout (``probes/gmpmon.h``: ``struct gm_event``), packed
little-endian as ``RECORD`` describes, so a ring-buffer span decodes in bulk with
``struct.iter_unpack``. Plain tuples (:data:`EventTuple`) are the only representation: the
model's hot loop unpacks them directly.

Kinds and their arguments
=========================

Timeline events (per-event records, from hot probes in ``full`` mode and in the duty-cycle
windows of ``default`` mode):

=================  =============================================================================
EXECUTE            G ``g`` starts running on P ``p`` / M ``m``. a0 = inheritTime (0/1),
                   a1 = local runq length of ``p`` at that moment (tail-head + runnext).
FIND_RUNNABLE      M ``m`` with P ``p`` enters ``findRunnable`` (looks for work; the P is
                   "searching" until the next EXECUTE on that P or it is released). a0 =
                   local runq length, a1 = global runq length (-1 as u64 if unknown).
PARK               G ``g`` parks (``gopark``) on P ``p``. a0 = wait-reason index (decode with
                   :attr:`Header.wait_reasons`), a1 = 0.
READY              G ``g`` becomes runnable (``ready``). a0 = goid of the waker (0 when the
                   scheduler, netpoll or a timer on g0 woke it), a1 = the wait-reason index
                   the readied G had parked with.
GO_CREATE          New G ``g`` created by goid a0 (0 when unknown). a1 = its go site: a stack
                   id into ``Batch.stacks`` from :data:`GO_SITE_BASE` (frames: start function,
                   creating function, ``file:line`` of the ``go`` statement), 0 when unknown.
                   (BPF sends low32(startpc) | low32(gopc) << 32; capture names the pair.)
GO_EXIT            G ``g`` exits (``goexit0`` / ``gdestroy``).
SYSCALL_ENTER      G ``g`` enters a syscall on P ``p``. a0 = 1 for ``entersyscallblock``
                   (the P is handed off at once), 0 otherwise.
SYSCALL_EXIT       G ``g`` returns from a syscall (``exitsyscall``) on M ``m``. ``p`` is the P
                   the M held at entry to exitsyscall (NO_P if it had lost it).
HANDOFF            P ``p`` handed off from its M (``handoffp``; the M is stuck in a syscall or
                   blocked). g = goid of the G in the syscall when known. a0 = the P's
                   local runq length, a1 = the global runq's (U64_MAX: unknown; 0 in
                   recordings made before they were read).
PREEMPT_REQ        Preemption of the G running on P ``p`` requested (``preemptone``), by
                   sysmon or the GC. g = that G's goid when known.
PREEMPTED          G ``g`` was preempted (``goschedImpl(gp, true)`` / ``gopreempt_m``) and
                   becomes runnable. a0 = 1 for preemption, 0 for a voluntary Gosched.
STW_START          Stop-the-world begins. a0 = stwReason index (``Header.stw_reasons``).
STW_END            The world restarts. a0 = stwReason index if known else 0,
                   a1 = pause length ns measured in the kernel (start->end), 0 if unknown.
STEAL              P ``p`` (thief) tried to steal from P a0 (victim). a1 = goroutines taken
                   (0 = failed attempt). ``g`` = 0.
MUTEX              G ``g`` waited for a contended lock: a0 = wait ns (slow-path entry to
                   exit), a1 = stack id into ``Batch.stacks``. The lock's address and kind come
                   in the MUTEX_ADDR just before it.
MUTEX_ADDR         Emitted right before its MUTEX: a0 = lock address, a1 = wait kind
                   (:class:`LockKind`) | (N << 16) for a sync.Mutex wait traced 1 in N
                   (COLD_CUT; 0 or 1: every wait was traced).
WAKE               G ``g`` becomes runnable without ``ready``: a bare ``casgstatus(gp, _Gwaiting,
                   _Grunnable)`` in ``findRunnable`` (netpoll, the GC worker, the trace
                   reader), ``injectglist`` (netpoll batches, GC-assist wake-ups) or the GC
                   controller's ``findRunnableGCWorker``. Fields as READY (a0 = 0).
                   a0 = 1: back from a syscall without a P (``exitsyscall0``, 1.26+
                   ``exitsyscallNoP``), a1 = 0, ``p`` = NO_P.
P_IDLE             P ``p`` put on the idle list (``pidleput``); its M stops or keeps spinning
                   without it. m = tid of the M that put it there (the P's own M giving up in
                   ``findRunnable``, sysmon or a syscall's M in ``handoffp``, the STW caller
                   in ``procresize``); g = 0, a0 = a1 = 0.
=================  =============================================================================

Sample and counter events (``sample`` mode's sampler, and all modes):

=================  =============================================================================
P_SAMPLE           State of P ``p`` read from the target's memory. m = tid of its M (0 if
                   none), g = goid of its M's curg (0 if none), a0 = P status (index
                   into ``Header.p_status``: ``idle``, ``running``...) | (curg status << 8)
                   | (runq length << 16), a1 = schedtick.
SCHED_SAMPLE       Global scheduler state: a0 = npidle | (nmspinning << 32),
                   a1 = global runq length.
COUNTER            A delta of an in-kernel aggregate: g = :class:`Counter` table id,
                   p = P (or NO_P), a0 = key within the table, a1 = delta to add.
LOST               a0 = records dropped in the kernel since the previous LOST (ring buffer
                   full), a1 = 0.
MUTEX_ROWS         Lock/semaphore waits summed in the kernel since the previous read (the
                   `wait_rows` hash, ``gmpmon/capture/waitrows.py``): m = as MUTEX_ADDR's a1
                   (the wait kind, :class:`LockKind`), g = lock address, a0 = their total wait ns,
                   a1 = stack id into ``Batch.stacks`` | (how many waits << 32). The same
                   waits as that many MUTEX_ADDR + MUTEX pairs; a wait whose row did not fit
                   comes as the pair.
WINDOW             Hot probes attached (a0=1) or detached (a0=0): delimits the windows in
                   which timeline events are complete (``default`` mode's duty cycle).
                   a1 = the window's planned length ns (a0=1; 0 if not planned), or how
                   far past its planned end it was detached, ns (a0=0). a0=2: a trigger's
                   burst extended the open window to ts + a1 (the probes stay attached).
                   a0=3: every hot site is in since ts (a1 = how long registering them took,
                   from the a0=1; before it, only the sites already in record).
COST               The budget controller's account, cumulative since attach: m = budget in
                   thousandths of a percent | (the part of a0 that is gmpmon's own CPU,
                   weighted by the host's contention, in µs << 20), g = windows that
                   overstayed their plan by more than 50 ms | (trigger bursts << 20) |
                   (windows closed early because their hits cost 1.5x their plan << 40),
                   a0 = estimated CPU ns watching cost the target (traps, BPF, gmpmon's CPU
                   as contended), a1 = CPU ns the target used.
DROP               a0 = records dropped in user space since the previous DROP of that stage,
                   a1 = the :class:`Stage` (reader queue full, cut at the end). Like LOST, the
                   model forgets what it inferred from the missing records.
TRIGGER            A ``--trigger`` condition fired: g = its index among the triggers given,
                   a0 = the burst asked of the hot probes, ns. The session dumps a recording
                   around it (``--dump-dir``).
COLD_CUT           The budget's governor traces 1 in N of a cold probe group's events, and
                   links its sites for a share of each period only, while they cost more
                   than their share of the budget (gmpmon/capture/coldgov.py); cumulative
                   since attach, sent with each COST once it was ever cut back:
                   g = the group (:class:`ColdGroup`) | (the share of each period its sites
                   are linked now, in thousandths, << 8), m = N now | (1 << 16 when even the
                   largest N passed its share), a0 = the largest N so far | (ms its sites
                   were not linked << 16), a1 = ns spent with N > 1 and the sites linked.
                   The records traced so say their own N (MUTEX_ADDR).
CGROUP_CPU         The target's cgroup CPU controller, read from its files
                   (``gmpmon/capture/cgroup.py``, every mode): g = :class:`CgroupField`,
                   a0 = the field's *absolute* value, a1 = cgroup version (1 or 2). Sent in
                   full on the first read, then only the fields that changed.
=================  =============================================================================

Runtime counters and the goroutine census (kinds 40-59; ``gmpmon/capture/runtime_counters.py``
and ``census.py``: read from the target's memory, no probe). Deltas, not full copies: a
recording replays to the same numbers.

=================  =============================================================================
RT_HIST            Delta of one bucket of a runtime ``timeHistogram``: g = :class:`RtHist`,
                   m = the histogram's number of counting buckets n (720 on 1.19, 160 on
                   1.21+), a0 = bucket index in the runtime/metrics layout (0 = underflow,
                   1..n = ``counts[a0-1]``, n+1 = overflow), a1 = count added.
RT_HISTS           Deltas of up to four buckets of one histogram, as that many RT_HIST:
                   g and m as RT_HIST's, a0 = b1 | b2 << 32, a1 = b3 | b4 << 32, each
                   b = bucket index | count added << 10 (0: none; a bucket that does not
                   fit comes as an RT_HIST). Under load ~190 of Go 1.19's 722 buckets move
                   at a read (gmpmon/histpack.py).
RT_SCHED           Gauges of ``runtime.sched``: g = goroutines as ``gcount()`` computes them
                   (``runtime.NumGoroutine``; 0 if unknown), a0 = ``allglen`` | (global runq
                   length << 32), a1 = ``npidle`` | (``nmspinning`` << 16) | (``gcwaiting``
                   << 32) | (GOMAXPROCS (``len(allp)``) << 40).
RT_TOTAL           Delta of a cumulative runtime counter: g = :class:`RtTotal`, a1 = ns added.
RT_PTICK           Per-P tick deltas: p = P id, a0 = ``schedtick`` delta (goroutines
                   scheduled), a1 = ``syscalltick`` delta (syscalls). Only when non-zero.
RT_MISSING         Once per feature this Go version or binary lacks: a0 = :class:`RtFeature`;
                   a1 = 1 when its reader stopped mid-run instead (the target's memory held
                   an implausible pointer or count, capture/targetmem.py), else 0; then
                   g = the one-line reason's id into ``Batch.stacks`` (:func:`reader_note_id`;
                   0 = not said).
RT_SKIPPED         A reader of the target's memory skipped reads and went on (one element's
                   pointer was implausible or led to no mapped page: one G of ``allgs``, one
                   P's M): a0 = :class:`RtFeature`, a1 = reads skipped since the previous
                   RT_SKIPPED of that feature, g = the first skip's reason as an id into
                   ``Batch.stacks`` (:func:`reader_note_id`).
RT_GC              One GC/heap value of the runtime's memory (memstats, gcController,
                   work.cpuStats), sent at the first read and when it changes: g =
                   :class:`GcField`, a1 = its value now (GOGC as an int32 in the low 32 bits).
CENSUS_BEGIN       A walk of ``allgs`` starts: a0 = census number, a1 = ``allglen``.
CENSUS_STATE       a0 = G status (``Header.g_status`` index, _Gscan stripped) | (wait reason
                   << 16) | (1 << 32 for system goroutines), a1 = goroutines counted.
CENSUS_WAIT        Same key as CENSUS_STATE: m = goroutines with ``waitsince`` set, g = sum of
                   their waits ns, a1 = the longest wait ns.
CENSUS_SITE        a0 = creation site id into ``Batch.stacks`` (root first: the function with
                   the ``go`` statement, then the goroutine's start function), a1 = goroutines.
CENSUS_G           G ``g`` is alive with go site a0 (as GO_CREATE's a1), sent when the
                   census first sees it and again when its site or state changed; a1 = its
                   state as CENSUS_STATE's key | :data:`CENSUS_G_STATE` (a1 = 0: recordings
                   made before the census told each goroutine's state). a0 = 0: G ``g`` has
                   left ``allgs``' live set since the previous complete walk.
CENSUS_END         a0 = goroutines walked, a1 = :class:`CensusCut` flags (0 = complete),
                   g = walk duration ns, m = ``allgs`` entries skipped (a pointer outside user
                   space or to no mapped page: not counted).
CENSUS_STACK       A group of goroutines parked at the same stack (recording format 2+):
                   a0 = key as CENSUS_STATE's, a1 = goroutines, g = the wait stack's id into
                   ``Batch.stacks`` (from :data:`CENSUS_STACK_BASE`; root first, the leaf
                   where it parked, at most ``MAX_STACK_FRAMES``), m = its creation site as a
                   CENSUS_SITE id minus :data:`CENSUS_SITE_BASE` (0 = unknown). Only the
                   largest groups of the walk (``MAX_STACK_GROUPS``).
CENSUS_STACK_WAIT  Right after its CENSUS_STACK, when some of the group have ``waitsince``
                   set: m = those goroutines, g = the sum of their waits ns, a1 = the longest.
=================  =============================================================================

Kernel sources (60-79: ``probes/samples.bpf.c``, ``probes/tracepoints.bpf.c``):

=================  =============================================================================
CPU_SAMPLE         A perf-event (cpu-clock) sample of thread ``m``: ``g`` ran on P ``p`` (from
                   R14, validated; NO_P/0 when not in Go). a0 = outcome (``SAMPLE_*``) |
                   P status << 8 | Batch stack id << 32 (user stack, root first in
                   ``Batch.stacks``; 0 = none), a1 = user pc (0 in kernel mode).
SAMPLER_OFF        The perf sampler turned itself off: R14 validated in a0 of a1 user-mode
                   samples (too few to trust any). Samples before it were never sent.
=================  =============================================================================

The tracepoint source sends only COUNTER deltas (tables ``Counter.M_*``, ``RUNQ_LAT``,
``SYS_*``).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from enum import IntEnum

NO_P = -1
NO_M = 0
NO_G = 0
U64_MAX = (1 << 64) - 1

# ts u64, kind u32, p i32, m u32, pad u32, g u64, a0 u64, a1 u64  -> 48 bytes
RECORD = struct.Struct("<QIiIIQQQ")
RECORD_SIZE = RECORD.size


# Event-kind number ranges (reserved so that parallel work never collides; a kind's number is
# part of the recording format and of probes/gmpmon.h, never reuse or renumber one):
#   1-31   probe (timeline) events, emitted by the BPF handlers of the probe table
#   32-39  memory samples, in-kernel counters and stream markers (P_SAMPLE .. WINDOW)
#   40-59  runtime counters (runtime/metrics-like) and the goroutine census
#   60-79  perf-event samples and kernel tracepoints
#   80-89  budget / cost controller / triggers
#   90-99  trust and anything else
# tests/unit/test_events.py checks that every kind is unique and inside a range.
KIND_RANGES: dict[str, range] = {
    "probe": range(1, 32),
    "memory": range(32, 40),
    "runtime": range(40, 60),
    "kernel": range(60, 80),
    "budget": range(80, 90),
    "other": range(90, 100),
}


class Kind(IntEnum):
    EXECUTE = 1
    FIND_RUNNABLE = 2  # the findRunnable entry (was SCHED)
    PARK = 3
    READY = 4
    GO_CREATE = 5
    GO_EXIT = 6
    SYSCALL_ENTER = 7
    SYSCALL_EXIT = 8
    HANDOFF = 9
    PREEMPT_REQ = 10
    PREEMPTED = 11
    STW_START = 12
    STW_END = 13
    STEAL = 14
    MUTEX = 15
    MUTEX_ADDR = 16
    P_IDLE = 17
    P_SAMPLE = 32
    SCHED_SAMPLE = 33
    COUNTER = 34
    LOST = 35
    WINDOW = 36
    MUTEX_ROWS = 37
    WAKE = 90
    RT_HIST = 40
    RT_SCHED = 41
    RT_TOTAL = 42
    RT_PTICK = 43
    RT_MISSING = 44
    RT_SKIPPED = 45
    RT_HISTS = 46
    RT_GC = 47
    CENSUS_BEGIN = 50
    CENSUS_STATE = 51
    CENSUS_WAIT = 52
    CENSUS_SITE = 53
    CENSUS_END = 54
    CENSUS_G = 55
    CENSUS_STACK = 56
    CENSUS_STACK_WAIT = 57
    CPU_SAMPLE = 60
    SAMPLER_OFF = 61
    COST = 80  # the overhead budget (gmpmon.capture.hotctl), see below
    DROP = 81  # records dropped in user space (bounded queues), see below
    TRIGGER = 82  # a flight-recorder trigger fired (gmpmon.capture.triggers), see below
    COLD_CUT = 83  # a cold probe group cut back to stay in the budget, see below
    CGROUP_CPU = 95  # "other" range: the target's cgroup, not the Go runtime


class ColdGroup(IntEnum):
    """The cold probes the budget's governor may cut back (COLD_CUT's g)."""

    MUTEX = 1  # sync.Mutex contention: lockSlow's entry and exits


class Stage(IntEnum):
    """Where in user space a DROP happened (the kernel ring buffer's drops are LOST)."""

    READER_QUEUE = 1  # capture -> model queue full: the model is behind
    CUT_AT_END = 2  # --duration / Ctrl-C: what was still queued is not worked through


# Counter table id ranges (same rule as KIND_RANGES: never reuse or renumber):
#   1-9    the scheduler tables below (1-7 taken)
#   10-19  kernel sources (perf events, tracepoints)
#   20-29  anything else
COUNTER_RANGES: dict[str, range] = {
    "sched": range(1, 10),
    "kernel": range(10, 20),
    "other": range(20, 30),
}


class Counter(IntEnum):
    """In-kernel aggregate tables, sent as COUNTER deltas. Keys per table:"""

    SCHED_LAT = 1  # key = latency bucket index (see LAT_BUCKETS); p = P of the execute
    STEAL_ATTEMPT = 2  # key = thief << 16 | victim
    STEAL_OK = 3  # key = thief << 16 | victim (successful steals)
    STEAL_GS = 4  # key = thief << 16 | victim (goroutines taken)
    PARK_COUNT = 5  # key = wait-reason index
    PARK_WAIT_NS = 6  # key = wait-reason index (park -> ready ns, added at ready)
    PROBE_HITS = 7  # key = probe id (capture-defined); for overhead accounting
    RING = 8  # key = RING_*: the probes' ring-buffer ledger (what was written, read, lost)
    # The totals, counted where the probes emit their records (thinning a record never
    # changes them; gmpmon/model/counts.py):
    GO_START = 9  # p = P of the execute: goroutine starts
    GO_CREATE = 20  # goroutines created
    GO_EXIT = 21  # goroutines exited
    SYS_ENTER = 22  # p = P; key 1 entersyscallblock, 0 entersyscall
    SYS_EXIT = 23  # p = P held at exitsyscall (NO_P: none)
    HANDOFF = 24  # p = the P handed off
    YIELD = 25  # key = YIELD_*: preemptions by kind, and Gosched
    PREEMPT_REQ = 26  # preemptone requests
    STW = 27  # key = stw reason index: stop-the-world pauses
    STW_NS = 28  # key = stw reason index: their total ns
    # Kernel sources (gmpmon/capture/perfsample.py, tracepoints.py); M = OS thread id:
    SAMPLES = 10  # key = SAMPLE_* outcome: perf samples of the target, exact
    M_ONCPU_NS = 11  # key = tid: time on a CPU (sched_switch)
    M_OFFCPU_NS = 12  # key = tid: time off CPU, runnable or blocked (sched_switch)
    M_RUNQ_NS = 13  # key = tid: runnable -> on CPU (woken or preempted), kernel run queue
    M_SWITCHES = 14  # key = what << 24 | tid: M_SW_* (runq waits, voluntary, involuntary)
    RUNQ_LAT = 15  # key = lat_bucket(kernel run-queue delay ns), p = NO_P
    SYS_COUNT = 16  # key = nr | tid << 10, p = P that made it (NO_P: none / not Go)
    SYS_NS = 17  # key = nr | tid << 10, p = P: total duration ns (enter -> exit)
    SYS_G_COUNT = 18  # key = goid (low 32 bits; 0 = g0/not Go)
    SYS_G_NS = 19  # key = goid (low 32 bits)


# Counter.YIELD keys: how a G gave up its P and stayed runnable.
YIELD_GOSCHED = 0  # runtime.Gosched
YIELD_PREEMPT = 1  # a preemption (goschedImpl with preempted, gopreempt_m)
YIELD_HANDOFF = 2  # goyield_m: semrelease handed the semaphore to a waiter (a preemption to
# the runtime's trace)

# Counter.RING keys. The kernel counts what the probes tried to write and what the full ring
# and the full counters hash refused; user space counts what it read and what it dropped
# unread at the end (CUT_AT_END). Once drained: WRITTEN + MARKS == READ + CUT + REFUSED.
# LOST records: a1 = LOST_IN_BAND when the probes wrote it into the ring where the gap is
# (a0 = records that CPU lost just before), 0 when capture polled the kernel's count.
LOST_IN_BAND = 1
RING_WRITTEN = 0
RING_READ = 1
RING_CUT = 2
RING_REFUSED = 3
RING_COUNTERS_FULL = 4
RING_MARKS = 5  # in-band LOST records the probes wrote (not counted in RING_WRITTEN)
RING_KEYS = {RING_WRITTEN: "written", RING_READ: "read", RING_CUT: "cut_at_end",
             RING_REFUSED: "refused", RING_COUNTERS_FULL: "counters_full",
             RING_MARKS: "lost_marks"}

# CPU_SAMPLE outcomes (a0 & 0xff; probes/samples.bpf.c):
SAMPLE_GO = 0  # user mode, R14 = m.curg: goroutine ``g`` ran on P ``p``
SAMPLE_G0 = 1  # user mode, R14 = m.g0: runtime on the system stack (``g`` = m.curg or 0)
SAMPLE_NOT_GO = 2  # user mode, R14 is not a g of this thread (cgo, assembly): no G, no P
SAMPLE_KERNEL = 3  # kernel mode: G/P are this thread's last validated user-mode sample's
# Stack ids of CPU_SAMPLE records start here (mutex stacks use small ids from 1).
STACK_ID_BASE = 1 << 24
# M_SWITCHES key kinds (key >> 24):
M_SW_RUNQ = 0  # runnable -> on CPU transitions timed (the count behind M_RUNQ_NS)
M_SW_VOLUNTARY = 1  # switched out blocked (sleep, futex, I/O)
M_SW_INVOLUNTARY = 2  # switched out still runnable (preempted by the kernel)


class RtHist(IntEnum):
    """The runtime's timeHistograms in ``runtime.sched`` (RT_HIST g)."""

    TIME_TO_RUN = 1  # /sched/latencies:seconds (about 1 transition in 8 is tracked)
    STW_STOPPING_GC = 2  # /sched/pauses/stopping/gc:seconds (1.22+)
    STW_STOPPING_OTHER = 3  # /sched/pauses/stopping/other:seconds
    STW_TOTAL_GC = 4  # /sched/pauses/total/gc:seconds
    STW_TOTAL_OTHER = 5  # /sched/pauses/total/other:seconds


class RtTotal(IntEnum):
    """Cumulative ns counters in ``runtime.sched`` (RT_TOTAL g), 1.21/1.22+."""

    MUTEX_WAIT = 1  # totalMutexWaitTime: sync.Mutex/RWMutex blocked time
    RUNTIME_LOCK_WAIT = 2  # totalRuntimeLockWaitTime: runtime-internal locks (1.22+)


class RtFeature(IntEnum):
    """What the runtime-counter and census readers may lack (RT_MISSING a0)."""

    LATENCY = 1  # sched.timeToRun
    GOROUTINES = 2  # allglen / gcount's free lists
    SCHED = 3  # npidle, nmspinning, runq size
    P_TICKS = 4  # allp, schedtick/syscalltick
    MUTEX_WAIT = 5  # totalMutexWaitTime (1.21+)
    STW = 6  # stwTotalTime*/stwStoppingTime* (1.22+)
    RUNTIME_LOCK_WAIT = 7  # totalRuntimeLockWaitTime (1.22+)
    CENSUS = 8  # allgs and g.atomicstatus/waitreason
    CENSUS_WAIT = 9  # g.waitsince
    CENSUS_SITES = 10  # g.gopc/startpc
    P_SAMPLES = 11  # the sampler's P states (allp, p.m, m.curg)
    CENSUS_STACKS = 12  # wait stacks: g.sched and a stack unwinder for the binary
    GC = 14  # memstats, gcController, work (the GC and heap panel)
    GC_CPU = 15  # work.cpuStats (Go 1.20+): GC mark assist/dedicated/idle and pause CPU


class GcField(IntEnum):
    """The values of an RT_GC event (g), each the runtime's own, read from its memory."""

    CYCLES = 1  # memstats.numgc: /gc/cycles/total:gc-cycles
    PAUSE_TOTAL = 2  # memstats.pause_total_ns: MemStats.PauseTotalNs (STW wall time)
    HEAP_MARKED = 3  # gcController.heapMarked: /gc/heap/live:bytes (1.21+ metric)
    HEAP_LIVE = 4  # gcController.heapLive: heap bytes in use now, as the pacer counts them
    HEAP_GOAL = 5  # heapGoal() as mgcpacer.go computes it from GOGC: /gc/heap/goal:bytes
    GOGC = 6  # gcController.gcPercent: /gc/gogc:percent (-1: off)
    MEMORY_LIMIT = 7  # gcController.memoryLimit: /gc/gomemlimit:bytes
    ASSIST_CPU = 8  # work.cpuStats.gcAssistTime: /cpu/classes/gc/mark/assist:cpu-seconds
    DEDICATED_CPU = 9  # gcDedicatedTime (+fractional): /cpu/classes/gc/mark/dedicated
    IDLE_CPU = 10  # gcIdleTime: /cpu/classes/gc/mark/idle:cpu-seconds
    PAUSE_CPU = 11  # gcPauseTime: /cpu/classes/gc/pause:cpu-seconds
    GOAL_TORN = 12  # 1: memoryLimitHeapGoal's inputs read torn, HEAP_GOAL is GOGC's alone


RT_FEATURE_NAMES: dict[int, str] = {
    RtFeature.LATENCY: "scheduling-latency histogram (sched.timeToRun)",
    RtFeature.GOROUTINES: "goroutine count (allglen, free lists)",
    RtFeature.SCHED: "idle Ps, spinning Ms and global runq (runtime.sched)",
    RtFeature.P_TICKS: "per-P schedules and syscalls (p.schedtick/syscalltick)",
    RtFeature.MUTEX_WAIT: "mutex wait total (sched.totalMutexWaitTime, Go 1.21+)",
    RtFeature.STW: "stop-the-world pauses (sched.stwTotalTime*, Go 1.22+)",
    RtFeature.RUNTIME_LOCK_WAIT: "runtime lock wait (sched.totalRuntimeLockWaitTime, Go 1.22+)",
    RtFeature.CENSUS: "goroutine census (allgs)",
    RtFeature.CENSUS_WAIT: "census waiting times (g.waitsince)",
    RtFeature.CENSUS_SITES: "census creation sites (g.gopc/startpc)",
    RtFeature.P_SAMPLES: "P states sampled from memory (allp)",
    RtFeature.CENSUS_STACKS: "census wait stacks (g.sched, stack unwinder)",
    RtFeature.GC: "GC and heap (memstats, gcController, work)",
    RtFeature.GC_CPU: "GC CPU time (work.cpuStats, Go 1.20+)",
}


class CensusCut(IntEnum):
    """Why a census walk stopped early (CENSUS_END a1 bits)."""

    LIMIT = 1  # more goroutines than the walk may visit
    TIME = 2  # the walk's time budget ran out
    TARGET_GONE = 4  # the target exited (or its memory stopped reading) mid-walk


# Stack ids of census creation sites (CENSUS_SITE a0) start here, far above capture's own.
CENSUS_SITE_BASE = 1 << 32
# Stack ids of go sites (GO_CREATE a1, CENSUS_G a0; capture/gosites.py) start here.
GO_SITE_BASE = 1 << 34
# Stack ids of census wait stacks (CENSUS_STACK g) start here.
CENSUS_STACK_BASE = 1 << 36
# CENSUS_G a1: this bit says the low bits hold the goroutine's state (CENSUS_STATE's key).
CENSUS_G_STATE = 1 << 40
# Ids of readers' one-line notes (RT_MISSING g, RT_SKIPPED g: one string each) start here.
READER_NOTE_BASE = 1 << 38


def reader_note_id(feature: int, stopped: bool) -> int:
    """The ``Batch.stacks`` id of a reader's note: why it stopped, or its first skip."""
    return READER_NOTE_BASE + 2 * feature + int(stopped)


MAX_STACK_FRAMES = 32  # frames kept of a wait stack (the leaf end: where it parked)
MAX_STACK_GROUPS = 200  # CENSUS_STACK groups sent per walk at most (the largest)
class CgroupField(IntEnum):
    """CGROUP_CPU fields (absolute values). The quota and period are those of the most
    restrictive cgroup on the path from the target's own up to the root (what the kernel
    enforces); the throttling counters are that cgroup's. Go 1.25+ reads only the target's
    own cgroup's limit (LEAF_*). AFFINITY_CPUS is not the cgroup's: the CPUs in the target's
    sched_getaffinity mask (sent even without a cgroup, a1 = 0 then)."""

    QUOTA_US = 1  # cpu.max's first field / cpu.cfs_quota_us; U64_MAX = no limit ("max", -1)
    PERIOD_US = 2  # cpu.max's second field / cpu.cfs_period_us
    NR_PERIODS = 3  # cpu.stat nr_periods
    NR_THROTTLED = 4  # cpu.stat nr_throttled
    THROTTLED_NS = 5  # cpu.stat throttled_usec * 1000 (v2) / throttled_time (v1, ns)
    USAGE_NS = 6  # cpu.stat usage_usec * 1000 (v2) / cpuacct.usage (v1), 0 if unknown
    AFFINITY_CPUS = 7  # CPUs in sched_getaffinity(target pid)
    LEAF_QUOTA_US = 8  # the target's own cgroup's quota (U64_MAX: none)
    LEAF_PERIOD_US = 9


class LockKind(IntEnum):
    MUTEX = 1  # sync.Mutex slow path
    RWMUTEX_R = 2  # RWMutex.RLock waiting for a writer
    RWMUTEX_W = 3  # RWMutex.Lock waiting for readers
    SEMA = 4  # any other semacquire (WaitGroup, ...)


# Scheduling-latency histogram buckets: log2 with 4 linear sub-buckets per power of two
# (relative error <= 25%), over ns. Bucket i covers [lat_bucket_lo(i), lat_bucket_lo(i+1)).
# Index is computed identically in BPF (probes/gmpmon.h: gm_lat_bucket).
LAT_SUB = 4
LAT_BUCKETS = 64 * LAT_SUB


def lat_bucket(ns: int) -> int:
    if ns < LAT_SUB:
        return max(ns, 0)
    hb = ns.bit_length() - 1  # floor(log2)
    sub = (ns >> (hb - 2)) & (LAT_SUB - 1)
    return hb * LAT_SUB + sub


def lat_bucket_lo(i: int) -> int:
    if i < LAT_SUB:
        return i
    if i < 2 * LAT_SUB:
        return LAT_SUB  # indices 4..7 are never produced (ns 4..7 land in 8..11)
    hb, sub = divmod(i, LAT_SUB)
    return (1 << hb) + (sub << (hb - 2))


EventTuple = tuple[int, int, int, int, int, int, int]

# The one spelling of what a stack could not name, everywhere (capture, census, model, every
# output): a frame no symbol covers, and a stack that was not taken at all (bcc's words).
UNKNOWN_FRAME = "[unknown]"
MISSED_STACK: tuple[str, ...] = ("[Missed User Stack]",)


def unknown_frame(pc: int = 0) -> str:
    """A frame no symbol covers: ``[unknown 0x4011aa]``, or ``[unknown]`` without a pc."""
    return f"[unknown {pc:#x}]" if pc else UNKNOWN_FRAME


@dataclass(slots=True)
class Batch:
    """What capture hands on, what a recording stores, what the model consumes.

    ``events`` are in timestamp order (capture merges per-CPU streams before handing on).
    ``stacks`` maps stack ids used by MUTEX events in this or later batches to symbolized
    frames, root first (``"main.worker;sync.(*Mutex).Lock"`` style names, unresolved frames as
    ``"[unknown 0x...]"``). A stack id is defined once, in the first batch that uses it.
    """

    events: list[EventTuple] = field(default_factory=list)
    stacks: dict[int, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Header:
    """Target and capture metadata: the first thing in a recording, and the model's context."""

    pid: int
    exe: str
    go_version: str
    gomaxprocs: int
    mode: str  # "sample" | "default" | "full" | "replay"
    start_ns: int  # monotonic ns at capture start
    wall_start: float  # time.time() at capture start
    wait_reasons: tuple[str, ...]  # index = wait-reason value
    stw_reasons: tuple[str, ...] = ()
    g_status: tuple[str, ...] = ()
    # The runtime's _P* constant names without the prefix ("idle", "running", ...); recordings
    # made before that spelling say "_Pidle"...: readers accept both.
    p_status: tuple[str, ...] = ()
    duty_window_ms: int = 0  # default mode: hot probes attached for this long ...
    duty_period_ms: int = 0  # ... in every period; 0 when not duty-cycled
    features: tuple[str, ...] = ()  # which probes were available (e.g. "mutex", "steal")
    # The perf-event sampler's rate per CPU (--sample-hz); recordings made before it: 999.
    sample_hz: int = 999


COST_WATCH_SHIFT = 20  # COST's m: budget (m.p.c.) in the low 20 bits, watcher µs above

