"""The headless interval lines (``attach``/``replay --no-tui``): one schedtrace-like line a
second, and the legend said once above them. A view of Snapshots, as gmpmon/report.py's
text report is."""

from __future__ import annotations

from collections import Counter

from gmpmon.model.rthist import bucket_bounds
from gmpmon.model.snapshot import LatencyStats, PState, Snapshot
from gmpmon.model.thinning import fmt_k
from gmpmon.report import WIDTH, _n, _q

_LETTER = {
    PState.UNKNOWN: "?",
    PState.RUNNING: "R",
    PState.SEARCHING: "S",
    PState.IDLE: "I",
    PState.SYSCALL: "Y",
    PState.GCSTOP: "G",
}


def interval_line(snap: Snapshot, prev: Snapshot | None) -> str:
    """One schedtrace-like line for the interval since ``prev`` (since the start if None).

    ``12.0s P0:R3 P1:S0 grq=4 | last 1.0s: steal=12 park=340 p99=<45µs lost=0`` — now: per
    P its state letter (R running, S searching, I idle, Y syscall, G GC stop, ? unknown) and
    local runq, the global runq; after ``last Ns:`` what happened in those N seconds only.
    """
    t = (snap.now - snap.start) / 1e9
    span = (snap.now - (prev.now if prev else snap.start)) / 1e9
    steals = snap.steals.count - (prev.steals.count if prev else 0)
    parks = sum(r.count for r in snap.park_reasons) - (
        sum(r.count for r in prev.park_reasons) if prev else 0
    )
    lost = snap.events_lost - (prev.events_lost if prev else 0)
    thinned = sum(snap.dropped.values()) - (sum(prev.dropped.values()) if prev else 0)
    lat99 = _interval_p99(snap.sched_latency, prev.sched_latency if prev else None)
    rv = snap.runtime
    # Default mode: an interval no duty-cycle window touched counted nothing with the hot
    # probes; its steal and park are not measured ("-", not 0), and its p99 is the
    # runtime's, as in sample mode (issue 27).
    unwindowed = snap.window == "windows" and snap.windows_covered_ns == (
        prev.windows_covered_ns if prev is not None else 0)
    if (snap.window == "sampled" or (unwindowed and lat99 == "-")) and rv is not None \
            and rv.reads:  # no probe latency: the runtime's own histogram
        before = prev.runtime.latency if prev is not None and prev.runtime else None
        edges = bucket_bounds(720 if snap.go_version.startswith("go1.19") else 160)
        lat99 = _interval_p99(rv.latency, before, edges)
    head = f"{t:7.1f}s "
    tail = (f" grq={snap.global_runq} | last {span:.1f}s:"
            f" steal={'-' if unwindowed else _n(steals, snap)}"
            f" park={'-' if unwindowed else _n(parks, snap)}"
            f" p99={lat99} lost={lost}"
            + (f" thin={fmt_k(thinned)}" if snap.dropped else ""))
    room = WIDTH - len(head) - len(tail)
    cells = [f"{_LETTER[PState(p.state)]}{p.runq}" for p in snap.procs]
    ps = " ".join(f"P{p.id}:{c}" for p, c in zip(snap.procs, cells, strict=True))
    if len(ps) > room:
        ps = "[" + " ".join(cells) + "]"
    if len(ps) > room:
        ps = "[" + "".join(_LETTER[PState(p.state)] for p in snap.procs) + "]"
    if len(ps) > room:
        ps = _first_and_rest([_LETTER[PState(p.state)] for p in snap.procs], room)
    line = head + ps + tail
    return line if len(line) <= WIDTH else line[: WIDTH - 3] + "..."  # a corrupt grq


def _first_and_rest(letters: list[str], room: int) -> str:
    """As many Ps' letters as fit, then the rest counted by state: ``[RRSIIIII +56: 2R 54I]``
    (at 64 Ps a line had "...]" and said nothing of the Ps it left out)."""
    for keep in range(min(len(letters), max(room - 2, 0)), -1, -1):
        rest = Counter(letters[keep:])
        counts = " ".join(f"{rest[c]}{c}" for c in "RSYGI?" if rest[c])
        ps = "[" + "".join(letters[:keep]) + f" +{len(letters) - keep}: {counts}]"
        if len(ps) <= room:
            return ps
    return ""


def interval_legend(interval_s: float, mode: str = "") -> str:
    """Said once above the interval lines: which numbers are now, which are recent."""
    counted = {"default": "\n(default mode: steal, park and p99 from the probes inside the"
                          "\n duty-cycle windows; an interval with no window: steal and park"
                          "\n not measured (-), p99 the runtime's own histogram, a bucket"
                          " bound)",
               "sample": "\n(sample mode: steal and park are not measured: -;\n p99 is the "
                         "runtime's own histogram, a bucket bound)",
               "full": "\n(full mode: steal, park and p99 from the probes, every event)",
               }.get(mode, "")
    return (f"Each line: P states, run queues, grq now; steal park p99 lost: the last"
            f" {interval_s:g}s only.\nThe report at the end counts the whole capture." + counted)


def _interval_p99(
    cur: LatencyStats, prev: LatencyStats | None, edges: tuple[int, ...] | None = None
) -> str:
    before = dict(prev.histogram) if prev else {}
    delta = [(lo, n - before.get(lo, 0)) for lo, n in cur.histogram]
    delta = [(lo, n) for lo, n in delta if n > 0]
    total = sum(n for _, n in delta)
    if not total:
        return "-"
    rank = -(-99 * total // 100)
    acc = 0
    for lo, n in delta:
        acc += n
        if acc >= rank:
            return _q(lo, cur, edges).replace(" ", "")
    return "-"
