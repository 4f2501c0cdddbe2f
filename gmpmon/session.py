"""The live SnapshotSource: capture -> model (-> recording) in a background thread.

``LiveSession`` implements gmpmon.source's SnapshotSource and RecordingControl. The TUI and
the headless printer only call ``latest()``/``status()``/``close()``; everything that touches
BPF stays inside gmpmon.capture.
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence

from gmpmon import priority
from gmpmon.binary.info import BinaryInfo
from gmpmon.capture.capture import Capture
from gmpmon.capture.kernelsources import DEFAULT_KERNEL
from gmpmon.capture.perfsample import SAMPLE_HZ
from gmpmon.capture.pipeline import thin
from gmpmon.capture.sampler import gate_layout, read_gomaxprocs
from gmpmon.capture.triggers import TriggerSpec
from gmpmon.dumps import DumpKeeper
from gmpmon.events import Batch, Header, Stage
from gmpmon.findings.attribution import Cancelled
from gmpmon.findings.engine import snapshot_with_findings
from gmpmon.model import Model
from gmpmon.model.snapshot import Snapshot
from gmpmon.priority import name_thread
from gmpmon.record import RecordingWriter
from gmpmon.source import Cost, DutyCycle, InputState, SourceStatus

SNAPSHOT_EVERY_S = 0.25
# A snapshot (views and findings) of a big target costs seconds (64 Ps, 100k goroutines:
# 2-4 s), and the model thread makes it: the next one waits this many times as long as the
# last took, so snapshots take at most a quarter of the model's time and it keeps up.
SNAPSHOT_SHARE = 4
CUT_AFTER_S = 0.3
# The model thread sleeps until a batch comes (sample mode: 10 a second), a snapshot is due or
# asked for (ask() nudges it), at most this long: each wakeup of a Python thread costs ~55 µs
# of CPU on the project's VMs (a bare time.sleep loop; C's nanosleep ~22 µs), so a 20-Hz
# timeout poll was ~0.1% of a core of sample mode's ~3.5% on Caddy.
IDLE_WAIT_S = 1.0
FEED_CHUNK = 4096  # events fed between two looks at the cut time
# Tests only: hold the GIL this long per batch, as a model far too slow for its input would.
SLOW_MODEL_S = float(os.environ.get("GMPMON_DEBUG_SLOW_MODEL_MS", "0") or 0) / 1000


def hog_gil(seconds: float) -> None:
    """Busy for ``seconds`` inside C code that never releases the GIL (sum over a range)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        sum(range(2_000_000))


def make_header(info: BinaryInfo, pid: int, capture: Capture, gomaxprocs: int) -> Header:
    default = capture.mode == "default"
    return Header(
        pid=pid,
        exe=info.path,
        go_version=info.go_version,
        gomaxprocs=gomaxprocs,
        mode=capture.mode,
        start_ns=time.monotonic_ns(),
        wall_start=time.time(),
        wait_reasons=info.wait_reasons,
        stw_reasons=info.stw_reasons,
        g_status=info.g_status,
        p_status=info.p_status,
        duty_window_ms=capture.window_ns // 1_000_000 if default else 0,
        duty_period_ms=capture.period_ns // 1_000_000 if default else 0,
        features=capture.features,
        sample_hz=capture.kernel.sample_hz,
    )


