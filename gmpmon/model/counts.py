"""The model's plain counts, one small part each: syscalls and handoffs, preemption,
goroutine creation and exit, probe hits (capture's overhead accounting)."""

from __future__ import annotations

from collections.abc import Iterable

from gmpmon.events import RING_KEYS, Counter, EventTuple, Kind
from gmpmon.model.part import Context, Handler, Part


class Syscalls(Part):
    """entersyscall / entersyscallblock (a0 = 1) and the handoffs of Ps stuck in them."""

    def __init__(self, ctx: Context) -> None:
        self.syscalls = 0
        self.blocking = 0
        self.handoffs = 0

    def handlers(self) -> Iterable[tuple[int, Handler]]:
        return ((Kind.SYSCALL_ENTER, self.on_enter), (Kind.HANDOFF, self.on_handoff))

    def on_enter(self, e: EventTuple) -> None:
        self.syscalls += 1
        if e[5]:
            self.blocking += 1

    def on_handoff(self, e: EventTuple) -> None:
        self.handoffs += 1

    def section(self, at: object) -> dict[str, object]:
        return {
            "syscalls": self.syscalls,
            "syscalls_blocking": self.blocking,
            "handoffs": self.handoffs,
        }


class Preemption(Part):
    """Requests (preemptone), preemptions (PREEMPTED a0=1) and voluntary Gosched (a0=0)."""

    def __init__(self, ctx: Context) -> None:
        self.requested = 0
        self.preempted = 0
        self.gosched = 0

    def handlers(self) -> Iterable[tuple[int, Handler]]:
        return ((Kind.PREEMPT_REQ, self.on_request), (Kind.PREEMPTED, self.on_preempted))

    def on_request(self, e: EventTuple) -> None:
        self.requested += 1

    def on_preempted(self, e: EventTuple) -> None:
        if e[5]:
            self.preempted += 1
        else:
            self.gosched += 1

    def section(self, at: object) -> dict[str, object]:
        return {
            "preempt_requested": self.requested,
            "preempted": self.preempted,
            "gosched": self.gosched,
        }


class Lifecycle(Part):
    """Goroutines created (newproc) and exited (goexit0 / gdestroy)."""

    def __init__(self, ctx: Context) -> None:
        self.created = 0
        self.exited = 0

    def handlers(self) -> Iterable[tuple[int, Handler]]:
        return ((Kind.GO_CREATE, self.on_create), (Kind.GO_EXIT, self.on_exit))

    def on_create(self, e: EventTuple) -> None:
        self.created += 1

    def on_exit(self, e: EventTuple) -> None:
        self.exited += 1

    def section(self, at: object) -> dict[str, object]:
        return {"goroutines_created": self.created, "goroutines_exited": self.exited}


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
