"""Pure rendering helpers: numbers, bars and the per-P timeline strip as Rich Text.

No Textual, no terminal, no clock: everything here is a function of a Snapshot (and a
width), so the widgets stay thin and these are unit-tested directly.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Sequence

from rich import box
from rich.table import Table
from rich.text import Text

from gmpmon.fmt import fmt_count as fmt_count  # re-exported: the widgets import them here
from gmpmon.fmt import fmt_ns as fmt_ns
from gmpmon.model.hist import pow2_counts, upper_edge
from gmpmon.model.phistory import History
from gmpmon.model.snapshot import GState, LatencyStats, ProcView, PState, Snapshot, Span

NS_PER_S = 1_000_000_000

# One colour per P state (gotraceui / Perfetto habit: running is green, GC is red). Running
# spans alternate between greens by goroutine so that a switch of G on a P is visible.
RUNNING_COLOURS = ("#3fb950", "#238636", "#56d364", "#2ea043")
SYSCALL_COLOUR = "#a371f7"
STW_COLOUR = "#f85149"
STATE_STYLE: dict[PState, tuple[str, str]] = {
    PState.UNKNOWN: (" ", ""),
    PState.RUNNING: ("█", RUNNING_COLOURS[0]),
    PState.SEARCHING: ("─", "#d29922"),
    PState.IDLE: ("·", "#6e7681"),
    PState.SYSCALL: ("▓", SYSCALL_COLOUR),
    PState.GCSTOP: ("▚", STW_COLOUR),
}
STATE_WORD: dict[PState, str] = {
    PState.UNKNOWN: "?",
    PState.RUNNING: "running",
    PState.SEARCHING: "searching",  # its M is in findRunnable; "spinning" is m.spinning
    PState.IDLE: "idle",
    PState.SYSCALL: "syscall",
    PState.GCSTOP: "GC stop",
}
GSTATE_WORD: dict[GState, str] = {
    GState.UNKNOWN: "unknown",
    GState.RUNNABLE: "runnable",
    GState.RUNNING: "running",
    GState.WAITING: "waiting",
    GState.SYSCALL: "syscall",
    GState.DEAD: "dead",
}
BAR_EIGHTHS = " ▏▎▍▌▋▊▉█"
SPARK = " ▁▂▃▄▅▆▇█"
# Each state has its own glyph so that the strip reads without colour (NO_COLOR=1, a
# monochrome terminal): running is a bar whose height is its share of the cell, syscall a
# shade whose density is its share, stop-the-world a checker that no other state uses.
SHADE = " ░░░▒▒▒▓▓"  # by eighths of the cell, like SPARK


def bar(value: float, full: float, width: int) -> str:
    """A left-aligned horizontal bar of ``width`` cells, in eighths of a cell."""
    if width <= 0:
        return ""
    if full <= 0 or value <= 0:
        return " " * width
    eighths = round(min(value / full, 1.0) * width * 8)
    if eighths == 0:
        eighths = 1  # a non-zero value never looks empty
    whole, part = divmod(eighths, 8)
    return ("█" * whole + (BAR_EIGHTHS[part] if part else "")).ljust(width)


def panel_table(expand: bool = False) -> Table:
    """The table look every view's panels share: a rule under a dim bold header, no frame."""
    return Table(box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1), show_edge=False,
                 header_style="bold dim", expand=expand)


def uptime_ns(snapshot: Snapshot, capture_start_ns: int) -> int:
    start = capture_start_ns if 0 < capture_start_ns <= snapshot.now else snapshot.start
    return max(snapshot.now - start, 0)


def proc_state_label(p: ProcView) -> str:
    return STATE_WORD.get(p.state, "?")


def _running_colour(goid: int) -> str:
    return RUNNING_COLOURS[(goid * 2654435761 >> 7) % len(RUNNING_COLOURS)]


# One timeline cell: (state shown, goroutine for RUNNING/SYSCALL, height 1..8 of the glyph for
# RUNNING/SYSCALL = the share of the cell's time the P spent in that state).
Cell = tuple[PState, int, int]
UNKNOWN_CELL: Cell = (PState.UNKNOWN, 0, 0)


def _start(s: Span) -> int:
    return s.start


