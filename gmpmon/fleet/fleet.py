"""The set of watched Go processes, kept up to date: processes come, go and are read.

One background thread does all of it, at a fixed pace whatever the number of scrapes:
``rescan_s`` to find new and vanished processes (``--all``/``--match``; explicit pids are
only dropped when they exit), ``interval_s`` to read every watch, ``p_interval_s`` to sample
P states (``--per-p``). A scrape only copies the latest readings under a lock: scraping more
often costs the targets nothing more.
"""

from __future__ import annotations

import re
import sys
import threading
import time
from collections.abc import Callable

from gmpmon.errors import GmpmonError
from gmpmon.fleet.discover import Discovery, GoProcess, exists
from gmpmon.fleet.findings import WINDOW_S
from gmpmon.fleet.infocache import InfoCache
from gmpmon.fleet.metrics import ProcessReading
from gmpmon.fleet.probed import ProbedWatch
from gmpmon.fleet.watch import Watch, watch_or_reason

RESCAN_S = 2.0
PROBE_MODES = ("sample", "default", "full")  # attach's modes; "none" is the trap-free Watch
AnyWatch = Watch | ProbedWatch


class Fleet:
    def __init__(
        self,
        *,
        pids: tuple[int, ...] = (),
        all_: bool = False,
        match: re.Pattern[str] | None = None,
        interval_s: float = 1.0,
        census_s: float = 5.0,
        per_p: bool = False,
        p_interval_s: float = 0.1,
        findings_window_s: float = WINDOW_S,
        mode: str = "none",
        budget_pct: float = 1.0,
        rescan_s: float = RESCAN_S,
        say: Callable[[str], None] | None = None,
    ) -> None:
        self.pids = pids
        self.all = all_
        self.match = match
        self.interval_s = interval_s
        self.census_s = census_s
        self.per_p = per_p
        self.p_interval_s = p_interval_s
        self.findings_window_s = findings_window_s
        self.mode = mode
        self.budget_pct = budget_pct
        self.rescan_s = rescan_s
        self.say = say or (lambda line: print(f"gmpmon: {line}", file=sys.stderr))
        self.discovery = Discovery()
        self.cache = InfoCache(readers_only=mode not in PROBE_MODES)
        self.watches: dict[int, AnyWatch] = {}
        self._refused: dict[int, str] = {}  # pid -> why it is not watched (said once)
        self._said: dict[int, int] = {}  # pid -> how many of its watch's missing lines said
        self._readings: list[ProcessReading] = []
        self.scrape_errors = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None

    # ---------------------------------------------------------------- discovery

    def _wanted(self) -> list[GoProcess]:
        if self.all or self.match is not None:
            return self.discovery.scan(self.match)
        out = []
        for pid in self.pids:
            gp = self.discovery.probe(pid)
            if gp is not None:
                out.append(gp)
            elif pid not in self._refused and pid not in self.watches:
                self._refused[pid] = "gone" if not exists(pid) else "not a Go program"
                self.say(f"process {pid}: {self._refused[pid]}; not watched")
        return out

    def rescan(self) -> None:
        wanted = {gp.pid: gp for gp in self._wanted()}
        for pid in list(self.watches):
            w = self.watches[pid]
            same = wanted.get(pid)
            if same is None or same.exe_key != w.proc.exe_key or w.down_reason is not None:
                # Exited, exec'd another program, or unreadable now: its series go.
                w.close()
                del self.watches[pid]
        for pid, gp in wanted.items():
            if pid in self.watches or pid in self._refused:
                continue
            if self._stop.is_set():
                break  # stopping: attach nothing more
            made, why = self._make(gp)
            if made is not None and self._stop.is_set():
                made.close()  # stop() came while it attached: it may have closed the others
                break
            if made is None:
                self._refused[pid] = why or "cannot be read"
                self.say(f"process {pid} ({gp.exe_name}): {self._refused[pid]}; not watched")
                continue
            for line in made.missing:
                self.say(f"process {pid} ({gp.exe_name}): {line}")
            self._said[pid] = len(made.missing)
            self.watches[pid] = made
        # Forget refusals of pids that are gone: a new process may reuse the pid.
        for pid in [p for p in self._refused if not exists(p)]:
            del self._refused[pid]

    def _make(self, gp: GoProcess) -> tuple[AnyWatch | None, str | None]:
        if self.mode not in PROBE_MODES:
            return watch_or_reason(gp, self.cache, census_s=self.census_s, per_p=self.per_p,
                                   findings_window_s=self.findings_window_s)
        try:
            return ProbedWatch(gp, self.cache.get(gp), mode=self.mode,
                               budget_pct=self.budget_pct, census_s=self.census_s), None
        except GmpmonError as e:
            return None, e.one_line()
        except OSError as e:
            return None, f"cannot read process {gp.pid}: {e.strerror or e}"

    # ---------------------------------------------------------------- reading

    def refresh(self, sample_ps_only: bool = False) -> None:
        now = time.monotonic_ns()
        for w in list(self.watches.values()):
            if sample_ps_only:
                w.sample_ps(now)
            else:
                w.refresh(now)
        if sample_ps_only:
            return
        readings = []
        for pid, w in self.watches.items():
            r = w.reading()
            said = self._said.get(pid, 0)
            for line in w.missing[said:]:  # a reader stopped mid-run: said once
                self.say(f"process {pid} ({w.proc.exe_name}): {line}")
            self._said[pid] = len(w.missing)
            if not r.up:
                self.scrape_errors += 1
                continue  # its series go at once; the next rescan drops the watch
            readings.append(r)
        with self._lock:
            self._readings = readings

    def readings(self) -> tuple[list[ProcessReading], int]:
        with self._lock:
            return list(self._readings), self.scrape_errors

    # ---------------------------------------------------------------- thread

    def start(self) -> None:
        self.rescan()
        self.refresh()
        self._thread = threading.Thread(target=self._run, name="gmpmon-fleet", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            next_scan = next_read = time.monotonic()
            next_p = next_read
            while not self._stop.is_set():
                t = time.monotonic()
                if t >= next_scan:
                    self.rescan()
                    next_scan = t + self.rescan_s
                if t >= next_read:
                    self.refresh()
                    next_read = t + self.interval_s
                elif self.per_p and t >= next_p:
                    self.refresh(sample_ps_only=True)
                if self.per_p and t >= next_p:
                    next_p = t + self.p_interval_s
                wake = min(next_scan, next_read, next_p if self.per_p else next_read)
                self._stop.wait(max(wake - time.monotonic(), 0.005))
        except BaseException as e:  # reported by serve, which exits non-zero
            self.error = e
            self._stop.set()

    def request_stop(self) -> None:
        """From a signal handler: attach nothing more; stop() does the rest."""
        self._stop.set()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            # An attach under way (a BCC compile: seconds) ends before the probes are counted
            # out below; rescan closes a watch made after the stop itself.
            self._thread.join(timeout=5 if self.mode not in PROBE_MODES else 120)
        for w in list(self.watches.values()):
            w.close()
        self.watches.clear()

    def wait(self, timeout: float | None = None) -> bool:
        """True once the fleet thread has stopped (by stop() or an error)."""
        return self._stop.wait(timeout)

