"""Pure rendering helpers: numbers, bars and the per-P timeline strip as Rich Text.

No Textual, no terminal, no clock: everything here is a function of a Snapshot (and a
width), so the widgets stay thin and these are unit-tested directly.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Sequence

from rich.text import Text

from gmpmon.model.snapshot import GState, LatencyStats, ProcView, PState, Snapshot, Span

NS_PER_S = 1_000_000_000

# One colour per P state (gotraceui / Perfetto habit: running is green, GC is red). Running
# spans alternate between greens by goroutine so that a switch of G on a P is visible.
RUNNING_COLOURS = ("#3fb950", "#238636", "#56d364", "#2ea043")
STATE_STYLE: dict[PState, tuple[str, str]] = {
    PState.UNKNOWN: (" ", ""),
    PState.RUNNING: ("█", RUNNING_COLOURS[0]),
    PState.SEARCHING: ("█", "#d29922"),
    PState.IDLE: ("·", "#6e7681"),
    PState.SYSCALL: ("█", "#a371f7"),
    PState.GCSTOP: ("█", "#f85149"),
}
STATE_WORD: dict[PState, str] = {
    PState.UNKNOWN: "?",
    PState.RUNNING: "running",
    PState.SEARCHING: "spinning",
    PState.IDLE: "idle",
    PState.SYSCALL: "syscall",
    PState.GCSTOP: "GC stop",
}
GSTATE_WORD: dict[GState, str] = {
    GState.UNKNOWN: "?",
    GState.RUNNABLE: "runnable",
    GState.RUNNING: "running",
    GState.WAITING: "waiting",
    GState.SYSCALL: "syscall",
    GState.DEAD: "dead",
}
BAR_EIGHTHS = " ▏▎▍▌▋▊▉█"
SPARK = " ▁▂▃▄▅▆▇█"


def fmt_ns(ns: int | float) -> str:
    """A duration in at most ~6 characters: 850ns, 12.3µs, 4.1ms, 2.50s, 3m20s."""
    ns = float(ns)
    if ns < 1_000:
        return f"{ns:.0f}ns"
    for unit, scale in (("µs", 1e3), ("ms", 1e6)):
        if ns < scale * 1_000:
            v = ns / scale
            return f"{v:.1f}{unit}" if v < 100 else f"{v:.0f}{unit}"
    s = ns / 1e9
    if s < 60:
        return f"{s:.2f}s" if s < 10 else f"{s:.1f}s"
    m, s = divmod(int(s), 60)
    if m < 60:
        return f"{m}m{s:02d}s"
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m"


def fmt_count(n: int | float) -> str:
    """A count in at most ~5 characters: 999, 12.3k, 4.56M."""
    n = float(n)
    if abs(n) < 1_000:
        return f"{n:.0f}"
    for unit, scale in (("k", 1e3), ("M", 1e6), ("G", 1e9)):
        if abs(n) < scale * 1_000:
            v = n / scale
            return f"{v:.2f}{unit}" if v < 10 else f"{v:.1f}{unit}" if v < 100 else f"{v:.0f}{unit}"
    return f"{n / 1e12:.1f}T"


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


def uptime_ns(snapshot: Snapshot, capture_start_ns: int) -> int:
    start = capture_start_ns if 0 < capture_start_ns <= snapshot.now else snapshot.start
    return max(snapshot.now - start, 0)


def proc_state_label(p: ProcView) -> str:
    return STATE_WORD.get(p.state, "?")


def _running_colour(goid: int) -> str:
    return RUNNING_COLOURS[(goid * 2654435761 >> 7) % len(RUNNING_COLOURS)]


def _cell_style(state: PState, goid: int) -> tuple[str, str]:
    ch, colour = STATE_STYLE.get(state, STATE_STYLE[PState.UNKNOWN])
    if state is PState.RUNNING:
        colour = _running_colour(goid)
    return ch, colour


def timeline_cells(
    spans: Sequence[Span],
    stw: Iterable[tuple[int, int]],
    t0: int,
    t1: int,
    width: int,
) -> list[tuple[PState, int]]:
    """What each of ``width`` cells covering [t0, t1) shows: (state, goid).

    A cell shows the state that covered most of it (a busy P that is briefly idle still reads
    as busy); cells not covered by any span are UNKNOWN. A cell touched by a stop-the-world
    shows GCSTOP whatever the P did, since STW stops every P. With many more spans than cells
    the dominant state is estimated from 8 samples per cell, so the cost stays bounded by the
    width, not by the event rate.
    """
    if width <= 0 or t1 <= t0:
        return []
    cell_ns = (t1 - t0) / width
    cells: list[tuple[PState, int]] = [(PState.UNKNOWN, 0)] * width
    starts = [s.start for s in spans]
    first = max(bisect_right(starts, t0) - 1, 0)
    last = bisect_right(starts, t1)
    window = spans[first:last]
    if len(window) <= 8 * width:
        cover: list[dict[tuple[PState, int], float]] = [{} for _ in range(width)]
        for s in window:
            a, b = max(s.start, t0), min(s.end, t1)
            if b <= a:
                continue
            key = (s.state, s.goid if s.state in (PState.RUNNING, PState.SYSCALL) else 0)
            i = int((a - t0) / cell_ns)
            j = min(int((b - t0) / cell_ns), width - 1)
            for k in range(i, j + 1):
                lo = max(a, t0 + k * cell_ns)
                hi = min(b, t0 + (k + 1) * cell_ns)
                if hi > lo:
                    d = cover[k]
                    d[key] = d.get(key, 0.0) + (hi - lo)
        for k, d in enumerate(cover):
            if d:
                cells[k] = max(d.items(), key=lambda kv: kv[1])[0]
    else:
        wstarts = starts[first:last]
        for k in range(width):
            votes: dict[tuple[PState, int], int] = {}
            for q in range(8):
                t = t0 + (k + (q + 0.5) / 8) * cell_ns
                idx = bisect_right(wstarts, t) - 1
                if idx >= 0 and window[idx].end > t:
                    s = window[idx]
                    key = (s.state, s.goid if s.state in (PState.RUNNING, PState.SYSCALL) else 0)
                    votes[key] = votes.get(key, 0) + 1
            if votes:
                cells[k] = max(votes.items(), key=lambda kv: kv[1])[0]
    for a, b in stw:
        a, b = max(a, t0), min(b, t1)
        if b <= a:
            continue
        i = int((a - t0) / cell_ns)
        j = min(int((b - t0) / cell_ns), width - 1)
        for k in range(i, j + 1):
            cells[k] = (PState.GCSTOP, 0)
    return cells


def timeline_text(cells: Sequence[tuple[PState, int]]) -> Text:
    text = Text()
    for state, goid in cells:
        ch, colour = _cell_style(state, goid)
        text.append(ch, style=colour or None)
    return text


def legend() -> Text:
    text = Text()
    for state in (PState.RUNNING, PState.SEARCHING, PState.IDLE, PState.SYSCALL, PState.GCSTOP):
        ch, colour = STATE_STYLE[state]
        text.append(ch * 2, style=colour)
        word = "GC/STW" if state is PState.GCSTOP else STATE_WORD[state]
        text.append(f" {word}  ")
    return text


def latency_spark(stats: LatencyStats, lo_pow: int = 6, hi_pow: int = 30) -> tuple[Text, Text]:
    """A one-line log2 histogram of a latency distribution and its axis line.

    Column k covers [2^k, 2^(k+1)) ns for k in [lo_pow, hi_pow); each column is 2 cells wide.
    Sub-buckets of the model's histogram are summed into their power of two.
    """
    counts = [0] * (hi_pow - lo_pow)
    for lo, n in stats.histogram:
        k = max(lo, 1).bit_length() - 1
        k = min(max(k, lo_pow), hi_pow - 1)
        counts[k - lo_pow] += n
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


def latency_line(stats: LatencyStats) -> str:
    if stats.count == 0:
        return "no samples yet"
    return (
        f"n={fmt_count(stats.count)}  p50 {fmt_ns(stats.p50)}  p90 {fmt_ns(stats.p90)}  "
        f"p99 {fmt_ns(stats.p99)}  max {fmt_ns(stats.max)}"
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
