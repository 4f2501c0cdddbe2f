"""`gmpmon attach PID`: one running Go program's scheduler (TUI, or headless lines), and what
`attach` with several targets and `run` share with it (options, signals, outputs)."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any, TextIO

from gmpmon import priority
from gmpmon.binary.validate import FAILED_PREFIX
from gmpmon.capture.capture import MODES
from gmpmon.capture.kernelsources import DEFAULT_KERNEL, parse_kernel
from gmpmon.capture.perfsample import SAMPLE_HZ
from gmpmon.capture.targetmem import running
from gmpmon.capture.triggers import parse_trigger
from gmpmon.errors import CaptureError, GmpmonError, TargetError, UsageError
from gmpmon.events import Header
from gmpmon.files import check_output_path
from gmpmon.model.snapshot import Snapshot
from gmpmon.session import LiveSession
from gmpmon.source import FAILED

# Headless asks the model thread for each line's snapshot (LiveSession.fresh) and waits this
# long at most for it (a big target's snapshots are paced by their cost: then the last one).
ANSWER_S = 0.5


def add_capture_options(p: argparse.ArgumentParser) -> None:
    """Options shared by attach and run."""
    p.add_argument(
        "--mode",
        choices=MODES,
        default="default",
        help="sample: read scheduler state at 50 Hz + cold probes; default: sample + hot "
        "probes in duty-cycled windows; full: every probe all the time (default: %(default)s)",
    )
    p.add_argument("-d", "--duration", type=float, metavar="S", help="stop after S seconds")
    p.add_argument("--no-tui", action="store_true", help="headless: print lines, then a summary")
    p.add_argument("--record", metavar="FILE", help="record every event for `gmpmon replay`")
    p.add_argument("--summary-json", metavar="FILE", help="write the summary as JSON at the end")
    p.add_argument("--folded", metavar="FILE", help="write mutex-contention folded stacks")
    p.add_argument(
        "--interval", type=float, default=1.0, metavar="S",
        help="headless: one line every S seconds, counting those S seconds only (the report "
        "at the end counts the whole capture; default: %(default)s)",
    )
    p.add_argument(
        "--census-interval", type=float, default=1.0, metavar="S",
        help="walk all goroutines (the census: states, wait reasons, creation sites and "
        "where they wait) at most every S seconds; 0 = never (default: %(default)s)",
    )
    p.add_argument(
        "--budget", type=float, default=1.0, metavar="PCT",
        help="default and sample modes: keep what the probes cost the target (their traps, "
        "and gmpmon's CPU for their records on a busy host) within PCT%% of its CPU time; "
        "default mode's windows are sized (down to none) to fit, and in both modes the cold "
        "sync.Mutex probes trace 1 contention in N (and pause) while they cost more than a "
        "quarter of it (default: %(default)s)",
    )
    p.add_argument(
        "--trigger", action="append", default=[], metavar="COND",
        help="flight recorder: when COND holds, arm the hot probes for --burst and dump a "
        "recording to --dump-dir. COND: latency.p99>5ms (the runtime's own histogram), "
        "runq>256, stw>10ms, goroutines+>1000/s, sigusr1, key (the TUI's !). Repeatable",
    )
    p.add_argument("--burst", type=float, default=500.0, metavar="MS",
                   help="how long a trigger arms the hot probes (default: %(default)s)")
    p.add_argument("--dump-dir", metavar="DIR",
                   help="write a recording per trigger here: the burst and the seconds "
                   "before it (open with `gmpmon replay`); a name already there is "
                   "skipped, never overwritten")
    p.add_argument(
        "--kernel", type=_kernel_arg, default=DEFAULT_KERNEL, metavar="LIST",
        help="kernel sources, comma-separated: samples (perf-event samples, --sample-hz: "
        "which G runs on which P, CPU profile), sched (sched_switch/wakeup tracepoints: M "
        "on-CPU time, kernel run-queue delay), syscalls (sys_enter/exit: syscalls per P/G/M; "
        "opt-in, it costs every syscall), default, none (default: "
        f"{','.join(DEFAULT_KERNEL)})",
    )
    p.add_argument(
        "--sample-hz", type=int, default=SAMPLE_HZ, metavar="HZ",
        help="perf-event samples per second on each CPU (1-1000; default: %(default)s). Each "
        "is a timer interrupt in whatever runs: 999 cost net/http ~10%% of its requests per "
        "CPU-second on a 2-CPU VM (docs/modes.md); raise it for short captures",
    )
    p.add_argument("--window-ms", type=int, default=200, help=argparse.SUPPRESS)
    p.add_argument("--period-ms", type=int, default=1000, help=argparse.SUPPRESS)


def _kernel_arg(text: str) -> tuple[str, ...]:
    try:
        return parse_kernel(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from e


def check_capture_args(args: argparse.Namespace) -> None:
    if args.duration is not None and args.duration <= 0:
        raise UsageError("--duration must be positive")
    if args.interval <= 0:
        raise UsageError("--interval must be positive")
    if args.census_interval < 0:
        raise UsageError("--census-interval must be 0 (off) or positive")
    if not (0 < args.budget <= 100):
        raise UsageError("--budget must be in (0, 100]")
    args.trigger_specs = [parse_trigger(t) for t in args.trigger]
    if args.burst <= 0:
        raise UsageError("--burst must be positive")
    if args.dump_dir is not None and not os.path.isdir(args.dump_dir):
        raise UsageError(f"--dump-dir {args.dump_dir}: not a directory")
    if not (1 <= args.sample_hz <= 1000):
        raise UsageError("--sample-hz must be in 1..1000")
    if not (0 < args.window_ms <= args.period_ms):
        raise UsageError("need 0 < --window-ms <= --period-ms")
    for path in (args.record, args.summary_json, args.folded):
        if path:
            check_output_path(path)


def run_one(args: argparse.Namespace) -> int:
    """`gmpmon attach PID` (its arguments checked): one session, the TUI or headless lines."""
    pid: int = args.pids[0]
    if pid <= 0 or not os.path.exists(f"/proc/{pid}"):
        raise TargetError(f"no process with pid {pid}")
    from gmpmon.binary import load_pid
    from gmpmon.capture.sampler import gate_layout

    with target_may_vanish(pid):
        info = load_pid(pid)
        info = gate_layout(info, pid)
        if "dwarf" in info.missing_optional:  # a hostile binary's DWARF: said, not fatal
            print(f"gmpmon: {info.path}: {info.missing_optional['dwarf']}", file=sys.stderr)
        if "layout" in info.missing_optional:  # said once here; the readers stay quiet
            print(f"gmpmon: {info.missing_optional['layout']}", file=sys.stderr)
        session = LiveSession(
            info, pid, mode=args.mode, window_ms=args.window_ms, period_ms=args.period_ms,
            budget_pct=args.budget, record=args.record, census_s=args.census_interval,
            triggers=args.trigger_specs, burst_ms=args.burst, dump_dir=args.dump_dir,
            kernel=args.kernel, sample_hz=args.sample_hz, history=drawn(args),
        )
    with stop_signals() as stop, usr1_triggers(session):
        try:
            with target_may_vanish(pid):
                session.start()
            priority.restore_boost()
        except BaseException:
            session.close()
            raise
        try:
            watch(session, args, stop)
        finally:
            if stop.why:
                say(f"gmpmon: {stop.why}; detaching and writing what was captured")
            recording = session.recording_path() or args.record  # or `r` in the TUI
            session.close()
    finish_outputs(session, args)
    if session.error is None:  # else the failure's own line says it all
        say_recorded(recording)
    return thread_failure(session)


def say_recorded(path: str | None) -> None:
    """One line once a recording is complete: where it is and how to open it."""
    if path:
        try:
            size = f" ({os.path.getsize(path):,} bytes)"
        except OSError:
            size = ""
        say(f"gmpmon: wrote recording {path}{size}; open it with: gmpmon replay {path}")


def drawn(args: argparse.Namespace) -> bool:
    """A TUI will draw the capture: there is a terminal and no --no-tui. Without one the
    model folds no timeline history (gmpmon/model/phistory.py): nothing would show it."""
    return not args.no_tui and sys.stdout.isatty()


def tui_factory(args: argparse.Namespace) -> Callable[..., Any] | None:
    """The TUI's make_app when there is a terminal to draw on (and no --no-tui)."""
    if not drawn(args):
        return None
    try:
        from gmpmon.tui.app import make_app
    except ImportError:
        return None
    return make_app


