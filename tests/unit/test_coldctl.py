"""Sample mode's controller: the budget's controller process with no hot site and no window
(``cold_only``), which governs the cold sync.Mutex probes only (gmpmon.capture.coldgov).
These run the real controller code on file descriptors that are not BPF objects: whatever
it would do to a map or a link fails, so what it does not do is proven by its not failing."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from gmpmon.capture.budget import BudgetPlanner
from gmpmon.capture.hotctl import Controller, HotConfig
from gmpmon.capture.hotparent import LAZY_MIN_RATE, LAZY_STEP_NS, HotControl, LazyGovernor
from gmpmon.probetable import HANDLERS


@pytest.fixture
def not_bpf() -> Iterator[int]:
    fd = os.open("/dev/null", os.O_RDONLY)
    yield fd
    os.close(fd)


def config(fd: int, cold_only: bool, mutex: bool = True) -> HotConfig:
    return HotConfig(
        prog_fd=fd, hits_fd=fd, cfg_fd=fd, path="/bin/true", offsets=[] if cold_only else [16],
        cookies=[] if cold_only else [0], hot_ids=[] if cold_only else [0],
        n_handlers=len(HANDLERS), pid=os.getpid(), budget_pct=1.0, window_ns=200_000_000,
        period_ns=1_000_000_000, hit_cost_s=0.7e-6, slow_start=True,
        mutex_link_fd=-1, mutex_offsets=[32, 48] if mutex else [],
        mutex_cookies=[1, 2] if mutex else [], cold_only=cold_only)


@pytest.mark.parametrize("cold_only", [True, False])
def test_a_burst_opens_a_window_only_where_there_are_hot_sites(not_bpf: int,
                                                                cold_only: bool) -> None:
    """Sample mode's triggers only dump: a burst sent to its controller (it has no hot site)
    is ignored, not a window on nothing. Default mode's controller tries to open one (here
    on a map that is not one, which fails)."""
    out = io.StringIO()
    ctl = Controller(config(not_bpf, cold_only), out)
    ctl.planner = BudgetPlanner(1.0, 0.7e-6, 1.0, 0.2)
    if cold_only:
        assert ctl.command(["burst", "500", "latency"])
        assert ctl.link < 0 and out.getvalue() == ""
    else:
        with pytest.raises(OSError):
            ctl.command(["burst", "500", "latency"])


def wait_failure(ctl: HotControl) -> str:
    end = time.monotonic() + 20
    while time.monotonic() < end:
        ctl.poll()
        why = ctl.failure()
        if why is not None:
            return why
        time.sleep(0.05)
    raise AssertionError("the controller neither failed nor said so")


@pytest.mark.parametrize(("cold_only", "mutex"), [(True, True), (False, True), (False, False)])
def test_a_controller_that_stops_says_what_is_lost(not_bpf: int, cold_only: bool,
                                                   mutex: bool) -> None:
    """The real controller process, handed fds that are not BPF objects, stops at its first
    map update. What the user is told depends on what it held: sample mode's has no window
    to lose, but the sync.Mutex sites' link was its own (its exit closed it)."""
    ctl = HotControl(config(not_bpf, cold_only, mutex))
    try:
        why = wait_failure(ctl)
    finally:
        ctl.stop()
    assert ctl.name == ("cold-probe governor" if cold_only else "hot-window controller")
    assert ("no hot window opens" in why) is not cold_only, why
    assert ("no sync.Mutex contention is traced" in why) is mutex, why
    assert why.endswith("from here on"), why


@pytest.fixture
def busy() -> Iterator[int]:
    """A process that burns a CPU (the target whose CPU time the lazy start reads)."""
    p = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    yield p.pid
    p.kill()
    p.wait()


@pytest.mark.parametrize(("per_s", "budget", "due"), [(2000, 1.0, True), (60, 10.0, False),
                                                      (LAZY_MIN_RATE / 2, 1.0, False)])
def test_sample_modes_governor_starts_when_the_mutex_hits_warrant_it(
        busy: int, per_s: float, budget: float, due: bool) -> None:
    """LazyGovernor: the lockSlow entries counted in a step (at CONTENTION_COST_S each) against
    LAZY_SHARE of the cold share of the budget, of what the target's CPU did meanwhile (a real
    busy process: ~1 CPU, whatever this machine lets it have). 2,000 a second pass 1% of
    even a whole CPU; 60 a second do not pass 10% of the 0.03 CPU-s it gets at the very least;
    under LAZY_MIN_RATE none starts it, whatever it costs."""
    lock_enter = HANDLERS.index("lock_enter")
    t0 = time.monotonic_ns()
    lazy = LazyGovernor(lambda: None, busy, budget, t0)
    lazy.count([(lock_enter + 1, 10**6)])  # the exits and other probes do not count
    assert not lazy.due(t0 + LAZY_STEP_NS // 2)  # not a whole step yet
    time.sleep(0.6)
    dt = (time.monotonic_ns() - t0) * 1e-9
    lazy.count([(lock_enter, int(per_s * dt))])
    assert lazy.due(time.monotonic_ns()) is due
    assert lazy.entries == 0  # a new step starts
