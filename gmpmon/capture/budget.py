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
``watch_s_per_hit = gmpmon's CPU per hot hit x contention``, where contention is the share of
the CPUs left to others that others use (0 on an idle host, 1 on a saturated one).

A token bucket holds the budget. Credit is earned as ``budget x target CPU time`` and spent
as the measured cost, cold probes included (those are always attached). A normal window may
spend at most what one period earns; a trigger's burst may run into debt of up to
``horizon_s`` worth of earnings, which later windows repay by being shorter or skipped: over
the horizon the average stays within the budget.
"""

from __future__ import annotations

from dataclasses import dataclass

MIN_WINDOW_NS = 2_000_000  # below this a window is skipped: attach+detach would be most of it
PROBE_WINDOW_NS = 5_000_000  # first window, to measure the hot hit rate
HORIZON_S = 60.0  # a burst's debt is repaid within this many seconds of earnings
EWMA = 0.5


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
    contention: float = 0.0  # share of the CPUs not gmpmon's that others use (0..1)

    def header_text(self) -> str:
        return f"cost ~{self.recent_pct:.1f}% (budget {self.budget_pct:g}%)"


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
        self.ns_per_hit = 0.0  # BPF program run time per hit (EWMA, from BPF stats)
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
                bpf_runs: int = 0, hot_hits: int = 0) -> float:
        """One accounting step: over ``dt_s`` the target used ``target_cpu_s`` and the probes
        were hit ``hits`` times, ``hot_hits`` of them hot; the kernel measured ``bpf_run_ns``
        in gmpmon's program over ``bpf_runs`` runs (None without BPF stats). Returns the
        cost charged, in seconds. The cold probes' records are not charged gmpmon's CPU:
        they come in every mode, the budget or not."""
        if bpf_run_ns is not None and bpf_runs > 0:
            nsph = bpf_run_ns / bpf_runs
            self.ns_per_hit = nsph if self.ns_per_hit == 0 else (
                EWMA * nsph + (1 - EWMA) * self.ns_per_hit)
        watch = hot_hits * self.watch_s_per_hit
        self.watch_cost_s += watch
        cost = (hits * self.hit_cost_s + (bpf_run_ns if bpf_run_ns is not None else 0) * 1e-9
                + watch)
        self.cost_s += cost
        self.target_cpu_s += target_cpu_s
        if dt_s > 0:
            rate = target_cpu_s / dt_s
            self.cpu_rate = rate if self.cpu_rate == 0 else EWMA * rate + (1 - EWMA) * self.cpu_rate
        self.credit_s += self.budget * target_cpu_s - cost
        # Unspent credit is not banked beyond one period: a quiet minute must not pay for a
        # long window later (bursts borrow instead, see allow_burst).
        self.credit_s = min(self.credit_s, self.budget * self.cpu_rate * self.period_s)
        self._recent.append((cost, target_cpu_s))
        if len(self._recent) > 30:
            del self._recent[0]
        return cost

    def window_done(self, hot_hits: int, open_s: float) -> None:
        """A window closed after ``open_s`` with ``hot_hits`` hits of the hot probes."""
        self.windows += 1
        self.covered_s += open_s
        if open_s <= 0:
            return
        rate = hot_hits / open_s
        self.hot_rate = rate if self.hot_rate < 0 else EWMA * rate + (1 - EWMA) * self.hot_rate

    # --- decisions -----------------------------------------------------------------------

    def window_cost_s(self, window_s: float) -> float:
        """Estimated cost of a hot window of this length (its hits at the measured rate)."""
        return max(self.hot_rate, 0.0) * window_s * self.per_hit_s()

    def next_window_s(self) -> float:
        """Length of the next hot window, 0 for none."""
        if self.hot_rate < 0:
            return min(PROBE_WINDOW_NS * 1e-9, self.max_window_s)
        if self.credit_s <= 0:
            return 0.0
        per_s = self.hot_rate * self.per_hit_s()
        w = self.max_window_s if per_s <= 0 else min(self.max_window_s, self.credit_s / per_s)
        return w if w * 1e9 >= MIN_WINDOW_NS else 0.0

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
