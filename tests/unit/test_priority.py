"""The attach's raised priority (gmpmon/priority.py): realtime for a bounded time, on every
thread it reached, and never passed on to the program `gmpmon run` starts."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator

import pytest

from gmpmon import priority
from gmpmon.commands.run import spawn_stopped

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="raising priority needs root")


def policy(tid: int) -> int:
    return os.sched_getscheduler(tid)


def nice(tid: int) -> int:
    return os.getpriority(os.PRIO_PROCESS, tid)


@contextlib.contextmanager
def a_thread() -> Iterator[int]:
    """A thread that waits until the block ends; its native id."""
    tids: list[int] = []
    started, done = threading.Event(), threading.Event()

    def worker() -> None:
        tids.append(threading.get_native_id())
        started.set()
        done.wait(10)

    t = threading.Thread(target=worker)
    t.start()
    started.wait(5)
    try:
        yield tids[0]
    finally:
        done.set()
        t.join()


@pytest.fixture(autouse=True)
def usual_priority(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("GMPMON_NO_BOOST", raising=False)
    yield
    priority.restore(0)  # whatever a failed test left


def test_boost_is_realtime_until_restore_for_every_thread_it_reached() -> None:
    me = threading.get_native_id()
    before = nice(me)
    old = priority.boost()
    assert old == before
    assert policy(me) == os.SCHED_RR and nice(me) == priority.BOOST_NICE
    with a_thread() as tid:
        assert policy(tid) == os.SCHED_RR  # inherited, and ended below with the rest
        priority.restore(old)
        for t in (me, tid):
            assert policy(t) == os.SCHED_OTHER and nice(t) == before


def test_the_watchdog_ends_realtime_on_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(priority, "RT_MAX_S", 0.2)
    me = threading.get_native_id()
    old = priority.boost()
    assert policy(me) == os.SCHED_RR
    deadline = time.monotonic() + 5
    while policy(me) != os.SCHED_OTHER and time.monotonic() < deadline:
        time.sleep(0.02)
    assert policy(me) == os.SCHED_OTHER
    assert nice(me) == priority.BOOST_NICE  # still raised, not realtime, until restore
    priority.restore(old)
    assert nice(me) == old


def test_a_boost_on_every_thread_reaches_threads_already_running() -> None:
    with a_thread() as tid:
        old = priority.boost(every_thread=True)
        assert policy(tid) == os.SCHED_RR and nice(tid) == priority.BOOST_NICE
        priority.restore(old)
        assert policy(tid) == os.SCHED_OTHER and nice(tid) == old


def test_the_program_gmpmon_run_starts_gets_the_usual_priority(
        monkeypatch: pytest.MonkeyPatch) -> None:
    before = nice(0)
    monkeypatch.setattr(priority, "BOOSTED", priority.boost())
    pid, go_w, st_r = spawn_stopped(["/bin/sleep", "5"])
    try:
        os.write(go_w, b"x")
        assert os.read(st_r, 100) == b""  # exec'd
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        # stat fields 19 (nice) and 41 (policy), counted from the one after ")" as 3
        assert int(fields[19 - 3]) == before
        assert int(fields[41 - 3]) == os.SCHED_OTHER
    finally:
        os.kill(pid, 9)  # ours: spawned above
        os.waitpid(pid, 0)
        os.close(go_w)
        os.close(st_r)
        priority.restore(priority.BOOSTED)


def test_a_goroutine_dump_is_boosted_only_with_fast() -> None:
    """attach and run start boosted; a dump's CPU is the target's, so only --fast boosts it
    (docs/goroutines.md#cost)."""
    from gmpmon.cli import _boosted

    assert _boosted(["attach", "123"]) and _boosted(["run", "--", "x"])
    assert not _boosted(["goroutines", "123"])
    assert not _boosted(["goroutines", "123", "--json", "--group"])
    assert _boosted(["goroutines", "123", "--fast"])
    assert not _boosted(["ps", "--fast"])