def watch(session: LiveSession, args: argparse.Namespace, stop: StopEvent) -> None:
    """Show the session until --duration, a signal, or the target's exit."""
    make_app = tui_factory(args)
    if make_app is not None:
        tui(session, args, stop, make_app)
    else:
        headless(session, args, stop)


def tui(
    session: LiveSession,
    args: argparse.Namespace,
    stop: StopEvent,
    make_app: Callable[..., Any],
) -> None:
    """The TUI until the user quits it, or --duration / SIGTERM end it from outside."""
    app = make_app(session)
    done = threading.Event()
    deadline = time.monotonic() + args.duration if args.duration else None

    def watchdog() -> None:
        while not done.is_set():
            if stop.wait(0.2) or (deadline is not None and time.monotonic() >= deadline):
                with contextlib.suppress(Exception):
                    app.call_from_thread(app.exit)
                return
            if session.error is not None and session.finished.is_set():
                with contextlib.suppress(Exception):
                    app.call_from_thread(app.exit)
                return
            if session.target_exited and session.finished.is_set():
                # The TUI may stay open long after the target is gone: write the files now.
                finish_outputs(session, args)

    threading.Thread(target=watchdog, name="gmpmon-tui-watchdog", daemon=True).start()
    try:
        app.run()
    finally:
        done.set()


