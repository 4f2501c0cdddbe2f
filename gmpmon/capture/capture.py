"""Capture: probes + sampler of one target -> timestamp-ordered Batches of events.

One reader thread polls everything every ~10 ms (20 ms in sample mode): the ring buffer (by
mmap, in bulk), the sampler (50 Hz, sample/default modes), the in-kernel counters (as COUNTER
deltas, so that a replayed recording adds up to the same numbers), lost records, and the duty
cycle of the hot probes in default mode (WINDOW events). Events are merged into timestamp
order through a small reorder window and handed out as Batches through a queue.
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import functools
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import compress
from operator import itemgetter

from gmpmon.binary.info import BinaryInfo
from gmpmon.capture.bpfprog import BpfProgram, ProbePlan, plan_probes
from gmpmon.capture.budget import CostStatus, prior_hits_per_s
from gmpmon.capture.cgroup import CgroupCpuReader
from gmpmon.capture.gosites import GoSites
from gmpmon.capture.hotparent import HotControl, LazyGovernor, WindowFact, attach_cold, start_hotctl
from gmpmon.capture.kernelsources import DEFAULT_KERNEL, KernelSources
from gmpmon.capture.perfsample import SAMPLE_HZ
from gmpmon.capture.pipeline import BatchQueue, ring_ledger
from gmpmon.capture.readernotes import ReaderNotes
from gmpmon.capture.ringbuf import RingBufReader
from gmpmon.capture.runtime_sources import RuntimeSources
from gmpmon.capture.sampler import Sampler
from gmpmon.capture.stacksym import MutexStacks, fix_go_sites
from gmpmon.capture.targetmem import ExitWatch, exe_id, gone
from gmpmon.capture.triggers import Flight, TriggerSpec
from gmpmon.capture.watchcost import PriorRate, WatchCost, cost_events, window_event
from gmpmon.errors import CaptureError, GmpmonError
from gmpmon.events import LOST_IN_BAND, Batch, Counter, EventTuple, Kind, RtFeature, Stage
from gmpmon.priority import name_thread

MODES = ("sample", "default", "full")
POLL_S = 0.010
# The memory sampler's P status reads: 50 Hz (a read of 2 Ps ~30 µs, a wakeup 20-30 µs: at
# 100 Hz a third of sample mode's CPU on an idle target). On-CPU: the perf sampler's 99 Hz.
SAMPLE_NS = 20_000_000
COUNTER_NS = 100_000_000  # full mode; default (and sample, at 4 Hz) modes' counters (cold probes,
COUNTER_SAMPLE_NS = 200_000_000  # sampler, cgroup) move slowly: a read of them all is ~300 µs
# Records of different CPUs reach the ring buffer a few µs out of timestamp order; a record
# is released once it is this much older than the newest poll.
REORDER_NS = 3_000_000
# Sample mode hands the model a batch every 250 ms (the rings are read then), not every poll:
# a batch's fixed part (ring reads, release, queue, feed, frame; the model's and recorder's
# wakeups) is ~0.4 ms, ~0.3% of a core on Prometheus at 50 ms. Default mode with its windows
# timed by hotctl every 100 ms; full mode, the in-thread duty cycle and triggers (they watch
# the released records) release every poll. The runtime sources are polled at 10 Hz apart.
RELEASE_SAMPLE_NS, RELEASE_WINDOWS_NS, RUNTIME_NS = 250_000_000, 100_000_000, 100_000_000
# Default mode: how often gmpmon's own CPU per probe hit goes to the budget (hotctl).
WATCH_NS = 250_000_000
CUT_BACKLOG = 20_000  # records left in the ring at stop beyond which they are only counted
_LOST = int(Kind.LOST)


@dataclass
class CaptureStats:
    records: int = 0
    lost: int = 0
    samples: int = 0
    windows: int = 0
    polls: int = 0
    cpu_s: float = 0.0  # CPU time of the reader thread (records/cpu_s = ingest capacity)


class Capture:
    """Live capture of one Go process. ``start()``, then ``get_batch()`` until it returns
    None after ``stop()`` or the target's exit."""

    def __init__(
        self,
        info: BinaryInfo,
        pid: int,
        mode: str = "default",
        window_ms: int = 200,
        period_ms: int = 1000,
        stop_on_exit: bool = True,
        defer_sampler: bool = False,
        census_s: float = 1.0,
        budget_pct: float = 1.0,
        triggers: Sequence[TriggerSpec] = (),
        burst_ms: float = 500.0,
        kernel: tuple[str, ...] = DEFAULT_KERNEL,
        sample_hz: int = SAMPLE_HZ,
    ) -> None:
        if mode not in MODES:
            raise CaptureError(f"unknown mode {mode!r}")
        self.info = info
        self.pid = pid
        self.mode = mode
        self.window_ns = window_ms * 1_000_000
        self.period_ns = period_ms * 1_000_000
        self.stop_on_exit = stop_on_exit
        self.defer_sampler = defer_sampler  # `run`: the target has not exec'd yet
        # `run` of a PIE: where its code is mapped is known only after the exec, and the
        # program runs meanwhile (its first mutex waits, go statements and CPU samples come
        # before `set_load_bias` on a loaded machine). Until then nothing is symbolized: the
        # uprobe records wait in _pending, the perf samples in their ring.
        self._bias_wait = defer_sampler and info.pie
        self.plan: ProbePlan = plan_probes(info)
        self.stats = CaptureStats()
        self.prog: BpfProgram | None = None
        self.ring: RingBufReader | None = None
        self.sampler: Sampler | None = None
        self.sampler_error = ""
        self.readers = ReaderNotes()  # readers of the target's memory that stopped or skipped
        # The runtime's counters and the goroutine census, in every mode (no probe).
        self.census_s = census_s
        self.runtime: RuntimeSources | None = None
        self.target_exited = False
        self.exit_reason = ""  # "exited", or "exec'd another program"
        # (dev, ino) of the image we probe. For attach, taken now, right after its binary was
        # read: attaching (compiles) takes seconds, and an exec meanwhile must be noticed, not
        # taken for the image we probe. For `run`, after the child's exec (start_sampler).
        self._exe_id: tuple[int, int] | None = None if defer_sampler else exe_id(pid)
        self._exits = ExitWatch(pid)  # the liveness check's cheap part (targetmem.py)
        self._q = BatchQueue()  # bounded in events; drops counted (gmpmon/capture/pipeline.py)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pending: list[EventTuple] = []
        self._mutex_stacks = MutexStacks()
        self.go_sites = GoSites(info)  # GO_CREATE a1 and the census's per-G sites
        self._hot_on = False
        self.budget_pct = budget_pct
        self.hotctl: HotControl | None = None  # default mode: the budgeted window controller
        self._lazy: LazyGovernor | None = None  # sample mode's, till it starts (hotparent.py)
        self._cost_sent: CostStatus | None = None
        # gmpmon's own CPU per record, for the budget (hotctl's "watch"): this thread's time
        # reading and releasing records, and the model thread's feeding them (charge_model).
        self._watch_cpu = 0.0
        self._model_cpu = 0.0
        self._hits_total = 0  # probe hits, from the hit counters
        self._watch = WatchCost()
        self._next_watch = 0
        self._prior = PriorRate()
        self._ring_prev: dict[int, int] = {}  # Counter.RING totals already sent
        self._ring_cut = 0  # records left unread in the ring at the end (CUT_AT_END)
        self._inband_lost = 0  # ring losses reported by in-band LOST marks (and the rest)
        self.flight = Flight(list(triggers), burst_ms) if triggers else None
        self.release_ns = RELEASE_SAMPLE_NS if mode == "sample" and not self.flight else 0
        # sample mode: with each release (4 Hz), in the same wakeup
        self.counter_ns = {"full": COUNTER_NS, "sample": RELEASE_SAMPLE_NS}.get(mode,
                                                                               COUNTER_SAMPLE_NS)
        # Sample mode without triggers has nothing due between two P status reads.
        self.poll_s = SAMPLE_NS / 1e9 if self.release_ns else POLL_S
        self._error: BaseException | None = None
        self.cgroup = CgroupCpuReader(pid)  # CGROUP_CPU events, every mode (findings)
        self.kernel = KernelSources(info, pid, kernel, sample_hz)  # perf samples, tracepoints

    # --- lifecycle -----------------------------------------------------------------------

    @property
    def features(self) -> tuple[str, ...]:
        f = list(self.plan.features)
        if self.mode != "full":
            f.append("sample")
        f += [f"kernel:{k}" for k in self.kernel.which]
        return tuple(f)

    def prepare(self) -> None:
        """Compile and attach the always-on probes (and all of them in full mode)."""
        if self.prog is not None:
            return
        self.prog = BpfProgram(self.info, self.pid, self.plan, cold_only=bool(self.release_ns))
        self.prog.set_load_bias(self.info.load_bias)
        self.prog.set_hot_off(self.mode == "default")  # till a window: gm_count_windowed
        self.ring = RingBufReader(self.prog.ringbuf_fd(),
                                  self.prog.ring_pages * os.sysconf("SC_PAGESIZE"))
        # Everything is compiled before anything is attached: a compile (seconds on a cache
        # miss) between the probes' first records and the sampler's first P states starts
        # the capture that much earlier, every P in whatever state a probe left it (a 2-s
        # capture of Go 1.19 read 4 s, half of it "searching"). The probes attach first:
        # where they cannot, that is the one error said.
        self.kernel.compile()
        try:
            attach_cold(self.prog, self.plan.cold, governed=self.mode != "full")
            if self.mode == "full":
                self.prog.attach("hot", self.plan.hot)
                self._hot_on = True
        except BaseException:
            self.close()
            raise
        self.kernel.attach()
        if not self.defer_sampler:
            self.start_sampler()

    hot_on = property(lambda self: self._hot_on, doc="The hot probes are attached now.")

    def inputs(self) -> list[tuple[str, str, str]]:
        """(name, state, detail) of each input: what gmpmon.source.InputState reports."""
        hot, cold = len(self.plan.hot), len(self.plan.cold)
        if self.mode == "sample":
            probes = ("on", f"{cold} cold sites (sample mode: no hot probes)")
        elif self.mode == "default":
            probes = ("windowed", f"{hot} hot sites duty-cycled, {cold} cold sites")
        else:
            probes = ("on", f"{hot} hot and {cold} cold sites")
        if self.mode == "full":
            sampler = ("off", "full mode reads no scheduler state from memory")
        elif self.sampler is not None:
            sampler = ("on", "")
        elif self.sampler_error:
            sampler = ("failed", self.sampler_error)
        else:
            sampler = ("deferred", "starts when the target has exec'd")
        runtime = ("on", "") if self.runtime is not None else ("off", "")
        rows = [("probes", *probes), ("sampler", *sampler), ("runtime", *runtime)]
        active = self.kernel.active
        for k in self.kernel.which:
            name = "perf samples" if k == "samples" else f"tracepoints:{k}"
            rows.append((name, "on" if k in active else "off", ""))
        return rows

    def _sampler_failed(self, now: int, e: GmpmonError) -> None:
        self.sampler.close()  # type: ignore[union-attr]  # the one that just failed
        self.sampler = None
        self.sampler_error = f"stopped: {e.one_line()}"
        self.readers.stopped("P sampler", e, (RtFeature.P_SAMPLES,), now)

    def failures(self) -> list[tuple[str, int]]:
        """(one line, exit code) of each reader that stopped mid-run, in order (the report
        and summary say which part and why: capture/readernotes.py)."""
        return list(self.readers.stops)

    def skipped(self) -> list[tuple[str, int]]:  # readers that skipped reads and went on
        return self.readers.skip_lines()

    def notes(self) -> list[str]:
        """One line each about an input that was left out or turned off (said once, at
        start, by the headless printer)."""
        out = list(self.runtime.errors) if self.runtime is not None else []
        return out + list(self.kernel.notes)

    def set_load_bias(self, bias: int) -> None:
        """`run` of a PIE: the load bias is known only after exec."""
        if bias != self.info.load_bias:
            self.info = dataclasses.replace(self.info, load_bias=bias, pid=self.pid)
            self.go_sites.rebind(self.info)
            self.kernel.rebind(self.info)
        if self.prog is not None:
            self.prog.set_load_bias(bias)
        self._bias_wait = False  # last: the reader thread may symbolize from here on

    def use_checked(self, info: BinaryInfo) -> None:
        """`run`: the BinaryInfo after the layout checks (gate_layout), once exec'd."""
        self.info = info
        if self.prog is not None:
            self.prog.info = info
            self.prog.set_load_bias(info.load_bias)

    def start_sampler(self) -> None:
        """Open the target's memory (sample and default modes). For `run`, only after exec:
        /proc/PID/mem opened earlier keeps pointing at the pre-exec address space."""
        if self._exe_id is None:
            self._exe_id = exe_id(self.pid)
        if self.runtime is None:
            with contextlib.suppress(OSError):
                self.runtime = RuntimeSources(
                    self.info, self.pid, census_s=self.census_s, starting=self.defer_sampler,
                    sites=self.go_sites, notes=self.readers,
                )
        if self.mode == "full" or self.sampler is not None:
            return
        try:
            self.sampler = Sampler(self.info, self.pid, starting=self.defer_sampler)
            self.readers.watch("P sampler", RtFeature.P_SAMPLES, self.sampler.skips)
        except (ValueError, KeyError, OSError) as e:
            self.sampler_error = str(e)

    def start(self) -> None:
        if self.prog is None:
            self.prepare()
        self._thread = threading.Thread(target=self._run, name="gmpmon-capture", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Detach every probe, drain what is left, end the batch stream."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self.close()

    def request_stop(self) -> None:  # end the batch stream soon (any thread; stop() waits)
        self._stop.set()

    def close(self) -> None:
        if self.prog is not None:
            self.prog.detach("hot")
            self.prog.detach("cold", "mutex")
        if self.ring is not None:
            self.ring.close()
            self.ring = None
        if self.prog is not None:
            self.prog.close()
            self.prog = None
        if self.sampler is not None:
            self.sampler.close()
            self.sampler = None
        if self.runtime is not None:
            self.runtime.close()
            self.runtime = None
        self.kernel.close()
        self._exits.close()

    def nudge(self) -> None:  # wake get_batch()'s waiter with an empty Batch
        self._q.put(Batch())

    def get_batch(self, timeout: float | None = None) -> Batch | None:
        """The next Batch; None at the end of the stream. Raises queue.Empty on timeout."""
        b = self._q.get(timeout=timeout)
        if b is None:
            self._q.put_end()  # keep answering None
            if self._error is not None:
                raise CaptureError(f"capture failed: {self._error}")
        return b

    # --- reader thread -------------------------------------------------------------------

    def _run(self) -> None:
        name_thread()
        try:
            self._loop()
        except BaseException as e:  # surfaced to the consumer by get_batch
            self._error = e
        finally:
            with contextlib.suppress(Exception):
                self._detach_all_and_drain()
            self._q.put_end()

    def _loop(self) -> None:
        assert self.prog is not None
        now = time.monotonic_ns()
        next_sample = now
        next_counters = now + self.counter_ns
        next_alive = now
        cycle_start = next_release = next_runtime = now
        if self.mode != "full":  # sample mode: the cold probes' governor only, when due
            rc = self.runtime is not None and self.runtime.counters is not None
            start = functools.partial(start_hotctl, self.prog, self.plan, self.pid, self.budget_pct,
                                      self.window_ns, self.period_ns, prior=rc,
                                      cold_only=self.mode == "sample")
            self.hotctl = start() if self.mode == "default" else None
            if self.mode == "sample":
                self._lazy = LazyGovernor(start, self.pid, self.budget_pct, now)
            elif self.hotctl is None:
                self._hot_attach()
            elif not self.flight:
                # The controller times the windows in its own process: nothing here is due every
                # 10 ms. A window's records (~30k/s on net/http) wait in the 16 MiB ring.
                self.release_ns = RELEASE_WINDOWS_NS
                self.poll_s = SAMPLE_NS / 1e9
        cpu0 = time.thread_time()
        while not self._stop.is_set():
            t0 = time.monotonic_ns()
            release = t0 >= next_release
            if self.hotctl is not None and (release or not self.hotctl.cold_only):  # sample: 4 Hz
                self._window_facts(self.hotctl.poll())
                if (why := self.hotctl.failure()) is not None:  # said at the end, as a stop
                    self.readers.stopped(self.hotctl.name, CaptureError(why), (), t0)
                self._cost_event(t0)
                if t0 >= self._next_watch:
                    self._watch_report()
                    self._prior_report(t0)
                    self._next_watch = t0 + WATCH_NS
            elif self.mode == "default" and self.hotctl is None:  # the in-thread duty cycle
                phase = (t0 - cycle_start) % self.period_ns
                if self._hot_on and phase >= self.window_ns:
                    self._hot_detach()
                elif not self._hot_on and phase < self.window_ns:
                    self._hot_attach()
            if release:
                # Sample mode reads the rings when it releases (every 250 ms, not at every
                # 20-ms poll: a read costs ~40 µs however few records it finds); the uprobe
                # ring holds seconds of its cold probes, the perf ring ~9 s of samples.
                w0 = time.thread_time()
                self._read_ring()
                self._watch_cpu += time.thread_time() - w0
            if t0 >= next_runtime:
                self._poll_runtime(t0)  # counters due at 10 Hz, censuses and notes: no hurry
                next_runtime = t0 + RUNTIME_NS
            if self.sampler is not None and t0 >= next_sample:
                try:
                    self.sampler.sample(self._pending)
                    self.stats.samples += 1
                except OSError:
                    if not self._alive():
                        self.target_exited = True
                except GmpmonError as e:  # an implausible pointer: stop sampling, go on
                    self._sampler_failed(t0, e)
                next_sample = t0 + SAMPLE_NS
            if t0 >= next_counters:
                self.stats.cpu_s = time.thread_time() - cpu0  # a syscall: not every poll
                # stamped when read: the ring read since t0 takes ms under load
                c0 = time.monotonic_ns()
                self._read_counters(c0)
                read_ns = time.monotonic_ns() - c0
                if self._lazy is not None and self._lazy.due(t0):
                    self.hotctl, self._lazy = self._lazy.start(), None
                # Many Ps make the counter map big (per-P latency buckets, the steal matrix):
                # reading it may take at most a tenth of the reader's time: the read's own
                # (from t0, a busy ring's read spaced full mode's reads up to 0.8 s apart).
                next_counters = t0 + max(self.counter_ns, 10 * read_ns)
            if t0 >= next_alive:
                if not self._alive():
                    self.target_exited = True
                next_alive = t0 + 100_000_000
            if release and not self._bias_wait:
                w0 = time.thread_time()
                self._release(t0 - REORDER_NS)
                self._watch_cpu += time.thread_time() - w0
                next_release = t0 + self.release_ns
            self.stats.polls += 1
            if self.target_exited and self.stop_on_exit:
                break
            time.sleep(self.poll_s)

    def _alive(self) -> bool:
        """Still the process we attached to. An exec'd target counts as gone: the probes
        sit in the old binary's inode and the sampler's offsets describe the old image."""
        why = gone(self.pid, self._exe_id, self._exits)
        if why:
            self.exit_reason = self.exit_reason or why
        return not why

    def _detach_all_and_drain(self) -> None:
        if self.prog is None:
            return
        if self.hotctl is not None:
            self._window_facts(self.hotctl.stop())
            self._cost_event(time.monotonic_ns())
        if self._hot_on and self.mode == "default" and self.hotctl is None:
            self._hot_detach()
        else:
            self.prog.detach("hot")
            self._hot_on = False
        self.prog.detach("cold", "mutex")
        if self._stop.is_set() and self.ring is not None and self.ring.backlog() > CUT_BACKLOG:
            # --duration / Ctrl-C: a full ring is not decoded after the end, only counted.
            n = self.ring.skip()
            self._ring_cut += n
            self._pending.append((time.monotonic_ns(), Kind.DROP, -1, 0, 0, n,
                                  int(Stage.CUT_AT_END)))
        self._read_ring()
        now = time.monotonic_ns()
        self._read_counters(now)
        self._poll_runtime(now, final=True)
        self._release(None)
        # Ring losses that no in-band mark reported (no record fitted after them on that
        # CPU, or their mark was cut unread): one LOST now, so that the total is whole.
        rest = self.prog.ring_totals()[1] - self._inband_lost
        if rest > 0:
            self._inband_lost += rest
            self.stats.lost += rest
            self._pending.append((now, Kind.LOST, -1, 0, 0, rest, 0))
            self._release(None)

    def _hot_attach(self) -> None:
        assert self.prog is not None
        self.prog.new_window()  # and window-only kinds count again
        self.prog.attach("hot", self.plan.hot)
        self._hot_on = True
        self.stats.windows += 1
        self._emit_window(1)

    def _hot_detach(self) -> None:
        assert self.prog is not None
        self._emit_window(0)
        self.prog.set_hot_off(True)
        self.prog.detach("hot")
        self._hot_on = False

    def _window_facts(self, facts: list[WindowFact]) -> None:
        for f in facts:
            self.stats.windows += f.on and not f.extended and not f.whole
            self._pending.append(window_event(f))

    def _cost_event(self, now: int) -> None:
        c = self.hotctl.status if self.hotctl is not None else None
        if c is not None and c is not self._cost_sent:
            self._cost_sent = c
            self._pending.extend(cost_events(now, c))

    def charge_model(self, cpu_s: float) -> None:
        """The model thread (and the recorder behind it) spent ``cpu_s`` on records."""
        self._model_cpu += cpu_s

    def _watch_report(self) -> None:
        """Tell the controller what a probe hit costs gmpmon's own threads (watchcost.py)."""
        assert self.hotctl is not None
        ring = self.ring.records if self.ring is not None else 0
        per_hit = self._watch.per_hit(self._watch_cpu + self._model_cpu, self.stats.records,
                                      ring, self._hits_total)
        if per_hit is not None:
            self.hotctl.watch_cost(per_hit)

    def _prior_report(self, now: int) -> None:
        """Tell the controller the hot-hit rate the runtime's own counters say (watchcost.py):
        what it sizes windows with, before the first and between them."""
        rc = self.runtime.counters if self.runtime is not None else None
        if rc is None or rc.reads < 2 or self.hotctl is None or self.hotctl.cold_only:
            return
        rates = self._prior.rates(now, rc.tracked, rc.syscalls)
        if rates is not None:
            self.hotctl.prior(prior_hits_per_s(*rates), rc.busy_ps)

    def _emit_window(self, on: int) -> None:
        self._pending.append((time.monotonic_ns(), Kind.WINDOW, -1, 0, 0, on, 0))

    def _read_ring(self) -> None:
        if self.ring is not None:
            self.stats.records += self.ring.read(self._pending)
        if not self._bias_wait:
            self.stats.records += self.kernel.poll(self._pending)

    def _read_counters(self, now: int) -> None:
        assert self.prog is not None
        ev = self._pending
        for table, p, key, delta in self.prog.counter_deltas():
            ev.append((now, Kind.COUNTER, p, 0, table, key, delta))
        self._mutex_stacks.read_rows(now, ev, self.prog, self.info)  # waits summed in-kernel
        for probe, delta in (hits := self.prog.hit_deltas()):
            ev.append((now, Kind.COUNTER, -1, 0, Counter.PROBE_HITS, probe, delta))
            self._hits_total += delta
        if self._lazy is not None:
            self._lazy.count(hits)
        self.cgroup.read(now, ev)
        self.kernel.read_counters(now, ev)
        lost = self.prog.lost_delta()
        if lost:
            self.stats.lost += lost
            ev.append((now, Kind.LOST, -1, 0, 0, lost, 0))
        self._ring_ledger(now)

    def _ring_ledger(self, now: int) -> None:
        assert self.prog is not None
        read = self.ring.records if self.ring is not None else 0
        ring_ledger(now, self.prog.ring_totals(), read, self._ring_cut, self._ring_prev,
                    self._pending)

    def _poll_runtime(self, now: int, final: bool = False) -> None:
        stacks: dict[int, tuple[str, ...]] = {}
        if self.runtime is not None:
            self.runtime.poll(now, self._pending, stacks, final=final)
        self.readers.take(now, self._pending, stacks)  # the sampler's stops and skips: notes
        if stacks:  # census site names, readers' notes: ahead of the events that use them
            self._q.put(Batch([], stacks))

    def _release(self, watermark: int | None) -> None:
        pend = self._pending
        if not pend:
            return
        pend.sort(key=_TS)
        cut = len(pend) if watermark is None else bisect.bisect_right(pend, watermark, key=_TS)
        if not cut:
            return
        out = pend[:cut]
        del pend[:cut]
        kinds = list(map(_KIND, out))  # C-level scan for the rare kinds fixed up below
        if _LOST in kinds:
            for i in compress(range(len(kinds)), map(_LOST.__eq__, kinds)):
                if out[i][6] == LOST_IN_BAND:
                    self._inband_lost += out[i][5]
                    self.stats.lost += out[i][5]
        stacks = self._mutex_stacks.fix(out, kinds, self.prog, self.info)
        fix_go_sites(self.go_sites, out, kinds)
        stacks.update(self.go_sites.take())  # names from here and from the census thread
        stacks.update(self.kernel.take_stacks())
        if self.flight is not None:
            ctl = self.hotctl  # sample mode's governs the cold probes only: no burst
            out += self.flight.check(out, ctl.burst if ctl and not ctl.cold_only else None)
        self._q.put(Batch(out, stacks))

_TS = itemgetter(0)
_KIND = itemgetter(1)
