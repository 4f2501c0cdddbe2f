"""The budget planner (gmpmon.capture.budget): windows sized so the estimated cost stays
within the budget, bursts borrowed against a horizon and repaid."""

from __future__ import annotations

import pytest

from gmpmon.capture.budget import (
    BANK_WINDOW_S,
    BPF_NS_PRIOR,
    CPU_HEADROOM,
    MIN_WINDOW_NS,
    PROBE_WINDOW_NS,
    TAIL_MIN_S,
    TAIL_PER_BUSY_P_S,
    BudgetPlanner,
)


class FakeTarget:
    """A target that uses ``cpu`` CPU-s per s and is hit ``hot_rate`` times a second by the
    hot probes while a window is open, ``cold_rate`` always: drives a planner one period at a
    time, accounting every 100 ms like the controller does."""

    def __init__(self, planner: BudgetPlanner, cpu: float, hot_rate: float,
                 cold_rate: float = 0.0, ns_per_hit: int = 0) -> None:
        self.p = planner
        self.cpu = cpu
        self.hot_rate = hot_rate
        self.cold_rate = cold_rate
        self.ns_per_hit = ns_per_hit
        self.open_s = 0.0

    def period(self, burst_s: float = 0.0) -> float:
        w = burst_s or self.p.next_window_s()
        if burst_s:
            self.p.burst_started()
        self.open_s += w
        steps = 10
        for i in range(steps):
            dt = self.p.period_s / steps
            t0, t1 = i * dt, (i + 1) * dt
            inside = max(0.0, min(t1, w) - t0)
            hot = int(self.hot_rate * inside)
            hits = hot + int(self.cold_rate * dt)
            self.p.account(dt, self.cpu * dt, hits, hits * self.ns_per_hit, hits, hot)
        if w:
            self.p.window_done(int(self.hot_rate * w), w)
        return w


def planner(budget: float = 1.0, cost_us: float = 0.7, max_ms: float = 200) -> BudgetPlanner:
    return BudgetPlanner(budget, cost_us * 1e-6, 1.0, max_ms / 1000)


def test_first_window_is_a_short_probe_to_measure_the_rate() -> None:
    p = planner()
    assert p.next_window_s() == pytest.approx(PROBE_WINDOW_NS * 1e-9)


@pytest.mark.parametrize(("cpu", "hot_rate"), [(1.0, 1e6), (2.0, 3e6), (0.5, 2e5)])
def test_long_run_cost_stays_within_the_budget(cpu: float, hot_rate: float) -> None:
    p = planner(budget=1.0)
    t = FakeTarget(p, cpu, hot_rate, cold_rate=1000)
    for _ in range(60):
        t.period()
    assert p.estimated_pct() <= 1.0 + 1e-6
    assert p.estimated_pct() > 0.8  # and it is used, not wasted
    assert 0 < t.open_s < 60 * 0.2


def test_a_cheap_target_gets_full_windows() -> None:
    p = planner(budget=1.0)
    t = FakeTarget(p, cpu=1.0, hot_rate=1000)
    ws = [t.period() for _ in range(5)]
    assert ws[2:] == [pytest.approx(0.2)] * 3
    assert p.estimated_pct() < 0.1


def test_bpf_run_time_counts_in_the_cost_per_hit() -> None:
    cheap, dear = planner(), planner()
    tc = FakeTarget(cheap, 1.0, 1e6)
    td = FakeTarget(dear, 1.0, 1e6, ns_per_hit=700)  # doubles the 0.7 us trap
    for _ in range(30):
        tc.period()
        td.period()
    assert dear.per_hit_s() == pytest.approx(1.4e-6)
    assert td.open_s == pytest.approx(tc.open_s / 2, rel=0.15)
    assert dear.estimated_pct() <= 1.0 + 1e-6