def cell_of(spans: Sequence[Span], lo: int, hi: int, history: History | None = None) -> Cell:
    """What the cell [lo, hi) shows, from the P's spans (sorted, not overlapping) and, before
    them, its ``history``'s buckets (a busy P's older time: ProcView.history).

    Running time wins over everything but a stop-the-world: a P that ran goroutines for a
    quarter of the cell shows a quarter-height green bar (at least the lowest one, however
    brief the runs), whatever it did the rest of the time: a P of a mostly idle program is
    mostly waiting in findRunnable between short runs, and the runs are the news. Syscall
    time likewise, then the state that covered most of the cell.
    """
    i = max(bisect_right(spans, lo, key=_start) - 1, 0)
    n = len(spans)
    run: dict[int, int] = {}
    sys: dict[int, int] = {}
    other: dict[PState, int] = {}
    while i < n:
        s = spans[i]
        i += 1
        if s.start >= hi:
            break
        a, b = max(s.start, lo), min(s.end, hi)
        if b <= a:
            continue
        if s.state is PState.RUNNING:
            run[s.goid] = run.get(s.goid, 0) + (b - a)
        elif s.state is PState.SYSCALL:
            sys[s.goid] = sys.get(s.goid, 0) + (b - a)
        else:
            other[s.state] = other.get(s.state, 0) + (b - a)
    if history is not None and lo < history.end and hi > history.start:
        per, top = history.cell(lo, hi)
        if per[PState.RUNNING]:
            run[top] = run.get(top, 0) + per[PState.RUNNING]
        if per[PState.SYSCALL]:
            sys[0] = sys.get(0, 0) + per[PState.SYSCALL]
        for st in (PState.SEARCHING, PState.IDLE, PState.GCSTOP):
            if per[st]:
                other[st] = other.get(st, 0) + per[st]
    length = hi - lo
    for state, by_g in ((PState.RUNNING, run), (PState.SYSCALL, sys)):
        total = sum(by_g.values())
        if total > 0:
            goid = max(by_g.items(), key=lambda kv: (kv[1], -kv[0]))[0]
            return (state, goid, min(8, max(1, round(8 * total / length))))
    if not other:
        return UNKNOWN_CELL
    state = max(other.items(), key=lambda kv: (kv[1], -int(kv[0])))[0]
    return (state, 0, 8)


def stw_shares(stw: Iterable[tuple[int, int]], t0: int, cell_ns: float,
               width: int) -> list[float]:
    """The share of each of ``width`` cells from ``t0`` that the world was stopped."""
    shares = [0.0] * max(width, 0)
    if width <= 0 or cell_ns <= 0:
        return shares
    end = t0 + cell_ns * width
    for start, stop in stw:
        a, b = max(float(start), t0), min(float(stop), end)
        if b <= a:
            continue
        i = int((a - t0) / cell_ns)
        j = min(int((b - 1 - t0) / cell_ns), width - 1)
        for k in range(i, j + 1):
            lo = t0 + k * cell_ns
            shares[k] += (min(b, lo + cell_ns) - max(a, lo)) / cell_ns
    return shares


def _overlay_stw(cells: list[Cell], stw: Iterable[tuple[int, int]], t0: int,
                 cell_ns: float) -> None:
    """A cell the world was stopped for half of or more shows GCSTOP, whatever the P did.
    Not every cell a pause touches: Prometheus and Caddy under load stop the world 50-160
    times a second, and one mark per pause hid every P's work (issue 27); the STW line above
    the Ps (:func:`stw_band`) shows each cell's share instead."""
    for k, share in enumerate(stw_shares(stw, t0, cell_ns, len(cells))):
        if share >= 0.5:
            cells[k] = (PState.GCSTOP, 0, 8)


def timeline_cells(
    spans: Sequence[Span],
    stw: Iterable[tuple[int, int]],
    t0: int,
    t1: int,
    width: int,
) -> list[Cell]:
    """``width`` cells covering [t0, t1), each as :func:`cell_of` says; a cell stopped by
    the world for half its time or more shows GCSTOP whatever the P did, since STW stops
    every P."""
    if width <= 0 or t1 <= t0:
        return []
    cell_ns = (t1 - t0) / width
    cells = [cell_of(spans, t0 + int(k * cell_ns), t0 + int((k + 1) * cell_ns))
             for k in range(width)]
    _overlay_stw(cells, stw, t0, cell_ns)
    return cells


