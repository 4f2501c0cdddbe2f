"""FindingsTracker: what the findings engine needs that the Snapshot does not keep.

Fed the same events as the Model, in the order it applies them, so that live and replay
give the same inputs. Pure and bounded (per-second series, capped tables). Only a few kinds
are looked at, picked by a C-level filter (compress over the kind column): ~40 ns an event.

What it keeps, by the finding that uses it:

- long-running-goroutine: per P, the G running and since when (EXECUTE .. the next event
  that takes it off: PARK, PREEMPTED, GO_EXIT, SYSCALL_ENTER, FIND_RUNNABLE); in sample mode
  the same from P samples (same G, same schedtick across samples). PREEMPT_REQ per goid.
- syscall-handoff / cgo-pinning: each HANDOFF's cause, from the last event of the M that
  called handoffp (a PARK just before: a LockOSThread'ed G blocked and its M took the P
  with it to sleep, ``stoplockedm``; a blocking SYSCALL_ENTER: ``entersyscallblock``; an M
  that runs no goroutine: sysmon's ``retake`` of a P stuck in a syscall), and how long the
  P stayed without an M (until an EXECUTE/FIND_RUNNABLE on it, or a P sample with an M).
- runq-overflow / cpu-saturation: local and global run-queue lengths (EXECUTE a1,
  FIND_RUNNABLE, P and SCHED samples).
- goroutine-leak: creates minus exits, one point per second, and creator goids of the live.
- idle-spinning: nmspinning / npidle from SCHED samples.
- cpu-throttled: first and last CGROUP_CPU reading.
- latency attribution: (ready, execute, P, goid) of recent latency samples (the Model
  appends them in _on_execute; bounded deque).
"""

from __future__ import annotations

from bisect import bisect_left
from collections import deque
from itertools import compress, repeat
from operator import itemgetter

from gmpmon.events import (
    SAMPLE_G0,
    SAMPLE_GO,
    SAMPLE_KERNEL,
    U64_MAX,
    UNKNOWN_FRAME,
    EventTuple,
    Header,
    Kind,
)
from gmpmon.model.cgrouptrack import CgroupTracker
from gmpmon.model.findingtypes import (
    CensusGrowth,
    FindingsInputs,
    GrowthSeries,
    HandoffStats,
    LongRun,
    RunqStats,
    SpinStats,
)
from gmpmon.model.waitstacks import GroupKey, GroupTrend

LONG_RUN_NS = 10_000_000  # sysmon's forcePreemptNS: a G on one P this long gets preempted
LATENCY_SAMPLES = 20_000
MAX_LONG_RUNS = 64
MAX_TABLE = 10_000
CAUSE_WINDOW_NS = 2_000_000  # a PARK/SYSCALL_ENTER on the same M this recent caused a hand-off
# Events of that window kept at most (live ~4k at 2M events/s; a recording whose timestamps
# barely move would otherwise keep all of them, and copy them at every chunk).
MAX_TAIL = 1 << 15
RUNQ_MAX = 256  # len(p.runq)
RUNQ_FULL = 240  # a reading this high is at the limit: runqput spills half at 256
_NS = 1_000_000_000

