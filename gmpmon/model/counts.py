"""The model's plain counts, one small part each: syscalls and handoffs, preemption,
goroutine creation and exit, probe hits (capture's overhead accounting).

Every count is a :class:`~gmpmon.model.part.Counted`: the per-event records' count, and the
in-kernel counter the same probe handler adds to (probes/gmpmon.bpf.c, Counter.SYS_ENTER...)
once a COUNTER of its table was seen. The counter is what thinning (capture/pipeline.py,
LOST records) cannot change; the per-event side is for recordings made before the counters.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gmpmon.events import (
    RING_KEYS,
    YIELD_GOSCHED,
    YIELD_HANDOFF,
    YIELD_PREEMPT,
    Counter,
    EventTuple,
    Kind,
)
from gmpmon.model.part import Context, Counted, Handler, Part


def _tally() -> dict[int, int]:
    return {}


def _add(c: Counted[dict[int, int]], e: EventTuple) -> None:
    """A COUNTER delta of ``c``'s table: kernel[key] += delta."""
    c.seen = True
    k = c.kernel
    k[e[5]] = k.get(e[5], 0) + e[6]


class Syscalls(Part):
    """entersyscall / entersyscallblock (key 1) and the handoffs of Ps stuck in them."""

    def __init__(self, ctx: Context) -> None:
        # key: 1 a blocking syscall (entersyscallblock), 0 the others
        self.entered: Counted[dict[int, int]] = Counted("syscalls", Counter.SYS_ENTER, _tally)
        self.exited: Counted[dict[int, int]] = Counted("syscall_exits", Counter.SYS_EXIT, _tally)
        self.handed: Counted[dict[int, int]] = Counted("handoffs", Counter.HANDOFF, _tally)

    def handlers(self) -> Iterable[tuple[int, Handler]]:
        return ((Kind.SYSCALL_ENTER, self.on_enter), (Kind.SYSCALL_EXIT, self.on_exit),
                (Kind.HANDOFF, self.on_handoff))

    def counters(self) -> Iterable[tuple[int, Handler]]:
        return ((Counter.SYS_ENTER, self.on_enter_counter),
                (Counter.SYS_EXIT, self.on_exit_counter),
                (Counter.HANDOFF, self.on_handoff_counter))

    def on_enter(self, e: EventTuple) -> None:
        ev = self.entered.events
        k = 1 if e[5] else 0
        ev[k] = ev.get(k, 0) + 1

    def on_exit(self, e: EventTuple) -> None:
        ev = self.exited.events
        ev[0] = ev.get(0, 0) + 1

    def on_handoff(self, e: EventTuple) -> None:
        ev = self.handed.events
        ev[0] = ev.get(0, 0) + 1

    def on_enter_counter(self, e: EventTuple) -> None:
        _add(self.entered, e)

    def on_exit_counter(self, e: EventTuple) -> None:
        _add(self.exited, e)

    def on_handoff_counter(self, e: EventTuple) -> None:
        _add(self.handed, e)

    def sources(self) -> Iterable[Counted[Any]]:
        return (self.entered, self.exited, self.handed)

    def section(self, at: object) -> dict[str, object]:
        entered = self.entered.chosen
        return {
            "syscalls": sum(entered.values()),
            "syscalls_blocking": entered.get(1, 0),
            "syscall_exits": sum(self.exited.chosen.values()),
            "handoffs": sum(self.handed.chosen.values()),
        }


