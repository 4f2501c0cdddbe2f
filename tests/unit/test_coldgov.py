"""The cold probes under the budget (gmpmon.capture.coldgov): the sync.Mutex probes traced
1 contention in N so that cold + hot cost stays within the budget, and the model's honest
account of it (each traced wait weighed N, the header and the summary saying so)."""

from __future__ import annotations

import pytest

from gmpmon.capture.budget import BudgetPlanner, CostStatus
from gmpmon.capture.coldgov import (
    BASE_NS,
    COLD_SHARE,
    DUTY_MIN,
    EVERY_MAX,
    RECORDS_PER_WAIT,
    ColdGovernor,
    ColdStep,
    MutexRates,
)
from gmpmon.capture.watchcost import cost_events
from gmpmon.events import ColdGroup, Kind, LockKind

TRAP_S = 0.7e-6


class ColdTarget:
    """A target that enters lockSlow ``entries`` times a second (and leaves it as often)
    and hits the other cold probes ``other`` times a second. Each sync.Mutex hit costs the
    program ``base_ns``, a traced entry ``walk_ns`` more (the stack walk, its records), each
    other hit ``other_ns``. What the controller's accounting step would read of it at 1 in
    ``every``, the sites linked a share ``duty`` of the step."""

    def __init__(self, cpu: float, entries: float, other: float = 0.0, base_ns: float = 500.0,
                 walk_ns: float = 2000.0, other_ns: float = 2000.0) -> None:
        self.cpu, self.entries, self.other = cpu, entries, other
        self.base_ns, self.walk_ns, self.other_ns = base_ns, walk_ns, other_ns

    def step(self, dt: float, every: int, duty: float = 1.0) -> ColdStep:
        e = int(self.entries * dt * duty)
        o = int(self.other * dt)
        run = 2 * e * self.base_ns + e / every * self.walk_ns + o * self.other_ns
        return ColdStep(dt, self.cpu * dt, 2 * e + o, e, int(run), 2 * e + o, 2 * e, dt * duty)

    def cost_s(self, dt: float, every: int, duty: float, watch_s: float) -> float:
        """What the cold probes really cost over a step."""
        s = self.step(dt, every, duty)
        return (s.cold_hits * TRAP_S + (s.bpf_run_ns or 0) * 1e-9
                + RECORDS_PER_WAIT * s.mutex_entries / every * watch_s)


def drive(gov: ColdGovernor, t: ColdTarget, steps: int, watch_s: float = 0.0,
          dt: float = 0.5) -> list[tuple[int, float]]:
    out = []
    for _ in range(steps):
        s = t.step(dt, gov.every, gov.duty)
        gov.elapsed(dt, s.linked_s)
        gov.step(s, TRAP_S, watch_s)
        out.append((gov.every, gov.duty))
    return out


def share_s(t: ColdTarget, dt: float = 1.0, budget: float = 0.01) -> float:
    return COLD_SHARE * budget * t.cpu * dt


def test_the_rates_split_what_sampling_cuts_from_what_it_cannot() -> None:
    gov = ColdGovernor(1.0)
    t = ColdTarget(cpu=2.0, entries=1000, other=100, base_ns=BASE_NS, other_ns=2000)
    other, m = gov.measure(t.step(1.0, 1), 1, TRAP_S, 1e-6)
    assert other == pytest.approx(100 * (TRAP_S + 2e-6))
    assert m is not None
    assert m.fixed == pytest.approx(2000 * (TRAP_S + BASE_NS * 1e-9))
    assert m.var1 == pytest.approx(1000 * 2e-6 + 2 * 1000 * 1e-6)
    assert MutexRates(1.0, 8.0).at(4) == 3.0
    # measured at 1 in 4, linked half the step: the same rates per second linked
    _, m4 = gov.measure(t.step(1.0, 4, 0.5), 4, TRAP_S, 1e-6)
    assert m4 is not None
    assert m4.fixed == pytest.approx(m.fixed) and m4.var1 == pytest.approx(m.var1)
    # paused throughout: nothing to say of the sites
    assert gov.measure(t.step(1.0, 4, 0.0), 4, TRAP_S, 1e-6)[1] is None


