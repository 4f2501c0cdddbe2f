"""`gmpmon ps [--sort COL] [--json]`: every Go process on this host, read from memory and
/proc only (no probe).

Found by the build info in each executable (gmpmon.fleet.discover), including processes in
other pid and mount namespaces (containers). For each: its pid inside its namespace, cgroup,
executable, Go version, CPU% over ``--interval`` and RSS (/proc, gmpmon.fleet.procstat),
and from its own memory (validated first, gmpmon.binary.validate) GOMAXPROCS, the goroutine
count as runtime.NumGoroutine computes it, and the p99 of the runtime's own
scheduling-latency histogram over the process's life; then whether ``gmpmon attach`` can
watch it. A process that cannot be read or attached says why in the last column; one that
exits while being read is left out.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gmpmon.errors import UsageError
from gmpmon.fleet.discover import Discovery, ExeKey, GoProcess
from gmpmon.fleet.infocache import InfoCache
from gmpmon.fleet.layoutcache import LayoutCache
from gmpmon.fleet.lifetime import LifetimeStats, read_lifetime
from gmpmon.fleet.procstat import cpu_percent, cpu_ticks, host_attach_block, rss_bytes
from gmpmon.fmt import fmt_ns

EPILOG = """\
examples:
  sudo gmpmon ps                    # every Go process on the host
  sudo gmpmon ps --sort cpu         # the busiest first
  sudo gmpmon ps --match server     # those whose executable or command line matches
  sudo gmpmon ps --json             # one JSON object per process, in a list
columns (--sort takes any name below, lower case):
  PID/NSPID  the pid here and inside its own pid namespace (a container)
  CONTAINER  its cgroup path (- for the root cgroup)
  CPU%       utime+stime from /proc/PID/stat over --interval (0.5 s) while ps
             runs; 100 = one CPU
  RSS        resident memory (/proc/PID/statm)
  PROCS      GOMAXPROCS;  GOROUTINES  what runtime.NumGoroutine() counts
  SCHED P99  runnable->running latency p99 from the runtime's own histogram
             (sched.timeToRun, ~1 transition in 8 sampled), over the process's life
  ATTACH     whether gmpmon attach can watch it: "no" when this host or user
             cannot attach at all, or its executable is not a Go program gmpmon
             supports; the reason is in NOTE
  -          not measured (never 0)
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
    p.add_argument("--sort", metavar="COL", type=str.lower, default="pid",
                   help=f"order by a column: {', '.join(SORT_KEYS)} (numbers: largest "
                   "first; names: A-Z; not measured: last)")
    p.add_argument("--interval", metavar="S", type=float, default=CPU_INTERVAL_S,
                   help="seconds over which CPU%% is measured (0: not measured; "
                   f"default {CPU_INTERVAL_S})")
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
    if args.sort not in SORT_KEYS:
        raise UsageError(f"--sort {args.sort!r}: one of {', '.join(SORT_KEYS)}")
    if not 0 <= args.interval <= 60:
        raise UsageError(f"--interval {args.interval}: between 0 and 60 seconds")
    procs = Discovery().scan(match)
    t0 = time.monotonic()
    ticks0 = {p.pid: cpu_ticks(p.pid) for p in procs} if args.interval > 0 else {}
    disk = None
    if not args.no_cache:
        disk = LayoutCache()
        if disk.off_reason:
            print(f"gmpmon: not using the layout cache: {disk.off_reason}", file=sys.stderr)
    stats = read_all(procs, disk)
    cpu: dict[int, float | None] = {}
    dt: float | None = None
    if args.interval > 0:
        # The interval overlaps the memory reads: ps waits only for what is left of it.
        time.sleep(max(args.interval - (time.monotonic() - t0), 0))
        dt = time.monotonic() - t0
        cpu = {st.proc.pid: cpu_percent(ticks0.get(st.proc.pid), cpu_ticks(st.proc.pid), dt)
               for st in stats}
    host = host_attach_block()
    rows = [PsRow(st, cpu.get(st.proc.pid), rss_bytes(st.proc.pid), host,
                  None if dt is None else round(dt, 3)) for st in stats]
    rows = sort_rows(rows, args.sort)
    if args.json:
        # One object a line: json's C encoder (indent= would take its Python one, ~1 ms a row)
        objs = [json.dumps(r.to_json()) for r in rows]
        sys.stdout.write("[\n" + ",\n".join(objs) + "\n]\n" if objs else "[]\n")
        return 0
    table = [HEAD, *(r.cells() for r in rows)]
    widths = [max(len(row[i]) for row in table) for i in range(len(HEAD))]
    for row in table:
        cells = [c.rjust(w) if i in RIGHT else c.ljust(w)
                 for i, (c, w) in enumerate(zip(row, widths, strict=True))]
        print("  ".join(cells).rstrip())
    if not rows:
        print("(no Go processes)" if not match else f"(no Go process matches {args.match!r})",
              file=sys.stderr)
    return 0