def test_gmpmons_own_cpu_per_hot_hit_counts_as_far_as_the_host_is_contended() -> None:
    """A hot hit's record costs gmpmon's threads CPU beside the target: on a saturated host
    (contention 1) all of it is charged, on an idle one none. The cold probes' records are
    not charged: they come in every mode."""
    idle, half, busy = planner(), planner(), planner()
    idle.set_watch(1.4e-6, 0.0)
    half.set_watch(1.4e-6, 0.5)  # 0.7 us: doubles the 0.7 us trap
    busy.set_watch(None, 1.0)  # contention known, the CPU per hit not yet: nothing charged
    ts = [FakeTarget(p, 1.0, 1e6, cold_rate=1000) for p in (idle, half, busy)]
    for _ in range(30):
        for t in ts:
            t.period()
    assert idle.per_hit_s() == pytest.approx(0.7e-6) and idle.watch_cost_s == 0
    assert busy.per_hit_s() == pytest.approx(0.7e-6)
    assert half.per_hit_s() == pytest.approx(1.4e-6)
    assert ts[1].open_s == pytest.approx(ts[0].open_s / 2, rel=0.15)
    assert half.estimated_pct() <= 1.0 + 1e-6
    hot_hits = 1e6 * ts[1].open_s
    assert half.watch_cost_s == pytest.approx(hot_hits * 0.7e-6, rel=0.05)
    half.set_watch(1e-3, 7.0)  # contention is a share: clamped to 1; the CPU per hit moves
    # halfway to each new measurement (EWMA 0.5)
    assert half.contention == 1.0
    assert half.watch_s_per_hit == pytest.approx(0.5 * 1e-3 + 0.5 * 1.4e-6)


def test_contention_is_the_chance_that_no_cpu_is_left_idle() -> None:
    from gmpmon.capture.hotctl import contention

    # 2 CPUs for 1 s: gmpmon used 0.1 s; others 1.9 s of the 1.9 s left (saturated), 0.95 s
    # (half), none (idle); a tick's rounding cannot make it leave 0..1.
    assert contention(2.0, 2.0, 0.1) == pytest.approx(1.0)
    assert contention(1.05, 2.0, 0.1) == pytest.approx(0.5)
    assert contention(0.1, 2.0, 0.1) == 0.0
    assert contention(2.02, 2.0, 0.0) == 1.0 and contention(0.0, 2.0, 0.1) == 0.0
    assert contention(1.0, 1.0, 1.0) is None  # no room measured
    # With 2 CPUs half busy, gmpmon mostly finds one idle: all are busy a quarter of the time;
    # on 64 such CPUs, never; saturated, always.
    assert contention(1.05, 2.0, 0.1, ncpu=2) == pytest.approx(0.25)
    assert contention(32.05, 64.0, 0.1, ncpu=64) < 1e-15
    assert contention(2.0, 2.0, 0.1, ncpu=2) == pytest.approx(1.0)


def test_window_shrinks_to_none_when_cold_probes_eat_the_budget() -> None:
    p = planner(budget=1.0)
    # Cold probes alone cost 1.4% of the target: no hot window fits.
    t = FakeTarget(p, cpu=1.0, hot_rate=1e6, cold_rate=20_000)
    ws = [t.period() for _ in range(10)]
    assert ws[0] > 0  # the probe window
    assert all(w == 0 for w in ws[1:])


def test_windows_below_the_minimum_are_skipped() -> None:
    p = planner(budget=0.01)
    t = FakeTarget(p, cpu=1.0, hot_rate=5e6)
    ws = [t.period() for _ in range(10)]
    assert all(w == 0 or w * 1e9 >= MIN_WINDOW_NS for w in ws)


def test_a_burst_borrows_and_later_windows_repay_it() -> None:
    p = planner(budget=1.0)
    t = FakeTarget(p, cpu=1.0, hot_rate=1e6)
    for _ in range(5):
        t.period()
    before = p.cost_s
    assert p.allow_burst(0.5)  # 0.35 s of cost, within 60 s x 10 ms
    t.period(burst_s=0.5)
    assert p.cost_s - before > 0.3
    skipped = [t.period() for _ in range(40)]
    assert skipped[:30] == [0.0] * 30  # ~35 periods of earnings repay it
    for _ in range(100):
        t.period()
    assert p.estimated_pct() <= 1.0 + 1e-6  # over the horizon the budget held
    assert p.bursts == 1


def test_a_burst_beyond_the_horizon_is_refused() -> None:
    p = planner(budget=1.0)
    t = FakeTarget(p, cpu=1.0, hot_rate=1e6)
    for _ in range(3):
        t.period()
    assert not p.allow_burst(5.0)  # 3.5 s of cost > 60 s x 1% x 1 CPU