K_EXECUTE, K_FIND_RUNNABLE, K_PARK = int(Kind.EXECUTE), int(Kind.FIND_RUNNABLE), int(Kind.PARK)
K_GO_CREATE, K_GO_EXIT = int(Kind.GO_CREATE), int(Kind.GO_EXIT)
K_SYSCALL_ENTER, K_HANDOFF = int(Kind.SYSCALL_ENTER), int(Kind.HANDOFF)
K_PREEMPT_REQ, K_PREEMPTED = int(Kind.PREEMPT_REQ), int(Kind.PREEMPTED)
K_P_SAMPLE, K_SCHED_SAMPLE = int(Kind.P_SAMPLE), int(Kind.SCHED_SAMPLE)
K_LOST, K_WINDOW, K_CGROUP = int(Kind.LOST), int(Kind.WINDOW), int(Kind.CGROUP_CPU)
K_DROP = int(Kind.DROP)
K_P_IDLE = int(Kind.P_IDLE)
K_CPU_SAMPLE, K_SAMPLER_OFF = int(Kind.CPU_SAMPLE), int(Kind.SAMPLER_OFF)
GOROUTINE_SAMPLES = 4096  # perf sample times kept per goroutine (long runs look back in them)
K_CENSUS_BEGIN, K_CENSUS_STATE = int(Kind.CENSUS_BEGIN), int(Kind.CENSUS_STATE)
K_CENSUS_SITE, K_CENSUS_END = int(Kind.CENSUS_SITE), int(Kind.CENSUS_END)
K_CENSUS_STACK, K_CENSUS_STACK_WAIT = int(Kind.CENSUS_STACK), int(Kind.CENSUS_STACK_WAIT)
G_WAITING_STATUS = 4  # _Gwaiting
HOT = frozenset({K_EXECUTE, K_FIND_RUNNABLE, K_PARK, K_GO_CREATE, K_GO_EXIT, K_SYSCALL_ENTER,
                 K_PREEMPTED, K_P_IDLE})
_KIND = itemgetter(1)
_TS = itemgetter(0)
_CAUSE_ROW = itemgetter(0, 1, 4, 5)  # (ts, kind, g, a0) of an M's last PARK/SYSCALL_ENTER
_RARE = frozenset({K_PREEMPT_REQ, K_P_SAMPLE, K_SCHED_SAMPLE, K_CGROUP, K_CENSUS_BEGIN,
                   K_CENSUS_STATE, K_CENSUS_SITE, K_CENSUS_END, K_CENSUS_STACK,
                   K_CENSUS_STACK_WAIT, K_CPU_SAMPLE, K_SAMPLER_OFF})
_CHURN = frozenset({K_GO_CREATE, K_GO_EXIT})
_G, _A0 = itemgetter(4), itemgetter(5)
_CAUSES = frozenset({K_PARK, K_SYSCALL_ENTER})
# What a tail event does to the causes it lends: a PARK/SYSCALL_ENTER sets its M's cause,
# an EXECUTE on the M ends it, a gap (WINDOW, LOST, DROP) forgets them all.
_TAIL = _CAUSES | {K_EXECUTE, K_WINDOW, K_LOST, K_DROP}
_SLOW = _RARE | _CHURN | {K_PARK, K_SYSCALL_ENTER, K_EXECUTE, K_FIND_RUNNABLE, K_HANDOFF,
                          K_WINDOW, K_LOST, K_P_IDLE, K_DROP}
_P_RUNNING_STATUS = 1  # index of "running" in Header.p_status (events.P_SAMPLE a0 & 0xff)


