"""`gmpmon goroutines PID`: every goroutine's stack, from outside, without stopping the target.

No probe, no signal, no code in the target: the runtime's ``allgs`` and each G's saved
registers are read from /proc/PID/mem and unwound with the binary's own pclntab
(gmpmon/capture/goroutines.py). The default output is Go's ``debug=2`` text.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from gmpmon import priority
from gmpmon.binary import load_pid
from gmpmon.binary.elf import Elf
from gmpmon.binary.load import read_file
from gmpmon.binary.unwind import Unwinder
from gmpmon.binary.validate import trusted
from gmpmon.capture.goroutines import G_RUNNING, Dump, GoroutineReader
from gmpmon.capture.sampler import check_layout
from gmpmon.capture.targetmem import TargetMemory, running, why
from gmpmon.errors import MissingSymbolsError, PermissionDenied, TargetError, TargetMemoryError
from gmpmon.export.goroutines import debug2_text, grouped_text, to_json

EPILOG = """\
examples:
  sudo gmpmon goroutines 1234              # like /debug/pprof/goroutine?debug=2
  sudo gmpmon goroutines 1234 --group      # identical stacks folded, largest group first
  sudo gmpmon goroutines 1234 --json       # the same, structured (with --group: groups)
  sudo gmpmon goroutines 1234 --system     # also the runtime's own goroutines
  sudo gmpmon goroutines 1234 --sample 0.5 # running goroutines' stacks from perf samples
  sudo gmpmon goroutines 1234 --fast       # at a raised priority: sooner, costlier now
"""


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "goroutines",
        help="dump every goroutine's stack from outside (Go's debug=2 text), no stop",
        description="Print every goroutine's stack, read from outside without stopping the "
        "process, in the format of Go's /debug/pprof/goroutine?debug=2.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("pid", type=int, metavar="PID", help="the Go process")
    p.add_argument("--group", action="store_true",
                   help="fold identical stacks, with counts, largest first")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--system", action="store_true",
                   help="also the runtime's goroutines, and runtime frames in every stack "
                   "(as GOTRACEBACK=system shows them)")
    p.add_argument("--sample", type=float, default=0.0, metavar="SECONDS",
                   help="stacks of running goroutines from perf samples (BPF), taken for at "
                   "most SECONDS after the read (default 0: none)")
    p.add_argument("--fast", action="store_true",
                   help="read at a raised priority (nice -15, realtime for at most 2 s), as "
                   "attach does: the dump comes sooner on a busy machine, and the CPU it "
                   "takes is taken from the target all at once (default: your nice)")
    p.set_defaults(func=run)


def take(pid: int, include_system: bool = False, sample_s: float = 0.0) -> Dump:
    """One dump of a live process; ``sample_s``: running goroutines' stacks from perf
    samples taken for at most that long."""
    info = load_pid(pid, readers_only=True)
    layout = check_layout(info, pid, ("allgs",))
    if not layout.ok("allgs"):
        raise MissingSymbolsError(f"cannot list pid {pid}'s goroutines: {layout.why('allgs')}")
    info = trusted(info, layout)
    unwinder = Unwinder(Elf(read_file(info.path), info.path))
    try:
        mem = TargetMemory(pid)
    except PermissionError as e:
        raise PermissionDenied(f"cannot read /proc/{pid}/mem (run as root)") from e
    except FileNotFoundError as e:
        raise TargetError(f"no process with pid {pid}") from e
    try:
        reader = GoroutineReader(info, mem, unwinder)
        dump = reader.read(include_system)
        on_cpu = {g.goid for g in dump.goroutines if g.status_code == G_RUNNING}
        if sample_s > 0 and on_cpu:
            from gmpmon.capture.runstacks import running_stacks  # BCC: only when asked

            reader.add_samples(dump, running_stacks(info, pid, on_cpu, sample_s))
        return dump
    except OSError as e:
        if not running(pid):
            raise TargetError(f"process {pid} exited while its goroutines were read") from e
        raise TargetMemoryError(f"cannot read pid {pid}'s goroutines: {why(e)}") from e
    finally:
        mem.close()


def run(args: argparse.Namespace) -> int:
    # Not boosted by default: every CPU-s the dump takes is taken from a target that keeps
    # the CPUs busy, and at a raised priority it is taken all at once (the target served
    # 44% of its requests/s during a boosted 100k dump, 2 CPUs; docs/goroutines.md).
    # --fast: as soon as it can, as attach (nice -15, realtime for at most 2 s), from the
    # start to the exit (cli.main boosted the start); a dump of 100k goroutines beside 64
    # busy target threads took 219 s unboosted, 3.4 s boosted.
    if args.fast and priority.BOOSTED is None:
        priority.BOOSTED = priority.boost()
    dump = take(args.pid, args.system, args.sample)
    if args.json:
        json.dump(to_json(dump, grouped=args.group), sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(grouped_text(dump) if args.group else debug2_text(dump))
    if dump.skipped:  # the dump is written; what it lacks, and why, is said
        sys.stdout.flush()
        gs = "goroutine" if dump.skipped == 1 else "goroutines"
        print(f"gmpmon: {dump.skipped} {gs} of allgs could not be read, not listed "
              f"(first: {dump.skipped_why})", file=sys.stderr)
        return TargetMemoryError.exit_code
    return 0
