"""The model's spine: the G and P state machines.

- Ps and Gs start UNKNOWN: attaching mid-flight is the normal case, so the first event seen
  for a G or a P establishes its state, and time in UNKNOWN is never counted.
- A P's span is closed by P transitions *and* by goroutine transitions on that P: EXECUTE
  opens RUNNING(goid); PARK / PREEMPTED / GO_EXIT close it (the M goes back into the
  scheduler: SEARCHING); SYSCALL_ENTER opens SYSCALL(goid); HANDOFF takes the P away from a
  syscall (SEARCHING when work is queued for it, else IDLE); P_IDLE (``pidleput``) ends a
  failed search (IDLE until the next FIND_RUNNABLE/EXECUTE on it); STW_START..STW_END puts
  every P in GCSTOP.
- G and P transitions are checked against one table each (model/legal.py: LEGAL_G, LEGAL_P);
  a violation (a missed or reordered event) is counted by kind (G, P, corrupt id), the state
  moves on, nothing raises.
- An *epoch* bumped at every reset (LOST, window edge) makes every G learnt in an older epoch
  UNKNOWN again (its pending ready/park timestamps dropped), in O(1).

What needs a G's history is computed here and handed to its aggregate: a scheduling latency
(ready -> execute) to :class:`~gmpmon.model.latency.Latency`, a park's wait (park -> ready) to
:class:`~gmpmon.model.parks.Parks`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Any

from gmpmon.events import (
    CENSUS_G_STATE,
    LAT_BUCKETS,
    NO_G,
    U64_MAX,
    Counter,
    EventTuple,
    Kind,
)
from gmpmon.model.evidence import LONG_RUN_NS, FindingsTracker
from gmpmon.model.gp import G, P
from gmpmon.model.latency import Latency
from gmpmon.model.legal import (
    G_DEAD,
    G_FROM,
    G_FROM_EXECUTE,
    G_FROM_PARK,
    G_FROM_READY,
    G_RUNNABLE,
    G_RUNNING,
    G_SYSCALL,
    G_UNKNOWN,
    G_WAITING,
    LEGAL_P_IDLE_FROM,
    P_FROM_EXECUTE,
    P_GCSTOP,
    P_IDLE,
    P_RUNNING,
    P_SEARCHING,
    P_SYSCALL,
    P_UNKNOWN,
)
from gmpmon.model.parks import Parks
from gmpmon.model.part import (
    WAKE_CREATED,
    WAKE_GOSCHED,
    WAKE_PREEMPTED,
    WAKE_SYSCALL,
    Context,
    Counted,
    Handler,
    Part,
    View,
)
from gmpmon.model.phistory import BUCKET_BYTES, HISTORY_BYTES, Folded, bucket_ns_for, ring_len
from gmpmon.model.pstatus import p_status_decoder
from gmpmon.model.snapshot import GState

_GSTATES = tuple(GState)

K_GO_CREATE, K_GO_EXIT = int(Kind.GO_CREATE), int(Kind.GO_EXIT)
K_SYSCALL_ENTER, K_SYSCALL_EXIT = int(Kind.SYSCALL_ENTER), int(Kind.SYSCALL_EXIT)
K_PREEMPTED = int(Kind.PREEMPTED)

G_STATUS_SYSCALL = 3
MAX_PROCS = 1 << 14  # P ids at or above this are treated as corrupt input

# Violations by kind (Snapshot.violations).
V_G, V_P, V_CORRUPT = 0, 1, 2
VIOLATION_NAMES = ("g", "p", "corrupt_id")


class Sched(Part):
    """G and P state, P timelines, goroutine table. See the module docstring."""

    def __init__(
        self,
        ctx: Context,
        latency: Latency,
        parks: Parks,
        *,
        max_goroutines: int,
        recent_dead: int,
        max_spans: int,
        on_span: object = None,
        findings: FindingsTracker,
        history: bool = True,
    ) -> None:
        self.ctx = ctx
        self.window_ns = ctx.window_ns
        self.max_goroutines = max_goroutines
        # Closed spans a P keeps exactly; beyond, the oldest are folded (model/phistory.py)
        self.max_spans = max_spans
        self.bucket_ns = bucket_ns_for(ctx.window_ns, ctx.header.gomaxprocs)
        # Rings that fit HISTORY_BYTES: one per P of the header's GOMAXPROCS, whatever P ids
        # a recording makes up; a P beyond them keeps its exact spans only. None without
        # ``history`` (no TUI to draw it: a replay's report, an export, a headless run).
        self.rings_left = HISTORY_BYTES // (ring_len(ctx.window_ns, self.bucket_ns)
                                            * BUCKET_BYTES) if history else 0
        self.on_span = on_span  # SpanSink (core.py) or None
        self.latency = latency
        self.findings = findings  # fed long runs, runq peaks and latency samples
        self._lat_samples = findings.latency_samples
        self._park_count = parks.count.events
        self._park_wait = parks.wait.events
        # Goroutine starts: per P, pp.executes (events) or pp.starts_counter (the kernel's
        # GO_START); this Counted only says which (its own sides stay empty).
        self.starts: Counted[None] = Counted("goroutine_starts", Counter.GO_START,
                                             lambda: None)
        self.procs: dict[int, P] = {}
        self.gs: dict[int, G] = {}
        self.sites: dict[int, int] = {}  # goid -> go site (CENSUS_G), bounded as gs is
        # goid -> its state as of the newest census (CENSUS_STATE's key); same keys as sites
        self.census_gs: dict[int, int] = {}
        self.census_views: dict[int, tuple[object, Any]] = {}  # model/view.py's rows, cached
        self.dead: deque[G] = deque(maxlen=recent_dead)
        self.evicted_live = 0
        self.epoch = 0
        self.violations = [0, 0, 0]  # V_G, V_P, V_CORRUPT
        self.unseen_wakes = 0  # WAITING -> RUNNING with no READY/WAKE seen
        self.global_runq = 0
        self.npidle = 0
        self.nmspinning = 0
        self.stw_start = -1  # the world is stopped since (-1: it is not)
        # Whether time is being counted exactly (set by the model: hot probes attached, or
        # sample mode, where samples and cold events are all there is).
        self.hot = False
        self.hot_since = -1  # the model's: when the hot probes were attached last
        self.account_samples = False
        self._p_status_map = p_status_decoder(ctx.header.p_status)
        self.void_p = P(-1, 0)
        for pid in range(min(max(ctx.header.gomaxprocs, 0), MAX_PROCS)):
            self.procs[pid] = P(pid, 0)

    def counters(self) -> Iterable[tuple[int, Handler]]:
        return ((Counter.GO_START, self.on_start_counter),)

    def on_start_counter(self, e: EventTuple) -> None:
        self.starts.seen = True
        if e[2] >= 0:
            self.proc(e[2], e[0]).starts_counter += e[6]

    def sources(self) -> Iterable[Counted[Any]]:
        return (self.starts,)

    def handlers(self) -> Iterable[tuple[int, Handler]]:
        return (
            (Kind.EXECUTE, self.on_execute),
            (Kind.FIND_RUNNABLE, self.on_find_runnable),
            (Kind.PARK, self.on_park),
            (Kind.READY, self.on_ready),
            (Kind.WAKE, self.on_wake),  # the same, without ready(): netpoll, GC workers
            (Kind.GO_CREATE, self.on_go_create),
            (Kind.GO_EXIT, self.on_go_exit),
            (Kind.CENSUS_G, self.on_census_g),
            (Kind.SYSCALL_ENTER, self.on_syscall_enter),
            (Kind.SYSCALL_EXIT, self.on_syscall_exit),
            (Kind.HANDOFF, self.on_handoff),
            (Kind.PREEMPTED, self.on_preempted),
            (Kind.STW_START, self.on_stw_start),
            (Kind.STW_END, self.on_stw_end),
            (Kind.P_IDLE, self.on_p_idle),
            (Kind.P_SAMPLE, self.on_p_sample),
            (Kind.SCHED_SAMPLE, self.on_sched_sample),
        )

    # ------------------------------------------------------------------ helpers

    def proc(self, pid: int, ts: int) -> P:
        pp = self.procs.get(pid)
        if pp is None:
            if pid >= MAX_PROCS:
                # Not a P id any runtime hands out (a corrupt or hostile recording): keep
                # memory bounded, send it to a P that is never shown.
                self.violations[V_CORRUPT] += 1
                return self.void_p
            pp = self.procs[pid] = P(pid, ts)
            if self.stw_start >= 0:
                pp.state = P_GCSTOP
        return pp

    def g(self, goid: int, ts: int) -> G:
        gg = self.gs.get(goid)
        if gg is None:
            gs = self.gs
            if len(gs) >= self.max_goroutines:
                del gs[next(iter(gs))]
                self.evicted_live += 1
            gg = gs[goid] = G(goid, ts, self.epoch)
            if self.sites:
                gg.site = self.sites.get(goid, 0)
        elif gg.epoch != self.epoch:
            gg.state = G_UNKNOWN
            gg.ready_ts = -1
            gg.park_ts = -1
            gg.epoch = self.epoch
        return gg

    def g_to(self, gg: G, kind: int, state: int, ts: int) -> None:
        if gg.state not in G_FROM[kind]:
            self.violations[V_G] += 1
        gg.state = state
        gg.since = ts

    def p_to(self, pp: P, ts: int, state: int, goid: int, exact: bool | None = None) -> None:
        if self.stw_start >= 0 and pp.state == P_GCSTOP:
            pp.after = (state, goid)  # the world is stopped: resume in this state
            return
        start = pp.since
        if ts < start:
            ts = start
        old = pp.state
        if old != P_UNKNOWN and ts > start:
            # A run that began at a window's start began earlier, or not at all (sampled).
            if old == P_RUNNING and ts - start >= LONG_RUN_NS and self.hot \
                    and start > self.hot_since:
                self.findings.long_run(pp.id, pp.goid, start, ts)
            if pp.exact:
                pp.times[old] += ts - start
            tl = pp.timeline
            tl.append((start, ts, old, pp.goid))
            if self.on_span is not None:
                self.on_span(pp.id, start, ts, old, pp.goid)  # type: ignore[operator]
            if len(tl) > self.max_spans:
                self._fold(pp)
            cutoff = ts - self.window_ns
            while tl[0][1] < cutoff:  # the span just added ends at ts: never emptied
                tl.popleft()
        pp.state = state
        pp.goid = goid
        pp.since = ts
        pp.exact = (self.hot or self.account_samples) if exact is None else exact

    def _fold(self, pp: P) -> None:
        """The oldest quarter of the P's exact spans to its buckets: a busy P's timeline
        keeps the model's window, at the buckets' resolution, whatever its event rate."""
        tl = pp.timeline
        n = len(tl) - self.max_spans * 3 // 4
        ring = pp.folded
        if ring is None and self.rings_left > 0:
            self.rings_left -= 1
            ring = pp.folded = Folded(self.bucket_ns, self.window_ns)
        if ring is None:  # no history kept (no TUI, or no ring left): only dropped
            for _ in range(n):
                tl.popleft()
        else:
            ring.fold([tl.popleft() for _ in range(n)])

    def _p_taken(self, pp: P, p: int) -> None:
        """A P leaves RUNNING(goid) by an event that is not that G's: a P violation when the
        G is still believed running there (same epoch); that G's state is UNKNOWN now."""
        prev = self.gs.get(pp.goid) if pp.goid else None
        if prev is not None and prev.state == G_RUNNING and prev.p == p and (
            prev.epoch == self.epoch
        ):
            self.violations[V_P] += 1
            prev.state = G_UNKNOWN

    def _leave_p(self, gg: G, p: int, ts: int) -> None:
        """G stops running (park, preempt, exit): its P's RUNNING span ends, M searches."""
        if p >= 0:
            # The event names the P: its M is entering schedule() whatever we thought.
            pp = self.procs.get(p) or self.proc(p, ts)
            if pp.state != P_SEARCHING:
                self.p_to(pp, ts, P_SEARCHING, 0)
            return
        pp2 = self.procs.get(gg.p)
        if pp2 is not None and pp2.goid == gg.goid and pp2.state == P_RUNNING:
            self.p_to(pp2, ts, P_SEARCHING, 0)

    def reset(self, ts: int) -> None:
        self.epoch += 1
        for pp in self.procs.values():
            self.p_to(pp, ts, P_UNKNOWN, 0)

    def restart_counting(self, ts: int) -> None:
        """Hot probes attached: keep the sampled state, but count it exactly from now on."""
        self.epoch += 1
        for pp in self.procs.values():
            self.p_to(pp, ts, pp.state, pp.goid, True)

    # ------------------------------------------------------------------ handlers

    def on_execute(self, e: EventTuple) -> None:
        ts, _, p, m, g, _a0, a1 = e
        gg = self.gs.get(g)
        if gg is None or gg.epoch != self.epoch:
            gg = self.g(g, ts)
        if gg.state == G_RUNNING and gg.p != p and gg.p >= 0:
            # Still running elsewhere: we missed how it left that P.
            other = self.procs.get(gg.p)
            if other is not None and other.goid == g and other.state == P_RUNNING:
                self.p_to(other, ts, P_UNKNOWN, 0)
        if gg.state not in G_FROM_EXECUTE:
            self.violations[V_G] += 1
        gg.state = G_RUNNING
        gg.since = ts
        rts = gg.ready_ts
        pp = (self.procs.get(p) or self.proc(p, ts)) if p >= 0 else None
        if rts >= 0:
            lat = ts - rts
            if lat < 4:
                b = lat if lat > 0 else 0
            else:
                hb = lat.bit_length() - 1
                b = hb * 4 + ((lat >> (hb - 2)) & 3)
                if b >= LAT_BUCKETS:
                    b = LAT_BUCKETS - 1
            self.latency.add(lat, b, gg.wake, p, pp)
            self._lat_samples.append((rts, ts, p, g))
            gg.ready_ts = -1
        elif gg.park_ts >= 0:
            gg.wait_ns += ts - gg.park_ts  # woken without ready(): park -> run, no latency
            self.unseen_wakes += 1
        gg.executes += 1
        gg.park_ts = -1
        if pp is not None:
            gg.p = p
            pp.executes += 1
            pp.runq = a1
            if a1 >= self.findings.rq_note:
                self.findings.runq(p, a1)
            pp.m = m
            if pp.state not in P_FROM_EXECUTE and pp.goid != g and pp.goid:
                self._p_taken(pp, p)
            self.p_to(pp, ts, P_RUNNING, g)

    def on_find_runnable(self, e: EventTuple) -> None:
        ts, _, p, m, _g, a0, a1 = e
        fnd = self.findings
        if a1 != U64_MAX:
            self.global_runq = a1
            if a1 > fnd.grq_note or ts >= fnd.grq_next:
                fnd.global_runq(ts, a1)
        if p < 0:
            return
        pp = self.proc(p, ts)
        pp.runq = a0
        if a0 >= fnd.rq_note:
            fnd.runq(p, a0)
        pp.m = m
        if pp.state == P_RUNNING and pp.goid:
            prev = self.gs.get(pp.goid)
            if prev is not None and prev.state == G_RUNNING and prev.p == p:
                prev.state = G_UNKNOWN  # left the P by a path we do not probe
        if pp.state != P_SEARCHING:
            self.p_to(pp, ts, P_SEARCHING, 0)

    def on_park(self, e: EventTuple) -> None:
        ts, _, p, _m, g, a0, _a1 = e
        gg = self.gs.get(g)
        if gg is None or gg.epoch != self.epoch:
            gg = self.g(g, ts)
        if gg.state not in G_FROM_PARK:
            self.violations[V_G] += 1
        gg.state = G_WAITING
        gg.since = ts
        gg.reason = a0
        gg.park_ts = ts
        gg.ready_ts = -1
        pc = self._park_count
        pc[a0] = pc.get(a0, 0) + 1
        self._leave_p(gg, p, ts)

    def on_ready(self, e: EventTuple) -> None:
        ts, _, _p, _m, g, _a0, a1 = e
        gg = self.gs.get(g)
        if gg is None or gg.epoch != self.epoch:
            gg = self.g(g, ts)
        if gg.state not in G_FROM_READY:
            self.violations[V_G] += 1
        gg.state = G_RUNNABLE
        gg.since = ts
        pts = gg.park_ts
        if pts >= 0:
            w = ts - pts
            gg.wait_ns += w
            pw = self._park_wait
            pw[a1] = pw.get(a1, 0) + w
            gg.park_ts = -1
        if gg.reason < 0:
            gg.reason = a1
        gg.ready_ts = ts
        gg.wake = a1

    def on_wake(self, e: EventTuple) -> None:
        if not e[5]:
            return self.on_ready(e)
        gg = self.g(e[4], e[0])  # a0 = 1: back from a syscall without a P (exitsyscall0)
        gg.state, gg.since, gg.ready_ts, gg.wake = G_RUNNABLE, e[0], e[0], WAKE_SYSCALL

    def on_go_create(self, e: EventTuple) -> None:
        ts, _, _p, _m, g, a0, a1 = e
        gg = self.g(g, ts)
        self.g_to(gg, K_GO_CREATE, G_RUNNABLE, ts)
        gg.parent = a0
        if a1:
            gg.site = a1
        gg.ready_ts = ts
        gg.wake = WAKE_CREATED

    def on_census_g(self, e: EventTuple) -> None:
        """The census: g's go site and its state as of the walk (a1), or g gone (a0 = 0)."""
        g, sid, gg = e[4], e[5], self.gs.get(e[4])
        if not sid:
            self.sites.pop(g, None)
            self.census_gs.pop(g, None)
        elif len(self.sites) < self.max_goroutines or g in self.sites:
            self.sites[g] = sid
            if e[6] & CENSUS_G_STATE:
                self.census_gs[g] = e[6] & ~CENSUS_G_STATE
        if gg is not None and sid:
            gg.site = sid

    def on_go_exit(self, e: EventTuple) -> None:
        ts, _, p, _m, g, _a0, _a1 = e
        if self.sites:
            self.sites.pop(g, None)
        gg = self.gs.get(g)
        if gg is None:
            if self.evicted_live:
                self.evicted_live -= 1
            gg = G(g, ts, self.epoch)
        else:
            gg = self.g(g, ts)
            del self.gs[g]
        self.g_to(gg, K_GO_EXIT, G_DEAD, ts)
        self._leave_p(gg, p, ts)
        gg.ready_ts = gg.park_ts = -1
        self.dead.append(gg)

    def on_syscall_enter(self, e: EventTuple) -> None:
        ts, _, p, m, g, _a0, _a1 = e
        gg = self.g(g, ts)
        self.g_to(gg, K_SYSCALL_ENTER, G_SYSCALL, ts)
        if p < 0:
            p = gg.p
        if p >= 0:
            gg.p = p
            pp = self.proc(p, ts)
            pp.m = m
            self.p_to(pp, ts, P_SYSCALL, g)

    def on_syscall_exit(self, e: EventTuple) -> None:
        ts, _, p, m, g, _a0, _a1 = e
        gg = self.g(g, ts)
        if p >= 0:
            self.g_to(gg, K_SYSCALL_EXIT, G_RUNNING, ts)
            gg.p = p
            pp = self.proc(p, ts)
            pp.m = m
            if pp.state != P_RUNNING or pp.goid != g:
                self.p_to(pp, ts, P_RUNNING, g)
        else:
            # The P was taken: it queues globally or grabs an idle P without execute.
            self.g_to(gg, K_SYSCALL_EXIT, G_UNKNOWN, ts)

    def on_handoff(self, e: EventTuple) -> None:
        ts, _, p, _m, _g, _a0, _a1 = e
        if p >= 0:
            pp = self.proc(p, ts)
            gg = self.gs.get(pp.goid) if pp.goid else None
            if gg is not None and gg.epoch == self.epoch and gg.state == G_RUNNING \
                    and gg.p == p:
                # Its G was seen leaving a syscall with this P, but sysmon retook the P
                # first (the exit probe reads the P before exitsyscall's CAS fails): the G
                # is queued, not running (spawn.gmp: SYSCALL_EXIT P0, HANDOFF P0 35 us
                # later, then the G's EXECUTE on P0 by another M).
                gg.state = G_UNKNOWN
            pp.m = 0
            # handoffp starts an M for a P with work in its runq or the global one (a0, a1);
            # idle until the next status read read busy Ps as 68-76% busy in sample mode.
            if e[5] or 0 < e[6] < U64_MAX:
                self.p_to(pp, ts, P_SEARCHING, 0)
            else:  # idle (pidleput), or started for other work: unknown without the probes
                self.p_to(pp, ts, P_IDLE if self.hot else P_UNKNOWN, 0)

    def on_p_idle(self, e: EventTuple) -> None:
        ts, _, p, _m, _g, _a0, _a1 = e
        if p < 0:
            return
        pp = self.proc(p, ts)
        state = pp.state
        if state == P_GCSTOP and self.stw_start >= 0:
            self.p_to(pp, ts, P_IDLE, 0)  # resumes idle at STW_END
            return
        if state not in LEGAL_P_IDLE_FROM:
            self._p_taken(pp, p)
        pp.m = 0  # an idle P has no M
        if state != P_IDLE:
            self.p_to(pp, ts, P_IDLE, 0)

    def on_preempted(self, e: EventTuple) -> None:
        ts, _, p, _m, g, a0, _a1 = e
        gg = self.g(g, ts)
        self.g_to(gg, K_PREEMPTED, G_RUNNABLE, ts)
        gg.ready_ts = ts
        gg.wake = WAKE_PREEMPTED if a0 else WAKE_GOSCHED
        if not self.hot:
            # Without hot probes no execute follows, and the preempted G's P runs the next
            # one at once (the preempted G went to a run queue): the P stays as the P status
            # reads have it. Ending its running span here made Go 1.19's sample mode (where
            # preemption is a cold probe) read a third of a busy P's time as searching.
            return
        self._leave_p(gg, p, ts)

    def on_stw_start(self, e: EventTuple) -> None:
        ts = e[0]
        if self.stw_start >= 0:
            return  # nested starts do not happen; keep the first
        for pp in self.procs.values():
            pp.after = (pp.state, pp.goid)
            self.p_to(pp, ts, P_GCSTOP, 0)
        self.stw_start = ts

    def on_stw_end(self, e: EventTuple) -> None:
        ts = e[0]
        if self.stw_start < 0 and not e[6]:
            return  # attached mid-STW and no kernel-side length: nothing known
        self.stw_start = -1
        for pp in self.procs.values():
            if pp.state == P_GCSTOP:
                state, goid = pp.after
                self.p_to(pp, ts, state, goid)

    def on_p_sample(self, e: EventTuple) -> None:
        ts, _, p, m, g, a0, _a1 = e
        if p < 0:
            return
        pp = self.proc(p, ts)
        pp.m = m
        pp.runq = (a0 >> 16) & 0xFFFFFFFF
        status = self._p_status_map.get(a0 & 0xFF, P_UNKNOWN)
        if self.hot:
            # Exact events own the timeline, but no probe sees findRunnable give up (pidleput,
            # stopm): a sample reading idle is the only news that a searching P went idle.
            if status == P_IDLE and pp.state == P_SEARCHING:
                self.p_to(pp, ts, P_IDLE, 0)
            return
        gstatus = (a0 >> 8) & 0xFF
        goid = 0
        if status == P_RUNNING:
            if g == NO_G:
                status = P_SEARCHING
            elif gstatus == G_STATUS_SYSCALL:
                status, goid = P_SYSCALL, g
            else:
                goid = g
        elif status == P_SYSCALL:
            goid = g
        if status == -1:
            return  # dead: beyond GOMAXPROCS
        if status != pp.state or goid != pp.goid:
            self.p_to(pp, ts, status, goid, self.account_samples)

    def on_sched_sample(self, e: EventTuple) -> None:
        a0 = e[5]
        self.npidle = a0 & 0xFFFFFFFF
        self.nmspinning = a0 >> 32
        self.global_runq = e[6]

    def section(self, at: View) -> dict[str, object]:
        epoch = self.epoch
        counts: dict[str, int] = {}
        for gg in self.gs.values():
            st = gg.state if gg.epoch == epoch else G_UNKNOWN
            name = _GSTATES[st].name.lower()
            counts[name] = counts.get(name, 0) + 1
        v = self.violations
        return {
            "global_runq": self.global_runq,
            "npidle": self.npidle,
            "nmspinning": self.nmspinning,
            "goroutines_live": len(self.gs) + self.evicted_live,
            "g_state_counts": dict(sorted(counts.items())),
            "illegal_transitions": sum(v),
            "violations": dict(zip(VIOLATION_NAMES, v, strict=True)),
            "unseen_wakes": self.unseen_wakes,
        }
