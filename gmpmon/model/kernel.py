"""Model part of the kernel sources: CPU_SAMPLE records and the COUNTER tables 10-19.

Pure and deterministic like the rest of the model: the same events give the same
:class:`KernelView` live and on replay. The core model hands it every CPU_SAMPLE event and
every COUNTER of a kernel table; ``view()`` builds the frozen answer.

Samples (source "samples"): per P, consecutive samples of the same goroutine are merged into
sampled spans (the per-P timeline) and into runs; a run of one G on one P whose first and last
samples are LONG_RUN_NS (and 3 sampling periods) or more apart, with no gap above GAP_NS
between samples (or 2.5 sampling periods at a lower --sample-hz: one missing sample does not
split a run), is a long-running goroutine. Every sample also goes into the on-CPU profile, keyed by
(stack, goid, P). Counters (source "tracepoints"): M times and switches, the kernel
run-queue delay histogram, syscalls by (P, number, M) and by goroutine.

``view()`` runs at every snapshot (4 Hz live) while the profile, the goroutine table and the
timelines grow to tens of thousands of entries, so it does not rebuild them: the profile is a
sorted list patched with the keys that moved since the last view, the top goroutines are
chosen among the last top and the ones sampled since, a timeline's spans that can no longer
change are made into Spans once, and the findings' digests of the profile (KernelView
``own_stacks`` ...) are kept as the samples come. The answer is the one a rebuild from
scratch gives (tests/unit/test_kernel_view_cost.py checks that against a reference).
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from collections import deque
from collections.abc import Iterable
from itertools import islice

from gmpmon.events import (
    M_SW_INVOLUNTARY,
    M_SW_RUNQ,
    M_SW_VOLUNTARY,
    SAMPLE_G0,
    SAMPLE_GO,
    SAMPLE_KERNEL,
    SAMPLE_NOT_GO,
    UNKNOWN_FRAME,
    Counter,
    EventTuple,
    Kind,
)
from gmpmon.model import hist as h
from gmpmon.model.kernelview import (
    GoroutineCpu,
    KernelView,
    LongRun,
    ProcSyscalls,
    SampleStats,
    SyscallStat,
    ThreadView,
    in_find_runnable,
    own_frame,
)
from gmpmon.model.part import Context, Handler, Part, View
from gmpmon.model.validation import validation_failure
from gmpmon.model.values import PState, Span
from gmpmon.syscalls import syscall_name

SAMPLE_HZ = 999  # recordings made before Header.sample_hz
LONG_RUN_NS = 10_000_000
GAP_NS = 5_000_000  # a larger gap between two samples of a P ends its run and its span


def long_run_ns(period_ns: int) -> int:
    """The shortest long run at this sampling period: two samples 10 ms apart at 99 Hz do not
    say the G ran in between, so 3 periods (4 samples) as well as LONG_RUN_NS."""
    return max(LONG_RUN_NS, 3 * period_ns)


MAX_SPANS = 2048  # sampled spans kept per P
MAX_PROFILE = 65536  # distinct profile keys; beyond, samples go to (0, 0, -1, SAMPLE_NOT_GO)
MAX_GOROUTINES = 65536
TOP_LONG_RUNS = 32
TOP_GOROUTINES = 50
TOP_SYSCALLS = 8
KERNEL_TABLES = frozenset(range(10, 20))
_OTHER = (0, 0, -1, SAMPLE_NOT_GO)  # the profile row of samples beyond MAX_PROFILE keys
_REBUILD = 1024  # more new profile keys than this since the last view: sort anew


# The bottom frame of every goroutine's stack (an assembly function: .abi0 where it is named so).
_GOEXIT = frozenset({"runtime.goexit", "runtime.goexit.abi0"})
_ELSEWHERE, _SEARCHING, _GOROUTINE = 0, 1, 2  # whose CPU a stack is (KernelPart._whose)


class _Run:
    __slots__ = ("goid", "last", "n", "stacks", "start", "user")

    def __init__(self, goid: int, ts: int, sid: int, user: bool) -> None:
        self.goid = goid
        self.start = ts
        self.last = ts
        self.n = 1
        self.user = int(user)  # samples in user mode (Go code), not in the kernel
        self.stacks: dict[int, int] = {sid: 1}


class KernelPart(Part):
    """Perf-event samples and kernel tracepoints (COUNTER tables 10-19)."""

    costly = True  # the timelines and profiles: half of a snapshot's time on net/http

    @classmethod
    def for_model(cls, ctx: Context) -> KernelPart:
        return cls(ctx.stacks, ctx.header.sample_hz)

    def handlers(self) -> Iterable[tuple[int, Handler]]:
        return ((Kind.CPU_SAMPLE, self.on_sample), (Kind.SAMPLER_OFF, self.on_sampler_off))

    def counters(self) -> Iterable[tuple[int, Handler]]:
        return tuple((t, self.on_counter) for t in sorted(KERNEL_TABLES))

    def section(self, at: View) -> dict[str, object]:
        return {"kernel": self.view(at.now)}

    def __init__(self, stacks: dict[int, tuple[str, ...]], hz: int = SAMPLE_HZ) -> None:
        self.stacks = stacks  # the model's stack table (Batch.stacks accumulate there)
        self.period_ns = 1_000_000_000 // max(hz, 1)
        self.gap_ns = max(GAP_NS, self.period_ns * 5 // 2)
        self.long_ns = long_run_ns(self.period_ns)
        self.records = 0
        self.by_outcome = [0, 0, 0, 0]  # from records
        self.ctr_outcome: dict[int, int] = {}  # from COUNTER SAMPLES (exact)
        self.off = ""
        self._runs: dict[int, _Run] = {}  # P -> open run
        self._spans: dict[int, deque[list[int]]] = {}  # P -> [start, end, goid]
        self._long: list[tuple[int, int, LongRun]] = []  # min-heap (duration, seq, run)
        self._seq = 0
        self.long_total = 0
        self.profile: dict[tuple[int, int, int, int], int] = {}  # (sid, goid, p, outcome)
        self.by_p: dict[int, int] = {}
        self.by_g: dict[int, list[int]] = {}  # goid -> [samples, set bits of Ps]
        self.g_stacks: dict[int, dict[int, int]] = {}  # goid -> sid -> samples (bounded)
        self.by_tid: dict[int, int] = {}
        self.m: dict[int, list[int]] = {}  # tid -> [on, off, runq_ns, runq_n, vol, invol]
        self.runq_hist = h.new_hist()
        self.sys: dict[tuple[int, int, int], list[int]] = {}  # (p, nr, tid) -> [count, ns]
        self.sys_g: dict[int, list[int]] = {}  # goid -> [count, ns]
        self.seen_samples = False
        self.seen_sched = False
        self.seen_sys = False
        self._clear_views()

    def _clear_views(self) -> None:
        """What view() keeps between snapshots (see the module docstring)."""
        self._rows: list[tuple[int, int, int, int, int]] = []  # the profile, sorted
        self._rows_view: tuple[tuple[int, int, int, int, int], ...] = ()
        self._moved: set[tuple[int, int, int, int]] = set()  # profile keys since the view
        self._moved_g: set[int] = set()  # goroutines of by_g sampled since the view
        self._top_g: list[int] = []  # the last view's cpu_by_goroutine, in order
        self._g_rows: dict[int, GoroutineCpu] = {}  # its rows
        self._appended: dict[int, int] = {}  # P -> spans ever appended to _spans[P]
        self._settled: dict[int, deque[Span]] = {}  # P -> Spans of closed, ended spans
        self._settled_to: dict[int, int] = {}  # P -> span count (ever) they reach
        self._view_now = -1
        # The findings' digests of the profile rows (KernelView.own_stacks ...).
        self._own_n: dict[tuple[int, int], int] = {}  # (goid, sid) -> GO/G0 samples
        self._own: dict[int, tuple[int, int]] = {}  # goid -> (samples, sid), the best
        self._own_view: dict[int, tuple[int, int]] = {}
        self._own_moved = False
        self._not_go: dict[int, int] = {}  # sid -> NOT_GO samples
        self._not_go_view: dict[int, int] = {}
        self._not_go_moved = False
        self._search = 0
        self._run = 0
        self._sid_own: dict[int, bool] = {}  # sid -> own_frame(its stack) != ""
        self._sid_whose: dict[int, int] = {}  # sid -> _whose(sid)

    # ------------------------------------------------------------------ input

    def on_sample(self, e: EventTuple) -> None:
        ts, _k, p, tid, goid, a0, _a1 = e
        self.seen_samples = True
        if self.off:
            return
        self.records += 1
        outcome = a0 & 0xFF
        if outcome < 4:
            self.by_outcome[outcome] += 1
        self.by_tid[tid] = self.by_tid.get(tid, 0) + 1
        sid = a0 >> 32
        if outcome == SAMPLE_NOT_GO:
            p, goid = -1, 0
        key = (sid, goid, p, outcome)
        prof = self.profile
        if key not in prof and len(prof) >= MAX_PROFILE:
            key = _OTHER
        prof[key] = prof.get(key, 0) + 1
        self._moved.add(key)
        self._digest(key)
        if p < 0 or outcome == SAMPLE_NOT_GO:
            return
        self.by_p[p] = self.by_p.get(p, 0) + 1
        if goid:
            g = self.by_g.get(goid)
            if g is None:
                if len(self.by_g) >= MAX_GOROUTINES:
                    return
                g = self.by_g[goid] = [0, 0]
                self.g_stacks[goid] = {}
            g[0] += 1
            self._moved_g.add(goid)
            if p < 63:
                g[1] |= 1 << p
            gs = self.g_stacks[goid]
            if sid in gs or len(gs) < 64:
                gs[sid] = gs.get(sid, 0) + 1
        self._track(p, goid, ts, sid, outcome != SAMPLE_KERNEL)

    def _whose(self, sid: int) -> int:
        """Stack ``sid``: _SEARCHING inside runtime.findRunnable, _GOROUTINE a goroutine's
        (from runtime.goexit), else _ELSEWHERE (cached per stack id)."""
        whose = self._sid_whose.get(sid)
        if whose is None:
            stack = self.stacks.get(sid, ())
            whose = self._sid_whose[sid] = (
                _SEARCHING if in_find_runnable(stack)
                else _GOROUTINE if _GOEXIT & set(stack) else _ELSEWHERE)
        return whose

    def _digest(self, key: tuple[int, int, int, int]) -> None:
        """One more sample in profile row ``key``: the digests the findings read."""
        sid, goid, _p, outcome = key
        if outcome == SAMPLE_NOT_GO:
            self._not_go[sid] = self._not_go.get(sid, 0) + 1
            self._not_go_moved = True
            return
        if outcome == SAMPLE_GO:
            self._run += 1
        elif outcome == SAMPLE_G0:
            self._search += self._whose(sid) == _SEARCHING
        else:
            if outcome == SAMPLE_KERNEL:
                # Kernel mode: the user stack (saved at kernel entry) says whose CPU it is. A
                # searching M's syscalls (runqgrab's usleep, futex wakes of other Ms) are
                # search CPU; a goroutine's syscall is running CPU. Without these, a search
                # that is mostly syscalls (idlespin: 90% of the samples in the kernel) hid
                # below the rule's bar.
                whose = self._whose(sid)
                self._search += whose == _SEARCHING
                self._run += whose == _GOROUTINE
            return  # kernel mode, or an outcome this version does not know
        if not goid:
            return
        own = self._sid_own.get(sid)
        if own is None:
            own = self._sid_own[sid] = bool(own_frame(self.stacks.get(sid, ())))
        if own:
            k = (goid, sid)
            n = self._own_n[k] = self._own_n.get(k, 0) + 1
            best = self._own.get(goid)
            if best is None or n > best[0] or (n == best[0] and sid < best[1]):
                self._own[goid] = (n, sid)
                self._own_moved = True

    def _track(self, p: int, goid: int, ts: int, sid: int, user: bool = True) -> None:
        spans = self._spans.get(p)
        if spans is None:
            spans = self._spans[p] = deque(maxlen=MAX_SPANS)
            self._appended[p] = 0
        last = spans[-1] if spans else None
        if last is not None and last[2] == goid and ts - last[1] + self.period_ns <= self.gap_ns:
            last[1] = ts + self.period_ns
        else:
            spans.append([ts, ts + self.period_ns, goid])
            self._appended[p] += 1
        run = self._runs.get(p)
        if run is not None and run.goid == goid and goid and ts - run.last <= self.gap_ns:
            run.last = ts
            run.n += 1
            run.user += user
            run.stacks[sid] = run.stacks.get(sid, 0) + 1
            return
        if run is not None:
            self._close(p, run)
        if goid:
            self._runs[p] = _Run(goid, ts, sid, user)
        else:
            self._runs.pop(p, None)

    def _close(self, p: int, run: _Run) -> None:
        if run.last - run.start < self.long_ns:
            return
        self.long_total += 1
        lr = self._long_run(p, run, ongoing=False)
        self._seq += 1
        item = (lr.duration_ns, self._seq, lr)
        if len(self._long) < TOP_LONG_RUNS:
            heapq.heappush(self._long, item)
        elif item[0] > self._long[0][0]:
            heapq.heapreplace(self._long, item)

    def _long_run(self, p: int, run: _Run, ongoing: bool) -> LongRun:
        sid = max(run.stacks.items(), key=lambda kv: (kv[1], -kv[0]))[0]
        stack = self.stacks.get(sid, ())
        return LongRun(run.goid, p, run.start, run.last, run.n, user_function(stack), stack,
                       ongoing, run.user)

    def on_sampler_off(self, e: EventTuple) -> None:
        self.seen_samples = True
        self.off = validation_failure(e[5], e[6]) or (
            f"perf samples off: R14 validated in {e[5]} of {e[6]} user-mode samples")
        # What the samples said before the verdict is not believed either, and the source
        # sends nothing after it.
        for d in (self.profile, self.by_p, self.by_g, self.g_stacks, self._runs,
                  self._spans, self.by_tid):
            d.clear()
        self._long.clear()
        self.long_total = 0
        self._clear_views()


    def on_counter(self, e: EventTuple) -> None:
        _ts, _k, p, _m, table, key, delta = e
        if table == Counter.SAMPLES:
            self.seen_samples = True
            self.ctr_outcome[key] = self.ctr_outcome.get(key, 0) + delta
        elif Counter.M_ONCPU_NS <= table <= Counter.M_SWITCHES:
            self.seen_sched = True
            if table == Counter.M_SWITCHES:
                tid, what = key & 0xFFFFFF, key >> 24
                slot = {M_SW_RUNQ: 3, M_SW_VOLUNTARY: 4, M_SW_INVOLUNTARY: 5}.get(what)
            else:
                tid = key
                slot = table - Counter.M_ONCPU_NS  # 0 on, 1 off, 2 runq ns
            if slot is not None:
                m = self.m.get(tid)
                if m is None:
                    m = self.m[tid] = [0] * 6
                m[slot] += delta
        elif table == Counter.RUNQ_LAT:
            self.seen_sched = True
            if 0 <= key < len(self.runq_hist):
                self.runq_hist[key] += delta
        elif table in (Counter.SYS_COUNT, Counter.SYS_NS):
            self.seen_sys = True
            k = (p, key & 0x3FF, key >> 10)
            s = self.sys.get(k)
            if s is None:
                s = self.sys[k] = [0, 0]
            s[table - Counter.SYS_COUNT] += delta
        elif table in (Counter.SYS_G_COUNT, Counter.SYS_G_NS):
            self.seen_sys = True
            s = self.sys_g.get(key)
            if s is None:
                s = self.sys_g[key] = [0, 0]
            s[table - Counter.SYS_G_COUNT] += delta

    # ------------------------------------------------------------------ output

    def view(self, now: int) -> KernelView | None:
        if not (self.seen_samples or self.seen_sched or self.seen_sys):
            return None
        sources: dict[str, str] = {}
        kw: dict[str, object] = {}
        if self.seen_samples:
            sources.update(dict.fromkeys(
                ("samples", "timeline", "cpu_by_p", "cpu_by_goroutine", "long_running",
                 "profile"), "samples"))
            kw.update(self._sample_view(now))
        threads: dict[int, dict[str, int]] = {}
        for tid, n in self.by_tid.items():
            threads.setdefault(tid, {})["samples"] = n
        if self.seen_sched:
            sources.update(runq_latency="tracepoints", threads="tracepoints")
            for tid, (on, off, rq, rqn, vol, inv) in self.m.items():
                threads.setdefault(tid, {}).update(
                    oncpu_ns=on, offcpu_ns=off, runq_ns=rq, runq_waits=rqn,
                    voluntary=vol, involuntary=inv)
            kw["runq_latency"] = h.stats(self.runq_hist)
        elif self.seen_samples:
            sources["threads"] = "samples"
        if self.seen_sys:
            sources["syscalls"] = "tracepoints"
            kw.update(self._sys_view(threads))
        kw["threads"] = tuple(ThreadView(tid, **threads[tid]) for tid in sorted(threads))
        return KernelView(sources=sources, **kw)  # type: ignore[arg-type]

    def _sample_view(self, now: int) -> dict[str, object]:
        c = self.ctr_outcome
        total = sum(c.values()) if c else self.records
        src = c if c else dict(enumerate(self.by_outcome))
        stats = SampleStats(
            total=total, go=src.get(SAMPLE_GO, 0), g0=src.get(SAMPLE_G0, 0),
            not_go=src.get(SAMPLE_NOT_GO, 0), kernel=src.get(SAMPLE_KERNEL, 0),
            records=self.records, period_ns=self.period_ns, off=self.off,
        )
        if now < self._view_now:  # an earlier instant than the last view: settle anew
            self._settled.clear()
            self._settled_to.clear()
        self._view_now = now
        timeline = {p: self._timeline(p, spans, now) for p, spans in sorted(self._spans.items())}
        longs = [lr for _d, _s, lr in self._long]
        longs += [self._long_run(p, r, ongoing=True) for p, r in self._runs.items()
                  if r.last - r.start >= self.long_ns]
        longs.sort(key=lambda r: (-r.duration_ns, r.start, r.p))
        if self._moved:
            self._rows_view = self._profile_rows()
            self._moved.clear()
        if self._own_moved:
            self._own_view = dict(self._own)
            self._own_moved = False
        if self._not_go_moved:
            self._not_go_view = dict(self._not_go)
            self._not_go_moved = False
        return {
            "samples": stats,
            "timeline": timeline,
            "cpu_by_p": dict(sorted(self.by_p.items())),
            "cpu_by_goroutine": self._top_goroutines(),
            "long_running": tuple(longs[:TOP_LONG_RUNS]),
            "long_runs_total": self.long_total,
            "profile": self._rows_view,
            "stacks": self.stacks,
            "own_stacks": self._own_view,
            "not_go_sites": self._not_go_view,
            "search_samples": self._search,
            "run_samples": self._run,
        }

    def _timeline(self, p: int, spans: deque[list[int]], now: int) -> tuple[Span, ...]:
        """P's sampled spans at ``now``. Only the last span grows; one that ended at or before
        ``now`` is final (``now`` never goes back), so it is made into a Span once."""
        total = self._appended[p]
        first = total - len(spans)  # spans ever appended before spans[0]
        done = self._settled.get(p)
        if done is None:
            done = self._settled[p] = deque(maxlen=MAX_SPANS)
        to = self._settled_to.get(p, first)
        if to < first:
            done.clear()
            to = first
        for s, e, g in islice(spans, to - first, total - 1 - first):
            if e > now:
                break
            done.append(Span(s, e, PState.RUNNING if g else PState.SEARCHING, g))
            to += 1
        self._settled_to[p] = to
        while done and to - len(done) < first:
            done.popleft()
        return tuple(done) + tuple(
            Span(s, min(e, max(now, s)), PState.RUNNING if g else PState.SEARCHING, g)
            for s, e, g in islice(spans, to - first, None))

    def _profile_rows(self) -> tuple[tuple[int, int, int, int, int], ...]:
        """The profile as sorted rows: the last view's, patched where samples came."""
        prof, rows = self.profile, self._rows
        if len(self._moved) > _REBUILD:
            rows[:] = sorted((*k, n) for k, n in prof.items())
        else:
            for k in self._moved:
                i = bisect_left(rows, k)  # a 4-tuple sorts just before its 5-tuple row
                if i < len(rows) and rows[i][:4] == k:
                    rows[i] = (*k, prof[k])
                else:
                    rows.insert(i, (*k, prof[k]))
        return tuple(rows)

    def _top_goroutines(self) -> tuple[GoroutineCpu, ...]:
        """The TOP_GOROUTINES most sampled goroutines. Counts only grow, so the new top is
        among the last top and the goroutines sampled since."""
        moved, by_g = self._moved_g, self.by_g
        if not moved:
            return tuple(self._g_rows[g] for g in self._top_g)
        cand = set(self._top_g) | moved
        top = sorted(cand, key=lambda g: (-by_g[g][0], g))[:TOP_GOROUTINES]
        rows = {}
        for goid in top:
            row = self._g_rows.get(goid)
            if row is None or goid in moved:
                n, pbits = by_g[goid]
                st = self.g_stacks.get(goid, {})
                sid = max(st.items(), key=lambda kv: (kv[1], -kv[0]))[0] if st else 0
                procs = tuple(i for i in range(63) if pbits >> i & 1)
                row = GoroutineCpu(goid, n, n * self.period_ns,
                                   user_function(self.stacks.get(sid, ())), procs)
            rows[goid] = row
        self._top_g, self._g_rows = top, rows
        moved.clear()
        return tuple(rows[g] for g in top)

    def _sys_view(self, threads: dict[int, dict[str, int]]) -> dict[str, object]:
        by_name: dict[int, list[int]] = {}
        by_p: dict[int, dict[int, list[int]]] = {}
        total = total_ns = 0
        for (p, nr, tid), (n, ns) in self.sys.items():
            total += n
            total_ns += ns
            a = by_name.setdefault(nr, [0, 0])
            a[0] += n
            a[1] += ns
            b = by_p.setdefault(p, {}).setdefault(nr, [0, 0])
            b[0] += n
            b[1] += ns
            t = threads.setdefault(tid, {})
            t["syscalls"] = t.get("syscalls", 0) + n
            t["syscall_ns"] = t.get("syscall_ns", 0) + ns

        def top(d: dict[int, list[int]], k: int | None) -> tuple[SyscallStat, ...]:
            rows = sorted(d.items(), key=lambda kv: (-kv[1][0], kv[0]))
            return tuple(SyscallStat(syscall_name(nr), nr, n, ns) for nr, (n, ns) in rows[:k])

        procs = tuple(
            ProcSyscalls(p, sum(v[0] for v in d.values()), sum(v[1] for v in d.values()),
                         top(d, TOP_SYSCALLS))
            for p, d in sorted(by_p.items())
        )
        per_g = sorted(((g, n, ns) for g, (n, ns) in self.sys_g.items() if g),
                       key=lambda r: (-r[1], r[0]))
        return {
            "syscalls": total,
            "syscall_ns": total_ns,
            "syscalls_by_name": top(by_name, None),
            "syscalls_by_p": procs,
            "syscalls_by_g": tuple(per_g[:TOP_GOROUTINES]),
        }


def user_function(stack: tuple[str, ...]) -> str:
    """The deepest frame that is not the runtime's (the leaf itself when all are)."""
    for name in reversed(stack):
        if not name.startswith(("runtime.", "[")):
            return name
    return stack[-1] if stack else UNKNOWN_FRAME
