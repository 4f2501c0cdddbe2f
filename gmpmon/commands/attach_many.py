"""`gmpmon attach PID PID...` and `attach --match REGEX`: several targets at once, one
session each (the lines prefixed by pid, one TUI at a time, each target's outputs at paths
holding {pid})."""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from typing import Any

from gmpmon import priority
from gmpmon.commands.attach_one import (
    StopEvent,
    finish_outputs,
    line_due,
    say,
    say_recorded,
    stop_signals,
    target_may_vanish,
    thread_failure,
    tui,
    tui_factory,
)
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


def run_many(args: argparse.Namespace, pids: list[int]) -> int:
    check_paths(args)
    from gmpmon.binary import load_pid
    from gmpmon.capture.sampler import gate_layout

    sessions: list[LiveSession] = []
    with stop_signals() as stop:
        try:
            for pid in pids:
                if stop.is_set():
                    break
                try:
                    if pid <= 0 or not os.path.exists(f"/proc/{pid}"):
                        raise TargetError(f"no process with pid {pid}")
                    with target_may_vanish(pid):
                        info = load_pid(pid)
                        info = gate_layout(info, pid)
                        if "dwarf" in info.missing_optional:
                            print(f"gmpmon: {pid}: {info.missing_optional['dwarf']}",
                                  file=sys.stderr)
                        if "layout" in info.missing_optional:
                            print(f"gmpmon: {pid}: {info.missing_optional['layout']}",
                                  file=sys.stderr)
                        s = LiveSession(
                            info, pid, mode=args.mode, window_ms=args.window_ms,
                            period_ms=args.period_ms, budget_pct=args.budget,
                            record=per_target(args.record, pid),
                            census_s=args.census_interval, kernel=args.kernel,
                            sample_hz=args.sample_hz,
                        )
                        try:
                            s.start()
                        except BaseException:
                            s.close()
                            raise
                except GmpmonError as e:
                    say(f"gmpmon: process {pid}: {e.one_line()}; not attached")
                    continue
                sessions.append(s)
            priority.restore_boost()
            if not sessions:
                raise TargetError("none of the targets could be attached")
            try:
                watch_many(sessions, args, stop)
            finally:
                if stop.why:
                    say(f"gmpmon: {stop.why}; detaching and writing what was captured")
        finally:
            for s in sessions:
                s.close()
    code = 0
    for s in sessions:
        finish(s, args)
        say_recorded(s.recording_path() or per_target(args.record, s.pid))
        code = code or thread_failure(s)
    return code


def finish(session: LiveSession, args: argparse.Namespace) -> None:
    ns = argparse.Namespace(**vars(args))
    ns.summary_json = per_target(args.summary_json, session.pid)
    ns.folded = per_target(args.folded, session.pid)
    if ns.no_tui or not sys.stdout.isatty():
        h = session.header
        say(f"\n=== PID {h.pid} ({os.path.basename(h.exe)}, {h.go_version}) ===",
                sys.stdout)
    finish_outputs(session, ns)


def watch_many(sessions: list[LiveSession], args: argparse.Namespace,
               stop: StopEvent) -> None:
    make_app = tui_factory(args)
    if make_app is not None:
        tui_many(sessions, args, stop, make_app)
    else:
        headless_many(sessions, args, stop)


def tui_many(sessions: list[LiveSession], args: argparse.Namespace, stop: StopEvent,
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
        tui(sessions[shown], ns, stop, factory)
        nxt = apps[0].switch_to if apps else None
        if nxt is None:
            return
        shown = nxt


def headless_many(sessions: list[LiveSession], args: argparse.Namespace,
                  stop: StopEvent) -> None:
    from gmpmon.interval import interval_legend, interval_line

    for s in sessions:
        h = s.header
        print(f"[{h.pid}] Tracing Go scheduler of PID {h.pid} ({os.path.basename(h.exe)}, "
              f"{h.go_version}, GOMAXPROCS={h.gomaxprocs}, mode {h.mode})", flush=True)
    print(f"Tracing {len(sessions)} Go programs... Ctrl-C to end.", flush=True)
    print(interval_legend(args.interval, sessions[0].header.mode), flush=True)
    for s in sessions:
        s.snapshots_on_request(light=True)
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
                say(f"gmpmon: target {s.pid} {s.state().exit_reason or 'exited'}")
        timeout = line_due(time.monotonic(), next_line, deadline)
        if timeout is not None:
            tickets = {s.pid: s.ask() for s in sessions if s.pid not in said_exit}
            for s in sessions:
                if s.pid in said_exit:
                    continue
                snap = s.answer(tickets[s.pid], timeout=timeout)
                if snap is None:
                    continue
                if not say(f"[{s.pid}] {interval_line(snap, prev[s.pid])}", sys.stdout):
                    stop.end("stdout closed")
                prev[s.pid] = snap
            next_line += args.interval
