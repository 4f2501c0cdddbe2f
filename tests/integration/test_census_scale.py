"""The goroutine census whole at scale (issue 25): the `scale` workload (64 Ps, 64 wakers
waking random goroutines on 2 CPUs) with 100,000 parked goroutines, and 1,000,000 (slow).
Every parked goroutine sits in chan receive on its own channel, so the workload's own count
is -g: the census must count >= 99.5% of them, in one walk that is not cut. Its walk runs in
a thread, as capture's census loop runs it (capture/runtime_sources.py)."""

from __future__ import annotations

import subprocess
import threading

import pytest

from gmpmon import priority
from gmpmon.binary import load_pid
from gmpmon.capture.census import Census
from gmpmon.capture.targetmem import TargetMemory
from gmpmon.events import EventTuple, Kind
from tests import gotargets


def census_of_scale(n: int) -> tuple[int, int, float, float]:
    exe = gotargets.build("scale", go="1.27", mode="default")
    p = subprocess.Popen([str(exe), "-g", str(n), "-t", "600s"], stdout=subprocess.PIPE,
                         text=True)
    try:
        assert p.stdout is not None
        for line in p.stdout:
            if line.strip() == "ready":
                break
        info = load_pid(p.pid, readers_only=True)
        mem = TargetMemory(p.pid)
        census = Census(info, mem)
        events: list[EventTuple] = []
        def walk() -> None:  # as the census thread does (RuntimeSources._census_loop)
            priority.nice_this_thread()
            census.walk(events, {})

        t = threading.Thread(target=walk)
        t.start()
        t.join()
        mem.close()
    finally:
        p.kill()
        p.wait()
    recv = [e for e in events if e[1] == Kind.CENSUS_STATE and e[5] & 0xFFFF == 4]
    end = next(e for e in events if e[1] == Kind.CENSUS_END)
    reasons = info.wait_reasons
    chan = sum(e[6] for e in recv if reasons[(e[5] >> 16) & 0xFFFF] == "chan receive")
    return chan, end[6], census.last_duration_s, census.last_cpu_s


@pytest.mark.parametrize("n", [100_000, pytest.param(1_000_000, marks=pytest.mark.slow)])
def test_census_is_whole_at_scale(n: int) -> None:
    chan, cut, wall, cpu = census_of_scale(n)
    print(f"{n}: counted {chan} in chan receive, walk {wall:.2f} s ({cpu:.2f} CPU-s)")
    assert cut == 0, f"walk cut ({cut}) after {wall:.1f} s"
    assert chan >= 0.995 * n, chan
