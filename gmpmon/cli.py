"""Command-line entry point: parses arguments, dispatches, maps errors to exit codes.

Each subcommand lives in gmpmon/commands/<name>.py with two functions:
``add_parser(subparsers) -> None`` and ``run(args) -> int``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from gmpmon import __version__
from gmpmon.errors import GmpmonError

COMMANDS = ("attach", "run", "replay", "export", "inspect", "doctor")

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
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gmpmon",
        description="Watch the Go scheduler (G/M/P) of a running Go program, with eBPF.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"gmpmon {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMANDS:
        importlib.import_module(f"gmpmon.commands.{name}").add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
        return code
    except GmpmonError as e:
        print(f"gmpmon: {e.one_line()}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 141