def test_header_text() -> None:
    from gmpmon.capture.budget import CostStatus

    c = CostStatus(budget_pct=1.0, estimated_pct=0.8, recent_pct=0.84, cost_s=0.1,
                   target_cpu_s=12.5, windows=3, covered_s=0.1, hit_cost_s=7e-7,
                   bpf_ns_per_hit=300, overstays=0, worst_overstay_ns=0, bursts=0)
    assert c.header_text() == "cost ~0.8% (budget 1%)"


def test_budget_must_be_positive() -> None:
    with pytest.raises(ValueError):
        BudgetPlanner(0, 1e-6, 1.0, 0.2)


def test_cost_events_give_the_summary_cost() -> None:
    """COST events are cumulative: the summary takes the last one, with the windows the
    model counted (a recording replays to the same document)."""
    from gmpmon.events import Kind
    from gmpmon.export.json import summary
    from tests.unit.test_model_scenarios import ev, run

    snap = run([
        ev(0, Kind.WINDOW, a0=1, a1=5_000_000),
        ev(5000, Kind.WINDOW, a0=0, a1=100_000),
        ev(10_000, Kind.COST, m=1000, g=0, a0=1_000_000, a1=500_000_000),
        ev(1_000_000, Kind.WINDOW, a0=1, a1=20_000_000),
        ev(1_020_000, Kind.WINDOW, a0=0),
        ev(1_100_000, Kind.COST, m=1000, g=1, a0=8_000_000, a1=1_000_000_000),
    ], mode="default")
    c = summary(snap)["cost"]
    assert c == {"estimated_pct": 0.8, "budget_pct": 1.0, "windows": 2, "covered_s": 0.025,
                 "cost_ns": 8_000_000, "watch_ns": 0, "target_cpu_ns": 1_000_000_000,
                 "overstays": 1, "bursts": 0, "cut_short": 0, "triggers": 0, "cut_back": []}
    # gmpmon's own CPU (as contended) rides above the budget in m, in µs
    snap = run([ev(10_000, Kind.COST, m=500 | 3_000 << 20, g=0, a0=8_000_000,
                   a1=1_000_000_000)], mode="default")
    c = summary(snap)["cost"]
    assert c["budget_pct"] == 0.5 and c["watch_ns"] == 3_000_000 and c["cost_ns"] == 8_000_000
    assert summary(run([], mode="full"))["cost"] is None


def test_the_prior_sizes_the_first_window_without_a_probe() -> None:
    """With the runtime's counters read (prior_hits_per_s), no blind probe window: the first
    one is sized by the budget like any other."""
    from gmpmon.capture.budget import prior_hits_per_s

    p = planner(budget=1.0)
    p.set_prior(prior_hits_per_s(25_000, 1_000))  # 25k timeToRun samples/s: ~200k transitions
    assert p.rate() == pytest.approx(32 * 25_000 + 2 * 1_000)
    assert p.next_window_s() == 0.0  # no credit yet: nothing is spent before it is earned
    for _ in range(10):
        p.account(0.1, 0.1, 0, None)
    w = p.next_window_s()
    # 10 ms of credit at (0.7 us trap + 1 us program, until measured) a hit: 5 ms of the
    # hits it pays for are the sites' way in and out until a window has measured it
    assert p.per_hit_s() == pytest.approx(0.7e-6 + BPF_NS_PRIOR * 1e-9)
    # (802k/s is more than 1 CPU-s/s of traps and programs holds: the CPU's cap applies)
    assert p.rate() == pytest.approx(CPU_HEADROOM / p.per_hit_s())
    assert w == pytest.approx(0.01 / (p.rate() * p.per_hit_s()) - TAIL_MIN_S, rel=0.01)


