"""What a model part is: the shape every aggregate of the model has.

A part owns one aggregate (latency, parks, steals, ...) and says

- which event kinds it handles (``handlers()``: kind -> function of the event tuple),
- which in-kernel COUNTER tables it folds (``counters()``: table id -> function of the event),
- what it forgets when the model's view of the target is reset (``reset(ts)``: a LOST record
  or a duty-cycle window edge),
- what it contributes to the Snapshot (``section(at)``: Snapshot field name -> value).

Several parts may handle the same kind: the model calls them in registration order (the state
machine first). Adding a part is one module with one class and one line in
gmpmon/model/registry.py; its Snapshot section is a defaulted field of Snapshot (None when the
part saw nothing) holding a frozen dataclass of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from gmpmon.events import EventTuple, Header

Handler = Callable[[EventTuple], None]
V = TypeVar("V")
K = TypeVar("K")


@dataclass
class Context:
    """What every part may read: the target's header and the model's shared tables."""

    header: Header
    window_ns: int  # how much timeline (spans) the model keeps
    stacks: dict[int, tuple[str, ...]] = field(default_factory=dict)  # stack id -> frames

    def reason_name(self, idx: int) -> str:
        """A wait-reason index (or a WAKE_* value) by its runtime name."""
        if idx in WAKE_NAMES:
            return WAKE_NAMES[idx]
        wr = self.header.wait_reasons
        if 0 <= idx < len(wr):
            return wr[idx] or "none"
        return f"waitreason({idx})"


# Wake "reasons" that are not wait reasons (a G made runnable without having parked).
WAKE_CREATED = -1
WAKE_PREEMPTED = -2
WAKE_GOSCHED = -3
WAKE_SYSCALL = -4  # back from a syscall without a P (WAKE a0 = 1)
WAKE_NAMES = {WAKE_CREATED: "created", WAKE_PREEMPTED: "preempted", WAKE_GOSCHED: "gosched",
              WAKE_SYSCALL: "syscall"}


class Part:
    """Base of the model's parts (every method optional)."""

    # Its section is left out of a light snapshot (Model.snapshot(light=True)): the headless
    # interval line needs the P states, run queues and counts, not the kernel views.
    costly = False

    def handlers(self) -> Iterable[tuple[int, Handler]]:
        return ()

    def counters(self) -> Iterable[tuple[int, Handler]]:
        """(Counter table id, handler of its COUNTER events)."""
        return ()

    def reset(self, ts: int) -> None:
        """The model's picture was reset (lost records, window edge): drop pending pairs."""

    def section(self, at: View) -> dict[str, object]:
        """The Snapshot fields this part fills."""
        return {}

    def sources(self) -> Iterable[Counted[object]]:
        """Its counter-or-events aggregates (Snapshot.sources says which one was used)."""
        return ()


class Counted(Generic[V]):
    """One aggregate kept twice: from per-event records and from an in-kernel COUNTER table.

    The kernel's table is authoritative for what it covers: once any COUNTER of ``table`` was
    seen, ``chosen`` is the kernel one, else the event one. Both are always kept and the choice
    is made at snapshot time: switching incrementally would double count what came before the
    first COUNTER. ``name`` is its key in Snapshot.sources.
    """

    __slots__ = ("events", "kernel", "name", "seen", "table")

    def __init__(self, name: str, table: int, make: Callable[[], V]) -> None:
        self.name = name
        self.table = table
        self.events: V = make()
        self.kernel: V = make()
        self.seen = False

    @property
    def chosen(self) -> V:
        return self.kernel if self.seen else self.events

    @property
    def source(self) -> str:
        return "counters" if self.seen else "events"


@dataclass(frozen=True, slots=True)
class View:
    """What a part's ``section`` may use besides its own state: the instant of the Snapshot."""

    now: int  # ts of the newest event applied
    start: int  # ts of the first
    cutoff: int  # spans that ended before this are outside the timeline window


def add_row(table: dict[K, list[int]], key: K, count: int, ns: int) -> None:
    """table[key] += [count, ns] (the (count, total ns) rows several parts keep)."""
    row = table.get(key)
    if row is None:
        table[key] = [count, ns]
    else:
        row[0] += count
        row[1] += ns