# What the 50 Hz P status reads may say in a sampled cell where no perf sample fell: the
# states in which a P's M is not running Go code (a "running" read with no CPU sample means
# the M was off CPU, or ran less than a sample period: not observed).
_OFF_CPU_STATES = frozenset({PState.IDLE, PState.SYSCALL, PState.GCSTOP})


def sampled_cell(on_cpu: Sequence[Span], status: Sequence[Span], lo: int, hi: int) -> Cell:
    """The cell [lo, hi) of a sampled timeline: what the perf samples saw on the P (a
    goroutine, or its M on g0 searching for work) wherever they saw anything, else what the
    P status reads say when it is a state off the CPU (idle, syscall, GC stop), else
    unknown."""
    cell = cell_of(on_cpu, lo, hi)
    if cell[0] is not PState.UNKNOWN:
        return cell
    return cell_of([s for s in _window(status, lo, hi) if s.state in _OFF_CPU_STATES], lo, hi)


def touches(intervals: Sequence[tuple[int, int]], lo: int, hi: int) -> bool:
    """Whether one of the disjoint (start, end) ``intervals``, sorted, overlaps [lo, hi)."""
    i = bisect_right(intervals, (hi, -1))  # the intervals starting before hi
    return i > 0 and intervals[i - 1][1] > lo


def _window(spans: Sequence[Span], lo: int, hi: int) -> Sequence[Span]:
    i = max(bisect_right(spans, lo, key=_start) - 1, 0)
    j = bisect_right(spans, hi, key=_start)
    return spans[i:j]


class TimelineGrid:
    """Per-P timeline cells on a fixed time grid (cell n covers [n*cell_ns, (n+1)*cell_ns)).

    A fixed grid keeps the strip from shimmering as ``now`` moves, and lets a finished cell be
    computed once: each refresh only computes the cells that completed since the last one.
    Going back in time (a replay seeking backwards) or a new cell size starts over.
    """

    def __init__(self) -> None:
        self.cell_ns = 0
        self.key: tuple[int, bool] = (0, True)
        self.now = 0
        self._done: dict[int, dict[int, Cell]] = {}

    def row(self, p: int, spans: Sequence[Span], stw: Iterable[tuple[int, int]], now: int,
            cell_ns: int, width: int, sampled: Sequence[Span] | None = None,
            probed: Sequence[tuple[int, int]] = (), settle_ns: int = 0,
            history: History | None = None) -> list[Cell]:
        """``spans``: the P's timeline, ``history`` its older time. ``sampled``: the perf
        samples' spans of the P; a cell
        that no ``probed`` interval (default mode's windows) touches is then drawn by
        :func:`sampled_cell`. Cells ending within ``settle_ns`` of ``now`` are not kept
        (their events may still be on the way: perf samples come in batches)."""
        key = (cell_ns, sampled is None)
        if key != self.key or now < self.now:
            self._done.clear()
            self.key = key
            self.cell_ns = cell_ns
        self.now = now
        last = now // cell_ns  # the cell holding ``now``: not finished, never cached
        first = last - width + 1
        settled = (now - settle_ns) // cell_ns  # cells before this one are final
        done = self._done.setdefault(p, {})
        for n in [n for n in done if n < first]:
            del done[n]
        cells = []
        for n in range(first, last + 1):
            cell = done.get(n)
            if cell is None:
                lo, hi = n * cell_ns, (n + 1) * cell_ns
                cell = (cell_of(spans, lo, hi, history)
                        if sampled is None or touches(probed, lo, hi)
                        else sampled_cell(sampled, spans, lo, hi))
                if n < last and n < settled:
                    done[n] = cell
            cells.append(cell)
        _overlay_stw(cells, stw, first * cell_ns, cell_ns)
        return cells


def cell_glyph(state: PState, level: int) -> str:
    """The character of one timeline cell: unique per state, whatever the colours."""
    if state is PState.RUNNING:
        return SPARK[level]
    if state is PState.SYSCALL:
        return SHADE[min(max(level, 1), 8)]
    return STATE_STYLE.get(state, STATE_STYLE[PState.UNKNOWN])[0]


