"""The hot-probe controller: a small process of its own that attaches and detaches the hot
probes on time, whatever the model, the ring reader or the TUI are doing.

It shares no GIL with them: the parent (capture) hands it the already loaded BPF program and
two maps by fd, and the child does everything about windows itself, by raw bpf(2) syscalls:

- at start, it calibrates one emulated hit (gmpmon.capture.calibrate) and turns on the
  kernel's BPF run-time statistics (BPF_ENABLE_STATS: undone when it exits);
- every ACCOUNT_S (ACCOUNT_IDLE_S between windows) it reads the probe hit counters, the
  program's run time and the target's CPU time, and charges the cost to the budget
  (gmpmon.capture.budget); every CONTENTION_S it reads how busy the host's CPUs are
  (/proc/stat) beside gmpmon's own CPU;
- at each period's start it opens a window as long as the budget allows (possibly none),
  and closes it at its planned end. It sleeps in select() until the next deadline; nothing
  else runs in it, so it wakes on time. A window found open more than OVERSTAY_NS past its
  plan anyway (the machine stalled it) is closed at once and reported.
- a trigger (a ``burst`` line from the parent) opens a window of the burst's length now, if
  the budget's horizon allows it; if a window is open, it is extended to the burst's end.

The parent reads its stdout, one line per fact:
``W 1 <ts> <planned_ns> <burst>`` before a window is attached (so any hot record in the ring
buffer is newer than the WINDOW event that announces it), ``W 3 <ts> <link_ns>`` once every
hot site is in (registering them took link_ns), ``W 2 <ts> <burst_ns> <burst>`` when
a burst extends the open window to ``ts + burst_ns``, ``W 0 <ts> <overstay_ns>`` before
it is detached, ``C <json>`` a CostStatus every ACCOUNT_S, ``CAL <seconds>``, ``E <message>``.
stdin carries the JSON config (one line), then ``burst <ms> <name>``, ``watch <seconds>``
(gmpmon's own CPU per hot hit, measured by the parent: see budget.py), ``prior <hits/s> <Ps>``
(the hot-hit rate the runtime's own counters say, and how many Ps run: see budget.py)
and ``quit``. On EOF of
stdin (the parent died) it detaches and exits; its own exit closes the link in any case.

In sample mode (``cold_only``) the same process runs with no hot site: it opens no window
and takes no burst, and only governs the cold sync.Mutex probes under the budget (coldgov);
it is started only once their hits warrant it (hotparent.LazyGovernor).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import select
import signal
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gmpmon.capture import bpfsys
from gmpmon.capture.budget import BudgetPlanner, CostStatus
from gmpmon.capture.coldgov import MUTEX_HANDLERS, RECORDS_PER_WAIT, ColdGovernor, ColdStep
from gmpmon.probetable import HANDLERS as HANDLER_NAMES

if TYPE_CHECKING:
    pass

ACCOUNT_S = 0.1
ACCOUNT_IDLE_S = 0.5  # ... when no window is open or just closed (ACCOUNT_BUSY_S)
ACCOUNT_BUSY_S = 0.5
GUARD_S = 0.01  # while a window is open: how often its cost so far is checked
GUARD_OVER = 1.5  # a window whose cost reaches this x its planned cost is closed early
OVERSTAY_NS = 50_000_000
CLK_TCK = os.sysconf("SC_CLK_TCK")
NCPU = os.cpu_count() or 1  # /proc/stat's first line sums every CPU of the host
CONTENTION_S = 0.5  # /proc/stat counts in 10-ms ticks: 100 of them on 2 CPUs, 1% steps
# After the probe window, no budgeted window opens before the parent has said what a hot hit
# costs gmpmon's own threads (``watch``), for at most this long: sized without it, the first
# full window on net/http under wrk ran up ~19 s of the budget's earnings in debt.
WATCH_WAIT_NS = 1_500_000_000
DEBUG = os.environ.get("GMPMON_DEBUG_HOTCTL", "") not in ("", "0")
# Before a window has measured them, how hot each handler is (higher: hotter): the busiest go
# into a link last (Controller.site_order).
STATIC_HEAT = {"execute": 9, "findrunnable": 9, "gopark": 8, "ready": 8, "wake_sched": 7,
               "pidleput": 6, "steal_try": 6, "sysenter": 5, "sysexit": 5, "gocreate": 4,
               "goexit": 4, "sema_enter": 3, "sema_exit": 3, "gosched": 2, "gosched_m": 2,
               "steal_got": 2}


@dataclass
class HotConfig:
    prog_fd: int
    hits_fd: int
    cfg_fd: int
    path: str  # the binary the hot sites are in
    offsets: list[int]  # file offsets of the hot sites
    cookies: list[int]  # their attach cookies (Site.cookie: the handler id, an exit's
    #                     condition in the high half)
    hot_ids: list[int]  # handler ids whose hits are hot
    n_handlers: int
    pid: int
    budget_pct: float
    window_ns: int  # the longest window
    period_ns: int
    hit_cost_s: float = 0.0  # 0: calibrate
    slow_start: bool = False  # no realtime priority (tests)
    prior: bool = False  # the parent reads the runtime's counters and sends ``prior`` lines
    # The sync.Mutex sites' link, handed over by the parent (-1: none), and the sites to link
    # them again after a pause (coldgov.py: their duty)
    mutex_link_fd: int = -1
    mutex_offsets: list[int] = dataclasses.field(default_factory=list)
    mutex_cookies: list[int] = dataclasses.field(default_factory=list)
    # Sample mode: no hot site, no window, no burst; the controller governs the cold probes
    # only (coldgov.py), under the same budget
    cold_only: bool = False


def target_cpu_s(pid: int) -> float:
    """utime + stime of the whole target process (/proc/PID/stat, every thread)."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def host_cpu_s() -> tuple[float, float]:
    """(busy, all) CPU seconds of the host since boot, every CPU (/proc/stat: busy is all
    but idle and iowait)."""
    with open("/proc/stat", "rb") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    total = sum(ticks[:8])  # guest time is counted in user already
    return (total - ticks[3] - ticks[4]) / CLK_TCK, total / CLK_TCK


