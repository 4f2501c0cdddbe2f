"""The cold probes under the budget: how many sync.Mutex contentions to trace, and for how
much of the time.

Pure arithmetic, like budget.py; the controller (gmpmon.capture.hotctl) feeds it what one
accounting step measured and carries out its answer: the sampling period N goes to the
program's ``cfg[2]`` (probes/gmpmon.bpf.c: on_lock_enter traces 1 contention in N, chosen at
random), the duty ``d`` says for what share of each period the sync.Mutex sites stay linked.

The cold probes are always attached in the other modes, but on a real server they are not
rare: Debian's Prometheus under wrk enters ``sync.(*Mutex).lockSlow`` 4.5-7k times a second
and leaves it as often, each traced entry walking the user stack (~2.8 µs of program a hit
with every one traced), each traced wait two ring records for gmpmon to read. That alone
cost 1.4-4% of its CPU, the token bucket stayed in debt, and default mode opened no hot
window at all (issue 26).

So the cold probes get at most ``COLD_SHARE`` of what the budget earns; the rest is for hot
windows. A step's cold cost is, per second:

- the other cold probes' (STW, hand-offs, preemption requests): their traps and runs;
- per second the sync.Mutex sites are linked: a fixed part, each hit's trap and the program's
  run for a hit that traces nothing (``base_ns``), and a part that falls as 1/N: the rest of
  the program's run time (the user-stack walks, the records) and gmpmon's CPU for the
  records (``watch_s_per_record``, as contended: budget.py).

N is the smallest power of two whose prediction fits the share with the sites always linked,
up at once, down by one halving a step and only with room to spare (``DOWN_ROOM``), so it
does not swing. Sampling cannot cut a trap: where even ``EVERY_MAX`` does not fit, the sites
are linked for a share ``d`` of each period only (at least ``DUTY_MIN``), and the waits of
the rest of the time are not seen: the counts become a lower bound, and the header and the
summary say so. On Prometheus the traps and the untraced runs alone came to ~1.3% of its CPU.

``base_ns`` is learned (``BASE_NS`` until then): at 1 in ``BASE_EVERY`` or fewer, the stack
walks are a small part of a run.

Only steps with no hot hit decide: the program's run time (BPF stats) is one figure for every
probe, and between windows it is the cold probes' alone.
"""

from __future__ import annotations

from dataclasses import dataclass

# Of the budget's earnings, at most this for the cold probes: a hot window on Prometheus
# (5 ms and its sites' way in and out, ~850k hits/s at ~2.6 µs) costs ~2% of a CPU-second,
# more than a second's whole budget; the cold probes must leave room for one every 2 s.
COLD_SHARE = 0.25
BASE_EVERY = 16
BASE_MUTEX_SHARE = 0.8
EWMA = 0.5
EVERY_MAX = 64
DOWN_ROOM = 0.6  # N halves (d grows) only when the prediction is under this x the share
BASE_NS = 600.0  # a run that traces nothing, until learned (~430 ns on lockhot, Go 1.22;
#                  ~790 ns on Prometheus, Go 1.19, which marks untraced entries: bpf.c)
DUTY_MIN = 0.05
MUTEX_FLOOR = 0.5  # of the cold share, for the sync.Mutex probes whatever the others cost
OTHER_NS = 2000.0  # the other cold probes' run, until learned (2-3 µs on Prometheus: STW,
#                    preemption requests and hand-offs read the runtime's memory and emit)
RECORDS_PER_WAIT = 2  # MUTEX_ADDR + MUTEX
# Names in the probe table of the governed group (gmpmon/probetable.py)
MUTEX_HANDLERS = ("lock_enter", "lock_exit")


@dataclass(frozen=True)
class ColdStep:
    """What one accounting step with no hot hit measured."""

    dt_s: float
    target_cpu_s: float
    cold_hits: int  # hits of every cold probe (the sync.Mutex ones included)
    mutex_entries: int  # lockSlow entries (hits of lock_enter): every contention while linked
    bpf_run_ns: int | None  # the program's run time (None: no BPF stats)
    bpf_runs: int
    mutex_hits: int = -1  # hits of the sync.Mutex sites (-1: 2 x entries)
    linked_s: float = -1.0  # how long the sync.Mutex sites were linked (-1: all of dt_s)


@dataclass(frozen=True)
class MutexRates:
    """The sync.Mutex sites' cost per second linked: ``fixed`` (traps and untraced runs) and
    ``var1`` (what tracing every contention adds: at 1 in N, var1 / N)."""

    fixed: float
    var1: float

    def at(self, every: int) -> float:
        return self.fixed + self.var1 / every