def timeline_text(cells: Sequence[Cell]) -> Text:
    text = Text()
    for state, goid, level in cells:
        ch = cell_glyph(state, level)
        if state is PState.RUNNING:
            text.append(ch, style=_running_colour(goid))
        else:
            colour = STATE_STYLE.get(state, STATE_STYLE[PState.UNKNOWN])[1]
            text.append(ch, style=colour or None)
    return text


TRIGGER_MARK = "▼"
TRIGGER_COLOUR = "bold #f0883e"


def trigger_marks(triggers: Sequence[tuple[int, int]], lo: int, cell_ns: int, width: int
                  ) -> Text | None:
    """A line of ``width`` timeline cells with a mark in each cell where a ``--trigger``
    fired (``triggers``: (ts, index) from Snapshot.triggers); None if none is in view."""
    if width <= 0 or cell_ns <= 0:
        return None
    cols = sorted({(ts - lo) // cell_ns for ts, _ in triggers if lo <= ts < lo + cell_ns * width})
    if not cols:
        return None
    text = Text(no_wrap=True, overflow="crop")
    at = 0
    for c in cols:
        text.append(" " * (c - at))
        text.append(TRIGGER_MARK, style=TRIGGER_COLOUR)
        at = c + 1
    text.append(" " * (width - at))
    return text


WINDOW_MARK = "━"
WINDOW_COLOUR = "#d29922"


def window_marks(windows: Sequence[tuple[int, int]], lo: int, cell_ns: int, width: int
                 ) -> Text | None:
    """A line of ``width`` timeline cells with a bar in each cell a duty-cycle window (hot
    probes attached) touches; None if none is in view."""
    if width <= 0 or cell_ns <= 0:
        return None
    marks = [touches(windows, lo + i * cell_ns, lo + (i + 1) * cell_ns) for i in range(width)]
    if not any(marks):
        return None
    return Text("".join(WINDOW_MARK if m else " " for m in marks), style=WINDOW_COLOUR,
                no_wrap=True, overflow="crop")


STW_LABEL = "STW (height: time stopped)"


def stw_band(stw: Sequence[tuple[int, int]], lo: int, cell_ns: int, width: int) -> Text | None:
    """A line of ``width`` timeline cells, each a bar as high as the share of the cell the
    world was stopped (at least the lowest bar when a pause touched it, however short): a
    density, not a mark per pause. None if no pause is in view."""
    if width <= 0 or cell_ns <= 0:
        return None
    shares = stw_shares(stw, lo, cell_ns, width)
    if not any(shares):
        return None
    return Text("".join(SPARK[min(8, max(1, round(8 * f)))] if f > 0 else " " for f in shares),
                style=STW_COLOUR, no_wrap=True, overflow="crop")


LEGEND: tuple[tuple[str, str, str], ...] = (
    ("▁▄█", RUNNING_COLOURS[0], "running"),
    ("░▒▓", SYSCALL_COLOUR, "syscall"),
    ("─", "#d29922", "searching"),
    ("·", "#6e7681", "idle"),
    ("▚", STW_COLOUR, "STW"),
)


def legend() -> Text:
    """One line: each glyph and its state, and what height, shade and a blank mean."""
    text = Text(no_wrap=True, overflow="ellipsis")
    for glyphs, colour, word in LEGEND:
        text.append(glyphs, style=colour)
        text.append(f" {word}  ")
    text.append("blank: not observed", style="dim")
    text.append("  (height/shade: share of the cell)", style="dim")
    return text


def latency_spark(stats: LatencyStats, lo_pow: int = 6, hi_pow: int = 30) -> tuple[Text, Text]:
    """A one-line log2 histogram of a latency distribution and its axis line.

    Column k covers [2^k, 2^(k+1)) ns for k in [lo_pow, hi_pow); each column is 2 cells wide.
    Sub-buckets of the model's histogram are summed into their power of two.
    """
    counts = [0] * (hi_pow - lo_pow)
    for k, n in pow2_counts(stats).items():
        counts[min(max(k, lo_pow), hi_pow - 1) - lo_pow] += n
    top = max(counts) if counts else 0
    spark = Text()
    for n in counts:
        level = 0 if top == 0 or n == 0 else max(1, round(n / top * 8))
        spark.append(SPARK[level] * 2, style="#58a6ff")
    axis = [" "] * (2 * len(counts))
    for label, k in (("1µs", 10), ("10µs", 13), ("100µs", 17), ("1ms", 20), ("10ms", 23),
                     ("100ms", 27)):
        if lo_pow <= k < hi_pow:
            pos = 2 * (k - lo_pow)
            if all(c == " " for c in axis[max(pos - 1, 0):pos + len(label)]):
                axis[pos:pos + len(label)] = list(label)
    return spark, Text("".join(axis[: 2 * len(counts)]), style="dim")


def fmt_q(value: int, stats: LatencyStats, edges: Sequence[int] | None = None) -> str:
    """A percentile (or a max) of a histogram, no more precise than it is.

    The model's percentiles are the lower edge of the histogram bucket holding the rank, so
    the true value is below the next edge: ``<655µs`` says exactly that (99% of the waits were
    under 655µs). A value that is not a bucket edge was measured (an exact max, or a
    percentile clamped to it) and is shown as is. No samples: ``-``.
    """
    if stats.count == 0:
        return "-"
    edge = upper_edge(value, edges)
    return fmt_ns(value) if edge is None else "<" + fmt_ns(edge)


BUCKET_NOTE = "<X: under X (percentiles come from histogram buckets)"


def latency_line(stats: LatencyStats) -> str:
    if stats.count == 0:
        return "no samples yet"
    return (
        f"n={fmt_count(stats.count)}  p50 {fmt_q(stats.p50, stats)}  "
        f"p90 {fmt_q(stats.p90, stats)}  p99 {fmt_q(stats.p99, stats)}  "
        f"max {fmt_q(stats.max, stats)}"
    )


def short_stack(stack: Sequence[str], skip_prefixes: tuple[str, ...] = (
    "sync.", "internal/sync.", "runtime.")) -> str:
    """Leaf-first chain of the frames a user wrote: ``main.work < main.main``.

    The lock's own frames (sync.(*Mutex).Lock, runtime.semacquire...) are the same for every
    stack and are dropped; if nothing is left the full leaf is shown.
    """
    frames = [f for f in reversed(stack) if not f.startswith(skip_prefixes)]
    if not frames:
        frames = list(reversed(stack))
    return " < ".join(frames)


def busy_share(spans: Sequence[Span], lo: int, hi: int, history: History | None = None
               ) -> float:
    """Share of [lo, hi) the P spent running goroutines (0 when nothing was observed)."""
    if hi <= lo:
        return 0.0
    i = max(bisect_right(spans, lo, key=_start) - 1, 0)
    run = history.cell(lo, hi)[0][PState.RUNNING] if history is not None else 0
    for s in spans[i:]:
        if s.start >= hi:
            break
        if s.state is PState.RUNNING:
            run += max(min(s.end, hi) - max(s.start, lo), 0)
    return run / (hi - lo)


def history_start(p: ProcView) -> int | None:
    """Where the P's timeline starts: its history's first bucket, else its first span."""
    if p.history is not None:
        return p.history.start
    return p.timeline[0].start if p.timeline else None


def last_known_state(p: ProcView) -> PState:
    """The P's state now or, when it is unknown (between duty-cycle windows, after the end of
    a recording), the last state its timeline shows; UNKNOWN if it never showed one."""
    if p.state is not PState.UNKNOWN:
        return p.state
    for s in reversed(p.timeline):
        if s.state is not PState.UNKNOWN:
            return s.state
    return PState.UNKNOWN


def id_ranges(ids: Iterable[int]) -> str:
    """``0 2 5-9``: sorted ids with runs collapsed."""
    out: list[str] = []
    run: list[int] = []
    for i in sorted(ids):
        if run and i == run[-1] + 1:
            run.append(i)
            continue
        if run:
            out.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
        run = [i]
    if run:
        out.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
    return " ".join(out)


def heat_strip(shares: Sequence[float]) -> Text:
    """One cell per P (by id): a bar as high as its busy share, `·` for a P that never ran."""
    text = Text(no_wrap=False)
    for f in shares:
        if f <= 0:
            text.append("·", style="#6e7681")
        else:
            text.append(SPARK[min(8, max(1, round(8 * f)))], style=RUNNING_COLOURS[0])
    return text