def contention(d_busy: float, d_all: float, d_gmpmon: float, ncpu: int = 1) -> float | None:
    """What a CPU-second of gmpmon's takes from the others: the chance that no CPU is idle
    when gmpmon runs. Of the CPU time not gmpmon's, others used a share u; with each of the
    host's ``ncpu`` CPUs busy that often, all are busy about u ** ncpu of the time (0 on an
    idle host, 1 on a saturated one). Charging u itself overcharged a target that leaves a
    CPU free: the ping-pong (~1 CPU of 2, u ~0.5) lost 2.3% per CPU-second at --budget 10
    where the estimate said 5.05%. None: nothing measured."""
    room = d_all - d_gmpmon
    if room <= 0:
        return None
    u = min(max((d_busy - d_gmpmon) / room, 0.0), 1.0)
    return u ** max(ncpu, 1)


class Controller:
    """The child's state: one window at a time, timed by its own clock."""

    def __init__(self, cfg: HotConfig, out: object) -> None:
        self.cfg = cfg
        self.out = out
        self.hits = bpfsys.PerCpuU64Array(cfg.hits_fd)
        self.link = -1
        self.gen = 0
        self.planned_end = 0
        self.opened = 0
        self.burst = ""
        self.cost_cap_s = 0.0  # the open window is closed early once it has cost this much
        self.cut_short = 0  # windows closed early by that guard
        self.overstays = 0
        self.worst_overstay = 0
        self.stats_fd = -1
        self.planner: BudgetPlanner | None = None
        self._prev_hits = [0] * cfg.n_handlers
        self._hot_at_open = 0
        self._prev_run: tuple[int, int] | None = None
        self._prev_cpu = 0.0
        self._prev_t = 0.0
        self._prev_host: tuple[float, float, float] | None = None  # busy, all, gmpmon's
        self._next_host = 0.0
        self.watch_seen = False  # the parent has measured gmpmon's CPU per hot hit
        self.contention_seen = False
        self.prior_seen = False
        self._prior_at_open = -1.0
        self._linked = (0, 0)  # when the open window's link was in, and the hot hits then
        self._open_totals: list[int] = []
        self._last_window_hits: dict[int, int] = {}  # handler -> hits in the last window
        self.gov = ColdGovernor(cfg.budget_pct)  # the cold sync.Mutex probes' sampling
        self._lock_ids = [HANDLER_NAMES.index(h) for h in MUTEX_HANDLERS]
        self.mutex_link = cfg.mutex_link_fd
        self.mutex_gen = 0
        self._mutex_since = time.monotonic()  # linked since (when linked)
        self._mutex_linked_s = 0.0  # linked time not yet accounted
        self._mutex_pause_at = 0  # ns: when this period's linked share ends (0: never)

    def say(self, line: str) -> None:
        self.out.write(line + "\n")  # type: ignore[attr-defined]
        self.out.flush()  # type: ignore[attr-defined]

    # --- setup ---------------------------------------------------------------------------

    def setup(self) -> None:
        if not self.cfg.slow_start:
            try:  # wake on time on a saturated machine; the work per wake-up is tiny
                os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
            except OSError:
                with contextlib.suppress(OSError):
                    os.setpriority(os.PRIO_PROCESS, 0, -10)
        cost = self.cfg.hit_cost_s
        if cost <= 0:
            from gmpmon.capture.calibrate import calibrate_hit_cost

            cost = calibrate_hit_cost()
        self.say(f"CAL {cost:.9f}")
        try:
            self.stats_fd = bpfsys.enable_run_time_stats()
        except OSError:
            self.stats_fd = -1
        self.planner = BudgetPlanner(self.cfg.budget_pct, cost, self.cfg.period_ns * 1e-9,
                                     self.cfg.window_ns * 1e-9)
        bpfsys.array_set_u32(self.cfg.cfg_fd, 2, self.gov.every)
        self._prev_t = time.monotonic()
        self._prev_cpu = target_cpu_s(self.cfg.pid)
        self._prev_run = bpfsys.prog_run_stats(self.cfg.prog_fd) if self.stats_fd >= 0 else None
        self.host_contention()  # the first reading: contention is known from CONTENTION_S on
        self._next_host = self._prev_t + CONTENTION_S
        self._prev_hits = self._totals()

    # --- windows -------------------------------------------------------------------------

    def debug(self, what: str) -> None:
        """GMPMON_DEBUG_HOTCTL=1: the planner's state at each decision, on stderr."""
        if DEBUG and self.planner is not None:
            p = self.planner
            print(f"hotctl {time.monotonic():.3f} {what}: prior {p.prior_rate:.0f} "
                  f"now {p.prior_now():.0f} scale {p.scale:.3f} rate {p.rate():.0f} "
                  f"hit {p.per_hit_s() * 1e6:.2f}us (watch {p.watch_s_per_hit * 1e6:.2f}) "
                  f"credit {p.credit_s * 1e3:.2f}ms cpu {p.cpu_rate:.2f} link "
                  f"{p.link_s * 1e3:.1f}ms tail {p.tail_s * 1e3:.1f}ms cost {p.cost_s * 1e3:.1f}ms",
                  file=sys.stderr, flush=True)

    def open_window(self, window_ns: int, burst: str = "") -> None:
        assert self.link < 0
        self.debug(f"open {window_ns / 1e6:.1f}ms")
        self.gen += 1
        bpfsys.array_set_u32(self.cfg.cfg_fd, 0, self.gen)
        bpfsys.array_set_u32(self.cfg.cfg_fd, 1, 0)  # window-only kinds count (gmpmon.bpf.c)
        self._open_totals = self._totals()
        self._hot_at_open = sum(self._open_totals[i] for i in self.cfg.hot_ids)  # before the
        # link: its way in is hit too
        now = time.monotonic_ns()
        self.say(f"W 1 {now} {window_ns} {burst or '-'}")
        offsets, cookies = self.site_order()
        self.link = bpfsys.link_uprobe_multi(self.cfg.prog_fd, self.cfg.path, offsets, cookies)
        self._linked = (time.monotonic_ns(), self._hot_total())
        # every hot site is in from here on: the window's events are whole (W 1 .. here,
        # they come from the sites already in only)
        self.say(f"W 3 {self._linked[0]} {self._linked[0] - now}")
        # Registering the uprobes takes 7-15 ms here, 8-60 ms on a loaded machine and ~250 ms
        # on 64 busy threads (the kernel patches each site in turn under the target's mm
        # lock, and the first ones fire at once): the plan counts from before the first is
        # in. Counted from when all were in, the probes' own records showed windows 10-30 ms
        # longer than planned (test_duty_cycle_measured_by_the_probes_own_hits).
        self.opened = now
        self.planned_end = now + window_ns
        self.burst = burst
        assert self.planner is not None
        self._prior_at_open = self.planner.prior_now()
        self.cost_cap_s = self.burst_cap() if burst else self.window_cap(window_ns * 1e-9)

    def site_order(self) -> tuple[list[int], list[int]]:
        """The hot sites, least hit first: the kernel puts a link's sites in one by one in
        this order, and each fires as soon as it is in, so the busiest go in last (on 64
        busy threads the way in took ~250 ms and was most of a window's hits). Ordered by
        each handler's hits in the last window, else by STATIC_HEAT."""
        last = self._last_window_hits
        heat = {h: (last.get(h, -1), STATIC_HEAT.get(HANDLER_NAMES[h], 0)
                    if h < len(HANDLER_NAMES) else 0) for h in self.cfg.hot_ids}
        pairs = sorted(zip(self.cfg.offsets, self.cfg.cookies, strict=True),
                       key=lambda oc: heat[oc[1] & 0xFFFFFFFF])
        return [o for o, _ in pairs], [c for _, c in pairs]

    def window_cap(self, window_s: float) -> float:
        """A budgeted window may spend 1.5x its estimate, and never more than the credit it
        was sized from plus one period's earnings: a wrong rate estimate (a starved first
        window, a target that speeds up) cannot run it far over the budget."""
        p = self.planner
        assert p is not None
        hard = max(p.credit_s, 0.0) + p.budget * max(p.cpu_rate, 0.1) * p.period_s
        return min(GUARD_OVER * self.planned_cost(window_s), hard)

    def burst_cap(self) -> float:
        """A burst may spend what the budget's horizon lends (see BudgetPlanner.allow_burst),
        however far the rate it was sized with is off."""
        p = self.planner
        assert p is not None
        return max(p.credit_s, 0.0) + p.budget * max(p.cpu_rate, 0.1) * p.horizon_s

    def planned_cost(self, window_s: float) -> float:
        """What a window of this length should cost; before the hot rate is known, one
        period's budget (of at least one CPU's time)."""
        p = self.planner
        assert p is not None
        if p.rate() < 0:
            return p.budget * max(p.cpu_rate, 1.0) * p.period_s
        return p.window_cost_s(window_s)

    def guard(self) -> None:
        """Close the open window early if its hits already cost more than planned: the rate
        it was sized with was wrong (the target sped up, or the first window's guess)."""
        assert self.planner is not None
        cost = (self._hot_total() - self._hot_at_open) * self.planner.per_hit_s()
        if cost > self.cost_cap_s:
            self.cut_short += 1
            self.close_window()

    def close_window(self) -> None:
        if self.link < 0:
            return
        now = time.monotonic_ns()
        over = max(0, now - self.planned_end)
        if over > OVERSTAY_NS:
            self.overstays += 1
        self.worst_overstay = max(self.worst_overstay, over)
        self.say(f"W 0 {now} {over}")
        bpfsys.array_set_u32(self.cfg.cfg_fd, 1, 1)
        at, hits_at = self._linked
        inside = (self._hot_total() - hits_at, (now - at) * 1e-9)  # before the way out
        # The kernel removes the sites first, then waits for RCU (~30 ms, up to 1 s on a
        # loaded machine): hits stop early in the close, which is not counted as overstay.
        # Removing the sites one by one takes up to ~40 ms under load (the probes' own
        # records, test_duty_cycle_measured_by_the_probes_own_hits).
        t_close = time.monotonic_ns()
        os.close(self.link)
        self.link = -1
        after = self._totals()  # one read: the sites are out, nothing moves them now
        self._last_window_hits = {h: after[h] - self._open_totals[h] for h in self.cfg.hot_ids}
        hits = sum(after[i] for i in self.cfg.hot_ids) - self._hot_at_open
        assert self.planner is not None
        self.planner.window_done(hits, (now - self.opened) * 1e-9,
                                 self._prior_at_open, inside, (at - self.opened) * 1e-9)
        if DEBUG:
            self.debug(f"close() took {(time.monotonic_ns() - t_close) / 1e6:.1f}ms")
            self.debug(f"closed after {(now - self.opened) / 1e6:.1f}ms, inside {inside[0]} "
                       f"hits in {inside[1] * 1e3:.1f}ms, {hits} in all")

    def _totals(self) -> list[int]:
        """Every handler's hits, summed over CPUs: one batch lookup."""
        return self.hits.totals(self.cfg.n_handlers)

    def _hot_total(self) -> int:
        t = self._totals()
        return sum(t[i] for i in self.cfg.hot_ids)

    # --- accounting ----------------------------------------------------------------------

    def account(self) -> None:
        assert self.planner is not None
        now = time.monotonic()
        try:
            cpu = target_cpu_s(self.cfg.pid)
        except OSError:
            cpu = self._prev_cpu
        totals = self._totals()
        prev, self._prev_hits = self._prev_hits, totals
        hits = sum(totals) - sum(prev)
        hot = sum(totals[i] - prev[i] for i in self.cfg.hot_ids)
        if now >= self._next_host:
            self._next_host = now + CONTENTION_S
            c = self.host_contention()
            self.contention_seen |= c is not None
            self.planner.set_watch(None, c)
        run_ns: int | None = None
        runs = 0
        if self._prev_run is not None:
            cur = bpfsys.prog_run_stats(self.cfg.prog_fd)
            if cur is not None:
                run_ns, runs = cur[0] - self._prev_run[0], cur[1] - self._prev_run[1]
                self._prev_run = cur
        entries, mhits = (totals[i] - prev[i] for i in self._lock_ids)
        mhits += entries
        dt, dcpu = now - self._prev_t, max(cpu - self._prev_cpu, 0.0)
        charged = self.planner.account(dt, dcpu, hits, run_ns, runs, hot,
                                       RECORDS_PER_WAIT * entries / self.gov.every)
        if DEBUG and hits:
            self.debug(f"account {hits} hits ({hot} hot, {entries} lockSlow), bpf {run_ns} ns"
                       f" / {runs} runs: {charged * 1e3:.2f}ms")
        linked = self.mutex_linked_s(now)
        self.gov.elapsed(dt, linked if self.cfg.mutex_offsets else dt)
        if hot == 0 and self.link < 0:  # the program's run time is the cold probes' alone
            self.govern(ColdStep(dt, dcpu, hits - hot, entries, run_ns, runs, mhits,
                                 linked if self.cfg.mutex_offsets else -1.0))
        self._prev_t, self._prev_cpu = now, cpu
        self.say("C " + json.dumps(dataclasses.asdict(self.status())))

    def govern(self, step: ColdStep) -> None:
        """The cold sync.Mutex probes' sampling period and duty for what this step cost
        (coldgov)."""
        assert self.planner is not None
        was, duty = self.gov.every, self.gov.duty
        every = self.gov.step(step, self.planner.hit_cost_s, self.planner.watch_s_per_hit)
        if not self.cfg.mutex_offsets:
            self.gov.duty = 1.0  # nothing to pause: sampling only
        if every != was:
            bpfsys.array_set_u32(self.cfg.cfg_fd, 2, every)
        if DEBUG and (every != was or self.gov.duty != duty):
            self.debug(f"mutex traced 1 in {every} (was {was}), linked "
                       f"{self.gov.duty:.0%} of each period, base {self.gov.base_ns:.0f}ns, "
                       f"cold {self.gov.cold_pct() or 0:.2f}%")

    # --- the sync.Mutex sites' duty ------------------------------------------------------

    def mutex_linked_s(self, now: float) -> float:
        """How long the sync.Mutex sites were linked since the last call."""
        s = self._mutex_linked_s
        if self.mutex_link >= 0:
            s += now - self._mutex_since
            self._mutex_since = now
        self._mutex_linked_s = 0.0
        return s

    def mutex_period(self, now_ns: int) -> None:
        """A period starts: link the sync.Mutex sites (if paused) for the governor's duty."""
        if not self.cfg.mutex_offsets:
            return
        if self.mutex_link < 0:
            self.mutex_gen += 1  # a lockSlow entered before the pause pairs with no exit
            bpfsys.array_set_u32(self.cfg.cfg_fd, 3, self.mutex_gen)
            self.mutex_link = bpfsys.link_uprobe_multi(
                self.cfg.prog_fd, self.cfg.path, self.cfg.mutex_offsets, self.cfg.mutex_cookies)
            self._mutex_since = time.monotonic()
        d = self.gov.duty
        self._mutex_pause_at = 0 if d >= 1.0 else now_ns + int(d * self.cfg.period_ns)

    def mutex_pause(self) -> None:
        if self.mutex_link < 0:
            return
        self._mutex_linked_s += time.monotonic() - self._mutex_since
        os.close(self.mutex_link)
        self.mutex_link = -1
        self._mutex_pause_at = 0

    def host_contention(self) -> float | None:
        """The host's contention since the last call (see contention), with gmpmon's CPU
        (the parent process and this one) taken out."""
        try:
            busy, total = host_cpu_s()
            t = os.times()
            mine = target_cpu_s(os.getppid()) + t.user + t.system
        except (OSError, ValueError, IndexError):
            return None
        prev, self._prev_host = self._prev_host, (busy, total, mine)
        if prev is None:
            return None
        return contention(busy - prev[0], total - prev[1], mine - prev[2], NCPU)

    def status(self) -> CostStatus:
        p = self.planner
        assert p is not None
        return CostStatus(
            budget_pct=p.budget_pct, estimated_pct=p.estimated_pct(), recent_pct=p.recent_pct(),
            cost_s=p.cost_s, target_cpu_s=p.target_cpu_s, windows=p.windows,
            covered_s=p.covered_s, hit_cost_s=p.hit_cost_s, bpf_ns_per_hit=p.ns_per_hit,
            overstays=self.overstays, worst_overstay_ns=self.worst_overstay, bursts=p.bursts,
            cut_short=self.cut_short, watch_cost_s=p.watch_cost_s,
            watch_s_per_hit=p.watch_s_per_hit, contention=p.contention,
            mutex_every=self.gov.every, mutex_every_max=self.gov.every_max,
            mutex_sampled_s=self.gov.sampled_s, cold_pct=self.gov.cold_pct(),
            cold_traps_over=self.gov.traps_over, mutex_duty=self.gov.duty,
            mutex_paused_s=self.gov.paused_s,
        )

    # --- the loop ------------------------------------------------------------------------

    def run(self, inp: int) -> None:
        assert self.planner is not None
        period = self.cfg.period_ns
        t0 = time.monotonic_ns()
        next_period = t0
        next_account = t0 + int(ACCOUNT_S * 1e9)
        next_guard = t0
        next_mutex = t0 + period // 2  # its pauses fall between the windows' starts
        buf = b""
        while True:
            now = time.monotonic_ns()
            if self.link >= 0 and now >= self.planned_end:
                self.close_window()
                now = time.monotonic_ns()
            elif self.link >= 0 and now >= next_guard:
                self.guard()
                now = time.monotonic_ns()
                next_guard = now + int(GUARD_S * 1e9)
            if now >= next_account:
                self.account()
                # Every 100 ms around windows; between them only the target's CPU and the
                # cold probes move, and the credit earned is the same read less often.
                busy = self.link >= 0 or now - self.planned_end < int(ACCOUNT_BUSY_S * 1e9)
                next_account = now + int((ACCOUNT_S if busy else ACCOUNT_IDLE_S) * 1e9)
            if self._mutex_pause_at and now >= self._mutex_pause_at:
                self.mutex_pause()
                now = time.monotonic_ns()
            if now >= next_mutex:
                self.mutex_period(now)
                next_mutex += period * max(1, (now - next_mutex) // period + 1)
            if self.link < 0 and now >= next_period and not self.cfg.cold_only:
                w = int(self.planner.next_window_s() * 1e9)
                if w > 0 and (now - t0 >= WATCH_WAIT_NS or self.ready_to_size()):
                    self.open_window(w)
                elif DEBUG:
                    self.debug(f"no window ({w / 1e6:.1f}ms, ready {self.ready_to_size()})")
                next_period += period * max(1, (now - next_period) // period + 1)
            wake = min(next_account, next_mutex, self._mutex_pause_at or next_mutex,
                       next_account if self.cfg.cold_only
                       else next_period if self.link < 0
                       else min(self.planned_end, next_guard))
            timeout = max(wake - time.monotonic_ns(), 500_000) * 1e-9
            r, _, _ = select.select([inp], [], [], timeout)
            if not r:
                continue
            chunk = os.read(inp, 4096)
            if not chunk:
                return  # the parent is gone
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                if not self.command(line.decode().split()):
                    return

    def ready_to_size(self) -> bool:
        """Whether what sizes the next window is known: the prior (when the parent sends
        one) and, for a budgeted window, gmpmon's CPU per hit and the host's contention. A
        probe window (no rate known) needs nothing more."""
        assert self.planner is not None
        if self.cfg.prior and not self.prior_seen:
            return False
        return self.planner.rate() < 0 or (self.watch_seen and self.contention_seen)

    def command(self, words: list[str]) -> bool:
        assert self.planner is not None
        if not words:
            return True
        if words[0] == "quit":
            return False
        if words[0] == "watch" and len(words) >= 2:  # gmpmon's CPU per hot hit, measured
            self.planner.set_watch(float(words[1]), None)
            self.watch_seen = True
            return True
        if words[0] == "prior" and len(words) >= 2:  # hot hits/s the runtime's counters say
            self.planner.set_prior(float(words[1]), int(words[2]) if len(words) > 2 else 0)
            self.prior_seen = True
            return True
        if words[0] == "burst" and len(words) >= 3 and not self.cfg.cold_only:
            burst_ns = int(float(words[1]) * 1e6)
            if not self.planner.allow_burst(burst_ns * 1e-9):
                self.say(f"E burst {words[2]} refused: over the budget's horizon")
                return True
            self.planner.burst_started()
            if self.link >= 0:  # extend the open window into the burst, and say so: the
                # recording must show that the trigger's burst ran (and until when)
                now = time.monotonic_ns()
                self.say(f"W 2 {now} {burst_ns} {words[2]}")
                self.planned_end = max(self.planned_end, now + burst_ns)
                self.burst = words[2]
                self.cost_cap_s += self.burst_cap()
            else:
                self.open_window(burst_ns, words[2])
        return True


def main() -> int:
    # Ctrl-C reaches the whole process group: the parent decides when this one stops.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    inp = sys.stdin.fileno()
    line = b""
    while not line.endswith(b"\n"):
        chunk = os.read(inp, 65536)
        if not chunk:
            return 1
        line += chunk
    first, _, rest = line.partition(b"\n")
    cfg = HotConfig(**json.loads(first))
    ctl = Controller(cfg, sys.stdout)
    try:
        ctl.setup()
        if rest:
            for ln in rest.split(b"\n"):
                ctl.command(ln.decode().split())
        ctl.run(inp)
    except Exception as e:  # reported to the parent, which falls back or says so
        ctl.say(f"E {type(e).__name__}: {e}")
        if DEBUG:
            import traceback

            traceback.print_exc()
        return 1
    finally:
        ctl.close_window()
        if ctl.planner is not None:
            ctl.account()
        if ctl.stats_fd >= 0:
            os.close(ctl.stats_fd)
    return 0


if __name__ == "__main__":
    sys.exit(main())
