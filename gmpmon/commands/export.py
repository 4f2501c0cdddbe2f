"""`gmpmon export FILE --format F -o OUT`: a recording into the formats people already open."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, BinaryIO

from gmpmon.errors import UsageError
from gmpmon.export import FORMATS
from gmpmon.files import check_output_path

EPILOG = """\
formats:
  folded    mutex-contention stacks "f1;f2;f3 N" (flamegraph.pl, inferno, speedscope);
            --what latency: scheduling latency as sched_latency;<wake reason>;P<n>
            --what waits: where goroutines wait (the census's wait stacks, leaf
            [wait reason]), weighted by wait time (g.waitsince) or --weight count
  pprof     gzipped profile.proto like Go's mutex profile (go tool pprof -top OUT);
            --what cpu: on-CPU profile from perf samples, labels goid and p (-tags)
  perfetto  Perfetto protobuf trace: a track per P (its spans: the running goroutine,
            searching, idle, syscall, GC stop), stop-the-world, steals and parks; open it
            in ui.perfetto.dev (chrome://tracing reads only JSON)
  json      the summary JSON (docs/summary-schema.md)

examples:
  gmpmon export s.gmp --format folded -o mutex.folded && flamegraph.pl mutex.folded > m.svg
  gmpmon export s.gmp --format folded --what latency --weight count -o lat.folded
  gmpmon export s.gmp --format folded --what waits --weight count -o waits.folded
  gmpmon export s.gmp --format pprof -o mutex.pb.gz && go tool pprof -top mutex.pb.gz
  gmpmon export s.gmp --format pprof --what cpu -o cpu.pb.gz && go tool pprof -tags cpu.pb.gz
  gmpmon export s.gmp --format perfetto -o trace.pftrace
  gmpmon export s.gmp --format pprof --from 10 --to 15 -o spike.pb.gz  # seconds 10-15 only
  gmpmon export s.gmp --format json -o - | jq .sched_latency_ns.p99
"""


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "export",
        help="convert a recording to folded stacks, pprof, perfetto or summary JSON",
        description="Convert a gmpmon recording (from --record) into another format.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("file", metavar="FILE", help="a recording written by --record")
    p.add_argument("--format", "-f", required=True, choices=FORMATS)
    p.add_argument("-o", "--output", required=True, metavar="OUT",
                   help="file to write (0600), or - for standard output")
    p.add_argument(
        "--weight",
        choices=("wait", "count"),
        default="wait",
        help="folded: weight lines by wait ns (default) or by count",
    )
    p.add_argument(
        "--what",
        choices=("mutex", "latency", "waits", "cpu"),
        default="mutex",
        help="folded: mutex-contention stacks (default), scheduling latency or where "
        "goroutines wait (census wait stacks); "
        "pprof: mutex (default) or cpu (on-CPU profile from perf samples)",
    )
    p.add_argument("--from", dest="from_s", type=float, metavar="S",
                   help="only what happened from S seconds after the recording's first event")
    p.add_argument("--to", dest="to_s", type=float, metavar="S",
                   help="only what happened up to S seconds after the recording's first event")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from gmpmon.export.base import export_recording
    from gmpmon.export.registry import make_exporter
    from gmpmon.record import content_checked, read_recording
    from gmpmon.replay import check_damage, stop_note

    if args.format == "pprof" and args.what in ("mutex", "cpu") and args.weight == "wait":
        pass
    elif args.format != "folded" and (args.what != "mutex" or args.weight != "wait"):
        raise UsageError("--what applies to --format folded and pprof, --weight to folded only")
    elif args.format == "folded" and args.what == "cpu":
        raise UsageError("--what cpu applies to --format pprof only")
    from_s, to_s = args.from_s, args.to_s
    if (from_s is not None and from_s < 0) or (to_s is not None and to_s <= 0) or (
            from_s is not None and to_s is not None and from_s >= to_s):
        raise UsageError("--from and --to are seconds after the recording's first event, "
                         "0 <= --from < --to")
    to_stdout = args.output == "-"
    if not to_stdout:
        check_output_path(args.output)
    rec = read_recording(args.file)
    with content_checked(args.file):
        exporter = make_exporter(args.format, rec.header, what=args.what, weight=args.weight)
        span = None if from_s is None and to_s is None else (from_s or 0.0, to_s)
        export_recording(rec, exporter, span)
    check_damage(rec)
    note = stop_note(rec)
    if note:
        print(f"gmpmon: {note}", file=sys.stderr)
    if to_stdout:
        out = _Counting(sys.stdout.buffer)
        with content_checked(args.file):
            exporter.dump(out)
        sys.stdout.buffer.flush()
        where, size = "standard output", out.bytes
    else:
        with content_checked(args.file):
            exporter.write(args.output)
        where, size = args.output, os.path.getsize(args.output)
    # On stderr, so that `-o -` keeps standard output for the data alone.
    print(f"gmpmon: wrote {args.format} to {where} ({size:,} bytes)", file=sys.stderr)
    return 0


class _Counting:
    """Standard output, counting what is written (for the closing line)."""

    def __init__(self, f: BinaryIO) -> None:
        self.f = f
        self.bytes = 0

    def write(self, data: bytes) -> int:
        self.bytes += len(data)
        return self.f.write(data)