class FindingsTracker:
    def __init__(self, header: Header, stacks: dict[int, tuple[str, ...]] | None = None) -> None:
        self.header = header
        self.stacks = stacks if stacks is not None else {}  # the Model's (census site names)
        # census: (ts, waiting user Gs by wait-reason index, Gs by creation-site stack id)
        self._census_new: tuple[dict[int, int], dict[int, int]] | None = None
        self._census_first: tuple[int, dict[int, int], dict[int, int]] | None = None
        self._census_last: tuple[int, dict[int, int], dict[int, int]] | None = None
        # census wait stacks: this walk's groups, and each group's trend over complete walks
        self._groups_new: dict[GroupKey, tuple[int, int]] = {}
        self._group_last: GroupKey | None = None
        self.stack_trend = GroupTrend()
        self.latency_samples: deque[tuple[int, int, int, int]] = deque(maxlen=LATENCY_SAMPLES)
        # Mirrors the Model: in default mode hot kinds count only inside WINDOW 1..0.
        self._hot = header.mode not in ("sample", "default")
        self._gated = header.mode == "default"
        self._t0 = -1
        # long runs
        self._srun: dict[int, tuple[int, int, int, int]] = {}  # P -> (goid, tick, first, last)
        self.long_runs: list[LongRun] = []
        self.long_run_count = 0
        self.long_by_goid: dict[int, list[int]] = {}  # goid -> [long runs, longest ns]
        self.preempt_by_goid: dict[int, int] = {}
        # Perf sample times per goroutine, user and kernel mode: is a long run Go on a CPU?
        self._user_ts: dict[int, deque[int]] = {}
        self._kern_ts: dict[int, deque[int]] = {}
        self.sample_period_ns = 0
        self._sampler_off = False
        # hand-offs
        self._tail: list[EventTuple] = []
        self._handed: dict[int, int] = {}  # P -> hand-off ts (no M yet)
        self.handoffs = 0
        self.handoff_cause: dict[str, int] = {}
        self.no_m_ns = 0
        self.no_m_max_ns = 0
        self.no_m_timed = 0  # hand-offs whose end an event timed (EXECUTE/FIND_RUNNABLE/P_IDLE)
        self.no_m_untimed = 0  # ... that a P sample ended (only known to be before it)
        self.handoff_g: dict[int, int] = {}
        self.locked_g: dict[int, int] = {}
        # run queues
        self.max_local = 0
        self.max_local_p = -1
        self.full_local = 0
        self.local_sum = 0
        self.local_n = 0
        self.runq_sampled = False
        self.max_global = 0
        self.rq_note = 1  # the Model calls runq() for readings >= this
        self.grq_note = -1  # ... and global_runq() above this, or at ts >= grq_next
        self.grq_next = 0
        self._gseries: dict[int, int] = {}
        # goroutine growth
        self._net = 0
        self._live_series: dict[int, int] = {}
        self._parent_of: dict[int, int] = {}
        # spinning
        self.spin_samples = 0
        self.p_idles = 0
        self.spin_nonzero = 0
        self.spin_sum = 0
        self.idle_sum = 0
        self.cgroup = CgroupTracker()
        self._p_running = _p_running_index(header.p_status)
        self._p_idle = _p_status_index(header.p_status, "idle", 0)

    # ------------------------------------------------------------------ input

    def apply(self, events: list[EventTuple]) -> None:
        if not events:
            return
        self.begin(events[0][0])
        kinds = list(map(_KIND, events))
        if not self.p_idles and K_P_IDLE in kinds:
            self.p_idles = 1
        if (K_HANDOFF in kinds or K_WINDOW in kinds or K_LOST in kinds or K_DROP in kinds
                or self._handed):
            self._apply_slow(events)
        else:
            if K_GO_CREATE in kinds or K_GO_EXIT in kinds:
                self._churn(events, kinds)
            for e in compress(events, map(_RARE.__contains__, kinds)):
                self._one(e)
        # The last CAUSE_WINDOW_NS of events, raw: a HANDOFF in the next chunk looks back
        # through them for its M's PARK/SYSCALL_ENTER (whatever the chunking).
        tail = self._tail + events if self._tail else events
        cut = bisect_left(tail, tail[-1][0] - CAUSE_WINDOW_NS, key=_TS)
        self._tail = tail[max(cut, len(tail) - MAX_TAIL):]

    def begin(self, ts: int) -> None:
        """The first event's time: the Model calls it before its handlers, which report
        run-queue readings (their second is counted from it, whatever the batching)."""
        if self._t0 < 0:
            self._t0 = self.grq_next = ts

    def _apply_slow(self, events: list[EventTuple]) -> None:
        """Event by event: hand-off causes and the time Ps spent without an M. The previous
        chunks' tail (already applied) only lends its causes: its PARK/SYSCALL_ENTER events,
        less those an EXECUTE on the same M ended (lending the PARK alone once made a GC
        worker's forEachP hand-off on Caddy a "locked-thread" one) or a gap made unknown."""
        m_last: dict[int, tuple[int, int, int, int]] = {}
        for e in compress(self._tail, map(_TAIL.__contains__, map(_KIND, self._tail))):
            k = e[1]
            if k in _CAUSES:
                if e[3]:
                    m_last[e[3]] = _CAUSE_ROW(e)
            elif k == K_EXECUTE:
                if e[3]:
                    m_last.pop(e[3], None)
            else:
                m_last.clear()
        for e in compress(events, map(_SLOW.__contains__, map(_KIND, events))):
            k = e[1]
            if self._gated and not self._hot and k in HOT:
                continue
            if k in (K_PARK, K_SYSCALL_ENTER):
                if e[3]:
                    m_last[e[3]] = _CAUSE_ROW(e)
            elif k in (K_EXECUTE, K_FIND_RUNNABLE, K_P_IDLE):
                if k == K_EXECUTE and e[3]:
                    m_last.pop(e[3], None)  # another G runs on the M: the park is not why
                # An M took the P, or it went idle (handoffp with no work idles it at once)
                if self._handed and e[2] >= 0:
                    self._got_m(e[2], e[0])
            elif k == K_HANDOFF:
                self._handoff(e, m_last)
            elif k in (K_WINDOW, K_LOST, K_DROP):
                if k == K_WINDOW:
                    self._hot = bool(e[5])
                else:
                    # Records lost (kernel ring) or dropped (a full queue): the EXECUTE or
                    # P_IDLE that ended a hand-off may be among them. Its time is unknown.
                    for p in list(self._handed):
                        self._got_m(p, e[0], False)
                m_last.clear()  # what happened in between is unknown
            else:
                self._one(e)

    def _churn(self, events: list[EventTuple], kinds: list[int]) -> None:
        """GO_CREATE / GO_EXIT of a chunk in bulk when it lies within one second (the series
        point is then the same as event by event), else one by one."""
        sel = list(compress(events, map(_CHURN.__contains__, kinds)))
        if self._sec(sel[0][0]) != self._sec(sel[-1][0]):
            for e in sel:
                (self._create if e[1] == K_GO_CREATE else self._exit)(e)
            return
        ck = list(map(_KIND, sel))
        creates = list(compress(sel, map(K_GO_CREATE.__eq__, ck)))
        self._net += len(creates) - (len(sel) - len(creates))
        self._live_series[self._sec(sel[-1][0])] = self._net
        parents = self._parent_of
        if creates and len(parents) < 100_000:
            parents.update(zip(map(_G, creates), map(_A0, creates), strict=True))
        if len(creates) < len(sel):
            exits = compress(sel, map(K_GO_EXIT.__eq__, ck))
            deque(map(parents.pop, map(_G, exits), repeat(None)), maxlen=0)

    def _one(self, e: EventTuple) -> None:
        k = e[1]
        if k == K_GO_CREATE:
            self._create(e)
        elif k == K_GO_EXIT:
            self._exit(e)
        elif k == K_PREEMPT_REQ:
            if e[4]:
                self._bump(self.preempt_by_goid, e[4])
        elif k == K_P_SAMPLE:
            self._p_sample(e)
        elif k == K_SCHED_SAMPLE:
            self._sched_sample(e)
        elif k == K_CPU_SAMPLE:
            self._cpu_sample(e)
        elif k == K_SAMPLER_OFF:
            self._sampler_off = True  # R14 not trusted: nothing the samples said counts
            self._user_ts.clear()
            self._kern_ts.clear()
        elif k == K_CGROUP:
            self.cgroup.apply(e)
        elif k == K_CENSUS_BEGIN:
            self._census_new = ({}, {})
            self._groups_new = {}
        elif k == K_CENSUS_STACK:
            key = self._group_last = (e[4], e[3], e[5])
            self._groups_new[key] = (e[6], 0)
        elif k == K_CENSUS_STACK_WAIT:
            last = self._group_last
            if last is not None and last in self._groups_new:
                self._groups_new[last] = (self._groups_new[last][0], e[6])
        elif k in (K_CENSUS_STATE, K_CENSUS_SITE):
            if self._census_new is not None:
                a0 = e[5]
                if k == K_CENSUS_SITE:
                    self._census_new[1][a0] = e[6]
                elif not a0 >> 32 and (a0 & 0xFFFF) == G_WAITING_STATUS:  # user, waiting
                    reason = (a0 >> 16) & 0xFFFF
                    self._census_new[0][reason] = self._census_new[0].get(reason, 0) + e[6]
        elif k == K_CENSUS_END:
            done, self._census_new = self._census_new, None
            if done is not None and not e[6]:  # complete walks only
                if self._census_first is None:
                    self._census_first = (e[0], *done)
                self._census_last = (e[0], *done)
                if self._groups_new:
                    self.stack_trend.walk(e[0], self._groups_new)
            self._groups_new = {}

    def long_run(self, p: int, goid: int, start: int, end: int) -> None:
        """Called by the Model when a RUNNING span of >= LONG_RUN_NS closes (events only)."""
        self._long(LongRun(goid, p, start, end - start, False))

    @staticmethod
    def _bump(d: dict[int, int], key: int, by: int = 1) -> None:
        if key in d or len(d) < MAX_TABLE:
            d[key] = d.get(key, 0) + by

    def _sec(self, ts: int) -> int:
        return max(0, ts - self._t0) // _NS

    def runq(self, p: int, n: int, sampled: bool = False) -> None:
        """A local runq reading at or above ``rq_note`` (the Model checks the bound: only a
        new maximum or a full queue costs a call)."""
        if n > 1 << 20:
            return
        if n >= RUNQ_FULL:
            self.full_local += 1
        if n > self.max_local:
            self.max_local = n
            self.max_local_p = p
        if sampled:
            self.runq_sampled = True
        self.rq_note = min(self.max_local + 1, RUNQ_FULL)

    def global_runq(self, ts: int, n: int) -> None:
        """A global runq reading above this second's maximum, or the first of a second."""
        if n < 0 or n == U64_MAX or n > 1 << 31:  # negative: a recording's, never capture's
            return
        if n > self.max_global:
            self.max_global = n
        s = self._sec(ts)
        if n > self._gseries.get(s, -1):
            self._gseries[s] = n
        if ts >= self.grq_next:
            self.grq_next = self._t0 + (s + 1) * _NS
        self.grq_note = self._gseries[s]

    def _long(self, run: LongRun) -> None:
        self.long_run_count += 1
        row = self.long_by_goid.get(run.goid)
        if row is None:
            if len(self.long_by_goid) < MAX_TABLE:
                self.long_by_goid[run.goid] = [1, run.ns]
        else:
            row[0] += 1
            if run.ns > row[1]:
                row[1] = run.ns
        lr = self.long_runs
        lr.append(run)
        if len(lr) > MAX_LONG_RUNS * 2:
            lr.sort(key=lambda r: (-r.ns, r.start))
            del lr[MAX_LONG_RUNS:]

    def _got_m(self, p: int, ts: int, timed: bool = True) -> None:
        t = self._handed.pop(p, None)
        if t is not None and not timed:
            # A P sample (50 Hz) saw an M on it, or it idle: when in its interval is unknown
            # (counting up to ``ts`` made every hand-off outside the windows ~10 ms long).
            self.no_m_untimed += 1
        elif t is not None:
            self.no_m_timed += 1
            d = ts - t
            self.no_m_ns += d
            if d > self.no_m_max_ns:
                self.no_m_max_ns = d

    def _exit(self, e: EventTuple) -> None:
        self._net -= 1
        self._live_series[self._sec(e[0])] = self._net
        self._parent_of.pop(e[4], None)

    def _create(self, e: EventTuple) -> None:
        ts, _, _p, _m, g, a0, _a1 = e
        self._net += 1
        self._live_series[self._sec(ts)] = self._net
        if len(self._parent_of) < 100_000:
            self._parent_of[g] = a0

    def _handoff(self, e: EventTuple, m_last: dict[int, tuple[int, int, int, int]]) -> None:
        ts, _, p, m, g, _a0, _a1 = e
        self.handoffs += 1
        last = m_last.pop(m, None) if m else None
        if last is not None and ts - last[0] <= CAUSE_WINDOW_NS:
            if last[1] == K_PARK:
                cause = "locked-thread"
                self._bump(self.locked_g, last[2])
            elif last[3]:
                cause = "syscall-block"
                self._bump(self.handoff_g, last[2])
            else:
                cause = "syscall-retake"
                self._bump(self.handoff_g, last[2])
        elif self._gated or not self._hot or ts - self._t0 < CAUSE_WINDOW_NS:
            # No hot probes, or (duty-cycled windows) probes that may not all be up yet: an
            # M with no PARK/SYSCALL_ENTER seen is not known to be sysmon.
            cause = "unknown"  # no PARK/SYSCALL_ENTER events to tell: sample mode, off-window
            if g:
                self._bump(self.handoff_g, g)
        else:
            cause = "syscall-retake"  # sysmon's M: it runs no goroutine
            if g:
                self._bump(self.handoff_g, g)
        self.handoff_cause[cause] = self.handoff_cause.get(cause, 0) + 1
        if p >= 0:
            self._handed[p] = ts

    def _p_sample(self, e: EventTuple) -> None:
        ts, _, p, m, g, a0, tick = e
        if p < 0:
            return
        n = (a0 >> 16) & 0xFFFFFFFF
        self.runq_sampled = True
        self.local_sum += n
        self.local_n += 1
        if n >= self.rq_note:
            self.runq(p, n, True)
        running = (a0 & 0xFF) == self._p_running and g != 0
        if self._handed and (m or (a0 & 0xFF) == self._p_idle):
            self._got_m(p, ts, False)  # an M has it, or it is idle: no longer waiting
        cur = self._srun.get(p)
        if cur is not None and running and cur[0] == g and cur[1] == tick:
            self._srun[p] = (g, tick, cur[2], ts)
            return
        if cur is not None and cur[3] - cur[2] >= LONG_RUN_NS:
            # Ran at least from the first to the last sample that saw it: a lower bound.
            self._long(LongRun(cur[0], p, cur[2], cur[3] - cur[2], True))
        if running:
            self._srun[p] = (g, tick, ts, ts)
        else:
            self._srun.pop(p, None)

    def _cpu_sample(self, e: EventTuple) -> None:
        if self._sampler_off:
            return
        if not self.sample_period_ns:
            self.sample_period_ns = 1_000_000_000 // max(self.header.sample_hz, 1)
        ts, g, outcome = e[0], e[4], e[5] & 0xFF
        if not g:
            return
        if outcome in (SAMPLE_GO, SAMPLE_G0):
            table = self._user_ts
        elif outcome == SAMPLE_KERNEL:
            table = self._kern_ts
        else:
            return
        d = table.get(g)
        if d is None:
            if len(table) >= MAX_TABLE:
                return
            d = table[g] = deque(maxlen=GOROUTINE_SAMPLES)
        d.append(ts)

    def _samples_in(self, run: LongRun) -> LongRun:  # the goroutine's samples in the run
        if not self.sample_period_ns or self._sampler_off:
            return run
        end = run.start + run.ns
        counts = []
        for table in (self._user_ts, self._kern_ts):
            d = table.get(run.goid)
            if d and d[0] > run.start and len(d) == d.maxlen:
                return run  # older samples were dropped: not measured
            counts.append(_count_between(d, run.start, end) if d else 0)
        return LongRun(run.goid, run.p, run.start, run.ns, run.sampled, counts[0], counts[1])

    def _sched_sample(self, e: EventTuple) -> None:
        ts, a0, a1 = e[0], e[5], e[6]
        npidle, nmspinning = a0 & 0xFFFFFFFF, a0 >> 32
        self.spin_samples += 1
        if nmspinning:
            self.spin_nonzero += 1
            self.spin_sum += nmspinning
        self.idle_sum += npidle
        self.global_runq(ts, a1)

    # ------------------------------------------------------------------ output

    def inputs(self, now: int) -> FindingsInputs:
        """The tracker's view at ``now`` (open runs count up to ``now``)."""
        runs = list(self.long_runs)
        count = self.long_run_count
        by_goid = {g: (n, mx) for g, (n, mx) in self.long_by_goid.items()}
        for p, (goid, _tick, first, last) in self._srun.items():
            if last - first >= LONG_RUN_NS:  # still running at ``now``
                runs.append(LongRun(goid, p, first, last - first, True))
                count += 1
                n, mx = by_goid.get(goid, (0, 0))
                by_goid[goid] = (n + 1, max(mx, last - first))
        runs.sort(key=lambda r: (-r.ns, r.start))
        runs = [self._samples_in(r) for r in runs[:MAX_LONG_RUNS]]
        no_m, no_m_max = self.no_m_ns, self.no_m_max_ns
        if self._hot and not self._gated:  # every event seen: a P still without an M
            for t in self._handed.values():
                no_m += max(0, now - t)
                no_m_max = max(no_m_max, now - t)
        parents: dict[int, int] = {}
        for parent in self._parent_of.values():
            parents[parent] = parents.get(parent, 0) + 1
        live = sorted(self._live_series.items())
        return FindingsInputs(
            cgroup=self.cgroup.view(),
            long_runs=tuple(runs),
            long_run_count=count,
            long_by_goid=by_goid,
            preempt_by_goid=dict(self.preempt_by_goid),
            handoffs=HandoffStats(
                count=self.handoffs,
                by_cause=dict(sorted(self.handoff_cause.items())),
                no_m_ns=no_m,
                no_m_max_ns=no_m_max,
                no_m_timed=self.no_m_timed,
                no_m_untimed=self.no_m_untimed,
                goroutines=dict(self.handoff_g),
                locked_goroutines=dict(self.locked_g),
            ),
            runq=RunqStats(
                max_local=self.max_local,
                max_local_p=self.max_local_p,
                full_local=self.full_local,
                max_global=self.max_global,
                global_series=tuple(sorted(self._gseries.items())),
                local_sum=self.local_sum,
                local_n=self.local_n,
                sampled=self.runq_sampled,
            ),
            growth=GrowthSeries(tuple(live), "events", parents),
            census_growth=self._census_growth(),
            stack_trends=self.stack_trend.trends(self.stacks, self.header.wait_reasons),
            spin=SpinStats(self.spin_samples, self.spin_nonzero, self.spin_sum, self.idle_sum),
            latency_samples=tuple(self.latency_samples),
            gomaxprocs=self.header.gomaxprocs,
            p_idles=self.p_idles,
            sample_period_ns=0 if self._sampler_off else self.sample_period_ns,
            cpus_allowed=self.cgroup.affinity,
        )

    def _census_growth(self) -> CensusGrowth | None:
        first, last = self._census_first, self._census_last
        if first is None or last is None or last[0] <= first[0]:
            return None
        wr = self.header.wait_reasons

        def reason(i: int) -> str:
            return (wr[i] or "none") if 0 <= i < len(wr) else f"waitreason({i})"

        def site(sid: int) -> tuple[str, str]:
            frames = self.stacks.get(sid)
            return (frames[0], frames[-1]) if frames else (UNKNOWN_FRAME, UNKNOWN_FRAME)

        reasons = {reason(i): n - first[1].get(i, 0) for i, n in last[1].items()}
        sites = {site(sid): n - first[2].get(sid, 0) for sid, n in last[2].items()}
        return CensusGrowth(
            seconds=(last[0] - first[0]) / _NS,
            by_reason=dict(sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))[:5]),
            by_site=tuple(sorted(((c, st, n) for (c, st), n in sites.items()),
                                 key=lambda r: (-r[2], r[0], r[1]))[:5]),
        )

def _count_between(d: deque[int], start: int, end: int) -> int:
    """Times in ``d`` (ascending) within [start, end]."""
    if not d or d[-1] < start or d[0] > end:
        return 0
    ts = list(d)
    return bisect_left(ts, end + 1) - bisect_left(ts, start)


def _p_running_index(names: tuple[str, ...]) -> int:
    return _p_status_index(names, "running", _P_RUNNING_STATUS)


def _p_status_index(names: tuple[str, ...], name: str, default: int) -> int:
    for i, n in enumerate(names):
        if n in (name, "_P" + name):
            return i
    return default
