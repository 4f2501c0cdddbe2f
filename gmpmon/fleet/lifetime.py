"""One look at a Go process's own counters over its whole life (for ``gmpmon ps``).

Unlike a watch, which counts from when gmpmon started, this takes the runtime's cumulative
values as they are: the scheduling-latency histogram since the process started, the
goroutine count and GOMAXPROCS now. One validated read, no probe.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from gmpmon.capture.runtime_counters import RuntimeCounters
from gmpmon.capture.sampler import check_layout, read_gomaxprocs
from gmpmon.capture.targetmem import TargetMemory
from gmpmon.errors import GmpmonError
from gmpmon.events import EventTuple, Kind, RtFeature, RtHist
from gmpmon.fleet.discover import GoProcess, exists
from gmpmon.fleet.infocache import InfoCache
from gmpmon.model.rthist import hist_stats

RT_SCHED = int(Kind.RT_SCHED)
NEEDS = ("procs", "sched")  # the layout groups every number here is read through


@dataclass(frozen=True, slots=True)
class LifetimeStats:
    proc: GoProcess
    gomaxprocs: int | None
    goroutines: int | None
    latency_p99_ns: int | None  # lower bound of the bucket holding the p99
    latency_samples: int | None
    note: str = ""  # why something is missing
    load_error: str = ""  # the executable could not be read as a supported Go program

    def to_json(self) -> dict[str, Any]:
        p = self.proc
        return {
            "pid": p.pid,
            "ns_pid": p.ns_pid,
            "container": p.container,
            "exe": p.exe,
            "go_version": p.go_version,
            "uptime_s": round(p.uptime_s, 2),
            "gomaxprocs": self.gomaxprocs,
            "goroutines": self.goroutines,
            "sched_latency_p99_ns": self.latency_p99_ns,
            "sched_latency_samples": self.latency_samples,
            "source": "runtime counters (memory reads, no probes)",
            "note": self.note,
        }


def read_lifetime(proc: GoProcess, cache: InfoCache) -> LifetimeStats | None:
    """The process's stats, or None when it exited while being read."""
    try:
        info = cache.get(proc)
    except GmpmonError as e:
        if not exists(proc.pid):
            return None
        return LifetimeStats(proc, None, None, None, None, note=e.one_line(),
                             load_error=e.one_line())
    try:
        layout = check_layout(info, proc.pid, NEEDS)
        if not layout.ok(*NEEDS) and cache.from_disk(proc):
            # A cached layout is trusted no more than a fresh one: read the file again.
            info = cache.reread(proc)
            layout = check_layout(info, proc.pid, NEEDS)
        mem = TargetMemory(proc.pid)
    except OSError:
        return None
    except GmpmonError as e:  # the re-read failed
        if not exists(proc.pid):
            return None
        return LifetimeStats(proc, None, None, None, None, note=e.one_line(),
                             load_error=e.one_line())
    try:
        if not layout.ok(*NEEDS):
            if not exists(proc.pid):
                return None
            return LifetimeStats(proc, None, None, None, None, note=layout.why(*NEEDS))
        counters = RuntimeCounters(info, mem)
        out: list[EventTuple] = []
        counters.read(time.monotonic_ns(), out)
        goroutines = next((e[4] for e in out if e[1] == RT_SCHED), None)
        if RtFeature.GOROUTINES in counters.missing:  # an implausible allglen: not a count
            goroutines = None
        counts = counters.lifetime_hist(RtHist.TIME_TO_RUN)
        p99 = samples = None
        if counts is not None:
            st = hist_stats(list(counts))
            samples = st.count
            p99 = st.p99 if st.count else None
        # What the target's memory held that was implausible comes first (said on its line).
        notes = [e.one_line() for _w, _f, e in counters.stopped]
        notes += [f"skipped: {s.first}" for s in (counters.skips, counters.m_skips) if s.n]
        notes += [counters.missing[f] for f in sorted(counters.missing)]
        return LifetimeStats(
            proc,
            # validated with the procs group just now; else what read_gomaxprocs falls back to
            gomaxprocs=layout.gomaxprocs or read_gomaxprocs(info, proc.pid),
            goroutines=goroutines,
            latency_p99_ns=p99,
            latency_samples=samples,
            note="; ".join(notes[:1]),
        )
    except OSError:
        if not exists(proc.pid):
            return None
        return LifetimeStats(proc, None, None, None, None, note="memory unreadable")
    except GmpmonError as e:  # an implausible pointer or count (capture/targetmem.py)
        return LifetimeStats(proc, None, None, None, None, note=e.one_line())
    finally:
        mem.close()