def test_contention_is_sampled_until_it_fits_its_share() -> None:
    """Tracing every contention costs ~0.35% of 4 CPUs, more than the cold share of a 1%
    budget; the governor goes at once to the smallest power of two that fits, and stays."""
    t = ColdTarget(cpu=4.0, entries=2_000)
    watch = 1.5e-6
    assert t.cost_s(1.0, 1, 1.0, watch) > share_s(t)
    gov = ColdGovernor(1.0)
    path = drive(gov, t, 10, watch)
    n = path[0][0]
    assert n > 1 and path == [(n, 1.0)] * 10
    assert t.cost_s(1.0, n, 1.0, watch) <= share_s(t)
    assert t.cost_s(1.0, n // 2, 1.0, watch) > share_s(t)
    assert not gov.traps_over and gov.every_max == n and gov.paused_s == 0
    assert gov.sampled_s == pytest.approx(9 * 0.5)  # from the first decision on
    assert gov.cold_pct() is not None


def test_traps_alone_over_the_share_link_the_sites_part_of_the_time() -> None:
    """Prometheus under wrk: ~7k lockSlow entries a second on ~1.5 CPUs. Its traps and
    untraced runs alone are over the cold share: 1 in 64 and the sites linked for a part of
    each period only, which the cost then fits."""
    t = ColdTarget(cpu=1.5, entries=7_000, other=500, base_ns=800)
    gov = ColdGovernor(1.0)
    path = drive(gov, t, 12, 1e-6)
    every, duty = path[-1]
    assert every == EVERY_MAX and gov.traps_over
    assert DUTY_MIN <= duty < 0.5
    assert t.cost_s(1.0, every, duty, 1e-6) <= share_s(t) * 1.15
    assert gov.paused_s > 0
    # where not even DUTY_MIN fits, it stays at DUTY_MIN (and says so: traps_over)
    g2 = ColdGovernor(1.0)
    drive(g2, ColdTarget(cpu=0.8, entries=55_000), 6)
    assert g2.duty == DUTY_MIN and g2.traps_over


def test_with_the_governor_the_budget_opens_hot_windows_again() -> None:
    """The token bucket fed the same steps: with every contention traced all the time its
    credit only falls and no window ever opens; governed, at least one every 2 s, and the
    whole stays within the budget."""
    def run(governed: bool) -> tuple[int, BudgetPlanner]:
        t = ColdTarget(cpu=1.5, entries=7_000, other=500, base_ns=800)
        p = BudgetPlanner(1.0, TRAP_S, 1.0, 0.2)
        p.set_prior(300_000, 2)
        gov = ColdGovernor(1.0)
        windows = 0
        for _ in range(30):  # periods of 1 s, accounted every 0.1 s; a window's hits cost
            w = p.next_window_s()
            windows += w > 0
            for i in range(10):
                duty = 1.0 if i < 10 * gov.duty else 0.0
                s = t.step(0.1, gov.every, duty)
                inside = max(0.0, min(w - 0.1 * i, 0.1))
                hot = int(300_000 * inside)
                p.account(0.1, s.target_cpu_s, s.cold_hits + hot,
                          (s.bpf_run_ns or 0) + hot * 1000, s.bpf_runs + hot, hot,
                          RECORDS_PER_WAIT * s.mutex_entries / gov.every)
                gov.elapsed(0.1, s.linked_s)
                if governed and hot == 0:
                    gov.step(s, TRAP_S, 0.0)
            if w:
                p.window_done(int(300_000 * w), w)
        return windows, p

    ungoverned, _ = run(False)
    governed, p = run(True)
    assert ungoverned <= 1  # the first window, on borrowed credit (budget.py)
    assert governed >= 15
    assert p.estimated_pct() <= 1.0 + 0.1


def test_when_the_load_drops_the_sites_come_back_then_every_contention() -> None:
    gov = ColdGovernor(1.0)
    drive(gov, ColdTarget(cpu=1.5, entries=7_000, base_ns=800), 4)
    assert gov.duty < 1.0 and gov.every == EVERY_MAX
    path = drive(gov, ColdTarget(cpu=1.5, entries=20), 12)
    assert path[0] == (EVERY_MAX, 1.0)  # linked throughout first, at 1 in 64
    assert path[1][0] == EVERY_MAX // 2  # then one halving a step
    assert path[-1] == (1, 1.0) and gov.every_max == EVERY_MAX
    # a steady load near the share does not swing
    gov = ColdGovernor(1.0)
    path = drive(gov, ColdTarget(cpu=4.0, entries=2_000), 20, 1.5e-6)
    assert len(set(path[1:])) == 1


def test_what_a_run_costs_is_learned_where_it_can_be_told() -> None:
    gov = ColdGovernor(1.0)
    t = ColdTarget(cpu=1.5, entries=7_000, other=500, base_ns=800, other_ns=2500)
    gov.every = 64
    gov.step(t.step(0.5, 64, 0.0), TRAP_S, 0.0)  # paused: every run is another probe's
    assert gov.other_ns == pytest.approx(2500)
    assert gov.base_ns == BASE_NS  # the sites made none of the runs
    gov.step(t.step(0.5, 64, 1.0), TRAP_S, 0.0)
    assert 800 < gov.base_ns < 800 + 2000 / 64 + 2500 * 500 / 14_000 + 1


def test_quiet_locks_are_never_cut_back() -> None:
    gov = ColdGovernor(1.0)
    assert gov.cold_pct() is None  # not measured yet: None, never 0
    assert drive(gov, ColdTarget(cpu=1.0, entries=100), 5) == [(1, 1.0)] * 5
    assert gov.every_max == 1 and gov.sampled_s == 0.0 and gov.paused_s == 0.0
    # an idle target (no CPU in the step) decides nothing
    assert gov.step(ColdStep(0.5, 0.0, 10, 5, 5000, 10), TRAP_S, 0.0) == 1


def test_cold_records_are_charged_gmpmons_cpu() -> None:
    p = BudgetPlanner(1.0, TRAP_S, 1.0, 0.2)
    p.set_watch(2e-6, 1.0)
    c0 = p.account(0.1, 0.1, 100, 0, 0, 0)
    c1 = p.account(0.1, 0.1, 100, 0, 0, 0, cold_records=50)
    assert c1 - c0 == pytest.approx(50 * 2e-6)


def test_the_header_says_what_was_cut_back() -> None:
    def status(**kw: object) -> CostStatus:
        return CostStatus(budget_pct=1.0, estimated_pct=0.9, recent_pct=0.9, cost_s=0.03,
                          target_cpu_s=3.0, windows=4, covered_s=0.05, hit_cost_s=TRAP_S,
                          bpf_ns_per_hit=1000, overstays=0, worst_overstay_ns=0, bursts=0,
                          **kw)  # type: ignore[arg-type]

    assert status().header_text() == "cost ~0.9% (budget 1%)"
    assert status(mutex_every=8, mutex_every_max=16, mutex_sampled_s=2.5).header_text() == (
        "cost ~0.9% (budget 1%); mutex: sampled 1 in 8 while over budget; 2.5s sampled "
        "(scaled)")
    assert status(mutex_every=64, mutex_every_max=64, mutex_sampled_s=1.0, mutex_duty=0.3,
                  mutex_paused_s=2.1, cold_traps_over=True).header_text() == (
        "cost ~0.9% (budget 1%); mutex: sampled 1 in 64 while over budget, linked 30% of "
        "the time; 1.0s sampled (scaled), 2.1s not linked (not seen: a lower bound)")


def test_the_model_weighs_each_sampled_wait_by_its_period_and_says_so() -> None:
    """Waits traced 1 in 4 count four times, in the totals and the tables; the quantity's
    coverage and the summary say they were sampled, and the mutex wait time is taken from
    the runtime's own counter first when it has one."""
    from gmpmon.export.json import summary
    from gmpmon.model.delta import since
    from tests.unit.test_model_scenarios import ev, run

    mutex = int(LockKind.MUTEX)
    evs = [ev(0, Kind.MUTEX_ADDR, g=3, a0=0xC000010, a1=mutex),
           ev(0, Kind.MUTEX, g=3, a0=1000, a1=7),
           ev(10, Kind.MUTEX_ADDR, g=4, a0=0xC000010, a1=mutex | 4 << 16),
           ev(10, Kind.MUTEX, g=4, a0=500, a1=7)]
    snap = run(evs, mode="default")
    assert snap.mutex_contentions == 5 and snap.mutex_wait_ns == 1000 + 4 * 500
    assert snap.mutex_by_addr == {0xC000010: (5, 3000)}
    assert snap.mutex_sampling == (1, 4)
    assert snap.waits_by_kind["sync.Mutex"] == (5, 3000)
    doc = summary(snap)
    assert doc["mutex"]["sampled"] == {"waits": 1, "every_max": 4}
    assert doc["mutex"]["coverage"].startswith("sampled 1 in up to 4 while over budget")
    exact = run(evs[:2], mode="default")
    assert summary(exact)["mutex"]["sampled"] is None
    assert summary(exact)["mutex"]["coverage"] == "exact"
    assert since(snap, exact).mutex_sampling == (1, 4)
    assert since(snap, exact).mutex_contentions == 4


def test_cold_cut_events_carry_the_cut_into_the_summary() -> None:
    from gmpmon.export.json import summary
    from tests.unit.test_model_scenarios import ev, run, us

    c = CostStatus(budget_pct=1.0, estimated_pct=0.9, recent_pct=0.9, cost_s=0.03,
                   target_cpu_s=3.0, windows=4, covered_s=0.05, hit_cost_s=TRAP_S,
                   bpf_ns_per_hit=1000, overstays=0, worst_overstay_ns=0, bursts=0,
                   mutex_every=64, mutex_every_max=64, mutex_sampled_s=2.5, cold_pct=0.45,
                   cold_traps_over=True, mutex_duty=0.25, mutex_paused_s=1.5)
    evs = cost_events(us(1), c)
    assert [e[1] for e in evs] == [Kind.COST, Kind.COLD_CUT]
    assert evs[1][4] & 0xFF == ColdGroup.MUTEX
    mutex = int(LockKind.MUTEX)
    snap = run([*evs, ev(2, Kind.MUTEX_ADDR, g=4, a0=0xC000010, a1=mutex | 64 << 16),
                ev(2, Kind.MUTEX, g=4, a0=500, a1=7), ev(4_000_000, Kind.COST, m=1000)],
               mode="default")
    doc = summary(snap)
    assert doc["cost"]["cut_back"] == [{
        "probes": "mutex contention", "every": 64, "every_max": 64, "sampled_ns": 2_500_000_000,
        "traps_over": True, "duty": 0.25, "paused_ns": 1_500_000_000,
        "text": "mutex contention: sampled 1 in 64 while over budget, linked 25% of the time; "
                "2.5s sampled (scaled), 1.5s not linked (not seen: a lower bound)"}]
    assert doc["mutex"]["coverage"] == (
        "sampled 1 in up to 64 while over budget (1 waits traced), scaled; its sites not "
        "linked 38% of the time: a lower bound")
    never = CostStatus(**{**c.__dict__, "mutex_every": 1, "mutex_every_max": 1,
                          "mutex_paused_s": 0.0, "mutex_duty": 1.0})
    assert [e[1] for e in cost_events(1_000, never)] == [Kind.COST]


def test_the_other_cold_probes_passing_the_share_do_not_squeeze_quiet_locks() -> None:
    """Caddy under wrk: ~1.9k hits/s of the other cold probes at ~2 µs pass the share alone,
    with no or a few contentions a second: nothing to divide by, nothing worth cutting."""
    for entries in (0, 2):
        gov = ColdGovernor(1.0)
        path = drive(gov, ColdTarget(cpu=1.5, entries=entries, other=1_900), 4)
        assert path == [(1, 1.0)] * 4 and not gov.traps_over


def test_the_line_names_only_what_was_cut() -> None:
    from gmpmon.model.cost import cut_back_text

    assert cut_back_text("mutex", 1, 1, 0.0) == ""
    assert cut_back_text("mutex", 1, 1, 0.0, 1.0, 0.4) == (
        "mutex: linked throughout again; 0.4s not linked (not seen: a lower bound)")
    assert cut_back_text("mutex", 1, 8, 2.0) == (
        "mutex: every one traced again (was 1 in 8); 2.0s sampled (scaled)")
