"""A model that replays a recording for its P spans only, for the exporters that want nothing
else (perfetto: every span, plus the raw batches' STW pauses, steals and parks).

:class:`SpanModel` is the :class:`~gmpmon.model.core.Model` (same parts, same reorder buffer,
same resets, windows and epochs) with another ``_apply``: only the G/P state machine
(model/sched.py) sees the events, and the kinds that make most of a full-mode recording
(SYSCALL_ENTER/EXIT, EXECUTE, FIND_RUNNABLE, PARK, READY: ~95% of a busy server's events)
are handled inline in one loop, with only what decides a span: a G's state, P and epoch, a
P's state, goroutine and start, the stopped world. Every other kind goes to the state
machine's own handler. The spans handed to ``on_span`` are the Model's, one for one, in the
same order (tests/unit/test_spanmodel.py checks it on every committed recording).

What it does not keep: the aggregates (latency, parks, syscalls, steals, ...), the findings'
evidence, the counts a P's open span adds to its times, the closed spans of the P timelines.
Its snapshot is good for its P list and their open spans (``timeline[-1]``), nothing else.
On 6 s of full mode on Caddy under wrk (800k events, 685k spans; scripts/bench-perfetto),
reading and replaying the recording takes 0.70 s through it against 1.79 s through the Model.
A change to sched.py's handlers of the kinds inlined here is a change here too: the test
above fails otherwise.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

from gmpmon.events import EventTuple, Header, Kind
from gmpmon.model.core import Model
from gmpmon.model.legal import (
    G_RUNNABLE,
    G_RUNNING,
    G_SYSCALL,
    G_UNKNOWN,
    G_WAITING,
    P_FROM_EXECUTE,
    P_GCSTOP,
    P_RUNNING,
    P_SEARCHING,
    P_SYSCALL,
    P_UNKNOWN,
)
from gmpmon.model.part import Handler

K_EXECUTE, K_FIND_RUNNABLE, K_PARK, K_READY = (
    int(Kind.EXECUTE), int(Kind.FIND_RUNNABLE), int(Kind.PARK), int(Kind.READY))
K_SYSCALL_ENTER, K_SYSCALL_EXIT = int(Kind.SYSCALL_ENTER), int(Kind.SYSCALL_EXIT)


# A P's spans closed by a chunk of events, (start, end, PState value, goid) in order.
SpansSink = Callable[[int, list[tuple[int, int, int, int]]], None]


class SpanModel(Model):
    """See the module docstring."""

    def __init__(self, header: Header, *, on_spans: SpansSink) -> None:
        super().__init__(header)
        self.on_spans = on_spans
        # Each P's spans closed since the last hand-off (the end of each chunk applied)
        self._spans: defaultdict[int, list[tuple[int, int, int, int]]] = defaultdict(list)
        spans = self._spans

        def closed(p: int, start: int, end: int, state: int, goid: int) -> None:
            spans[p].append((start, end, state, goid))

        self.sched.on_span = closed  # the state machine's own handlers' spans
        table: list[Handler | None] = [None] * 256
        for kind, fn in self.sched.handlers():
            table[int(kind)] = fn
        for kind, fn in ((Kind.LOST, self._on_lost), (Kind.WINDOW, self._on_window),
                         (Kind.DROP, self._on_drop)):
            table[int(kind)] = fn
        self._spans_table = table

    def _apply(self, events: list[EventTuple]) -> None:
        self._batch_begins(events)
        sched = self.sched
        gs, procs = sched.gs, sched.procs
        new_g, new_p, p_to = sched.g, sched.proc, sched.p_to
        spans = self._spans
        # The model's table: None for a kind no part handles, or a hot kind between windows
        # (mutated in place by a WINDOW event). Then the state machine's own handlers.
        allowed, table = self._handlers, self._spans_table
        epoch, stw = sched.epoch, sched.stw_start
        # Each inline ``p_to`` below is sched.Sched.p_to(pp, ts, state, goid) without what
        # is not a span (times, timeline, findings' long runs): in the stopped world a P in
        # GCSTOP only notes where it resumes; a P's span never starts after its end; a span
        # is emitted when it is known (not UNKNOWN) and not empty.
        for e in events:
            k = e[1] & 0xFF
            if allowed[k] is None:
                continue
            if k == K_SYSCALL_EXIT:
                ts, _, p, _m, g, _a0, _a1 = e
                gg = gs.get(g)
                if gg is None or gg.epoch != epoch:
                    gg = new_g(g, ts)
                if p < 0:
                    gg.state = G_UNKNOWN  # the P was taken
                    continue
                gg.state = G_RUNNING
                gg.p = p
                pp = procs.get(p) or new_p(p, ts)
                if pp.state == P_RUNNING and pp.goid == g:
                    continue
                if stw >= 0 and pp.state == P_GCSTOP:
                    pp.after = (P_RUNNING, g)
                    continue
                start = pp.since
                if ts < start:
                    ts = start
                elif ts > start and pp.state != P_UNKNOWN:
                    spans[pp.id].append((start, ts, pp.state, pp.goid))
                pp.state, pp.goid, pp.since = P_RUNNING, g, ts
            elif k == K_SYSCALL_ENTER:
                ts, _, p, _m, g, _a0, _a1 = e
                gg = gs.get(g)
                if gg is None or gg.epoch != epoch:
                    gg = new_g(g, ts)
                gg.state = G_SYSCALL
                if p < 0:
                    p = gg.p
                    if p < 0:
                        continue
                gg.p = p
                pp = procs.get(p) or new_p(p, ts)
                if stw >= 0 and pp.state == P_GCSTOP:
                    pp.after = (P_SYSCALL, g)
                    continue
                start = pp.since
                if ts < start:
                    ts = start
                elif ts > start and pp.state != P_UNKNOWN:
                    spans[pp.id].append((start, ts, pp.state, pp.goid))
                pp.state, pp.goid, pp.since = P_SYSCALL, g, ts
            elif k == K_EXECUTE:
                ts, _, p, _m, g, _a0, _a1 = e
                gg = gs.get(g)
                if gg is None or gg.epoch != epoch:
                    gg = new_g(g, ts)
                if gg.state == G_RUNNING and gg.p != p and gg.p >= 0:
                    other = procs.get(gg.p)  # still running elsewhere: how it left was missed
                    if other is not None and other.goid == g and other.state == P_RUNNING:
                        p_to(other, ts, P_UNKNOWN, 0)
                gg.state = G_RUNNING
                if p < 0:
                    continue
                pp = procs.get(p) or new_p(p, ts)
                gg.p = p
                if pp.state not in P_FROM_EXECUTE and pp.goid != g and pp.goid:
                    sched._p_taken(pp, p)
                if stw >= 0 and pp.state == P_GCSTOP:
                    pp.after = (P_RUNNING, g)
                    continue
                start = pp.since
                if ts < start:
                    ts = start
                elif ts > start and pp.state != P_UNKNOWN:
                    spans[pp.id].append((start, ts, pp.state, pp.goid))
                pp.state, pp.goid, pp.since = P_RUNNING, g, ts
            elif k == K_FIND_RUNNABLE:
                ts, _, p, _m, _g, _a0, _a1 = e
                if p < 0:
                    continue
                pp = procs.get(p) or new_p(p, ts)
                if pp.state == P_RUNNING and pp.goid:
                    prev = gs.get(pp.goid)
                    if prev is not None and prev.state == G_RUNNING and prev.p == p:
                        prev.state = G_UNKNOWN  # left the P by a path we do not probe
                if pp.state == P_SEARCHING:
                    continue
                if stw >= 0 and pp.state == P_GCSTOP:
                    pp.after = (P_SEARCHING, 0)
                    continue
                start = pp.since
                if ts < start:
                    ts = start
                elif ts > start and pp.state != P_UNKNOWN:
                    spans[pp.id].append((start, ts, pp.state, pp.goid))
                pp.state, pp.goid, pp.since = P_SEARCHING, 0, ts
            elif k == K_PARK:
                ts, _, p, _m, g, _a0, _a1 = e
                gg = gs.get(g)
                if gg is None or gg.epoch != epoch:
                    gg = new_g(g, ts)
                gg.state = G_WAITING
                if p < 0:
                    sched._leave_p(gg, p, ts)
                    continue
                pp = procs.get(p) or new_p(p, ts)
                if pp.state == P_SEARCHING:
                    continue
                if stw >= 0 and pp.state == P_GCSTOP:
                    pp.after = (P_SEARCHING, 0)
                    continue
                start = pp.since
                if ts < start:
                    ts = start
                elif ts > start and pp.state != P_UNKNOWN:
                    spans[pp.id].append((start, ts, pp.state, pp.goid))
                pp.state, pp.goid, pp.since = P_SEARCHING, 0, ts
            elif k == K_READY:
                g = e[4]
                gg = gs.get(g)
                if gg is None or gg.epoch != epoch:
                    gg = new_g(g, e[0])
                gg.state = G_RUNNABLE
            else:
                fn = table[k]
                if fn is not None:
                    fn(e)  # may reset (a new epoch), stop or restart the world
                    epoch, stw = sched.epoch, sched.stw_start
        last = events[-1][0]
        if last > self.applied_ts:
            self.applied_ts = last
        self.events_total += len(events)
        for p, closed in spans.items():
            if closed:
                self.on_spans(p, closed)
        spans.clear()
