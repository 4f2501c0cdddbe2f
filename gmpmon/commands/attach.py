"""`gmpmon attach PID [PID...]` / `attach --match REGEX`: watch running Go programs'
schedulers. One target: gmpmon/commands/attach_one.py; several: attach_many.py."""

from __future__ import annotations

import argparse
from typing import Any

from gmpmon.commands.attach_many import run_many, target_pids
from gmpmon.commands.attach_one import add_capture_options, check_capture_args, run_one

EXAMPLES = """\
examples:
  sudo gmpmon attach 1234                       # live TUI
  sudo gmpmon attach 1234 --no-tui -d 10        # 10 s of schedtrace-like lines, then a summary
  sudo gmpmon attach 1234 --mode full -d 5 --summary-json s.json
  sudo gmpmon attach 1234 --mode sample         # no hot probes at all: near-zero overhead
  sudo gmpmon attach 1234 --record s.gmp --folded mutex.folded
  sudo gmpmon attach 1234 5678 --no-tui -d 10   # two targets: lines prefixed by pid
  sudo gmpmon attach --match api --summary-json s-{pid}.json
"""


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "attach",
        help="watch a running Go program's scheduler",
        description="Attach uprobes to a running Go program and show its scheduler (G/M/P).",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("pids", metavar="PID", type=int, nargs="*",
                   help="process id of the Go program (several: one session each)")
    p.add_argument("--match", metavar="REGEX",
                   help="attach to every Go process whose executable path or command line "
                   "matches (with several targets, file paths must hold {pid})")
    add_capture_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    check_capture_args(args)
    if len(args.pids) != 1 or args.match is not None:
        return run_many(args, target_pids(args))
    return run_one(args)
