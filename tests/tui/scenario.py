"""A small deterministic scheduler run as events, fed through the real Model.

It stands in for a recording until tests/data holds one: 4 Ps running a pool of goroutines
that park on channels, mutexes and timers, get stolen, make syscalls and are stopped by two
GC pauses. The event stream follows the vocabulary in gmpmon/events.py; the numbers the TUI
shows are the Model's, not ours.
"""

from __future__ import annotations

import heapq
import random
from collections import deque

from gmpmon.events import Batch, EventTuple, Header, Kind, LockKind
from gmpmon.findings.engine import snapshot_with_findings
from gmpmon.model import Model
from gmpmon.model.snapshot import Snapshot

US = 1_000
MS = 1_000_000
S = 1_000_000_000
T0 = 5_000 * S
NPROCS = 4
NGOROUTINES = 32
REASONS = ("", "chan receive", "sync.Mutex.Lock", "sleep", "select", "IO wait")
STACKS = {
    1: ("runtime.goexit", "main.worker", "main.(*Cache).Get", "sync.(*Mutex).Lock",
        "internal/sync.(*Mutex).lockSlow"),
    2: ("runtime.goexit", "main.flusher", "main.(*Log).Flush", "sync.(*Mutex).Lock",
        "internal/sync.(*Mutex).lockSlow"),
    3: ("runtime.goexit", "net/http.(*conn).serve", "main.handler", "sync.(*RWMutex).Lock"),
}

HEADER = Header(
    pid=4242, exe="/srv/bin/demo", go_version="go1.27.3", gomaxprocs=NPROCS, mode="full",
    start_ns=T0, wall_start=1_767_000_000.0, wait_reasons=REASONS,
)


def events(duration_ns: int = 8 * S, seed: int = 7) -> list[EventTuple]:
    rng = random.Random(seed)
    out: list[EventTuple] = []
    end = T0 + duration_ns
    runq: list[deque[tuple[int, int]]] = [deque() for _ in range(NPROCS)]  # (ready at, goid)
    wakeups: list[tuple[int, int, int]] = []  # (ts, goid, reason)
    for g in range(1, NGOROUTINES + 1):
        out.append((T0, Kind.GO_CREATE, g % NPROCS, 0, g, 1 if g > 1 else 0, 0))
        runq[g % NPROCS].append((T0, g))
    procs = [(T0 + p * 10 * US, p) for p in range(NPROCS)]
    heapq.heapify(procs)
    stw = [(T0 + 3 * S, 400 * US), (T0 + 6 * S, 900 * US)]
    while procs:
        t, p = heapq.heappop(procs)
        if t >= end:
            continue
        if stw and t >= stw[0][0]:
            start, length = stw.pop(0)
            out.append((start, Kind.STW_START, p, 100 + p, 0, 1, 0))
            out.append((start + length, Kind.STW_END, p, 100 + p, 0, 1, length))
            t = start + length
        m = 100 + p
        while wakeups and wakeups[0][0] <= t:
            wt, g, reason = heapq.heappop(wakeups)
            out.append((wt, Kind.READY, p, m, g, 0, reason))
            runq[rng.randrange(NPROCS)].append((wt, g))
        out.append((t, Kind.FIND_RUNNABLE, p, m, 0, len(runq[p]), 0))
        t += rng.randrange(5, 200) * US
        if not runq[p]:
            victim = max(range(NPROCS), key=lambda v: len(runq[v]))
            if len(runq[victim]) > 1:
                n = len(runq[victim]) // 2
                for _ in range(n):
                    runq[p].append(runq[victim].pop())
                out.append((t, Kind.STEAL, p, m, 0, victim, n))
            else:
                out.append((t, Kind.STEAL, p, m, 0, victim, 0))
                heapq.heappush(procs, (t + rng.randrange(1, 30) * MS, p))  # idle a while
                continue
        ready_at, g = runq[p].popleft()
        t = max(t, ready_at)  # never run a G before the event that made it runnable
        out.append((t, Kind.EXECUTE, p, m, g, 0, len(runq[p])))
        t += rng.randrange(100, 8000) * US
        what = rng.random()
        if what < 0.15:
            out.append((t, Kind.PREEMPT_REQ, p, m, g, 0, 0))
            out.append((t + 20 * US, Kind.PREEMPTED, p, m, g, 1, 0))
            t += 20 * US
            runq[p].append((t, g))
        elif what < 0.3:
            out.append((t, Kind.SYSCALL_ENTER, p, m, g, 0, 0))
            t += rng.randrange(50, 3000) * US
            out.append((t, Kind.SYSCALL_EXIT, p, m, g, 0, 0))
            t += rng.randrange(10, 500) * US
            out.append((t, Kind.PARK, p, m, g, 5, 0))
            heapq.heappush(wakeups, (t + rng.randrange(1, 50) * MS, g, 5))
        else:
            reason = rng.choice((1, 1, 1, 2, 3, 4, 5))
            if reason == 2:
                stack = rng.choice((1, 1, 2, 3))
                wait = rng.randrange(20, 3000) * US
                out.append((t + wait, Kind.MUTEX_ADDR, p, m, g, 0xC000010000 + 64 * stack,
                            int(LockKind.MUTEX)))
                out.append((t + wait, Kind.MUTEX, p, m, g, wait, stack))
            out.append((t, Kind.PARK, p, m, g, reason, 0))
            heapq.heappush(wakeups, (t + rng.randrange(2_000, 80_000) * US, g, reason))
        heapq.heappush(procs, (t, p))
    out.sort(key=lambda e: e[0])
    return out


def snapshots(ticks: int, every_ns: int = 250 * MS, first_ns: int = 6_500 * MS) -> list[Snapshot]:
    """Snapshots of the Model at T0+first_ns, then every ``every_ns`` (like a live source)."""
    evs = events(first_ns + ticks * every_ns + S)
    model = Model(HEADER)
    model.feed(Batch(events=[], stacks=dict(STACKS)))
    out = []
    i = 0
    for k in range(ticks):
        cut = T0 + first_ns + k * every_ns
        j = i
        while j < len(evs) and evs[j][0] <= cut:
            j += 1
        model.feed(Batch(events=evs[i:j]))
        model.flush()
        out.append(snapshot_with_findings(model))
        i = j
    return out
