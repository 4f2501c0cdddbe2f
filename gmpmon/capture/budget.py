"""The overhead budget: how long the next hot window may be so that what watching costs the
target stays within ``--budget`` percent of the target's own CPU time.

Pure arithmetic, no BPF or /proc: the controller (gmpmon.capture.hotctl) feeds it what it
measured (probe hits, the BPF program's run time, the target's CPU time) and asks it for
the next window's length.

The cost of watching is charged to the target: every uprobe hit is a trap taken on the
target's thread. It is estimated as ``hits x trap_s + bpf_run_s``: ``trap_s`` is one emulated
hit with a program that does nothing, calibrated at attach on this machine under its current
load; ``bpf_run_s`` is the time the kernel measured in gmpmon's own program (BPF stats).

And each hot hit is a record gmpmon's own threads then read, order and model: CPU taken
beside the target. Where the host's CPUs are busy, that CPU is taken from the target (or
from what feeds it: on net/http under wrk, a neighbour spinning at gmpmon's CPU share cost
the server as much per request as gmpmon did, docs/modes.md). So a hot hit also costs
``watch_s_per_hit = gmpmon's CPU per hot hit x contention``, where contention is the chance
that gmpmon finds no CPU idle (hotctl.contention: 0 on an idle host, 1 on a saturated one).

The hot hit rate a window is sized with comes first from the runtime's own counters, which
cost the target nothing: ``sched.timeToRun`` counts about one goroutine transition to running
in 8, each P's ``syscalltick`` its syscalls (prior_hits_per_s). Each window then measures what
the target really did while it was open, and the planner learns the ratio of that to the
prior (``scale``): the next window is sized with the prior of that moment times the ratio, so
a target that speeds up between windows gets a shorter one, not a window sized for the old
rate. A target whose counters cannot be read gets a short probe window first, as before.

A token bucket holds the budget. Credit is earned as ``budget x target CPU time`` and spent
as the measured cost, cold probes included (those are always attached). A normal window may
spend at most what one period earns; a trigger's burst may run into debt of up to
``horizon_s`` worth of earnings, which later windows repay by being shorter or skipped: over
the horizon the average stays within the budget.
"""

from __future__ import annotations

from dataclasses import dataclass

MIN_WINDOW_NS = 2_000_000  # below this a window is skipped: attach+detach would be most of it
BANK_WINDOW_S = 0.005  # credit may be saved up for a window this long (see account)
PROBE_WINDOW_NS = 5_000_000  # first window, to measure the hot hit rate
# The first window, where it borrows (first_may_borrow): longer than the sites' way in
# (7-15 ms here), or it measures nothing (SCALE_MIN_HITS, INSIDE_MIN_S) and the next one is
# sized by the prior again.
FIRST_WINDOW_S = 0.02
FIRST_DEBT_PERIODS = 8
HORIZON_S = 60.0  # a burst's debt is repaid within this many seconds of earnings
EWMA = 0.5
# The prior: hot hits per timeToRun sample (the runtime tracks ~1 transition in 8) and per
# syscall (entersyscall + exitsyscall). Measured in full mode (hits of every hot probe against
# the runtime's own counts over the same 4 s, Go 1.22 and 1.27): 2.1 hits per transition on
# the ping-pong, 1.4-1.8 per transition (+2 per syscall) on net/http under wrk, 5.3-5.8 on the
# demo. 4 per transition overestimates the first two (the first window is short, not long)
# and underestimates the demo by ~1.6x, which the cost guard of an open window bounds.
PRIOR_PER_TRACKED = 4 * 8
PRIOR_PER_SYSCALL = 2
CPU_HEADROOM = 1.2  # see BudgetPlanner.prior_now
# gmpmon's program per hot hit until the kernel has measured it: 0.9 µs on the ping-pong,
# 1.0-1.3 µs on the scale workload (BPF_ENABLE_STATS, here).
BPF_NS_PRIOR = 1000.0
SCALE_MIN_HITS = 50  # fewer hits in a window say nothing about its rate
INSIDE_MIN_S = 0.001  # nor do less than this between the link being in and the close
TAIL_MAX_S = 1.0
TAIL_PER_BUSY_P_S = 0.004  # see BudgetPlanner.tail
TAIL_MIN_S = 0.005
SCALE_RANGE = (1 / 32, 32.0)
# With no prior, a probe window that saw no hit at all was most likely closed before the
# kernel had put its sites in (8-60 ms on a loaded machine): the next probe is twice as long.
PROBE_MAX_NS = 80_000_000