CPU_INTERVAL_S = 0.5
HEAD = ("PID", "NSPID", "CONTAINER", "EXE", "GO", "CPU%", "RSS", "PROCS", "GOROUTINES",
        "SCHED P99", "UPTIME", "ATTACH", "NOTE")
RIGHT = {0, 1, 5, 6, 7, 8, 9, 10}


@dataclass(frozen=True, slots=True)
class PsRow:
    """One line of ps: the runtime's numbers (LifetimeStats) and what /proc says."""

    st: LifetimeStats
    cpu_pct: float | None
    rss: int | None
    host_block: str | None  # why this host cannot attach anything (None: it can)
    interval_s: float | None  # the interval CPU% was measured over (>= --interval)

    @property
    def attach_why(self) -> str:
        """"" when gmpmon attach can watch the process, else why not (one clause)."""
        return self.host_block or self.st.load_error

    def cells(self) -> tuple[str, ...]:
        st, p = self.st, self.st.proc
        why = self.attach_why
        note = "; ".join(dict.fromkeys(x for x in (why, st.note) if x))
        return (
            str(p.pid), str(p.ns_pid), _clip(p.container or "-", 24), _clip(p.exe_name, 16),
            p.go_version, "-" if self.cpu_pct is None else f"{self.cpu_pct:.1f}",
            fmt_bytes(self.rss), "-" if st.gomaxprocs is None else str(st.gomaxprocs),
            "-" if st.goroutines is None else str(st.goroutines),
            ("<=" + fmt_ns(st.latency_p99_ns)) if st.latency_p99_ns is not None else "-",
            fmt_uptime(p.uptime_s), "no" if why else "yes", note,
        )

    def to_json(self) -> dict[str, Any]:
        out = self.st.to_json()
        out.update({
            "cpu_percent": None if self.cpu_pct is None else round(self.cpu_pct, 2),
            "cpu_interval_s": self.interval_s,
            "cpu_source": "/proc/PID/stat utime+stime over cpu_interval_s",
            "rss_bytes": self.rss,
            "attachable": not self.attach_why,
            "attach_note": self.attach_why,
        })
        return out


def fmt_bytes(n: int | None) -> str:
    if n is None:
        return "-"
    for unit, size in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return f"{n}B"


# --sort keys: the column (lower case, as in the header) -> (key, largest first)
_SORTS: dict[str, tuple[Callable[[PsRow], Any], bool]] = {
    "pid": (lambda r: r.st.proc.pid, False),
    "nspid": (lambda r: r.st.proc.ns_pid, False),
    "container": (lambda r: r.st.proc.container, False),
    "exe": (lambda r: r.st.proc.exe_name, False),
    "go": (lambda r: _version_key(r.st.proc.go_version), True),
    "cpu": (lambda r: r.cpu_pct, True),
    "rss": (lambda r: r.rss, True),
    "procs": (lambda r: r.st.gomaxprocs, True),
    "goroutines": (lambda r: r.st.goroutines, True),
    "p99": (lambda r: r.st.latency_p99_ns, True),
    "uptime": (lambda r: r.st.proc.uptime_s, True),
    "attach": (lambda r: (bool(r.attach_why), r.attach_why), False),
}
_ALIASES = {"cpu%": "cpu", "gomaxprocs": "procs", "sched": "p99", "latency": "p99",
            "version": "go", "mem": "rss"}
SORT_KEYS: tuple[str, ...] = (*_SORTS, *_ALIASES)


def _version_key(v: str) -> tuple[int, ...]:
    return tuple(int(x) if x.isdigit() else 0 for x in re.split(r"[.a-z]+", v) if x)


def sort_rows(rows: list[PsRow], col: str) -> list[PsRow]:
    """Rows by ``col`` (a SORT_KEYS name); ties and not-measured values by pid, last."""
    key, desc = _SORTS[_ALIASES.get(col, col)]
    have = [r for r in rows if key(r) is not None]
    none = [r for r in rows if key(r) is None]
    have.sort(key=lambda r: r.st.proc.pid)
    have.sort(key=key, reverse=desc)  # stable: equal values keep pid order
    return have + sorted(none, key=lambda r: r.st.proc.pid)


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
    cache = InfoCache(readers_only=True, functab=False, gc=False, disk=_DISK)
    out = []
    for proc in procs:
        st = read_lifetime(proc, cache)
        if st is not None:
            out.append(st)
    return out


def _clip(s: str, n: int) -> str:
    return s if len(s) <= n else ".." + s[-(n - 2):]