def headless(session: LiveSession, args: argparse.Namespace, stop: StopEvent) -> None:
    from gmpmon.interval import interval_legend, interval_line

    h = session.header
    info = session.info
    newer = info.offsets_table not in ("", f"1.{info.go_minor}")
    print(
        f"Tracing Go scheduler of PID {h.pid} ({h.go_version}, GOMAXPROCS={h.gomaxprocs}, "
        f"mode {h.mode}"
        + (f"; offsets of go{info.offsets_table}, validated on it" if newer else "")
        + ")... Ctrl-C to end.",
        flush=True,
    )
    print(interval_legend(args.interval, h.mode), flush=True)
    state = session.state()
    for note in state.notes:
        if FAILED_PREFIX not in note:  # a layout failure was said once, at the gate
            print(f"gmpmon: {note}", file=sys.stderr)
    sampler = state.input("sampler")
    if sampler is not None and sampler.state == FAILED and FAILED_PREFIX not in sampler.detail:
        print(f"gmpmon: no sampler ({sampler.detail}); probes only", file=sys.stderr)
    session.snapshots_on_request(light=True)  # one per line, not 4 a second
    # Woken by the next line, a signal or the stream's end, not 10 times a second (each
    # wakeup ~55 µs of CPU here); the flight recorder's notes are said as they happen.
    session.when_finished(stop.set)
    poll = 0.1 if session.dumps is not None else float("inf")
    start = time.monotonic()
    deadline = start + args.duration if args.duration else None
    next_line = start + args.interval
    prev: Snapshot | None = None
    while not stop.is_set() and not session.finished.is_set():
        now = time.monotonic()
        if deadline is not None and now >= deadline:
            break
        wake = min(next_line, deadline) if deadline is not None else next_line
        stop.wait(max(0.0, min(wake - now, poll)))
        timeout = line_due(time.monotonic(), next_line, deadline)
        if timeout is not None:
            snap = session.fresh(timeout=timeout)
            if snap is not None:
                if not say(interval_line(snap, prev), sys.stdout):
                    stop.end("stdout closed")
                prev = snap  # the next line counts from here: the last interval only
            next_line += args.interval
        say_dumps(session)  # as they happen: a skipped dump does not end the capture
    if session.target_exited:
        why = session.state().exit_reason or "exited"
        say(f"gmpmon: target {h.pid} {why}; writing what was captured")


def line_due(now: float, next_line: float, deadline: float | None) -> float | None:
    """How long an interval line due now may wait for its snapshot; None if no line is due.
    No line at --duration's end (the summary follows), and none waits past it: a snapshot
    of 64 Ps on a saturated machine took ~0.5 s, which ended `-d 10` 0.7 s late."""
    if now < next_line or (deadline is not None and next_line >= deadline):
        return None
    return ANSWER_S if deadline is None else max(min(ANSWER_S, deadline - now), 0.0)


def finish_outputs(session: LiveSession, args: argparse.Namespace) -> None:
    """Every requested file, complete, then the final summary on stdout (which may be a
    closed terminal by now)."""
    from gmpmon import report

    snap = session.latest()
    if snap is not None and session.claim_outputs():
        for fmt, path in (("json", args.summary_json), ("folded", args.folded)):
            if path:
                write_output(fmt, session.header, snap, path)
        if args.no_tui or not sys.stdout.isatty():
            say(report.text_report(snap, width=report.terminal_width(sys.stdout)), sys.stdout)
    say_dumps(session, final=True)


def say_dumps(session: LiveSession, final: bool = False) -> None:
    """The flight recorder's lines not said yet: a dump written or skipped."""
    for note in session.dumps.take_notes(final) if session.dumps is not None else ():
        say(f"gmpmon: {note}")


