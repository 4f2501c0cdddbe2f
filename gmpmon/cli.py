"""Command-line entry point: parses arguments, dispatches, maps errors to exit codes.

Each subcommand lives in gmpmon/commands/<name>.py with two functions:
``add_parser(subparsers) -> None`` and ``run(args) -> int``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import os
import sys
from collections.abc import Sequence

from gmpmon import __version__
from gmpmon.errors import GmpmonError

COMMANDS = (
    "attach", "run", "replay", "export", "inspect", "doctor", "ps", "serve", "goroutines",
)

EPILOG = """\
examples:
  sudo gmpmon attach 1234                  # live TUI of PID 1234's scheduler
  sudo gmpmon attach 1234 --no-tui -d 10   # 10 s, schedtrace-like lines, then a summary
  sudo gmpmon attach 1234 --record s.gmp   # also record events for later replay
  sudo gmpmon run -- ./server -port 8080   # start a Go program with probes in place
  gmpmon replay s.gmp                      # browse a recording in the TUI
  gmpmon export s.gmp --format folded -o mutex.folded
  gmpmon inspect ./server                  # Go version, symbols, offsets, probe sites
  sudo gmpmon doctor                       # can this machine attach?
  sudo gmpmon ps                           # every Go process on this host (no probes)
  sudo gmpmon serve --all                  # Prometheus metrics of them on 127.0.0.1:9464
  sudo gmpmon goroutines 1234              # every goroutine's stack, debug=2 text, no stop
"""


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser; with ``only``, just that subcommand's module is imported (the others pull
    in BCC, capstone or Textual, which would cost a second before ``inspect`` could start)."""
    parser = argparse.ArgumentParser(
        prog="gmpmon",
        description="Watch the Go scheduler (G/M/P) of a running Go program, with eBPF.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"gmpmon {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMANDS if only is None else (only,):
        importlib.import_module(f"gmpmon.commands.{name}").add_parser(sub)
    return parser


def _chosen_command(argv: Sequence[str]) -> str | None:
    for arg in argv:
        if not arg.startswith("-"):
            return arg if arg in COMMANDS else None
    return None


def entry() -> None:
    """The `gmpmon` command and `python -m gmpmon`: main(), then the exit. After attach and
    run, every output is written and closed and every probe detached; what is left is
    Python freeing the model one object at a time, which took 4-6 s at 100,000 goroutines
    on a loaded machine (past --duration). os._exit skips that.

    The exit itself (the kernel freeing gmpmon's maps, perf events and ~200 MB of memory)
    runs at the attach's raised priority: at its own, beside 64 busy target threads on 2
    CPUs, it took up to 0.5 s."""
    _whole_lines()
    code = main()
    if _chosen_command(sys.argv[1:]) in ("attach", "run", "goroutines"):
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):  # a closed pipe: nothing more to say
                stream.flush()
        from gmpmon import priority

        if _boosted(sys.argv[1:]):
            priority.boost(every_thread=True)
        os._exit(code)  # also unboosted: freeing 100k goroutines' objects is CPU for nothing
    sys.exit(code)


class _WholeLines(io.TextIOWrapper):
    """Flushed when a write ends a line: print()'s text (inner newlines and all) and its
    newline leave in one write(2). Plain line buffering flushes at any newline, so a
    multi-line print still went out as text, then its last newline."""

    def write(self, s: str) -> int:
        n = super().write(s)
        if s.endswith("\n"):
            self.flush()
        return n


def _whole_lines() -> None:
    """Each line gmpmon prints reaches the kernel in one write. Under PYTHONUNBUFFERED
    (set in many containers and CI images) print() writes a line's text and its newline
    in two writes, and `gmpmon run`'s program shares gmpmon's stdout and stderr: one of its
    lines landed between the two, glued to the end of gmpmon's (a CI failure: the oracle's
    "oracle {...}" line no longer started a line)."""
    for name in ("stdout", "stderr"):
        s = getattr(sys, name)
        raw = getattr(s, "buffer", None)
        if isinstance(raw, io.FileIO):  # unbuffered: give it a buffer, flushed per line
            setattr(sys, name, _WholeLines(io.BufferedWriter(raw, 1 << 16), encoding=s.encoding,
                                           errors=s.errors))


def _boosted(argv: list[str]) -> bool:
    """attach and run always start boosted; a goroutine dump only with --fast: its CPU is
    taken from the target's, and at a raised priority all at once (docs/goroutines.md)."""
    cmd = _chosen_command(argv)
    return cmd in ("attach", "run") or (cmd == "goroutines" and "--fast" in argv)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if _boosted(argv):
        from gmpmon import priority

        # Until attached, or the dump read (the command restores it): gmpmon/priority.py.
        priority.BOOSTED = priority.boost()
    try:
        args = build_parser(_chosen_command(argv)).parse_args(argv)
        code: int = args.func(args)
        return code
    except GmpmonError as e:
        print(f"gmpmon: {e.one_line()}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        # Also while the parser imports the command's modules: no traceback for an early ^C.
        return 130
    except BrokenPipeError:
        return 141
