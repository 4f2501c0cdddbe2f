"""`gmpmon ps [--json]`: every Go process on this host, read from memory only (no probe).

Found by the build info in each executable (gmpmon.fleet.discover), including processes in
other pid and mount namespaces (containers). For each: its pid inside its namespace, cgroup,
executable, Go version, and from its own memory (validated first, gmpmon.binary.validate)
GOMAXPROCS, the goroutine count as runtime.NumGoroutine computes it, and the p99 of the
runtime's own scheduling-latency histogram over the process's life. A process that cannot be
read says why in the last column instead; one that exits while being read is left out.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from typing import Any

from gmpmon.errors import UsageError
from gmpmon.fleet.discover import Discovery, ExeKey, GoProcess
from gmpmon.fleet.infocache import InfoCache
from gmpmon.fleet.layoutcache import LayoutCache
from gmpmon.fleet.lifetime import LifetimeStats, read_lifetime
from gmpmon.fmt import fmt_ns

EPILOG = """\
examples:
  sudo gmpmon ps                    # every Go process on the host
  sudo gmpmon ps --match server     # those whose executable or command line matches
  sudo gmpmon ps --json             # one JSON object per process, in a list
columns:
  PID/NSPID  the pid here and inside its own pid namespace (a container)
  CONTAINER  its cgroup path (- for the root cgroup)
  PROCS      GOMAXPROCS;  GOROUTINES  what runtime.NumGoroutine() counts
  SCHED P99  runnable->running latency p99 from the runtime's own histogram
             (sched.timeToRun, ~1 transition in 8 sampled), over the process's life
cache:
  What ps learns from each executable (where its runtime's globals
  are, struct offsets) is kept in /var/cache/gmpmon (as root; else
  $XDG_CACHE_HOME/gmpmon), one entry per file (device, inode, size,
  mtime, ctime) and gmpmon version: a later ps reads no binary it has
  seen. Every process is still checked against its live memory first.
  $GMPMON_CACHE_DIR sets the directory (empty: no cache); --no-cache
  neither reads nor writes it; deleting it is always safe.
"""


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "ps",
        help="list the Go processes on this host (memory reads only, no probes)",
        description="List every Go process on this host, from its build info and memory.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--json", action="store_true", help="print a JSON list")
    p.add_argument("--match", metavar="REGEX",
                   help="only processes whose executable path or command line matches")
    p.add_argument("--no-cache", action="store_true",
                   help="read every executable, and keep nothing on disk (see cache below)")
    p.set_defaults(func=run)


def fmt_uptime(s: float) -> str:
    s = int(s)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def run(args: argparse.Namespace) -> int:
    match = None
    if args.match:
        try:
            match = re.compile(args.match)
        except re.error as e:
            raise UsageError(f"--match {args.match!r}: {e}") from e
    procs = Discovery().scan(match)
    disk = None
    if not args.no_cache:
        disk = LayoutCache()
        if disk.off_reason:
            print(f"gmpmon: not using the layout cache: {disk.off_reason}", file=sys.stderr)
    rows = read_all(procs, disk)
    if args.json:
        # One object a line: json's C encoder (indent= would take its Python one, ~1 ms a row)
        objs = [json.dumps(r.to_json()) for r in rows]
        sys.stdout.write("[\n" + ",\n".join(objs) + "\n]\n" if objs else "[]\n")
        return 0
    head = ("PID", "NSPID", "CONTAINER", "EXE", "GO", "PROCS", "GOROUTINES", "SCHED P99",
            "UPTIME", "NOTE")
    table = [head]
    for r in rows:
        p = r.proc
        table.append((
            str(p.pid), str(p.ns_pid), _clip(p.container or "-", 24), _clip(p.exe_name, 16),
            p.go_version, "-" if r.gomaxprocs is None else str(r.gomaxprocs),
            "-" if r.goroutines is None else str(r.goroutines),
            ("<=" + fmt_ns(r.latency_p99_ns)) if r.latency_p99_ns is not None else "-",
            fmt_uptime(p.uptime_s), r.note,
        ))
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    right = {0, 1, 5, 6, 7, 8}
    for row in table:
        cells = [c.rjust(w) if i in right else c.ljust(w)
                 for i, (c, w) in enumerate(zip(row, widths, strict=True))]
        print("  ".join(cells).rstrip())
    if not rows:
        print("(no Go processes)" if not match else f"(no Go process matches {args.match!r})",
              file=sys.stderr)
    return 0


# Forked workers pay for themselves when executables are to be read (~10 ms each), or for
# very many processes (~1 ms each to check and read); a pool costs ~50 ms.
PARALLEL_READS = 4
PARALLEL_PROCS = 200


def read_all(procs: list[GoProcess], disk: LayoutCache | None = None) -> list[LifetimeStats]:
    """read_lifetime of every process, in pid order. Most of the time goes to reading each
    distinct executable not in the ``disk`` cache (the finders' disassembly in a stripped
    one: ~10 ms), so the executables are shared out among one forked worker per CPU, all
    the processes of one executable to the same worker (it reads that binary once)."""
    groups: dict[ExeKey, list[GoProcess]] = {}
    for p in procs:
        groups.setdefault(p.exe_key, []).append(p)
    work = sorted(groups.values(), key=len, reverse=True)
    ncpu = len(os.sched_getaffinity(0))
    global _DISK
    _DISK = disk  # a forked worker inherits it
    reads = sum(1 for g in work if disk is None or not disk.has(g[0].exe_key))
    if ncpu < 2 or len(work) < 2 or (reads < PARALLEL_READS and len(procs) < PARALLEL_PROCS):
        done = [_read_group(g) for g in work]
    else:
        import multiprocessing

        # Imported here once, not in each forked worker: what reading a binary needs.
        import gmpmon.binary.finders
        import gmpmon.binary.probes  # noqa: F401

        ctx = multiprocessing.get_context("fork")
        with ctx.Pool(min(ncpu, len(work), 16)) as pool:
            done = pool.map(_read_group, work, chunksize=1)
    rows = [st for group in done for st in group]
    rows.sort(key=lambda r: r.proc.pid)
    return rows


_DISK: LayoutCache | None = None


def _read_group(procs: list[GoProcess]) -> list[LifetimeStats]:
    cache = InfoCache(readers_only=True, functab=False, disk=_DISK)
    out = []
    for proc in procs:
        st = read_lifetime(proc, cache)
        if st is not None:
            out.append(st)
    return out


def _clip(s: str, n: int) -> str:
    return s if len(s) <= n else ".." + s[-(n - 2):]