def thread_failure(session: LiveSession) -> int:
    """The exit code: 0, or, after one line saying what, that of a failure in the capture
    or model thread (which ended the run early: see LiveSession._run), else that of the
    first reader that stopped mid-run (the capture went on without it; docs/safety.md)."""
    e = session.error
    if e is None:
        failed = session.capture.failures() + session.capture.skipped()
        for line, _ in failed:
            say(f"gmpmon: {line}; the capture went on without it")
        return failed[0][1] if failed else 0
    msg = e.one_line() if isinstance(e, GmpmonError) else f"{type(e).__name__}: {e}"
    say(f"gmpmon: stopped: {msg}; probes detached, outputs written")
    return e.exit_code if isinstance(e, GmpmonError) else CaptureError.exit_code


def say(text: str, stream: TextIO | None = None) -> bool:
    """Print one line; False if the stream is gone (a closed terminal gives EIO, a closed
    pipe EPIPE). A dead stdout is pointed at /dev/null, so that the interpreter's last flush
    cannot fail either."""
    stream = sys.stderr if stream is None else stream
    if "utf" not in (getattr(stream, "encoding", None) or "utf").lower():
        from gmpmon.report import for_stream

        text = for_stream(text, stream)  # ASCII where needed: 12.3us, <= 1.0ms
    try:
        print(text, file=stream, flush=True)
        return True
    except OSError:
        with contextlib.suppress(OSError, ValueError):
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, stream.fileno())
            os.close(null)
        return False


def write_output(fmt: str, header: Header, snap: Snapshot, path: str) -> None:
    """One output format of the registry, written from the final Snapshot."""
    from gmpmon.export.registry import make_exporter

    exporter = make_exporter(fmt, header)
    exporter.add(snap)
    exporter.write(path)


@contextmanager
def target_may_vanish(pid: int) -> Iterator[None]:
    """The target can exit at any moment while gmpmon reads its binary and attaches; then
    whatever failed first (its /proc/PID/root path vanished, an attach failed) is not the
    story: say that the target exited."""
    try:
        yield
    except TargetError:
        raise
    except (GmpmonError, OSError) as e:
        if not running(pid):
            raise TargetError(f"process {pid} exited while gmpmon was attaching") from e
        if isinstance(e, OSError):
            raise CaptureError(f"cannot attach to process {pid}: {e}") from e
        raise


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


class StopEvent(threading.Event):
    """Set to end the run; ``why`` says what ended it ("SIGHUP", "stdout closed")."""

    def __init__(self) -> None:
        super().__init__()
        self.why = ""

    def end(self, why: str) -> None:
        self.why = self.why or why
        self.set()


@contextmanager
def usr1_triggers(session: LiveSession) -> Iterator[None]:
    """SIGUSR1 fires the ``sigusr1`` trigger (if one was asked for)."""

    def handler(signum: int, frame: FrameType | None) -> None:
        session.trigger("sigusr1")

    old = signal.signal(signal.SIGUSR1, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGUSR1, old)


@contextmanager
def stop_signals() -> Iterator[StopEvent]:
    """SIGINT, SIGTERM, SIGHUP (a closed terminal, a dropped SSH session) and SIGQUIT set an
    Event instead of killing gmpmon or raising in the middle of a detach."""
    stop = StopEvent()

    def handler(signum: int, frame: FrameType | None) -> None:
        stop.why = signal.Signals(signum).name
        # Not stop.set() here: the handler runs in the main thread between two bytecodes,
        # and when that thread is inside stop.wait() it holds the Event's lock: set() would
        # wait for it forever (seen: a SIGTERM that never ended a run, py-spy showed
        # handler -> Event.set under Condition.wait). Another thread sets it.
        threading.Thread(target=stop.set, name="gmpmon-signal", daemon=True).start()

    old = {s: signal.signal(s, handler) for s in STOP_SIGNALS}
    try:
        yield stop
    finally:
        for s, h in old.items():
            signal.signal(s, h)

# ---------------------------------------------------------------- several targets
# `gmpmon attach PID PID...` and `gmpmon attach --match REGEX`: one LiveSession per target,
# each with its own probes, started one after the other (a target that cannot be attached is
# said in one line and the others go on). Headless, every interval prints one line per
# target, prefixed by its pid, and the end one summary block per target. In a terminal the
# TUI opens on the first target and `T` picks another (tui/widgets/targets.py). Output files
# name their target: with several targets a path must hold {pid} (--summary-json s-{pid}.json).
