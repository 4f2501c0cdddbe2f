"""`gmpmon serve`: a Prometheus exporter for the Go processes of this host, trap-free by default.

Every watched process is read from its memory (the runtime's own counters, a goroutine
census, P states with ``--per-p``), its threads' schedstat and its cgroup's CPU files: no
probe, no trap, nothing the target pays per event. ``--mode sample|default|full`` adds
attach's probes of that mode to every target (``default``: held to ``--budget``).
``--all`` and ``--match`` follow processes as they start and exit (a rescan every 2 s);
explicit pids are watched until they exit. Metrics and their labels: docs/fleet.md.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
import threading
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric

from gmpmon.errors import PermissionDenied, TargetError, UsageError
from gmpmon.fleet.findings import WINDOW_S
from gmpmon.fleet.fleet import PROBE_MODES, Fleet
from gmpmon.fleet.metrics import families
from gmpmon.fleet.server import parse_listen, serve_registry

DEFAULT_LISTEN = "127.0.0.1:9464"

EPILOG = """\
examples:
  sudo gmpmon serve --all                          # every Go process, on 127.0.0.1:9464
  sudo gmpmon serve 1234 5678                      # these two
  sudo gmpmon serve --match 'api|worker' --per-p   # by exe/command line, with P states
  sudo gmpmon serve --all --listen 0.0.0.0:9464    # reachable from other hosts
  sudo gmpmon serve 1234 --mode default --budget 1 # + budgeted probes: hand-offs
then scrape http://127.0.0.1:9464/metrics (docs/fleet.md has a scrape config and
every series: scheduler, goroutines, and the GC and heap as gmpmon_gc_*: heap live and
goal, GOGC, GOMEMLIMIT, cycles, pause and GC CPU, read from the runtime's memory).
"""


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "serve",
        help="export the scheduler metrics of Go processes to Prometheus (no probes "
        "unless --mode)",
        description="Serve Prometheus metrics of Go processes on this host, read from their "
        "memory and the kernel's accounting: no probes unless --mode asks for them.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("pids", metavar="PID", nargs="*", type=int, help="process ids to watch")
    p.add_argument("--all", action="store_true", help="every Go process on the host")
    p.add_argument("--match", metavar="REGEX",
                   help="Go processes whose executable path or command line matches")
    p.add_argument("--listen", default=DEFAULT_LISTEN, metavar="HOST:PORT",
                   help=f"address to serve /metrics on (default {DEFAULT_LISTEN}: loopback)")
    p.add_argument("--per-p", action="store_true",
                   help="also gmpmon_p_state_seconds_total{p,state} (P states sampled at 10 Hz; "
                   "--mode none only)")
    p.add_argument("--interval", type=float, default=1.0, metavar="S",
                   help="seconds between reads of each process (default 1)")
    p.add_argument("--census-interval", type=float, default=5.0, metavar="S",
                   help="seconds between goroutine censuses of each process (default 5; "
                   "0 = none)")
    p.add_argument("--mode", choices=("none", *PROBE_MODES), default="none",
                   help="none (default): no probe, nothing but memory and /proc reads; "
                   "sample|default|full: also attach's probes of that mode on every target "
                   "(docs/modes.md), which add gmpmon_handoffs_total; default mode's hot "
                   "probes and the cold sync.Mutex probes (sample and default) are held to "
                   "--budget")
    p.add_argument("--budget", type=float, default=1.0, metavar="PCT",
                   help="--mode default|sample: what the probes may cost each target, in percent "
                   "of its own CPU time (default 1)")
    p.add_argument("--findings-window", type=float, default=WINDOW_S, metavar="S",
                   help="gmpmon_findings{id,severity} look at the last S/2 to S seconds of "
                   f"each process (default {WINDOW_S:g}; 0 = no findings); with probes "
                   "(--mode) findings cover the time since serve attached")
    p.set_defaults(func=run)


class _Collector:
    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet

    def collect(self) -> list[Metric]:
        readings, errors = self.fleet.readings()
        return list(families(readings, errors))


def run(args: argparse.Namespace) -> int:
    chosen = sum((bool(args.pids), bool(args.all), args.match is not None))
    if chosen != 1:
        raise UsageError("say what to watch: PID..., --all or --match REGEX (one of them)")
    if not (0 < args.budget <= 100):
        raise UsageError("--budget must be in (0, 100]")
    if args.per_p and args.mode != "none":
        raise UsageError("--per-p samples P states itself: it goes with --mode none (with "
                         "probes, the capture's own sampler feeds the findings)")
    if args.interval <= 0 or args.census_interval < 0 or args.findings_window < 0:
        raise UsageError("--interval must be > 0, --census-interval and --findings-window "
                         ">= 0")
    match = None
    if args.match is not None:
        try:
            match = re.compile(args.match)
        except re.error as e:
            raise UsageError(f"--match {args.match!r}: {e}") from e
    host, port = parse_listen(args.listen)
    if os.geteuid() != 0:
        raise PermissionDenied("gmpmon serve reads other processes' memory",
                               hint="run as root, as for attach")
    fleet = Fleet(pids=tuple(args.pids), all_=args.all, match=match,
                  interval_s=args.interval, census_s=args.census_interval, per_p=args.per_p,
                  findings_window_s=args.findings_window, mode=args.mode,
                  budget_pct=args.budget)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(fleet))
    server = serve_registry(registry, host, port)
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        # Off the main thread: it may hold stop's lock inside stop.wait() (see attach).
        threading.Thread(target=_stop_all, name="gmpmon-signal", daemon=True).start()

    def _stop_all() -> None:
        stop.set()
        fleet.request_stop()  # an attach under way is the last one

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    try:
        fleet.start()
        if args.pids and not fleet.watches:
            raise TargetError("none of the given pids is a Go process that can be read")
        what = ("every Go process" if args.all else
                f"Go processes matching {args.match!r}" if match else
                f"{len(fleet.watches)} process(es)")
        how = "no probes" if args.mode == "none" else (
            f"{args.mode} mode probes, budget {args.budget:g}%"
            if args.mode in ("default", "sample") else f"{args.mode} mode probes")
        print(f"Serving scheduler metrics of {what} on http://{host}:{server.server_port}"
              f"/metrics ({how})... Ctrl-C to end.", flush=True)
        while not stop.wait(0.5):
            if fleet.wait(0):
                break
    finally:
        server.shutdown()
        server.server_close()
        fleet.stop()
    if fleet.error is not None:
        print(f"gmpmon: serve stopped: {type(fleet.error).__name__}: {fleet.error}",
              file=sys.stderr)
        return 1
    return 0