def prior_hits_per_s(tracked_per_s: float, syscalls_per_s: float) -> float:
    """Hot probe hits per second to expect, from the runtime's own counters: timeToRun
    samples per second and syscalls per second."""
    return PRIOR_PER_TRACKED * max(tracked_per_s, 0.0) + PRIOR_PER_SYSCALL * max(
        syscalls_per_s, 0.0)


@dataclass(frozen=True)
class CostStatus:
    """What the header and the summary show about the budget."""

    budget_pct: float
    estimated_pct: float  # cost / target CPU time since attach, in percent
    recent_pct: float  # the same over the last few periods
    cost_s: float  # estimated CPU seconds the target lost to watching
    target_cpu_s: float  # CPU seconds the target used since attach
    windows: int
    covered_s: float  # seconds of hot windows
    hit_cost_s: float  # calibrated cost of one emulated hit (trap only)
    bpf_ns_per_hit: float  # measured run time of gmpmon's BPF program per hit (0: unknown)
    overstays: int  # windows detached more than OVERSTAY_NS after their planned end
    worst_overstay_ns: int
    bursts: int
    cut_short: int = 0  # windows closed early: their hits cost more than planned
    watch_cost_s: float = 0.0  # the part of cost_s that is gmpmon's own CPU (contended)
    watch_s_per_hit: float = 0.0  # gmpmon's CPU per hot hit, times contention
    contention: float = 0.0  # the chance that gmpmon finds no CPU idle (0..1)
    # The cold sync.Mutex probes under the governor (coldgov.py): 1 contention in
    # mutex_every traced now, the largest period so far, the seconds spent sampling, their
    # cost in % of the target's CPU (None: not measured yet), whether even 1 in EVERY_MAX
    # passed their share, the share of each period their sites are linked, and the seconds
    # they were not.
    mutex_every: int = 1
    mutex_every_max: int = 1
    mutex_sampled_s: float = 0.0
    cold_pct: float | None = None
    cold_traps_over: bool = False
    mutex_duty: float = 1.0
    mutex_paused_s: float = 0.0

    def header_text(self) -> str:
        from gmpmon.model.cost import cut_back_text

        text = f"cost ~{self.recent_pct:.1f}% (budget {self.budget_pct:g}%)"
        cut = cut_back_text("mutex", self.mutex_every, self.mutex_every_max,
                            self.mutex_sampled_s, self.mutex_duty, self.mutex_paused_s)
        return f"{text}; {cut}" if cut else text