class ColdGovernor:
    """The sync.Mutex probes' sampling period and duty, and what they cost in coverage."""

    def __init__(self, budget_pct: float, share: float = COLD_SHARE) -> None:
        self.budget = budget_pct / 100.0
        self.share = share
        self.every = 1
        self.every_max = 1  # the largest period so far
        self.duty = 1.0  # the share of each period the sync.Mutex sites are linked
        self.duty_min_seen = 1.0
        self.sampled_s = 0.0  # seconds during which 1 in N > 1 was traced
        self.paused_s = 0.0  # seconds during which the sites were not linked
        self.base_ns = BASE_NS
        self.rates: MutexRates | None = None
        self._base_seen = False
        self.other_ns = OTHER_NS  # the other cold probes' run (learned where paused)
        self._other_seen = False
        self.cold_cost_s = 0.0  # the cold probes' cost over the deciding steps
        self.cold_cpu_s = 0.0  # the target's CPU over the same steps
        self.traps_over = False  # at the last decision even EVERY_MAX did not fit
        self.decided = 0

    def _learn_base(self, step: ColdStep, every: int) -> None:
        """At 1 in 16 or fewer the stack walks are under 1/16 of what they were: a run is
        then mostly what one that traces nothing costs, where the sync.Mutex sites made
        most of the runs (the other cold probes' cost 2-3 µs a run on Prometheus: learned
        from a step where the sites were paused, they had the sites' duty cut to 5%)."""
        mhits = step.mutex_hits if step.mutex_hits >= 0 else 2 * step.mutex_entries
        if (step.bpf_run_ns is None or step.bpf_runs <= 0 or every < BASE_EVERY
                or mhits < BASE_MUTEX_SHARE * step.bpf_runs):
            return
        r = step.bpf_run_ns / step.bpf_runs
        self.base_ns = r if not self._base_seen else EWMA * r + (1 - EWMA) * self.base_ns
        self._base_seen = True

    def _learn_other(self, step: ColdStep) -> None:
        """A step with the sync.Mutex sites paused throughout: every run was another cold
        probe's."""
        if (step.bpf_run_ns is None or step.bpf_runs <= 0 or step.linked_s < 0
                or step.linked_s > 0.01 * step.dt_s):
            return
        r = step.bpf_run_ns / step.bpf_runs
        self.other_ns = r if not self._other_seen else EWMA * r + (1 - EWMA) * self.other_ns
        self._other_seen = True

    def measure(self, step: ColdStep, every: int, hit_cost_s: float,
                watch_s_per_record: float) -> tuple[float, MutexRates | None]:
        """(the other cold probes' cost per second, the sync.Mutex sites' rates per second
        linked, None when they were not linked long enough to tell) for one step."""
        mhits = step.mutex_hits if step.mutex_hits >= 0 else 2 * step.mutex_entries
        linked = step.dt_s if step.linked_s < 0 else min(step.linked_s, step.dt_s)
        others = max(step.cold_hits - mhits, 0)
        other = others * (hit_cost_s + self.other_ns * 1e-9) / step.dt_s
        if linked < 0.05 * step.dt_s:
            return other, None
        run_ns = step.bpf_run_ns if step.bpf_run_ns is not None else step.bpf_runs * self.base_ns
        mutex_ns = max(run_ns - others * self.other_ns, 0.0)
        var = (max(mutex_ns - mhits * self.base_ns, 0.0) * 1e-9
               + RECORDS_PER_WAIT * step.mutex_entries / every * watch_s_per_record)
        per_hit = hit_cost_s + self.base_ns * 1e-9
        return other, MutexRates(mhits * per_hit / linked, var * every / linked)

    def step(self, step: ColdStep, hit_cost_s: float, watch_s_per_record: float) -> int:
        """One step with no hot hit in it: returns the sampling period from now on (the
        duty is ``self.duty``)."""
        if step.dt_s <= 0 or step.target_cpu_s <= 0:
            return self.every
        self.decided += 1
        every = self.every
        self._learn_base(step, every)
        self._learn_other(step)
        other, rates = self.measure(step, every, hit_cost_s, watch_s_per_record)
        if rates is not None:
            self.rates = rates
        linked = step.dt_s if step.linked_s < 0 else min(step.linked_s, step.dt_s)
        m = self.rates
        self.cold_cost_s += (other + (m.at(every) * linked / step.dt_s if m else 0.0)) * step.dt_s
        self.cold_cpu_s += step.target_cpu_s
        if m is None or m.at(1) <= 0:
            return every  # not measured, or no contention to cut
        # What the other cold probes leave of the share, and at least MUTEX_FLOOR of it: they
        # are not governed, and squeezing the sync.Mutex probes cannot pay for them (Caddy
        # under wrk: ~2k hits/s of them passed the share alone, with ~2 contentions a second)
        share = self.share * self.budget * step.target_cpu_s / step.dt_s
        allowed = max(share - other, MUTEX_FLOOR * share)

        def smallest(limit: float) -> int | None:
            n = 1
            while n <= EVERY_MAX:
                if m.at(n) <= limit:
                    return n
                n *= 2
            return None

        up = smallest(allowed)
        self.traps_over = up is None
        if up is None:
            new, duty = EVERY_MAX, max(allowed, 0.0) / m.at(EVERY_MAX)
            if duty > self.duty:  # back up with room to spare, as N comes down
                duty = max(self.duty, max(DOWN_ROOM * allowed, 0.0) / m.at(EVERY_MAX))
            self.duty = min(max(duty, DUTY_MIN), 1.0)
        elif self.duty < 1.0:
            # linked part of the time, and now even linked throughout it fits: link it
            # throughout only with room to spare, else a little longer
            full = m.at(EVERY_MAX) <= DOWN_ROOM * allowed
            self.duty = 1.0 if full else min(max(DOWN_ROOM * allowed / m.at(EVERY_MAX),
                                                 self.duty), 1.0)
            new = EVERY_MAX
        elif up > every:
            new = up
        else:
            down = smallest(DOWN_ROOM * allowed)
            new = max(down, every // 2, 1) if down is not None and down < every else every
        self.every = new
        self.every_max = max(self.every_max, new)
        self.duty_min_seen = min(self.duty_min_seen, self.duty)
        return new

    def elapsed(self, dt_s: float, linked_s: float) -> None:
        """Time passes (every step, windows or not): ``linked_s`` of it with the sync.Mutex
        sites linked."""
        if self.every > 1:
            self.sampled_s += max(linked_s, 0.0)
        self.paused_s += max(dt_s - linked_s, 0.0)

    def cold_pct(self) -> float | None:
        """The cold probes' cost as the deciding steps measured it, % of the target's CPU
        over them (None: none measured)."""
        if self.cold_cpu_s <= 0:
            return None
        return 100.0 * self.cold_cost_s / self.cold_cpu_s
