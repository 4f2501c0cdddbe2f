"""`gmpmon attach PID PID...` and `gmpmon attach --match REGEX`: several targets at once.

One LiveSession per target, each with its own probes, started one after the other (a target
that cannot be attached is said in one line and the others go on). Headless, every interval
prints one line per target, prefixed by its pid, and the end prints one summary block per
target. In a terminal the TUI opens on the first target and ``t`` picks another
(gmpmon.tui's target picker). Output files name their target: with several targets a path
must hold ``{pid}`` (``--summary-json s-{pid}.json``).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from typing import Any

from gmpmon import priority
from gmpmon.commands import attach as one
from gmpmon.errors import GmpmonError, TargetError, UsageError
from gmpmon.model.snapshot import Snapshot
from gmpmon.session import LiveSession


def target_pids(args: argparse.Namespace) -> list[int]:
    """The pids to attach to: those given, or every Go process matching --match."""
    pids: list[int] = list(args.pids)
    if args.match is not None:
        from gmpmon.fleet.discover import Discovery

        try:
            rx = re.compile(args.match)
        except re.error as e:
            raise UsageError(f"--match {args.match!r}: {e}") from e
        found = [gp.pid for gp in Discovery().scan(rx)]
        if not found:
            raise TargetError(f"no Go process matches {args.match!r}")
        pids += [p for p in found if p not in pids]
    if not pids:
        raise UsageError("say which process: PID [PID...] or --match REGEX")
    return pids


def per_target(path: str | None, pid: int) -> str | None:
    return None if path is None else path.replace("{pid}", str(pid))


def check_paths(args: argparse.Namespace) -> None:
    for opt in ("record", "summary_json", "folded"):
        path = getattr(args, opt)
        if path and "{pid}" not in path:
            raise UsageError(
                f"--{opt.replace('_', '-')} {path}: with several targets the path must hold "
                "{pid} (e.g. s-{pid}.json)"
            )


def run(args: argparse.Namespace, pids: list[int]) -> int:
    check_paths(args)
    from gmpmon.binary import load_pid
    from gmpmon.capture.sampler import gate_table_offsets

    sessions: list[LiveSession] = []
    with one.stop_signals() as stop:
        try:
            for pid in pids:
                if stop.is_set():
                    break
                try:
                    if pid <= 0 or not os.path.exists(f"/proc/{pid}"):
                        raise TargetError(f"no process with pid {pid}")
                    with one.target_may_vanish(pid):
                        info = load_pid(pid)
                        gate_table_offsets(info, pid)
                        s = LiveSession(
                            info, pid, mode=args.mode, window_ms=args.window_ms,
                            period_ms=args.period_ms, budget_pct=args.budget,
                            record=per_target(args.record, pid),
                            census_s=args.census_interval,
                        )
                        try:
                            s.start()
                        except BaseException:
                            s.close()
                            raise
                except GmpmonError as e:
                    one.say(f"gmpmon: process {pid}: {e.one_line()}; not attached")
                    continue
                sessions.append(s)
            priority.restore_boost()
            if not sessions:
                raise TargetError("none of the targets could be attached")
            try:
                watch_many(sessions, args, stop)
            finally:
                if stop.why:
                    one.say(f"gmpmon: {stop.why}; detaching and writing what was captured")
        finally:
            for s in sessions:
                s.close()
    code = 0
    for s in sessions:
        finish(s, args)
        one.say_recorded(s.recording_path() or per_target(args.record, s.pid))
        code = code or one.thread_failure(s)
    return code


def finish(session: LiveSession, args: argparse.Namespace) -> None:
    ns = argparse.Namespace(**vars(args))
    ns.summary_json = per_target(args.summary_json, session.pid)
    ns.folded = per_target(args.folded, session.pid)
    if ns.no_tui or not sys.stdout.isatty():
        h = session.header
        one.say(f"\n=== PID {h.pid} ({os.path.basename(h.exe)}, {h.go_version}) ===",
                sys.stdout)
    one.finish_outputs(session, ns)


def watch_many(sessions: list[LiveSession], args: argparse.Namespace,
               stop: one.StopEvent) -> None:
    if not args.no_tui and sys.stdout.isatty():
        try:
            from gmpmon.tui.app import make_app
        except ImportError:
            pass
        else:
            tui_many(sessions, args, stop, make_app)
            return
    headless_many(sessions, args, stop)


def tui_many(sessions: list[LiveSession], args: argparse.Namespace, stop: one.StopEvent,
             make_app: Any) -> None:
    """One TUI at a time, on the chosen target; `T` ends it with the next choice, and the
    next one opens on that target (every session goes on capturing meanwhile)."""
    shown = 0
    deadline = time.monotonic() + args.duration if args.duration else None
    while not stop.is_set():
        apps: list[Any] = []

        def factory(session: LiveSession, apps: list[Any] = apps) -> Any:
            app = make_app(session, targets=sessions)
            apps.append(app)
            return app

        ns = argparse.Namespace(**vars(args))
        if deadline is not None:
            ns.duration = max(deadline - time.monotonic(), 0.01)
        one.tui(sessions[shown], ns, stop, factory)
        nxt = apps[0].switch_to if apps else None
        if nxt is None:
            return
        shown = nxt


def headless_many(sessions: list[LiveSession], args: argparse.Namespace,
                  stop: one.StopEvent) -> None:
    from gmpmon.report import interval_line

    for s in sessions:
        h = s.header
        print(f"[{h.pid}] Tracing Go scheduler of PID {h.pid} ({os.path.basename(h.exe)}, "
              f"{h.go_version}, GOMAXPROCS={h.gomaxprocs}, mode {h.mode})", flush=True)
    print(f"Tracing {len(sessions)} Go programs... Ctrl-C to end.", flush=True)
    start = time.monotonic()
    deadline = start + args.duration if args.duration else None
    next_line = start + args.interval
    prev: dict[int, Snapshot | None] = {s.pid: None for s in sessions}
    said_exit: set[int] = set()
    while not stop.is_set():
        if all(s.finished.is_set() for s in sessions):
            break
        now = time.monotonic()
        if deadline is not None and now >= deadline:
            break
        wake = min(next_line, deadline) if deadline is not None else next_line
        stop.wait(max(0.0, min(wake - now, 0.1)))
        for s in sessions:
            if s.target_exited and s.pid not in said_exit:
                said_exit.add(s.pid)
                one.say(f"gmpmon: target {s.pid} {s.state().exit_reason or 'exited'}")
        if time.monotonic() >= next_line:
            for s in sessions:
                if s.pid in said_exit:
                    continue
                snap = s.latest()
                if snap is None:
                    continue
                if not one.say(f"[{s.pid}] {interval_line(snap, prev[s.pid])}", sys.stdout):
                    stop.end("stdout closed")
                prev[s.pid] = snap
            next_line += args.interval
