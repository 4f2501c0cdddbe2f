"""The parent's side of the hot-probe controller (gmpmon/capture/hotctl.py runs as its own
process): its config from the program's hot sites, the handle that starts it, reads its
window facts and cost status, and stops it."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gmpmon.capture.budget import CostStatus
from gmpmon.capture.coldgov import COLD_SHARE, MUTEX_HANDLERS
from gmpmon.capture.hotctl import HotConfig, target_cpu_s
from gmpmon.probetable import HANDLERS as HANDLER_NAMES

if TYPE_CHECKING:
    from gmpmon.capture.bpfprog import BpfProgram, ProbePlan
    from gmpmon.capture.sites import Site


def attach_cold(prog: BpfProgram, cold: list[Site], governed: bool) -> None:
    """Attach the cold sites; in default and sample modes the sync.Mutex ones as a link of
    their own ("mutex"), which the controller takes over and may pause (coldgov.py)."""
    mutex = [s for s in cold if s.probe.handler in MUTEX_HANDLERS] if governed else []
    prog.attach("cold", [s for s in cold if s not in mutex])
    prog.attach("mutex", mutex)


@dataclass
class WindowFact:
    on: bool
    ts: int
    planned_ns: int = 0  # on: the window's planned length (extended: the burst's length)
    overstay_ns: int = 0  # off: how far past its planned end it was detached
    burst: str = ""  # on: the trigger that asked for it ("" for a budgeted window)
    extended: bool = False  # on: a burst extended the window already open
    whole: bool = False  # on: every hot site is in since ts (planned_ns: how long that took)


def config_for(prog: BpfProgram, sites: list[Site], pid: int, budget_pct: float,
               window_ns: int, period_ns: int, prior: bool = False,
               mutex: list[Site] | None = None) -> HotConfig:
    """The controller's config for this program's hot sites (and its sync.Mutex sites, whose
    link the controller takes over: ``mutex_link_fd``)."""
    from gmpmon.capture.bpfprog import BPF_TRACE_UPROBE_MULTI

    fn = prog.bpf.load_func(b"gmpmon_probe", prog._kprobe_type, None, BPF_TRACE_UPROBE_MULTI)
    offsets = prog.file_offsets(sites)
    hit_cost = float(os.environ.get("GMPMON_HIT_COST_US", "0") or 0) * 1e-6
    return HotConfig(
        prog_fd=fn.fd, hits_fd=prog.bpf[b"hits"].map_fd, cfg_fd=prog.bpf[b"cfg"].map_fd,
        path=prog.path, offsets=offsets, cookies=[s.cookie for s in sites],
        hot_ids=sorted({s.hid for s in sites}),
        n_handlers=len(HANDLER_NAMES), pid=pid, budget_pct=budget_pct, window_ns=window_ns,
        period_ns=period_ns, hit_cost_s=hit_cost, prior=prior,
        mutex_link_fd=prog.link_fd("mutex") if mutex else -1,
        mutex_offsets=prog.file_offsets(mutex) if mutex else [],
        mutex_cookies=[s.cookie for s in mutex or ()],
    )


class HotControl:
    """The parent's handle on the controller process."""

    def __init__(self, cfg: HotConfig) -> None:
        fds = tuple(fd for fd in (cfg.prog_fd, cfg.hits_fd, cfg.cfg_fd, cfg.mutex_link_fd)
                    if fd >= 0)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gmpmon.capture.hotctl"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, pass_fds=fds, close_fds=True,
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(dataclasses.asdict(cfg)).encode() + b"\n")
        self.proc.stdin.flush()
        self._out = self.proc.stdout.fileno()
        os.set_blocking(self._out, False)
        self._buf = b""
        self.status: CostStatus | None = None
        self.hit_cost_s = 0.0
        self.errors: list[str] = []
        self._failed = False  # failure() said so
        self._stopping = False  # stop() asked it to exit
        self.cold_only = cfg.cold_only  # sample mode: the cold probes' governor, no window
        self.name = "cold-probe governor" if cfg.cold_only else "hot-window controller"
        self._held_mutex = bool(cfg.mutex_offsets)  # its exit detached the sync.Mutex sites

    def poll(self) -> list[WindowFact]:
        """Window facts since the last call (in order); updates status and errors."""
        facts: list[WindowFact] = []
        while True:
            try:
                chunk = os.read(self._out, 65536)
            except BlockingIOError:
                break
            if not chunk:
                break
            self._buf += chunk
        while b"\n" in self._buf:
            raw, self._buf = self._buf.split(b"\n", 1)
            line = raw.decode(errors="replace")
            tag, _, rest = line.partition(" ")
            if tag == "W":
                w = rest.split()
                if w[0] == "3":
                    facts.append(WindowFact(True, int(w[1]), planned_ns=int(w[2]), whole=True))
                elif w[0] in ("1", "2"):
                    facts.append(WindowFact(True, int(w[1]), planned_ns=int(w[2]),
                                            burst="" if w[3] == "-" else w[3],
                                            extended=w[0] == "2"))
                else:
                    facts.append(WindowFact(False, int(w[1]), overstay_ns=int(w[2])))
            elif tag == "C":
                self.status = CostStatus(**json.loads(rest))
            elif tag == "CAL":
                self.hit_cost_s = float(rest)
            elif tag == "E":
                self.errors.append(rest)
        return facts

    def burst(self, ms: float, name: str) -> None:
        self._send(f"burst {ms:g} {name}")

    def prior(self, hits_per_s: float, busy_ps: int) -> None:
        """Hot hits per second to expect and the Ps running, from the runtime's counters
        (budget.py)."""
        self._send(f"prior {hits_per_s:.1f} {busy_ps}")

    def watch_cost(self, cpu_per_hit_s: float) -> None:
        """gmpmon's own CPU per hot hit, as the parent measured it (BudgetPlanner)."""
        self._send(f"watch {cpu_per_hit_s:.9f}")

    def _send(self, line: str) -> None:
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(line.encode() + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass

    def alive(self) -> bool:
        return self.proc.poll() is None

    def failure(self) -> str | None:
        """Once, why the controller stopped mid-run (its own "E" line, or its exit code):
        default mode then goes on with no hot window and no governed cold probe, which the
        user must be told (capture hands it to the readers' stops). None while it runs."""
        if self._failed or self._stopping or (not self.errors and self.alive()):
            return None
        self._failed = True
        why = self.errors[0] if self.errors else f"exited with status {self.proc.returncode}"
        lost = ["no hot window opens"] if not self.cold_only else []
        if self._held_mutex:  # the sites' link was its own: its exit closed it
            lost.append("no sync.Mutex contention is traced")
        return f"{why}; {' and '.join(lost)} from here on"

    def stop(self, timeout: float = 2.0) -> list[WindowFact]:
        """Ask it to detach and exit; kill it (it is our child) if it does not in time."""
        self._stopping = True
        self._send("quit")
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.set_blocking(self._out, True)
        facts = self.poll()
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return facts


def start_hotctl(prog: BpfProgram, plan: ProbePlan, pid: int, budget_pct: float,
                 window_ns: int, period_ns: int, prior: bool = False,
                 cold_only: bool = False) -> HotControl | None:
    """The controller for default mode; None where it cannot run (no uprobe_multi links:
    capture then keeps the old in-thread duty cycle, and the sync.Mutex sites stay linked).
    It takes over the sync.Mutex sites' link: this process closes its own copy.

    ``cold_only`` (sample mode): the same controller with no hot site and no window, which
    governs the cold sync.Mutex probes under the budget (coldgov.py), started by
    LazyGovernor once they warrant it; None where there is nothing to govern (no sync.Mutex
    site) or no uprobe_multi link to pause."""
    from gmpmon.capture.bpfprog import uprobe_multi_supported

    sites = [] if cold_only else plan.hot
    if (not sites and not cold_only) or not uprobe_multi_supported():
        return None
    if os.environ.get("GMPMON_NO_HOTCTL", "") not in ("", "0"):
        return None
    mutex = [s for s in plan.cold if s.probe.handler in MUTEX_HANDLERS]
    if prog.link_fd("mutex") < 0:
        mutex = []
    if cold_only and not mutex:
        return None
    cfg = config_for(prog, sites, pid, budget_pct, window_ns, period_ns, prior, mutex)
    cfg.cold_only = cold_only
    ctl = HotControl(cfg)
    if mutex:
        prog.detach("mutex")  # the controller holds the link now (its copy of the fd)
    return ctl


# Sample mode's governor starts only once the sync.Mutex probes cost enough to govern
# (LazyGovernor): over LAZY_SHARE of the cold share, at CONTENTION_COST_S a contention traced
# whole (two traps of ~0.8 µs, the entry's user-stack walk ~2.8 µs, the exit's run; coldgov.py).
CONTENTION_COST_S = 5e-6
LAZY_SHARE = 0.5
LAZY_MIN_RATE = 50.0  # lockSlow entries a second below which nothing is worth a process
LAZY_STEP_NS = 500_000_000  # how long each look at the rate lasts
_LOCK_ENTER = HANDLER_NAMES.index("lock_enter")


class LazyGovernor:
    """Sample mode's cold-probe governor (``cold_only``), started only when the sync.Mutex
    probes' hits warrant it. Running all the time, it cost ~0.2-0.4% of a core (its process,
    its link's pauses, the parent's reads of its reports) on targets with almost no
    contention to govern: Caddy (~2 contentions a second) and the lab's net/http. Capture
    feeds it the lockSlow entries its counter reads see; once, in a step of LAZY_STEP_NS,
    tracing every one of them would cost the target more than LAZY_SHARE of the governor's
    cold share of the budget (at least LAZY_MIN_RATE a second), ``start`` runs it, and it
    stays for the rest of the run (it un-cuts the probes itself when they quieten). Until
    then every contention is traced and the summary has no ``cost``."""

    def __init__(self, start: Callable[[], HotControl | None], pid: int, budget_pct: float,
                 now_ns: int) -> None:
        self._start = start
        self.pid = pid
        self.allowed = LAZY_SHARE * COLD_SHARE * budget_pct / 100.0  # of the target's CPU
        self.entries = 0
        self._since = now_ns
        self._cpu = self._target_cpu()

    def _target_cpu(self) -> float:
        try:
            return target_cpu_s(self.pid)
        except (OSError, ValueError, IndexError):
            return -1.0

    def count(self, deltas: list[tuple[int, int]]) -> None:
        """One counter read's hit deltas (BpfProgram.hit_deltas)."""
        for probe, delta in deltas:
            if probe == _LOCK_ENTER:
                self.entries += delta

    def due(self, now_ns: int) -> bool:
        """Whether the governor should run now (checked at most once a step)."""
        dt = (now_ns - self._since) * 1e-9
        if dt < LAZY_STEP_NS * 1e-9:
            return False
        cpu = self._target_cpu()
        entries, cpu0 = self.entries, self._cpu
        self._since, self._cpu, self.entries = now_ns, cpu, 0
        if cpu < 0 or cpu0 < 0 or entries < LAZY_MIN_RATE * dt:
            return False
        return entries * CONTENTION_COST_S > self.allowed * (cpu - cpu0)

    def start(self) -> HotControl | None:
        return self._start()