class BudgetPlanner:
    """Sizes hot windows from measured costs. All times in seconds unless named ``_ns``."""

    def __init__(
        self,
        budget_pct: float,
        hit_cost_s: float,
        period_s: float,
        max_window_s: float,
        horizon_s: float = HORIZON_S,
    ) -> None:
        if budget_pct <= 0:
            raise ValueError("budget must be positive")
        self.budget = budget_pct / 100.0
        self.budget_pct = budget_pct
        self.hit_cost_s = hit_cost_s
        self.period_s = period_s
        self.max_window_s = max_window_s
        self.horizon_s = horizon_s
        self.credit_s = 0.0
        self.cpu_rate = 0.0  # target CPU-s per s (EWMA)
        self.hot_rate = -1.0  # hot hits per s while a window is open (-1: not measured yet)
        self.prior_rate = -1.0  # hot hits per s from the runtime's counters (-1: none yet)
        self.scale = 1.0  # what windows measured / the prior at the time (learned)
        self._scaled = False
        self.tail_s = 0.0  # a window's hits outside its inside time, in s at the full rate
        self._tail_seen = False
        self.link_s = 0.0  # how long putting the hot link in takes (the window counts it)
        self.busy_ps = 0
        self._nsph_seen = False
        self._link_seen = False
        self.probe_s = PROBE_WINDOW_NS * 1e-9
        self.ns_per_hit = BPF_NS_PRIOR  # BPF program run time per hot hit (EWMA, BPF stats)
        self.cpu_per_hit_s = 0.0  # gmpmon's own CPU per hot hit (measured by the reader)
        self.contention = 0.0
        self.watch_s_per_hit = 0.0  # cpu_per_hit_s x contention
        self.watch_cost_s = 0.0
        self.cost_s = 0.0
        self.target_cpu_s = 0.0
        self._recent: list[tuple[float, float]] = []  # (cost_s, cpu_s) per account() call
        self.windows = 0
        self.covered_s = 0.0
        self.bursts = 0

    # --- measurements --------------------------------------------------------------------

    def per_hit_s(self) -> float:
        """What one hot hit costs the target: its trap, its BPF run, and gmpmon's CPU for its
        record as far as the host's CPUs are contended."""
        return self.hit_cost_s + self.ns_per_hit * 1e-9 + self.watch_s_per_hit

    def set_prior(self, hits_per_s: float, busy_ps: int = 0) -> None:
        """The newest hot-hit rate expected from the runtime's counters (prior_hits_per_s),
        and how many Ps they say run (GOMAXPROCS - npidle)."""
        self.prior_rate = max(hits_per_s, 0.0)
        self.busy_ps = max(busy_ps, 0)

    def prior_now(self) -> float:
        """The prior as windows are planned with it (-1: none): at most what the target's
        CPU time can hold. Each trap runs on the target's own thread, so while the probes are
        in a target cannot be hit more often than its CPU time allows: the ping-pong, whose
        counters say ~40 M hits/s unwatched, runs at ~2% of its speed inside a window, where
        each of its ~1 CPU-s/s goes to traps and programs. The CPU is taken 1.2x: a target that was
        not saturated may use more CPU while it is slowed."""
        if self.prior_rate < 0:
            return -1.0
        trap = self.hit_cost_s + self.ns_per_hit * 1e-9
        if self.cpu_rate > 0 and trap > 0:
            return min(self.prior_rate, CPU_HEADROOM * self.cpu_rate / trap)
        return self.prior_rate

    def rate(self) -> float:
        """Hot hits per second a window is planned with, -1 if nothing says yet: the prior
        times the ratio windows measured to it; without a prior, the windows' own rate."""
        if self.prior_rate > 0:
            return self.prior_now() * self.scale
        if self.hot_rate >= 0:
            return self.hot_rate
        return 0.0 if self.prior_rate == 0 else -1.0

    def set_watch(self, cpu_per_hit_s: float | None, contention: float | None) -> None:
        """The newest measurements of gmpmon's CPU per hot hit and of the host's contention
        (None: unchanged)."""
        if cpu_per_hit_s is not None:
            c = max(cpu_per_hit_s, 0.0)
            self.cpu_per_hit_s = c if self.cpu_per_hit_s == 0 else (
                EWMA * c + (1 - EWMA) * self.cpu_per_hit_s)
        if contention is not None:
            self.contention = min(max(contention, 0.0), 1.0)
        self.watch_s_per_hit = self.cpu_per_hit_s * self.contention

    def account(self, dt_s: float, target_cpu_s: float, hits: int, bpf_run_ns: int | None,
                bpf_runs: int = 0, hot_hits: int = 0, cold_records: float = 0.0) -> float:
        """One accounting step: over ``dt_s`` the target used ``target_cpu_s`` and the probes
        were hit ``hits`` times, ``hot_hits`` of them hot; the kernel measured ``bpf_run_ns``
        in gmpmon's program over ``bpf_runs`` runs (None without BPF stats). Returns the
        cost charged, in seconds. The governed cold probes' records (``cold_records``: the
        traced sync.Mutex waits', coldgov.py) are charged gmpmon's CPU like a hot hit's."""
        if bpf_run_ns is not None and bpf_runs > 0 and 2 * hot_hits >= bpf_runs:
            # Only where the hot hits are most of the runs: the cold probes' runs walk user
            # stacks (~2.5 µs each on the ping-pong, 3x a hot hit's) and, between windows,
            # said that a hot hit would cost that much.
            nsph = bpf_run_ns / bpf_runs
            self.ns_per_hit = nsph if not self._nsph_seen else (
                EWMA * nsph + (1 - EWMA) * self.ns_per_hit)
            self._nsph_seen = True
        watch = (hot_hits + cold_records) * self.watch_s_per_hit
        self.watch_cost_s += watch
        cost = (hits * self.hit_cost_s + (bpf_run_ns if bpf_run_ns is not None else 0) * 1e-9
                + watch)
        self.cost_s += cost
        self.target_cpu_s += target_cpu_s
        if dt_s > 0:
            rate = target_cpu_s / dt_s
            self.cpu_rate = rate if self.cpu_rate == 0 else EWMA * rate + (1 - EWMA) * self.cpu_rate
        self.credit_s += self.budget * target_cpu_s - cost
        # Unspent credit is not banked beyond one period, or the cost of one short window
        # where a period's earnings cannot buy even that (a target hot enough that a window
        # of a few ms costs more than a second of its budget gets one every few seconds):
        # a quiet minute must not pay for a long window later (bursts borrow instead).
        cap = max(self.budget * self.cpu_rate * self.period_s,
                  max(self.rate(), 0.0) * self.per_hit_s() * (BANK_WINDOW_S + self.tail()))
        self.credit_s = min(self.credit_s, cap)
        self._recent.append((cost, target_cpu_s))
        if len(self._recent) > 30:
            del self._recent[0]
        return cost

    def window_done(self, hot_hits: int, open_s: float, prior_rate: float = -1.0,
                    inside: tuple[int, float] | None = None, link_s: float | None = None,
                    ) -> None:
        """A window closed ``open_s`` after it was asked for, with ``hot_hits`` hits of the
        hot probes in all (while the kernel put the sites in and took them out, too);
        ``prior_rate`` is what the prior said when it opened (-1: none); ``inside`` the hits
        and seconds between the link being in and the close being asked for; ``link_s`` how
        long putting the link in took.

        With a prior, the rate is learned from ``inside`` alone: the sites go in over 7-15 ms
        here (more on a loaded machine) and a short window closed right after, so hits /
        open_s said a few % of the real rate and the next window was planned 30x too long.
        What the window cost beyond ``inside`` at that rate (the sites going in and out) is
        learned as ``tail_s``, the link's time as ``link_s``: the next window is planned
        with both (effective_s)."""
        self.windows += 1
        self.covered_s += open_s
        if link_s is not None:
            self.link_s = (link_s if not self._link_seen
                           else EWMA * link_s + (1 - EWMA) * self.link_s)
            self._link_seen = True
        if open_s <= 0:
            return
        if inside is not None and inside[1] >= INSIDE_MIN_S and inside[0] >= SCALE_MIN_HITS:
            rate = inside[0] / inside[1]
            tail = min(max(hot_hits / rate - inside[1], 0.0), TAIL_MAX_S)
            self.tail_s = tail if not self._tail_seen else EWMA * tail + (1 - EWMA) * self.tail_s
            self._tail_seen = True
        elif prior_rate < 0:
            if hot_hits == 0 and self.hot_rate < 0:
                # Most likely closed before its sites were in: probe again, for longer.
                self.probe_s = min(2 * self.probe_s, PROBE_MAX_NS * 1e-9)
                return
            rate = hot_hits / open_s  # no better measure: counts the sites' way in and out
        else:
            return  # nothing learned: the prior and the last ratio stand
        self.hot_rate = rate if self.hot_rate < 0 else EWMA * rate + (1 - EWMA) * self.hot_rate
        if prior_rate > 0:
            lo, hi = SCALE_RANGE
            s = min(max(rate / prior_rate, lo), hi)
            self.scale = s if not self._scaled else EWMA * s + (1 - EWMA) * self.scale
            self._scaled = True

    # --- decisions -----------------------------------------------------------------------

    def tail(self) -> float:
        """A window's hits outside its inside time, in seconds at the full rate: learned;
        before any window, TAIL_PER_BUSY_P_S for each P running. The sites' way in and out
        is slower the more threads hit them meanwhile: 10-15 ms on 2 busy Ps here, 130-400
        ms on 64 (the scale workload, where it was all of a first window's 130k-260k hits,
        5-10% of a 10-s run). A dry link on sites that never run does not tell: 0.7-44 ms
        there against 13-252 ms for the hot sites, in the same seconds."""
        if self._tail_seen or self.prior_rate < 0:
            return self.tail_s  # without a prior the rate is hits / open_s: tails included
        return max(TAIL_PER_BUSY_P_S * self.busy_ps, TAIL_MIN_S)

    def effective_s(self, window_s: float) -> float:
        """How long a window asked for this long is hit at the full rate, as measured: its
        time after the link is in, and the sites' way in and out."""
        return max(window_s - self.link_s, 0.0) + self.tail()

    def window_cost_s(self, window_s: float) -> float:
        """Estimated cost of a hot window of this length (its hits at the measured rate)."""
        return max(self.rate(), 0.0) * self.effective_s(window_s) * self.per_hit_s()

    def next_window_s(self) -> float:
        """Length of the next hot window, 0 for none: the link's time, and as long after it
        as the credit pays for (its tail included); none if that is under MIN_WINDOW_NS."""
        rate = self.rate()
        if rate < 0:
            return min(self.probe_s, self.max_window_s)
        per_s = rate * self.per_hit_s()
        if per_s <= 0:
            return self.max_window_s if self.credit_s > 0 else 0.0
        inside = self.credit_s / per_s - self.tail()
        if inside * 1e9 >= MIN_WINDOW_NS and self.credit_s > 0:
            return min(self.max_window_s, self.link_s + inside)
        if self.windows == 0 and self.first_may_borrow():
            return min(FIRST_WINDOW_S, self.max_window_s)
        return 0.0

    def first_may_borrow(self) -> bool:
        """The first window may borrow what FIRST_DEBT_PERIODS periods earn: until a window
        has measured the rate and the sites' way in and out, the prior prices one at several
        times its cost (Prometheus under wrk: ~35 ms planned, ~6 ms charged), and the credit
        took 4-5 s to reach that: a short run of default mode opened no window at all. Not
        where the prior says a window costs more (64 busy Ps: its way in alone, 130-400 ms,
        is all hit): that one waits for its credit."""
        debt = self.window_cost_s(FIRST_WINDOW_S) - max(self.credit_s, 0.0)
        return self.cpu_rate > 0 and debt <= (
            FIRST_DEBT_PERIODS * self.budget * self.cpu_rate * self.period_s) + min(
            self.credit_s, 0.0)

    def allow_burst(self, burst_s: float) -> bool:
        """A trigger's burst may borrow: the debt it leaves must be repaid within the horizon."""
        debt_after = self.credit_s - self.window_cost_s(burst_s)
        return -debt_after <= self.budget * self.cpu_rate * self.horizon_s

    def burst_started(self) -> None:
        self.bursts += 1

    def recent_pct(self) -> float:
        cost = sum(c for c, _ in self._recent)
        cpu = sum(t for _, t in self._recent)
        return 100.0 * cost / cpu if cpu > 0 else 0.0

    def estimated_pct(self) -> float:
        return 100.0 * self.cost_s / self.target_cpu_s if self.target_cpu_s > 0 else 0.0
