"""Triggers of the external flight recorder: conditions on the cheap, always-on data that
arm the hot probes for a burst and have the session dump a recording.

Go 1.25's ``trace.FlightRecorder`` needs code in the program; these need none. Conditions
(``--trigger``, repeatable):

=========================  ==================================================================
``latency.p99>5ms``        the runtime's own scheduling-latency histogram (``sched.timeToRun``,
                           RT_HIST(S) deltas) over the last second: its p99 above the threshold
``runq>256``               runnable goroutines queued: global run queue (RT_SCHED, or the
                           sampler's SCHED_SAMPLE) plus every P's local queue (P_SAMPLE)
``stw>10ms``               a stop-the-world pause longer than that (the cold STW probes, and the
                           runtime's own pause histograms)
``goroutines+>1000/s``     goroutine count (``gcount``, RT_SCHED) growing faster than that
``sigusr1``                gmpmon received SIGUSR1
``key``                    the TUI's `!` key
=========================  ==================================================================

Units: ``ns``, ``us``, ``ms``, ``s`` for times (default ms), ``/s`` for rates. A trigger
fires at most once per COOLDOWN_S. The scan is bounded work per batch: a pass over the kinds
column, and per-event work only for the few kinds a condition reads.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from operator import itemgetter

from gmpmon.errors import UsageError
from gmpmon.events import EventTuple, Kind, RtHist
from gmpmon.histpack import hist_buckets

COOLDOWN_S = 10.0
LATENCY_WINDOW_NS = 1_000_000_000
LATENCY_MIN_SAMPLES = 20  # a p99 of fewer samples is noise
GROWTH_WINDOW_NS = 1_000_000_000
MANUAL = ("sigusr1", "key")

_K_RT_HIST, _K_RT_HISTS, _K_RT_SCHED = int(Kind.RT_HIST), int(Kind.RT_HISTS), int(Kind.RT_SCHED)
_K_P_SAMPLE, _K_SCHED_SAMPLE, _K_STW_END = (
    int(Kind.P_SAMPLE), int(Kind.SCHED_SAMPLE), int(Kind.STW_END))
_STW_HISTS = (int(RtHist.STW_TOTAL_GC), int(RtHist.STW_TOTAL_OTHER))
_READS = frozenset((_K_RT_HIST, _K_RT_HISTS, _K_RT_SCHED, _K_P_SAMPLE, _K_SCHED_SAMPLE,
                    _K_STW_END))
_KIND = itemgetter(1)

_UNITS = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000, "": 1_000_000}
_SPEC = re.compile(r"^(latency\.p99|runq|stw|goroutines\+)>([0-9.]+)\s*(ns|us|ms|s|/s)?$")


@dataclass(frozen=True)
class TriggerSpec:
    text: str  # as given
    metric: str  # "latency.p99" | "runq" | "stw" | "goroutines+" | "sigusr1" | "key"
    threshold: float  # ns for times, a count for runq, per second for growth

    @property
    def slug(self) -> str:
        """The trigger in a file name: ``latency.p99>5ms`` -> ``latency.p99-gt-5ms``."""
        return re.sub(r"[^A-Za-z0-9.]+", "-", self.text.replace(">", "-gt-")).strip("-")


def parse_trigger(text: str) -> TriggerSpec:
    t = text.strip().lower().replace(" ", "")
    if t in MANUAL:
        return TriggerSpec(t, t, 0.0)
    m = _SPEC.match(t)
    if not m:
        raise UsageError(
            f"--trigger {text!r}: expected latency.p99>5ms, runq>256, stw>10ms, "
            "goroutines+>1000/s, sigusr1 or key")
    metric, num, unit = m.group(1), float(m.group(2)), m.group(3) or ""
    if metric in ("latency.p99", "stw"):
        if unit == "/s":
            raise UsageError(f"--trigger {text!r}: {metric} takes a time (ns, us, ms, s)")
        return TriggerSpec(t, metric, num * _UNITS[unit])
    if metric == "goroutines+" and unit not in ("/s", ""):
        raise UsageError(f"--trigger {text!r}: goroutine growth is per second (/s)")
    if metric == "runq" and unit:
        raise UsageError(f"--trigger {text!r}: runq is a count")
    return TriggerSpec(t, metric, num)


class TriggerEngine:
    """Evaluates the conditions on the event stream; returns the indexes of the specs that
    fired. Timestamps are the events' own (monotonic ns)."""

    def __init__(self, specs: list[TriggerSpec], cooldown_s: float = COOLDOWN_S) -> None:
        self.specs = specs
        self.cooldown_ns = int(cooldown_s * 1e9)
        self._last_fired: dict[int, int] = {}
        self._by_metric: dict[str, list[int]] = {}
        for i, s in enumerate(specs):
            self._by_metric.setdefault(s.metric, []).append(i)
        self._lat: deque[tuple[int, int, int]] = deque()  # (ts, bucket, count)
        self._lat_n = 0  # the histogram's counting buckets (RT_HIST m)
        self._local_runq: dict[int, int] = {}
        self._global_runq = 0
        self._gcount: deque[tuple[int, int]] = deque()  # (ts, goroutines)
        self.fired: list[tuple[int, int]] = []  # (ts, spec index), for the summary/tests

    def wants(self) -> bool:
        return any(m not in MANUAL for m in self._by_metric)

    def manual(self, metric: str, ts: int) -> list[int]:
        return [i for i in self._by_metric.get(metric, []) if self._fire(i, ts)]

    def _fire(self, i: int, ts: int) -> bool:
        last = self._last_fired.get(i)
        if last is not None and ts - last < self.cooldown_ns:
            return False
        self._last_fired[i] = ts
        self.fired.append((ts, i))
        return True

    def scan(self, events: list[EventTuple]) -> list[int]:
        if not events or not self.wants():
            return []
        kinds = set(map(_KIND, events))
        if not kinds & _READS:
            return []
        bm = self._by_metric
        out: list[int] = []
        stw_ns = 0
        lat_seen = runq_seen = g_seen = False
        for e in events:
            k = e[1]
            if k not in _READS:
                continue
            if k in (_K_RT_HIST, _K_RT_HISTS):
                if e[4] == RtHist.TIME_TO_RUN:
                    self._lat.extend((e[0], b, c) for b, c in hist_buckets(e))
                    self._lat_n = e[3]
                    lat_seen = True
                elif e[4] in _STW_HISTS and e[3]:
                    from gmpmon.model.runtime import bucket_bounds

                    for b, _c in hist_buckets(e):
                        if 0 < b <= e[3]:
                            stw_ns = max(stw_ns, bucket_bounds(e[3])[b - 1])
            elif k == _K_RT_SCHED:
                self._global_runq = e[5] >> 32
                self._gcount.append((e[0], e[4]))
                runq_seen = g_seen = True
            elif k == _K_SCHED_SAMPLE:
                self._global_runq = e[6] & 0xFFFFFFFF
                runq_seen = True
            elif k == _K_P_SAMPLE:
                self._local_runq[e[2]] = (e[5] >> 16) & 0xFFFFFFFF
                runq_seen = True
            elif k == _K_STW_END:
                stw_ns = max(stw_ns, e[6])
        ts = events[-1][0]
        if lat_seen and "latency.p99" in bm:
            p99 = self.latency_p99(ts)
            out += [i for i in bm["latency.p99"]
                    if p99 is not None and p99 > self.specs[i].threshold and self._fire(i, ts)]
        if runq_seen and "runq" in bm:
            q = self._global_runq + sum(self._local_runq.values())
            out += [i for i in bm["runq"] if q > self.specs[i].threshold and self._fire(i, ts)]
        if stw_ns and "stw" in bm:
            out += [i for i in bm["stw"] if stw_ns > self.specs[i].threshold and self._fire(i, ts)]
        if g_seen and "goroutines+" in bm:
            rate = self.goroutine_growth(ts)
            out += [i for i in bm["goroutines+"]
                    if rate is not None and rate > self.specs[i].threshold and self._fire(i, ts)]
        return out

    def latency_p99(self, now: int) -> int | None:
        """p99 (ns, a bucket's lower bound) of the runtime's latency histogram over the last
        LATENCY_WINDOW_NS; None with too few samples."""
        lat = self._lat
        while lat and lat[0][0] < now - LATENCY_WINDOW_NS:
            lat.popleft()
        n = self._lat_n
        if n <= 0:
            return None
        counts = [0] * (n + 2)
        for _ts, b, c in lat:
            if 0 <= b < len(counts):
                counts[b] += c
        if sum(counts) < LATENCY_MIN_SAMPLES:
            return None
        from gmpmon.model.runtime import hist_stats

        return hist_stats(counts).p99

    def goroutine_growth(self, now: int) -> float | None:
        g = self._gcount
        while len(g) > 2 and g[1][0] <= now - GROWTH_WINDOW_NS:
            g.popleft()
        if len(g) < 2 or g[-1][0] - g[0][0] < GROWTH_WINDOW_NS // 2:
            return None
        return (g[-1][1] - g[0][1]) * 1e9 / (g[-1][0] - g[0][0])


class Flight:
    """Capture's side of the flight recorder: scans each released batch, asks the hot-probe
    controller for a burst when a condition fires, and marks it in the stream with a TRIGGER
    event (g = spec index, a0 = burst ns) that the session turns into a dump."""

    def __init__(self, specs: list[TriggerSpec], burst_ms: float) -> None:
        self.engine = TriggerEngine(specs)
        self.burst_ms = burst_ms
        self._requests: list[str] = []  # manual triggers from other threads (list.append)

    def request(self, metric: str) -> bool:
        """SIGUSR1 / the TUI key; False if no such trigger was asked for."""
        if metric not in self.engine._by_metric:
            return False
        self._requests.append(metric)
        return True

    def check(self, events: list[EventTuple], burst: Callable[[float, str], None] | None
              ) -> list[EventTuple]:
        fired = self.engine.scan(events)
        ts = events[-1][0] if events else 0
        while self._requests:
            fired += self.engine.manual(self._requests.pop(0), ts)
        out = []
        for i in fired:
            if burst is not None:
                burst(self.burst_ms, self.engine.specs[i].slug)
            out.append((ts, int(Kind.TRIGGER), -1, 0, i, int(self.burst_ms * 1e6), 0))
        return out
