"""The census's wait stacks against the program's own view: Go's
``/debug/pprof/goroutine?debug=2`` taken just before and just after one census walk of the
`stacks` workload (goroutines parked in chan receive through nested and inlined calls, select,
sync.Mutex, time.Sleep, sync.Cond, WaitGroup, RWMutex). Grouped as the census groups them
(wait reason, functions leaf first), the goroutines parked alike in both of Go's dumps must
be in the census's groups with the same stacks. No BPF: the census only reads
/proc/PID/mem."""

from __future__ import annotations

import socket
import subprocess
from collections import Counter

import pytest

from gmpmon.binary import load_pid
from gmpmon.capture.census import Census
from gmpmon.capture.censusstacks import census_unwinder
from gmpmon.capture.gosites import GoSites
from gmpmon.capture.targetmem import TargetMemory
from gmpmon.events import EventTuple
from gmpmon.model.runtime import RuntimePart
from tests import gotargets
from tests.goroutine_oracle import fetch, parse

CASES = [("1.27", "default"), ("1.19", "stripped"), ("1.21", "pie")]
PORTS = range(18410, 18430)  # this helper's range


def free_port() -> int:
    for port in PORTS:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port in 18410-18429")


Key = tuple[str, tuple[str, ...]]  # (wait reason, functions leaf first)


def census_groups(pid: int) -> Counter[Key]:
    info = load_pid(pid)
    mem = TargetMemory(pid)
    try:
        census = Census(info, mem, sites=GoSites(info), unwind=census_unwinder(info, mem))
        assert census.wait_stacks is not None, census.missing
        events: list[EventTuple] = []
        stacks: dict[int, tuple[str, ...]] = {}
        census.walk(events, stacks)
    finally:
        mem.close()
    part = RuntimePart(info.g_status, info.wait_reasons, stacks)
    table = dict(part.handlers())
    for e in events:
        if e[1] in table:
            table[e[1]](e)
    view = part.view()
    assert view is not None and view.census is not None and view.census.stacks is not None
    assert not view.census.cut
    got: Counter[Key] = Counter()
    for w in view.census.stacks:
        if not w.system:
            got[(w.reason, w.leaf_first)] += w.count
    return got


@pytest.mark.parametrize(("version", "mode"), CASES, ids=[f"go{v}-{m}" for v, m in CASES])
def test_census_wait_stacks_match_the_programs_own_dump(version: str, mode: str) -> None:
    exe = gotargets.build("stacks", go=version, mode=mode)
    port = free_port()
    p = subprocess.Popen([str(exe), "-port", str(port), "-running", "0"],
                         stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None
        for line in p.stdout:
            if line.strip() == "ready":
                break
        url = f"http://127.0.0.1:{port}/debug/pprof/goroutine?debug=2"
        before = parse(fetch(url))
        ours = census_groups(p.pid)
        after = parse(fetch(url))
    finally:
        p.kill()
        p.wait()
    theirs: Counter[Key] = Counter()
    for goid, (state, funcs) in after.items():
        # parked alike in both of Go's dumps, and parked (the census unwinds waiting Gs only:
        # not running, runnable or in a syscall)
        if before.get(goid) != (state, funcs) or state in ("running", "runnable", "syscall"):
            continue
        theirs[(state, tuple(funcs))] += 1
    parked = sum(theirs.values())
    assert parked >= 7 * 20, theirs
    # every group of Go's dump is in the census, at least as large (the census also counts
    # the goroutines that moved while Go's dumps were taken)
    found = sum(min(n, ours.get(key, 0)) for key, n in theirs.items())
    missing = {k: (n, ours.get(k, 0)) for k, n in theirs.items() if ours.get(k, 0) < n}
    print(f"go{version} {mode}: {parked} parked in Go's dumps, {found} in the census's groups"
          f" ({100 * found / parked:.1f}%)")
    assert found >= 0.99 * parked, (missing, ours)
