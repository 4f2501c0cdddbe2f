"""`gmpmon replay FILE`: a recording fed through the same model as the live run."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gmpmon.errors import UsageError
from gmpmon.files import check_output_path
from gmpmon.findings.engine import snapshot_with_findings

if TYPE_CHECKING:
    from gmpmon.model.snapshot import Snapshot
    from gmpmon.record import Recording

EPILOG = """\
examples:
  gmpmon replay s.gmp                          # browse in the TUI (pause, step, seek)
  gmpmon replay s.gmp --no-tui                 # print the end-of-run report
  gmpmon replay s.gmp --summary-json out.json  # the same JSON the live run wrote
  gmpmon replay s.gmp --no-tui --interval 1    # schedtrace-like lines, 1 s of recording each
"""


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "replay",
        help="replay a recording (TUI, report or summary JSON)",
        description="Replay a recording made with --record through gmpmon's model.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("file", metavar="FILE", help="a recording written by --record")
    p.add_argument("--summary-json", metavar="F", help="write the summary JSON to F (0600)")
    p.add_argument("--no-tui", action="store_true", help="no TUI: print the text report")
    p.add_argument("--report", action="store_true", help="print the text report")
    p.add_argument(
        "--interval",
        type=float,
        metavar="S",
        help="without the TUI: print one schedtrace-like line per S seconds of recording",
    )
    p.add_argument("--speed", type=float, default=1.0, help="TUI playback speed (default 1)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from gmpmon.record import content_checked, read_recording
    from gmpmon.replay import ReplaySource, check_damage, stop_note

    if args.summary_json:
        check_output_path(args.summary_json)
    if args.interval is not None and args.interval <= 0:
        raise UsageError("--interval must be positive")
    if args.speed <= 0:
        raise UsageError("--speed must be positive")
    headless = args.no_tui or args.summary_json or args.report or args.interval
    if not headless and sys.stdout.isatty() and sys.stdin.isatty():
        from gmpmon.tui.app import run_tui

        with content_checked(args.file):
            src = ReplaySource(args.file, speed=args.speed)
        try:
            run_tui(src)
        finally:
            src.close()
        if src.failure is not None:
            raise src.failure
        if src.error:
            print(f"gmpmon: {src.error}", file=sys.stderr)
        return 0

    rec = read_recording(args.file)
    with content_checked(args.file):
        snap = _replay(rec, args.interval, sys.stdout.write)
        report = None
        if args.report or not args.summary_json:
            from gmpmon.report import terminal_width, text_report

            report = text_report(snap, width=terminal_width(sys.stdout))
        if args.summary_json:
            from gmpmon.export.json import JsonExporter

            ex = JsonExporter(rec.header)
            ex.add(snap)
            ex.recording_read(rec)
            check_damage(rec)
            ex.write(args.summary_json)
    check_damage(rec)
    note = stop_note(rec)
    if note:
        print(f"gmpmon: {note}", file=sys.stderr)
    if report is not None:
        from gmpmon.report import for_stream

        if rec.error is not None:  # the report says it too: it is of the good batches only
            report = f"{report.rstrip()}\n\nrecording read in part: {note}\n"
        sys.stdout.write(for_stream(report, sys.stdout))
    return 0


def _replay(rec: Recording, interval: float | None, out: Callable[[str], object]) -> Snapshot:
    from gmpmon.model import Model
    from gmpmon.replay import replay_all

    if not interval:
        return replay_all(rec)
    from gmpmon.interval import interval_legend, interval_line

    out(interval_legend(interval, rec.header.mode) + "\n")
    model = Model(rec.header, history=False)
    step = int(interval * 1e9)
    next_at = -1
    prev = None
    for batch in rec:
        model.feed(batch)
        if not batch.events:
            continue
        if next_at < 0:
            next_at = batch.events[0][0] + step
        if batch.events[-1][0] >= next_at:  # one line per batch: a line's "last Ns" is
            snap = snapshot_with_findings(model)  # the time since the previous one, gaps included
            out(interval_line(snap, prev) + "\n")
            prev = snap
            # The next boundary past this batch (arithmetic: a recording's timestamps may
            # jump by centuries, and a loop of steps would not end).
            next_at += ((batch.events[-1][0] - next_at) // step + 1) * step
    model.flush()
    return snapshot_with_findings(model)
