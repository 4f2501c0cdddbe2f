"""What a Snapshot measured, and over how much of the time: the rules every view follows.

Three capture modes (docs/modes.md) see different parts of the scheduler:

- ``full`` (window "exact"): every probe all the time: counts are totals.
- ``default`` (window "windows"): the hot probes (execute, gopark, ready, newproc, goexit,
  entersyscall, runqsteal, goschedImpl) are attached for a window in every period, so what
  they count is what happened *inside the windows*: a part of the time, never a total. Such a
  number is shown with its coverage ("in 19% of the time") and its rate is computed over the
  covered time only (an estimate of the real rate, labelled so).
- ``sample`` (window "sampled"): no hot probe at all: those numbers are not measured and show
  ``–``, never 0.

Cold probes (handoffp, entersyscallblock, preemptone, stop/startTheWorld, lockSlow) are
attached in every mode: their counts are totals everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass

from gmpmon.model.snapshot import Snapshot
from gmpmon.tui.render import fmt_count

NOT_MEASURED = "–"
NS_PER_S = 1_000_000_000


@dataclass(frozen=True, slots=True)
class Coverage:
    window: str  # Snapshot.window: "exact" | "windows" | "sampled"
    observed_ns: int  # now - start
    covered_ns: int  # time the hot probes were attached

    @property
    def hot(self) -> bool:
        """Whether hot-probe numbers were measured at all."""
        return self.window != "sampled" and (self.window == "exact" or self.covered_ns > 0)

    @property
    def exact(self) -> bool:
        return self.window == "exact"

    @property
    def fraction(self) -> float:
        if self.window == "exact":
            return 1.0
        if self.observed_ns <= 0:
            return 0.0
        return min(self.covered_ns / self.observed_ns, 1.0)

    @property
    def covered_s(self) -> float:
        return max(self.covered_ns if not self.exact else self.observed_ns, 1) / NS_PER_S

    def note(self) -> str:
        """What a hot number covers, to put next to it ("" when it is a total)."""
        if self.exact:
            return ""
        if not self.hot:
            return f"not measured in {mode_name(self.window)} mode"
        return f"in {pct(self.fraction)} of the time"

    def short(self) -> str:
        """The same for a column header: "" / "in 19%" / "–"."""
        if self.exact:
            return ""
        if not self.hot:
            return NOT_MEASURED
        return f"in {pct(self.fraction)}"


def pct(f: float) -> str:
    p = 100 * f
    return f"{p:.0f}%" if p >= 1 or p == 0 else "<1%"


def mode_name(window: str) -> str:
    return {"exact": "full", "windows": "default", "sampled": "sample"}.get(window, window)


def coverage(snap: Snapshot) -> Coverage:
    observed = max(snap.now - snap.start, 0)
    covered = observed if snap.window == "exact" else snap.windows_covered_ns
    return Coverage(snap.window, observed, covered)


def hot_count(n: int | float, cov: Coverage) -> str:
    """A count from hot probes: ``–`` when not measured, else the count."""
    if not cov.hot:
        return NOT_MEASURED
    return fmt_count(n)


def hot_rate(n: int | float, cov: Coverage) -> str:
    """A rate of hot-probe events per second of *covered* time: an estimate in default mode."""
    if not cov.hot:
        return NOT_MEASURED
    return fmt_count(n / cov.covered_s)


def rate_header(cov: Coverage) -> str:
    return "/s" if cov.exact else "~/s"


def count_header(cov: Coverage, word: str = "count") -> str:
    short = cov.short()
    return f"{word} {short}" if short and short != NOT_MEASURED else word


# Things that only hot probes see, as the views name them; used by the "not measured" notes.
SAMPLE_MODE_MISSES = ("goroutines", "parks", "run latency", "steals", "syscalls", "Gosched",
                      "preemptions done")