class LiveSession:
    """Capture of one process, modelled in a background thread."""

    live = True

    def __init__(
        self,
        info: BinaryInfo,
        pid: int,
        *,
        mode: str = "default",
        window_ms: int = 200,
        period_ms: int = 1000,
        budget_pct: float = 1.0,
        triggers: Sequence[TriggerSpec] = (),
        burst_ms: float = 500.0,
        dump_dir: str | None = None,
        record: str | None = None,
        gomaxprocs: int | None = None,
        before_exec: bool = False,
        census_s: float = 1.0,
        kernel: tuple[str, ...] = DEFAULT_KERNEL,
        sample_hz: int = SAMPLE_HZ,
        history: bool = True,
    ) -> None:
        self.info = info
        self.pid = pid
        self.capture = Capture(
            info, pid, mode=mode, window_ms=window_ms, period_ms=period_ms,
            defer_sampler=before_exec, census_s=census_s, budget_pct=budget_pct,
            triggers=triggers, burst_ms=burst_ms,
            kernel=kernel, sample_hz=sample_hz,
        )
        self.header = make_header(
            info, pid, self.capture, gomaxprocs or read_gomaxprocs(info, pid)
        )
        self.model = Model(self.header, history=history)  # history: a TUI draws the Ps
        self.dumps = DumpKeeper(self.header, list(triggers), dump_dir) if (
            triggers and dump_dir) else None
        self._record_lock = threading.Lock()
        self._recorder: RecordingWriter | None = None
        self._rec_seen: tuple[RecordingWriter | None, float] = (None, 0.0)
        if record:
            self._recorder = RecordingWriter(record, self.header, background=True)
        self._latest: Snapshot | None = None
        # Snapshots 4 times a second (the TUI), or only when asked (``on_request``).
        self._on_request = False
        self._light = False
        self._asked = False
        self._made = 0  # snapshots made by the model thread
        self._snap_cv = threading.Condition()
        self._thread: threading.Thread | None = None
        self.finished = threading.Event()  # the batch stream ended (stop or target exit)
        self._on_finished: list[Callable[[], None]] = []
        self._closed = False
        self.error: BaseException | None = None
        self._outputs_lock = threading.Lock()
        self._outputs_claimed = False
        self._cut_at = 0.0  # set by close(): batches taken after this are thinned, not modelled

    def claim_outputs(self) -> bool:
        """True exactly once: that caller writes the requested output files (at the target's
        exit while the TUI stays open, or at the end), so they are never written twice."""
        with self._outputs_lock:
            first = not self._outputs_claimed
            self._outputs_claimed = True
            return first

    # --- SnapshotSource ------------------------------------------------------------------

    def latest(self) -> Snapshot | None:
        return self._latest

    def snapshots_on_request(self, light: bool = False) -> None:
        """From now on the model thread makes a snapshot only when ``fresh()`` asks for one
        (the headless printer: once per --interval), not 4 times a second: on net/http a
        snapshot with findings was a third of gmpmon's own CPU in sample mode. ``light``:
        those snapshots have no findings and no kernel views (Model.snapshot(light=True)),
        all an interval line reads; close() still makes the full final one."""
        self._on_request = True
        self._light = light

    @property
    def snapshots_made(self) -> int:
        """Snapshots the model thread has made so far (not close()'s final one)."""
        return self._made

    def ask(self) -> int:
        """Ask the model thread for a snapshot; the ticket to wait for it with."""
        with self._snap_cv:
            self._asked = True
            ticket = self._made + 1
        self.capture.nudge()  # the model thread may be waiting for a batch: wake it
        return ticket

    def answer(self, ticket: int, timeout: float) -> Snapshot | None:
        """The snapshot asked for with ``ticket`` (one begun after the ask); the latest one
        if none is made within ``timeout`` (the model thread paces them by their cost) or
        the run has finished."""
        with self._snap_cv:
            self._snap_cv.wait_for(
                lambda: self._made >= ticket or self.finished.is_set(), timeout=timeout)
            return self._latest

    def when_finished(self, fn: Callable[[], None]) -> None:
        """Call ``fn`` (from the model thread) once the batch stream has ended; now if it has:
        a waiter need not poll ``finished``."""
        with self._snap_cv:
            if not self.finished.is_set():
                self._on_finished.append(fn)
                return
        fn()

    def fresh(self, timeout: float) -> Snapshot | None:
        return self.answer(self.ask(), timeout)

    def status(self) -> str:
        if self.capture.target_exited:
            return f"target {self.capture.exit_reason or 'exited'}"
        if self.finished.is_set():
            return "detached"
        cost = self.capture.hotctl.status if self.capture.hotctl else None
        if cost is not None:
            return cost.header_text()
        if self.capture.mode == "default":
            return (
                f"window {self.capture.window_ns // 1_000_000}/"
                f"{self.capture.period_ns // 1_000_000}ms"
            )
        return "attached"

    def state(self) -> SourceStatus:
        cap = self.capture
        duty = None
        if cap.mode == "default":
            duty = DutyCycle(cap.window_ns // 1_000_000, cap.period_ns // 1_000_000, cap.hot_on)
        return SourceStatus(
            line=self.status(),
            live=True,
            target_exited=cap.target_exited,
            exit_reason=(cap.exit_reason or "exited") if cap.target_exited else "",
            finished=self.finished.is_set(),
            error=str(self.error) if self.error is not None else "",
            inputs=tuple(InputState(*i) for i in cap.inputs()),
            notes=tuple(cap.notes()),
            failures=tuple(f for f, _ in cap.failures() + cap.skipped()),
            duty=duty,
            cost=self._cost(),
        )

    def _cost(self) -> Cost | None:
        """The budget controller's view (default mode), as the source status carries it."""
        cs = self.capture.hotctl.status if self.capture.hotctl else None
        if cs is None:
            return None
        return Cost(overhead=cs.recent_pct / 100, budget=cs.budget_pct / 100,
                    state="cold probes only" if self.capture.mode == "sample"
                    else f"{cs.windows} windows, {cs.cut_short} cut short",
                    detail=cs.header_text())

    def target_started(self, load_bias: int | None = None) -> BinaryInfo:
        """`gmpmon run`: the target has exec'd. Tell the probes where a PIE's globals are,
        check the layout (the globals that fail it are dropped), and start what reads its
        memory (only now: a handle opened before the exec would show the old address
        space). Returns the checked BinaryInfo."""
        if load_bias is not None:
            self.capture.set_load_bias(load_bias)
        checked = gate_layout(self.capture.info, self.pid, starting=True)
        self.capture.use_checked(checked)
        self.capture.start_sampler()
        return checked

    def start(self) -> None:
        """Attach (raises a GmpmonError when it cannot) and start modelling."""
        self.capture.prepare()
        self.capture.start()
        self._thread = threading.Thread(target=self._run, name="gmpmon-model", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Detach every probe, drain, finish the model and every output. Idempotent."""
        if self._closed:
            return
        self._closed = True
        # --duration / Ctrl-C end the run within a second whatever the backlog: what the
        # model has not reached by then is cut (counted), not worked through. The model
        # thread's snapshot in progress is given up (the final one is made here), and the
        # end runs at the attach's raised priority: on a saturated machine the final
        # snapshot of 64 Ps took seconds at gmpmon's own (gmpmon/priority.py).
        self._cut_at = time.monotonic() + CUT_AFTER_S
        boosted = priority.boost(every_thread=True)
        try:
            self.capture.stop()
            if self._thread is not None:
                self._thread.join()
            try:
                self.model.flush()
                self._latest = snapshot_with_findings(self.model)
            except Exception as e:  # keep the last good snapshot; the exit says what failed
                self.error = self.error or e
            try:
                self.stop_recording()
            except OSError as e:
                self.error = self.error or e
        finally:
            priority.restore(boosted)

    @property
    def target_exited(self) -> bool:
        return self.capture.target_exited

    # --- RecordingControl ----------------------------------------------------------------

    def start_recording(self, path: str) -> None:
        with self._record_lock:
            if self._recorder is None:
                # Stacks defined by earlier batches: the new file must stand on its own.
                self._recorder = RecordingWriter(path, self.header, stacks=dict(self.model.stacks),
                                                 background=True)

    def stop_recording(self) -> str | None:
        with self._record_lock:
            rec, self._recorder = self._recorder, None
        if rec is None:
            return None
        rec.close()
        return rec.path

    def recording_path(self) -> str | None:
        rec = self._recorder
        return rec.path if rec else None

    # --- model thread --------------------------------------------------------------------

    def _run(self) -> None:
        name_thread()
        next_snap = time.monotonic() + SNAPSHOT_EVERY_S
        try:
            while True:
                try:
                    batch = self.capture.get_batch(timeout=self._wait_s(next_snap))
                except queue.Empty:
                    batch = Batch()
                else:
                    if batch is None:
                        break
                for part in self._parts(batch):
                    c0 = time.thread_time()
                    self._consume(part)
                    # what watching costs in gmpmon's CPU, per event: charged to the budget
                    self.capture.charge_model(time.thread_time() - c0 + self._recorder_cpu())
                now = time.monotonic()
                # Once close() began, the final snapshot is close()'s: none in between.
                if now >= next_snap and not self._cut_at and (self._asked
                                                              or not self._on_request):
                    with self._snap_cv:
                        self._asked = False  # an ask from here on is for the next one
                    try:
                        snap = (self.model.snapshot(light=True) if self._light
                                else snapshot_with_findings(self.model, self._closing))
                    except Cancelled:  # close() began: the final snapshot is its own
                        continue
                    with self._snap_cv:
                        self._latest = snap
                        self._made += 1
                        self._snap_cv.notify_all()
                    took = time.monotonic() - now
                    every = 0.0 if self._on_request else SNAPSHOT_EVERY_S
                    next_snap = now + max(every, SNAPSHOT_SHARE * took)
        except BaseException as e:
            self.error = e
            self.capture.request_stop()  # the run ends now: detach, outputs, non-zero exit
            # Keep draining so the capture thread can always finish.
            with contextlib.suppress(Exception):
                while self.capture.get_batch(timeout=1.0) is not None:
                    pass
        finally:
            if self.capture.target_exited:
                # Nothing more will come: make the outputs complete now, not when the user
                # leaves the TUI (a closed terminal must not lose the recording's tail).
                with contextlib.suppress(Exception):
                    self.model.flush()
                    self._latest = snapshot_with_findings(self.model)
                with contextlib.suppress(Exception):
                    self.stop_recording()
            if self.dumps is not None:
                with contextlib.suppress(Exception):
                    self.dumps.close()
            with self._snap_cv:
                self.finished.set()
                self._snap_cv.notify_all()  # fresh() answers with the last one
                hooks = list(self._on_finished)
            for fn in hooks:
                with contextlib.suppress(Exception):
                    fn()

    def _wait_s(self, next_snap: float) -> float:
        """How long the model thread may wait for a batch: till the next snapshot is due
        (4 a second for the TUI), or, when they are made on request and none is asked for,
        IDLE_WAIT_S (an ask nudges it)."""
        if self._on_request and not self._asked:
            return IDLE_WAIT_S
        return min(max(next_snap - time.monotonic(), 0.005), IDLE_WAIT_S)

    def _recorder_cpu(self) -> float:
        """The recorder thread's CPU since the last call (it packs and writes what the model
        thread hands it)."""
        rec = self._recorder
        if rec is None:
            return 0.0
        if rec is not self._rec_seen[0]:
            self._rec_seen = (rec, 0.0)
        d = rec.cpu_s - self._rec_seen[1]
        self._rec_seen = (rec, rec.cpu_s)
        return d

    def _parts(self, batch: Batch) -> Iterator[Batch]:
        """``batch`` in pieces of at most FEED_CHUNK events; once close()'s cut time has
        passed, the rest is thinned (counted as cut), so that a large batch taken just
        before it is not worked through: at 64 Ps one took seconds to feed."""
        ev = batch.events
        stacks = batch.stacks
        for i in range(0, max(len(ev), 1), FEED_CHUNK):
            if self._cut_at and time.monotonic() > self._cut_at:
                events, _n = thin(ev[i:], Stage.CUT_AT_END)
                yield Batch(events, stacks)
                return
            yield Batch(ev[i:i + FEED_CHUNK], stacks)
            stacks = {}

    def _closing(self) -> bool:
        return self._cut_at != 0

    def trigger(self, metric: str = "key") -> bool:
        """Fire a manual trigger (``key``: the TUI's key, ``sigusr1``); False if the user
        gave no such ``--trigger``."""
        return self.capture.flight.request(metric) if self.capture.flight else False

    def _consume(self, batch: Batch) -> None:
        if self.dumps is not None:
            self.dumps.feed(batch, self.model.stacks)
        if batch.events or batch.stacks:
            if SLOW_MODEL_S:
                hog_gil(SLOW_MODEL_S)
            self.model.feed(batch)
            with self._record_lock:
                if self._recorder is not None:
                    self._recorder.write(batch)
