"""Blocking waits: sync.Mutex contention (lockSlow) and semaphore waits (semacquire1:
RWMutex, WaitGroup, ...), by kind, by stack and (sync.Mutex) by lock address.

Each wait arrives as MUTEX_ADDR (which lock, which LockKind) then MUTEX (how long, from
which stack) for the same goroutine, or summed in the kernel with the others of its lock,
stack and kind word: a MUTEX_ROWS row (capture/waitrows.py).

While the cold probes cost more than the budget, the governor (gmpmon/capture/coldgov.py)
traces 1 sync.Mutex contention in N; the kind word (MUTEX_ADDR's a1, MUTEX_ROWS' m) says N
above its LockKind (word >> 16; 0 before it was sampled: 1). Each such wait stands for N:
the counts, the wait time and the tables by stack and by lock add it N times (an estimate,
unbiased: the N-th is chosen at random), and ``mutex_sampling`` says how many waits were so
weighed and the largest N.
"""

from __future__ import annotations

from collections.abc import Iterable

from gmpmon.events import MISSED_STACK, EventTuple, Kind, LockKind
from gmpmon.model.part import Context, Handler, Part, add_row
from gmpmon.model.snapshot import LOCK_KIND_NAMES, MutexStack

LOCK_MUTEX = int(LockKind.MUTEX)


def lock_kind_name(kind: int) -> str:
    return LOCK_KIND_NAMES.get(kind, f"lockkind({kind})")


class Waits(Part):
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.mutex_contentions = 0
        self.mutex_wait_ns = 0
        self.by_stack: dict[int, list[int]] = {}  # sync.Mutex: stack id -> [n, ns]
        # sync.Mutex: (lock address, stack id) -> [n, ns]: by address, and whose stack a
        # lock's waits came from (section() sums it by address)
        self.by_addr_stack: dict[tuple[int, int], list[int]] = {}
        self.addr_of_g: dict[int, tuple[int, int]] = {}  # goid -> (addr, LockKind)
        self.by_kind: dict[int, list[int]] = {}  # LockKind -> [count, ns]
        self.other_by_stack: dict[tuple[int, int], list[int]] = {}  # (kind, stack) -> [n, ns]
        self.sampled = 0  # sync.Mutex waits traced 1 in N > 1 (each weighed N)
        self.sample_max = 1  # the largest N

    def handlers(self) -> Iterable[tuple[int, Handler]]:
        return (
            (Kind.MUTEX_ADDR, self.on_mutex_addr),
            (Kind.MUTEX, self.on_mutex),
            (Kind.MUTEX_ROWS, self.on_mutex_rows),
            (Kind.GO_EXIT, self.on_go_exit),
        )

    def reset(self, ts: int) -> None:
        self.addr_of_g.clear()

    def on_go_exit(self, e: EventTuple) -> None:
        self.addr_of_g.pop(e[4], None)

    def on_mutex_addr(self, e: EventTuple) -> None:
        self.addr_of_g[e[4]] = (e[5], e[6])

    def on_mutex(self, e: EventTuple) -> None:
        _ts, _, _p, _m, g, a0, a1 = e
        addr, word = self.addr_of_g.pop(g, (-1, LOCK_MUTEX))
        kind, every = word & 0xFFFF, max(word >> 16, 1)
        if kind != LOCK_MUTEX:
            # RWMutex and semaphore waits (semacquire1): kept apart, so that "mutex" stays
            # sync.Mutex contention only.
            add_row(self.by_kind, kind, 1, a0)
            add_row(self.other_by_stack, (kind, a1), 1, a0)
            return
        if every > 1:
            self.sampled += 1
            self.sample_max = max(self.sample_max, every)
        ns = a0 * every
        add_row(self.by_kind, kind, every, ns)
        self.mutex_contentions += every
        self.mutex_wait_ns += ns
        add_row(self.by_stack, a1, every, ns)
        if addr >= 0:
            add_row(self.by_addr_stack, (addr, a1), every, ns)

    def on_mutex_rows(self, e: EventTuple) -> None:
        """Waits summed in the kernel: as many MUTEX_ADDR + MUTEX pairs, added at once."""
        _ts, _, _p, word, addr, ns, a1 = e
        n, sid = a1 >> 32, a1 & 0xFFFFFFFF
        kind, every = word & 0xFFFF, max(word >> 16, 1)
        if kind != LOCK_MUTEX:
            add_row(self.by_kind, kind, n, ns)
            add_row(self.other_by_stack, (kind, sid), n, ns)
            return
        if every > 1:  # n waits traced 1 in `every`: each stands for `every` (on_mutex)
            self.sampled += n
            self.sample_max = max(self.sample_max, every)
            n, ns = n * every, ns * every
        add_row(self.by_kind, kind, n, ns)
        self.mutex_contentions += n
        self.mutex_wait_ns += ns
        add_row(self.by_stack, sid, n, ns)
        add_row(self.by_addr_stack, (addr, sid), n, ns)

    def _by_addr(self, top: int = 8) -> tuple[dict[int, list[int]], dict[int, tuple[str, ...]]]:
        """sync.Mutex waits by lock address ([n, ns]), and the stack with the most wait on
        each of the ``top`` locks with the most wait: a lock's site is its own waiters',
        never another lock's."""
        by_addr: dict[int, list[int]] = {}
        best: dict[int, tuple[int, int]] = {}  # addr -> (ns, stack id)
        for (addr, sid), (n, ns) in self.by_addr_stack.items():
            add_row(by_addr, addr, n, ns)
            if ns > best.get(addr, (-1, 0))[0]:
                best[addr] = (ns, sid)
        heavy = sorted(by_addr.items(), key=lambda kv: (-kv[1][1], kv[0]))[:top]
        stacks = self.ctx.stacks
        return by_addr, {a: stacks.get(best[a][1], MISSED_STACK) for a, _r in heavy}

    def section(self, at: object) -> dict[str, object]:
        stacks = self.ctx.stacks
        by_addr, addr_stack = self._by_addr()
        mutex = [MutexStack(stacks.get(sid, MISSED_STACK), c, w)
                 for sid, (c, w) in self.by_stack.items()]
        mutex.sort(key=lambda s: (-s.wait_ns, -s.count, s.stack))
        other = [
            MutexStack(stacks.get(sid, MISSED_STACK), c, w, lock_kind_name(k))
            for (k, sid), (c, w) in self.other_by_stack.items()
        ]
        other.sort(key=lambda s: (-s.wait_ns, -s.count, s.kind, s.stack))
        return {
            "mutex_contentions": self.mutex_contentions,
            "mutex_wait_ns": self.mutex_wait_ns,
            "mutex_sampling": (self.sampled, self.sample_max),
            "mutex_stacks": tuple(mutex),
            "mutex_by_addr": {a: (r[0], r[1]) for a, r in sorted(by_addr.items())},
            "mutex_addr_stack": addr_stack,
            "waits_by_kind": {
                lock_kind_name(k): (r[0], r[1]) for k, r in sorted(self.by_kind.items())
            },
            "wait_stacks": tuple(other),
        }
