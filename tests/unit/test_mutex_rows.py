"""MUTEX_ROWS (lock and semaphore waits summed in the kernel, capture/waitrows.py) make the
numbers that the same waits make as MUTEX_ADDR + MUTEX pairs, one pair per wait."""

from __future__ import annotations

import random

from gmpmon.events import Batch, EventTuple, Header, Kind, LockKind
from gmpmon.model import Model
from gmpmon.model.snapshot import Snapshot

T0 = 1_000_000_000_000
STACKS = {
    1: ("main.main", "main.worker", "sync.(*Mutex).Lock"),
    2: ("main.main", "main.reader", "sync.(*RWMutex).RLock"),
    3: ("main.main", "main.wait", "sync.(*WaitGroup).Wait"),
}


def header() -> Header:
    return Header(pid=42, exe="/bin/target", go_version="go1.27.3", gomaxprocs=2,
                  mode="sample", start_ns=T0, wall_start=0.0,
                  wait_reasons=("", "sync.Mutex.Lock"), stw_reasons=("",))


def snapshot(batches: list[list[EventTuple]]) -> Snapshot:
    model = Model(header())
    model.feed(Batch([], dict(STACKS)))
    for b in batches:
        model.feed(Batch(b))
    model.flush()
    return model.snapshot()


def waits_of(s: Snapshot) -> tuple[object, ...]:
    return (s.mutex_contentions, s.mutex_wait_ns, s.mutex_stacks, s.mutex_by_addr,
            s.mutex_addr_stack, s.waits_by_kind, s.wait_stacks)


def test_rows_make_the_numbers_their_pairs_make() -> None:
    rng = random.Random(7)
    kinds = (LockKind.MUTEX, LockKind.MUTEX, LockKind.RWMUTEX_R, LockKind.SEMA)
    waits = []  # (ts, goid, lock address, LockKind, stack id, wait ns)
    for i in range(3000):
        kind = rng.choice(kinds)
        addr = 0xC000010 + 0x10 * rng.randrange(12)
        sid = 1 if kind == LockKind.MUTEX and rng.random() < 0.7 else rng.choice((1, 2, 3))
        waits.append((T0 + 1000 * i, 100 + i % 50, addr, int(kind), sid, rng.randrange(1, 10**6)))
    pairs = []
    for ts, g, addr, kind, sid, ns in waits:
        pairs.append((ts, int(Kind.MUTEX_ADDR), 0, 7, g, addr, kind))
        pairs.append((ts, int(Kind.MUTEX), 0, 7, g, ns, sid))
    # Rows as capture reads them: every 200 waits, the deltas of the rows that grew; one
    # row's read falls between the kernel's two adds (its count first, its ns one read later).
    rows: list[list[EventTuple]] = []
    torn: dict[tuple[int, int, int], int] = {}
    for start in range(0, len(waits), 200):
        acc: dict[tuple[int, int, int], list[int]] = {}
        for _ts, _g, addr, kind, sid, ns in waits[start:start + 200]:
            r = acc.setdefault((addr, sid, kind), [0, 0])
            r[0] += 1
            r[1] += ns
        for key, ns in torn.items():
            acc.setdefault(key, [0, 0])[1] += ns
        torn = {}
        now = waits[min(start + 199, len(waits) - 1)][0] + 1
        batch = []
        for i, ((addr, sid, kind), (n, ns)) in enumerate(sorted(acc.items())):
            if i == 0 and n:
                torn[(addr, sid, kind)], ns = ns, 0
            batch.append((now, int(Kind.MUTEX_ROWS), -1, kind, addr, ns, sid | n << 32))
        rows.append(batch)
    assert torn  # the last read's torn row comes with nothing after it: add it
    (addr, sid, kind), ns = next(iter(torn.items()))
    rows.append([(waits[-1][0] + 2, int(Kind.MUTEX_ROWS), -1, kind, addr, ns, sid)])

    by_pairs = snapshot([pairs[i:i + 500] for i in range(0, len(pairs), 500)])
    by_rows = snapshot(rows)
    assert by_pairs.mutex_contentions > 1000 and len(by_pairs.wait_stacks) >= 4
    assert waits_of(by_rows) == waits_of(by_pairs)


def test_rows_and_pairs_add_up_in_one_stream() -> None:
    """A wait that found the kernel's hash full comes as its pair, beside the rows."""
    s = snapshot([[
        (T0, int(Kind.MUTEX_ADDR), 0, 7, 9, 0xC000010, int(LockKind.MUTEX)),
        (T0, int(Kind.MUTEX), 0, 7, 9, 5_000, 1),
        (T0 + 10, int(Kind.MUTEX_ROWS), -1, int(LockKind.MUTEX), 0xC000010, 12_000, 1 | 3 << 32),
        (T0 + 10, int(Kind.MUTEX_ROWS), -1, int(LockKind.SEMA), 0xC000400, 800, 3 | 2 << 32),
    ]])
    assert (s.mutex_contentions, s.mutex_wait_ns) == (4, 17_000)
    assert s.mutex_by_addr == {0xC000010: (4, 17_000)}
    assert s.waits_by_kind == {"sync.Mutex": (4, 17_000), "semacquire": (2, 800)}


def test_sampled_rows_weigh_as_their_sampled_pairs() -> None:
    """The governor's 1-in-N tracing (coldgov) rides in the kind word (N << 16), which keys
    the kernel's row: a row of n waits traced 1 in N stands for n x N, as n pairs do."""
    word = int(LockKind.MUTEX) | 8 << 16
    pairs: list[EventTuple] = []
    for i, ns in enumerate((100, 250, 4000)):
        pairs.append((T0 + i, int(Kind.MUTEX_ADDR), 0, 7, 100 + i, 0xC000010, word))
        pairs.append((T0 + i, int(Kind.MUTEX), 0, 7, 100 + i, ns, 1))
    row: list[EventTuple] = [(T0 + 5, int(Kind.MUTEX_ROWS), 0, word, 0xC000010, 4350, 3 << 32 | 1)]
    by_pairs, by_row = snapshot([pairs]), snapshot([row])
    assert waits_of(by_row) == waits_of(by_pairs)
    assert (by_row.mutex_contentions, by_row.mutex_wait_ns) == (24, 4350 * 8)
    assert by_row.mutex_sampling == by_pairs.mutex_sampling