class Preemption(Part):
    """Requests (preemptone), preemptions (PREEMPTED a0=1: goschedImpl's, gopreempt_m's,
    goyield_m's) and voluntary Gosched (a0=0); the kernel's YIELD table keys them by how."""

    def __init__(self, ctx: Context) -> None:
        self.requested: Counted[dict[int, int]] = Counted(
            "preempt_requests", Counter.PREEMPT_REQ, _tally)
        # YIELD_* -> count; the per-event side knows only preempted (YIELD_PREEMPT) or not
        self.yields: Counted[dict[int, int]] = Counted("yields", Counter.YIELD, _tally)

    def handlers(self) -> Iterable[tuple[int, Handler]]:
        return ((Kind.PREEMPT_REQ, self.on_request), (Kind.PREEMPTED, self.on_preempted))

    def counters(self) -> Iterable[tuple[int, Handler]]:
        return ((Counter.PREEMPT_REQ, self.on_request_counter),
                (Counter.YIELD, self.on_yield_counter))

    def on_request(self, e: EventTuple) -> None:
        ev = self.requested.events
        ev[0] = ev.get(0, 0) + 1

    def on_preempted(self, e: EventTuple) -> None:
        ev = self.yields.events
        k = YIELD_PREEMPT if e[5] else YIELD_GOSCHED
        ev[k] = ev.get(k, 0) + 1

    def on_request_counter(self, e: EventTuple) -> None:
        _add(self.requested, e)

    def on_yield_counter(self, e: EventTuple) -> None:
        _add(self.yields, e)

    def sources(self) -> Iterable[Counted[Any]]:
        return (self.requested, self.yields)

    def section(self, at: object) -> dict[str, object]:
        y = self.yields.chosen
        return {
            "preempt_requested": sum(self.requested.chosen.values()),
            "preempted": y.get(YIELD_PREEMPT, 0) + y.get(YIELD_HANDOFF, 0),
            "gosched": y.get(YIELD_GOSCHED, 0),
        }


class Lifecycle(Part):
    """Goroutines created (newproc) and exited (goexit0 / gdestroy)."""

    def __init__(self, ctx: Context) -> None:
        self.created: Counted[dict[int, int]] = Counted(
            "goroutines_created", Counter.GO_CREATE, _tally)
        self.exited: Counted[dict[int, int]] = Counted(
            "goroutines_exited", Counter.GO_EXIT, _tally)

    def handlers(self) -> Iterable[tuple[int, Handler]]:
        return ((Kind.GO_CREATE, self.on_create), (Kind.GO_EXIT, self.on_exit))

    def counters(self) -> Iterable[tuple[int, Handler]]:
        return ((Counter.GO_CREATE, self.on_create_counter),
                (Counter.GO_EXIT, self.on_exit_counter))

    def on_create(self, e: EventTuple) -> None:
        ev = self.created.events
        ev[0] = ev.get(0, 0) + 1

    def on_exit(self, e: EventTuple) -> None:
        ev = self.exited.events
        ev[0] = ev.get(0, 0) + 1

    def on_create_counter(self, e: EventTuple) -> None:
        _add(self.created, e)

    def on_exit_counter(self, e: EventTuple) -> None:
        _add(self.exited, e)

    def sources(self) -> Iterable[Counted[Any]]:
        return (self.created, self.exited)

    def section(self, at: object) -> dict[str, object]:
        return {"goroutines_created": sum(self.created.chosen.values()),
                "goroutines_exited": sum(self.exited.chosen.values())}


class ProbeHits(Part):
    """Counter.PROBE_HITS: hits per probe-table handler id."""

    def __init__(self, ctx: Context) -> None:
        self.hits: dict[int, int] = {}

    def counters(self) -> Iterable[tuple[int, Handler]]:
        return ((Counter.PROBE_HITS, self.on_counter),)

    def on_counter(self, e: EventTuple) -> None:
        self.hits[e[5]] = self.hits.get(e[5], 0) + e[6]

    def section(self, at: object) -> dict[str, object]:
        return {"probe_hits": dict(sorted(self.hits.items()))}


class RingLedger(Part):
    """Counter.RING: the probes' ring-buffer ledger, by RING_KEYS name."""

    def __init__(self, ctx: Context) -> None:
        self.totals: dict[str, int] = {}

    def counters(self) -> Iterable[tuple[int, Handler]]:
        return ((Counter.RING, self.on_counter),)

    def on_counter(self, e: EventTuple) -> None:
        name = RING_KEYS.get(e[5])
        if name is not None:
            self.totals[name] = self.totals.get(name, 0) + e[6]

    def section(self, at: object) -> dict[str, object]:
        return {"ring": dict(self.totals)}