def test_before_any_window_the_way_in_is_priced_by_the_ps_running() -> None:
    """On 64 busy Ps the sites' way in and out took 130-400 ms, all of it hit: a target like
    that gets no window until the credit covers one (credit is banked up to that), where 2
    busy Ps get one at once."""
    small, scale = planner(budget=1.0), planner(budget=1.0)
    small.set_prior(1e5, busy_ps=1)
    scale.set_prior(1e6, busy_ps=64)
    assert small.tail() == TAIL_MIN_S and scale.tail() == pytest.approx(64 * TAIL_PER_BUSY_P_S)
    for p in (small, scale):
        for _ in range(10):
            p.account(0.1, 0.2, 0, None)  # 2 CPUs: 20 ms of credit a second
    assert small.next_window_s() > 0
    assert scale.next_window_s() == 0.0
    need = scale.window_cost_s(scale.link_s + BANK_WINDOW_S)  # a 5-ms window and its tail
    secs = 1
    while scale.next_window_s() == 0.0:
        for _ in range(10):
            scale.account(0.1, 0.2, 0, None)
        secs += 1
        assert secs < 200
    assert scale.credit_s >= need * 0.4 and secs == pytest.approx(need / 0.02, rel=0.6)


def test_the_prior_is_capped_by_the_targets_cpu() -> None:
    """A trap runs on the target's thread: inside a window it cannot be hit more often than
    its CPU time holds (the ping-pong's counters say ~40M hits/s unwatched)."""
    p = planner(budget=1.0, cost_us=1.0)
    p.set_prior(40e6)
    p.account(0.1, 0.1, 0, None)  # 1 CPU; a trap and a program run take 2 us
    assert p.prior_now() == pytest.approx(CPU_HEADROOM * 1.0 / (1e-6 + BPF_NS_PRIOR * 1e-9))
    assert p.rate() == pytest.approx(p.prior_now())


def test_the_rate_is_learned_from_the_windows_inside_not_its_way_in() -> None:
    """The link takes 15 ms to go in and the window closed right after: hits / open_s would
    say a fraction of the rate. Only hits after the link is in teach the rate; what the way
    in and out adds is learned as tail_s, the link's time as link_s."""
    p = planner(budget=1.0)
    p.set_prior(1e6)
    p.account(0.1, 1.0, 0, None)
    # 16 ms open, 300 hits, of which none after the link (inside 0.5 ms): rate unchanged
    p.window_done(300, 0.016, p.prior_now(), inside=(0, 0.0005), link_s=0.015)
    assert p.rate() == pytest.approx(1e6) and p.link_s == pytest.approx(0.015)
    # 30 ms open: 15 ms linking, 15 ms inside with 7,500 hits (500k/s), 10,000 in all
    p.window_done(10_000, 0.030, p.prior_now(), inside=(7_500, 0.015), link_s=0.015)
    assert p.scale == pytest.approx(0.5)
    assert p.rate() == pytest.approx(5e5)
    assert p.tail_s == pytest.approx(10_000 / 5e5 - 0.015)
    # A window is planned as the link's time plus what the credit pays after it, its tail
    # included.
    p.credit_s = 0.01
    per_s = 5e5 * p.per_hit_s()
    assert p.next_window_s() == pytest.approx(0.015 + 0.01 / per_s - p.tail_s)
    assert p.window_cost_s(p.next_window_s()) == pytest.approx(0.01)


def test_the_prior_follows_the_target_between_windows() -> None:
    """The ratio learned stays; the prior moves with the target: twice as busy, half the
    window."""
    p = planner(budget=1.0)
    p.set_prior(1e5)
    for _ in range(10):
        p.account(0.1, 0.1, 0, None)
    p.window_done(500, 0.01, p.prior_now(), inside=(500, 0.01), link_s=0.0)
    assert p.tail_s == 0.0
    p.credit_s = 0.005
    w1 = p.next_window_s()
    p.set_prior(2e5)
    assert p.next_window_s() == pytest.approx(w1 / 2)


def test_a_probe_that_saw_no_hit_probes_again_for_longer() -> None:
    """Without a prior, a probe window with no hit at all says nothing (its sites were most
    likely not in yet): the next probe is twice as long, not a 200-ms window at rate 0."""
    p = planner()
    w = p.next_window_s()
    p.window_done(0, w)
    assert p.next_window_s() == pytest.approx(2 * w)
    p.window_done(0, 2 * w)
    p.window_done(0, 4 * w)
    p.window_done(0, 8 * w)
    p.window_done(0, 16 * w)
    assert p.next_window_s() <= 0.08
