"""`gmpmon run [options] -- CMD ARGS...`: start a Go program with the probes already in place.

Uprobes belong to the binary's inode, so they can be attached (pid=-1, the BPF programs
filter on the child's TGID) before the program exists: fork, the child waits on a pipe
until the parent has attached, then execs. Nothing of the program runs unobserved, however
short-lived it is. gmpmon exits with the program's exit code (128+N if killed by signal N).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import sys
import threading
from typing import Any

from gmpmon import priority
from gmpmon.commands.attach_one import (
    StopEvent,
    add_capture_options,
    check_capture_args,
    drawn,
    finish_outputs,
    say,
    say_recorded,
    stop_signals,
    thread_failure,
    usr1_triggers,
    watch,
)
from gmpmon.errors import TargetError, UsageError
from gmpmon.session import LiveSession

EXAMPLES = """\
examples:
  sudo gmpmon run -- ./server -port 8080
  sudo gmpmon run --mode full --no-tui --summary-json s.json -- ./batchjob -n 100
"""


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "run",
        help="start a Go program with probes in place",
        description="Start a Go program with gmpmon's probes attached before its first "
        "goroutine runs; exit with its exit code.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_capture_options(p)
    p.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD ARGS...")
    p.set_defaults(func=run)


def _gomaxprocs_for_child() -> int:
    env = os.environ.get("GOMAXPROCS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    return len(os.sched_getaffinity(0))


def spawn_stopped(argv: list[str]) -> tuple[int, int, int]:
    """Fork a child that execs ``argv`` once released. Returns (pid, go_fd, exec_fd):
    write a byte to go_fd to release it; exec_fd reads EOF once the exec succeeded, or the
    errno text if it failed (close-on-exec status pipe)."""
    go_r, go_w = os.pipe()
    st_r, st_w = os.pipe2(os.O_CLOEXEC)
    pid = os.fork()
    if pid == 0:  # child
        try:
            os.close(go_w)
            os.close(st_r)
            if priority.BOOSTED is not None:  # the target runs at the nice gmpmon started with
                priority.end_realtime_here()
                os.setpriority(os.PRIO_PROCESS, 0, priority.BOOSTED)
            if os.read(go_r, 1) != b"x":
                os._exit(127)
            os.close(go_r)
            os.execv(argv[0], argv)
        except OSError as e:
            os.write(st_w, (e.strerror or str(e)).encode())
        finally:
            os._exit(127)
    os.close(go_r)
    os.close(st_w)
    return pid, go_w, st_r


def run(args: argparse.Namespace) -> int:
    check_capture_args(args)
    cmd: list[str] = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise UsageError("nothing to run: gmpmon run [options] -- CMD ARGS...")
    exe = shutil.which(cmd[0])
    if exe is None:
        raise TargetError(f"{cmd[0]}: command not found")
    exe = os.path.abspath(exe)
    from gmpmon.binary.elf import Elf
    from gmpmon.binary.load import load_elf, read_file
    from gmpmon.binary.target import load_segments, pie_bias

    data = read_file(exe)  # read once: the BinaryInfo, and a PIE's PT_LOAD segments
    info = load_elf(data, exe)
    if "dwarf" in info.missing_optional:  # a hostile binary's DWARF: said, not fatal
        print(f"gmpmon: {exe}: {info.missing_optional['dwarf']}", file=sys.stderr)
    # The segments before the child goes: a short program (spawn -n 500) could exit while
    # the whole binary was read after its exec, and /proc/PID/maps then has no bias.
    segments = load_segments(Elf(data, exe)) if info.pie else None
    del data
    pid, go_fd, exec_fd = spawn_stopped([exe, *cmd[1:]])
    released = False
    try:
        session = LiveSession(
            info, pid, mode=args.mode, window_ms=args.window_ms, period_ms=args.period_ms,
            budget_pct=args.budget, record=args.record, gomaxprocs=_gomaxprocs_for_child(),
            before_exec=True, census_s=args.census_interval,
            triggers=args.trigger_specs, burst_ms=args.burst, dump_dir=args.dump_dir,
            kernel=args.kernel, sample_hz=args.sample_hz, history=drawn(args),
        )
        with stop_signals() as stop, usr1_triggers(session):
            try:
                session.start()
                priority.restore_boost()
                os.write(go_fd, b"x")
                released = True
                os.close(go_fd)
                err = os.read(exec_fd, 4096)
                if err:
                    raise TargetError(f"{cmd[0]}: {err.decode(errors='replace')}")
                bias = pie_bias(pid, segments, exe) if segments is not None else None
                checked = session.target_started(bias)
                if "layout" in checked.missing_optional:  # said once; the readers stay quiet
                    print(f"gmpmon: {checked.missing_optional['layout']}", file=sys.stderr)
                forward = _Forwarder(pid, stop)
                forward.start()
                try:
                    watch(session, args, forward.second)
                finally:
                    forward.done.set()
            finally:
                recording = session.recording_path() or args.record
                session.close()
        finish_outputs(session, args)
        if session.error is None:  # else the failure's own line says it all
            say_recorded(recording)
        failed = thread_failure(session)
    finally:
        if not released:
            os.close(go_fd)  # the child reads EOF and exits 127
        os.close(exec_fd)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    return failed or (128 - code if code < 0 else code)


class _Forwarder(threading.Thread):
    """The first SIGINT/SIGTERM goes to the program (gmpmon keeps tracing until it exits);
    a second one stops tracing at once."""

    def __init__(self, pid: int, stop: StopEvent) -> None:
        super().__init__(name="gmpmon-signals", daemon=True)
        self.pid = pid
        self.stop = stop
        self.second = StopEvent()
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            if self.stop.wait(0.1):
                self.stop.clear()
                say(f"gmpmon: {self.stop.why or 'stop'}: sent SIGTERM to {self.pid}; tracing "
                    "until it exits (again to stop at once)")
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.pid, signal.SIGTERM)
                while not self.done.is_set():
                    if self.stop.wait(0.1):
                        self.second.end(self.stop.why)
                        return
                return


