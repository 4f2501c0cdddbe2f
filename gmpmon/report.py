"""Snapshot -> the text report and the headless interval lines (a view, not a schema: the
summary JSON is gmpmon/export/json.py's).

Pure: strings out, the caller prints them. The text report keeps the bcc manners: under 80
columns on a terminal (``width``; None for a file or a pipe: nothing is cut), a latency
histogram drawn as bars, top-N tables. Every quantity is the best source's value
(gmpmon.model.quantities) and says which; what nothing measured reads "not measured", never 0.
A bucket bound is written "≤ 12.0µs"; a measured value has no sign.
"""

from __future__ import annotations

from gmpmon.events import RT_FEATURE_NAMES, RtFeature
from gmpmon.findings.render import text_lines as findings_text
from gmpmon.fmt import fmt_ns
from gmpmon.model.gcheap import GcView
from gmpmon.model.hist import pow2_counts, upper_edge
from gmpmon.model.kernel import long_run_ns
from gmpmon.model.kernelview import KernelView
from gmpmon.model.quantities import Measured, bucket_edges, max_is_measured, measure_all
from gmpmon.model.rthist import bucket_bounds
from gmpmon.model.runtime import CensusView, RuntimeView
from gmpmon.model.snapshot import LatencyStats, PState, Snapshot
from gmpmon.model.thinning import fidelity, thinning, thinning_line
from gmpmon.report_readers import reader_lines, walk_line

WIDTH = 80
NOT_MEASURED = "not measured"
DASH = "-"


# ---------------------------------------------------------------- text


def terminal_width(stream: object) -> int | None:
    """The report's width: 80 columns on a terminal, no limit for a file or a pipe."""
    isatty = getattr(stream, "isatty", None)
    return WIDTH if callable(isatty) and isatty() else None


def for_stream(text: str, stream: object) -> str:
    """ASCII spellings on a stream that cannot take UTF-8 (a C locale): 12.3us, <= 1.0ms."""
    if "utf" in (getattr(stream, "encoding", None) or "utf").lower():
        return text
    return text.replace("µ", "u").replace("≤", "<=")


def lost_hint(mode: str) -> str:
    """What to do about lost records. The ring buffer has a fixed size (16 MiB): records
    are lost when the probes fire faster than gmpmon drains it, so the fix is fewer hot
    probe hits, not a bigger buffer."""
    if mode == "full":
        return "lost events: the probes outran the reader; --mode default duty-cycles them"
    if mode == "default":
        return "lost events: the probes outran the reader; --mode sample attaches no hot ones"
    return "lost events: gmpmon's reader could not keep up (a loaded machine?)"


def _pct(part: int, whole: int) -> str:
    return f"{100.0 * part / whole:5.1f}%" if whole > 0 else "    -"


def _fit(s: str, width: int) -> str:
    return s if len(s) <= width else s[: width - 3] + "..."


def _frame(name: str) -> str:
    # Full import paths, as the TUI and the folded/pprof exports name them (net/http, not http).
    return name


def _hot_note(snap: Snapshot) -> str:
    """What the hot-probe numbers cover when they are not totals (see docs/tui.md)."""
    if snap.window == "windows":
        dur = max(snap.now - snap.start, 1)
        return f"counted in {100 * snap.windows_covered_ns / dur:.0f}% of the time, not totals"
    if snap.window == "sampled":
        return "not measured in sample mode: no hot probes"
    return ""


def _n(n: int, snap: Snapshot) -> str:
    """A hot-probe count: '-' when not measured (sample mode), never 0."""
    return "-" if snap.window == "sampled" else str(n)


def _q(ns: int, ls: LatencyStats, edges: tuple[int, ...] | None = None) -> str:
    """A percentile from histogram buckets, no more precise than it is: "≤ next edge"."""
    edge = upper_edge(ns, edges) if ls.count else None
    return f"≤ {fmt_ns(edge)}" if edge is not None else fmt_ns(ns)


def _no_hot(snap: Snapshot) -> str:
    """Why a hot-probe quantity was not measured."""
    if snap.window == "windows":
        return "no duty-cycle window opened"
    return f"no hot probes in {snap.mode} mode"


def _mv(m: Measured | None, fmt: str = "{}") -> str:
    """A quantity's value, or "-" when nothing measured it."""
    return DASH if m is None else fmt.format(m.value)


def _said(m: Measured | None) -> str:
    """Where a value came from, in parentheses: "(runtime counters: per-P syscalltick)"."""
    return f"({NOT_MEASURED})" if m is None else f"({m.describe()})"


def latency_bars(ls: LatencyStats, width: int = WIDTH) -> list[str]:
    """runqlat-style power-of-two histogram (bucket pairs merged to powers of two)."""
    if not ls.count:
        return ["  (no scheduling-latency samples)"]
    pow2 = pow2_counts(ls)
    lo_k, hi_k = min(pow2), max(pow2)
    peak = max(pow2.values())
    bar_w = width - 44
    out = [f"{'latency':>21} : {'count':<9} distribution"]
    for k in range(lo_k, hi_k + 1):
        n = pow2.get(k, 0)
        rng = f"{fmt_ns(1 << k) if k else '0'} -> {fmt_ns((1 << (k + 1)) - 1)}"
        bar = "*" * (round(bar_w * n / peak) if peak else 0)
        out.append(f"{rng:>21} : {n:<9} |{bar:<{bar_w}}|")
    return out


def text_report(snap: Snapshot, *, top: int = 5, width: int | None = WIDTH) -> str:
    """The text report. ``width``: cut lines to it (a terminal); None: cut nothing (a file or
    a pipe)."""
    w = width if width is not None else 1 << 30
    qs = measure_all(snap)
    dur = max(0, snap.now - snap.start)
    lines: list[str] = []
    add = lines.append
    thin = thinning(snap)
    add(
        _fit(
            f"gmpmon: pid {snap.pid} {snap.go_version} GOMAXPROCS={snap.gomaxprocs} "
            f"mode={snap.mode} ({fidelity(snap, thin)}) {fmt_ns(dur)}",
            w,
        )
    )
    lost = f", {snap.events_lost} LOST" if snap.events_lost else ""
    if thin.thinned:
        whole = thin.counts_whole and snap.window == "exact"
        add(f"events {snap.events_total}{lost}; "
            + ("counts cover the whole capture (in-kernel counters)" if whole
               else "counts miss what was thinned"))
        add(f"  {thinning_line(thin)}:")
        add("  P times, timelines, goroutines and latency by reason miss those records")
    else:
        add(f"events {snap.events_total}{lost}; every number below counts the whole capture")
    if snap.events_lost:
        full = snap.ring.get("counters_full", 0)
        if full:
            add(f"  ({full} in-kernel counter updates lost: the counters hash was full; "
                "counts the kernel aggregates are short)")
        if snap.events_lost > full:
            add(f"  ({lost_hint(snap.mode)})")
    if snap.window == "windows":
        add(f"  timeline numbers come from {snap.windows} duty-cycle windows "
            f"({fmt_ns(snap.windows_covered_ns)} covered)")
    elif snap.window == "sampled":
        add("  P state times are approximate (sampled)")
    for cut in snap.cost.cut_back if snap.cost else ():
        add(_fit(f"  cut back to stay in the budget: {cut.text()}", w))
    add('  every value names its source; "-": no source measured it (never a 0)')
    add("")
    lines.extend(_procs_lines(snap, qs, w))
    add("")
    lines.extend(_latency_lines(snap, qs, top, w))
    add("")
    parks = qs["parks"]
    add(f"{'Top park reasons':<34} {'count':>10} {'total wait':>12} {'avg wait':>10}")
    if parks is None:
        add(f"  ({NOT_MEASURED}: {_no_hot(snap)})")
    elif parks.source != "probes":
        add(f"  ({parks.describe()})")
    if parks is not None and not snap.park_reasons:
        add("  (none)")
    for r in snap.park_reasons[:top] if parks is not None else ():
        avg = fmt_ns(r.wait_ns / r.count) if r.count else "-"
        add(f"{_fit(r.reason, 34):<34} {r.count:>10} {fmt_ns(r.wait_ns):>12} {avg:>10}")
    add("")
    lines.extend(_steal_lines(snap, qs, w))
    add("")
    lines.extend(_counts_lines(snap, qs))
    lines.extend(goroutine_lines(snap, qs))
    add("")
    mw = qs["mutex_waits"]
    if mw is None:
        add(f"Mutex contention: {NOT_MEASURED}")
    else:
        add(f"Mutex contention: {snap.mutex_contentions} waits, "
            f"{fmt_ns(snap.mutex_wait_ns)} total {_said(mw)}")
    for s in snap.mutex_stacks[:top]:
        add(f"  {fmt_ns(s.wait_ns):>9} {s.count:>8}x")
        frames = [_frame(f) for f in s.stack]
        for f in list(reversed(frames))[:6]:
            add(_fit(f"      {f}", w))
        if len(frames) > 6:
            add(f"      ... {len(frames) - 6} more frames")
    others = [(k, c, ns) for k, (c, ns) in snap.waits_by_kind.items() if k != "sync.Mutex"]
    if others:
        add("Other blocking waits: " + ", ".join(
            f"{k} {c}x {fmt_ns(ns)}" for k, c, ns in sorted(others, key=lambda r: -r[2])))
    lines.extend(runtime_lines(snap.runtime, top=top, go_version=snap.go_version))
    lines.extend(gc_lines(snap.gc))
    if snap.kernel is not None:
        lines += kernel_text(snap.kernel, top=top)
    add("")
    lines.extend(findings_text(snap, width=w))
    lines.extend(model_check_lines(snap))
    return "\n".join(line.rstrip()[:w] for line in lines) + "\n"


def _procs_lines(snap: Snapshot, qs: dict[str, Measured | None], w: int) -> list[str]:
    ex, run, lat = qs["executes"], qs["p_running_ns"], qs["sched_latency"]
    states = run is not None and run.source != "perf samples"
    per_p_lat = lat is not None and lat.source != "runtime histogram"
    steals = qs["steals"] is not None
    out = ["P    now        running  search    idle syscall   execs  stole stolen  lat p99"]
    for p in snap.procs:
        tot = p.running_ns + p.searching_ns + p.idle_ns + p.syscall_ns + p.gcstop_ns
        if states:
            share = (f"{_pct(p.running_ns, tot):>7} {_pct(p.searching_ns, tot):>7} "
                     f"{_pct(p.idle_ns, tot):>7} {_pct(p.syscall_ns, tot):>7}")
        elif run is not None:  # perf samples: on-CPU time on the P, the other states unknown
            dur = max(snap.now - snap.start, 1)
            share = f"{_pct(run.value.get(p.id, 0), dur):>7} " + " ".join(
                f"{DASH:>7}" for _ in range(3))
        else:
            share = " ".join(f"{DASH:>7}" for _ in range(4))
        execs = DASH if ex is None else str(ex.value.get(p.id, DASH))
        st_in = str(p.steals_in) if steals else DASH
        st_out = str(p.steals_out) if steals else DASH
        p99 = _q(p.latency.p99, p.latency) if per_p_lat and p.latency.count else DASH
        out.append(f"P{p.id:<3} {PState(p.state).name.lower():<9} {share} {execs:>7} "
                   f"{st_in:>6} {st_out:>6} {p99:>8}")
    out.append(f"  P states {_said(run)}")
    out.append(f"  execs {_said(ex)}")
    if lat is not None and not per_p_lat:
        out.append(f"  lat p99 per P: {NOT_MEASURED} (the runtime's histogram is per process)")
    return [_fit(line, w) for line in out]


def _latency_lines(
    snap: Snapshot, qs: dict[str, Measured | None], top: int, w: int
) -> list[str]:
    m = qs["sched_latency"]
    if m is None:
        return [f"Scheduling latency (runnable -> running): {NOT_MEASURED}"]
    ls: LatencyStats = m.value
    edges = bucket_edges(m, snap.go_version)
    out = [f"Scheduling latency (runnable -> running): {ls.count} samples",
           f"  {_said(m)}"]
    if ls.count:
        mx = fmt_ns(ls.max) if max_is_measured(m, snap) else _q(ls.max, ls, edges)
        avg = (f"avg {fmt_ns(ls.sum / ls.count)}" if max_is_measured(m, snap)
               else f"avg ~{fmt_ns(ls.sum / ls.count)}")
        out.append(f"  p50 {_q(ls.p50, ls, edges)}  p90 {_q(ls.p90, ls, edges)}  "
                   f"p99 {_q(ls.p99, ls, edges)}  max {mx}  {avg}")
    out.extend(latency_bars(ls, min(w, WIDTH)))
    if snap.latency_by_reason and m.source != "runtime histogram":
        out.append("")
        out.append(f"{'by wake reason':<28} {'count':>9} {'p50':>9} {'p99':>9} {'max':>9}")
        ranked = sorted(snap.latency_by_reason.items(), key=lambda kv: (-kv[1].count, kv[0]))
        for name, rl in ranked[:top]:
            rmax = fmt_ns(rl.max) if max_is_measured(m, snap) else _q(rl.max, rl)
            out.append(
                f"{_fit(name, 28):<28} {rl.count:>9} {_q(rl.p50, rl):>9} "
                f"{_q(rl.p99, rl):>9} {rmax:>9}"
            )
    return out


def _steal_lines(snap: Snapshot, qs: dict[str, Measured | None], w: int) -> list[str]:
    m = qs["steals"]
    if m is None:
        return [f"Work stealing: {NOT_MEASURED} ({_no_hot(snap)})"]
    st = snap.steals
    out = [f"Work stealing: {st.attempts} attempts, {st.count} successful, "
           f"{st.goroutines} goroutines taken {_said(m)}"]
    ids = sorted({k[0] for k in st.matrix} | {k[1] for k in st.matrix})
    if not st.goroutines:
        ids = []  # only failed attempts: nothing to draw
    if ids and len(ids) <= 12:
        out.append("  goroutines taken, thief (row) from victim (column):")
        out.append("  " + "thief".ljust(6) + "".join(f"{'P' + str(v):>6}" for v in ids))
        for t in ids:
            cells = "".join(f"{st.matrix.get((t, v), (0, 0, 0))[2] or '.':>6}" for v in ids)
            out.append(_fit(f"  {'P' + str(t):<6}{cells}", w))
    elif ids:
        out.append(f"  ({len(ids)} Ps: matrix omitted, see --summary-json)")
    return out


def _counts_lines(snap: Snapshot, qs: dict[str, Measured | None]) -> list[str]:
    sc, pre = qs["syscalls"], qs["preempted"]
    stw = qs["stw"]
    out = [
        f"Syscalls {_mv(sc)} {_said(sc)}",
        f"  blocking {_mv(qs['syscalls_blocking'])}, handoffs {_mv(qs['handoffs'])} "
        f"{_said(qs['handoffs'])}",
        f"Preempted {_mv(pre)} {_said(pre)}",
        f"  requested {_mv(qs['preempt_requested'])} {_said(qs['preempt_requested'])}, "
        f"Gosched {_mv(qs['gosched'])}",
    ]
    if stw is not None and stw.source != "runtime histogram":
        out.append(f"GC stop-the-world: {snap.stw_count} pauses, total "
                   f"{fmt_ns(snap.stw_total_ns)}, max {fmt_ns(snap.stw_max_ns)} {_said(stw)}")
    else:
        out.append(f"GC stop-the-world: {_mv(stw)} pauses {_said(stw)}")
    return out


def goroutine_lines(snap: Snapshot, qs: dict[str, Measured | None]) -> list[str]:
    """Goroutines as runtime.NumGoroutine counts them, system goroutines apart, and how the
    other counts people compare with relate to it."""
    live = qs["goroutines_live"]
    c = snap.runtime.census if snap.runtime else None
    system = f" + {c.system} system" if c is not None else ""
    out = [f"Goroutines: {_mv(live)} live{system} {_said(live)}",
           f"  created {_mv(qs['goroutines_created'])}, exited "
           f"{_mv(qs['goroutines_exited'])} {_said(qs['goroutines_created'])}"]
    if live is not None:
        out.append("  live is runtime.NumGoroutine's count (go_goroutines); system ones apart")
        if c is not None and live.source != "census" and c.goroutines != live.value:
            why = f"{c.skipped} Gs unreadable" if c.skipped else "an earlier instant"
            out.append(f"  the census #{c.seq} counted {c.goroutines}: {why}")
        out.append("  a pprof goroutine profile adds the goroutines serving its request;")
        out.append("  a client_golang go_goroutines adds its scrape's collector goroutines")
    return out


def model_check_lines(snap: Snapshot) -> list[str]:
    """The model's own check, only when it found something, and what it means: events that
    the legal-transition tables rejected (illegal_transitions in --summary-json)."""
    n = snap.illegal_transitions
    if not n:
        return []
    kinds = ", ".join(f"{k} {v}" for k, v in sorted(snap.violations.items()) if v)
    return [
        "",
        f"Model check: {n} event{'s' if n > 1 else ''} did not fit the G/P state machine"
        f" ({kinds}).",
        "  Some events were missed or came out of order (lost records, a probe window's",
        "  edge): the times and counts around them may be slightly off.",
    ]


# ---------------------------------------------------------------- runtime counters, census


def runtime_lines(rv: RuntimeView | None, *, top: int = 5, go_version: str = "") -> list[str]:
    """Text-report section (empty when the capture had no runtime counters)."""
    if rv is None:
        return []
    out = ["", f"From the runtime's own counters (source: {rv.source}):"]
    ls = rv.latency
    lacks = set(rv.missing)  # never print zeros that were not read
    if RT_FEATURE_NAMES[RtFeature.LATENCY] not in lacks and rv.reads:
        out.append(f"  scheduling latency ({rv.latency_note}): {ls.count} samples")
        edges = bucket_bounds(720 if go_version.startswith("go1.19") else 160)
        out.append(
            f"    p50 {_q(ls.p50, ls, edges)}  p90 {_q(ls.p90, ls, edges)}  "
            f"p99 {_q(ls.p99, ls, edges)}  max {_q(ls.max, ls, edges)}"
        )
    if RT_FEATURE_NAMES[RtFeature.GOROUTINES] not in lacks and rv.reads:
        out.append(f"  goroutines {rv.goroutines} (allglen {rv.allglen})")
    if RT_FEATURE_NAMES[RtFeature.SCHED] not in lacks and rv.reads:
        out.append(
            f"  idle Ps {rv.npidle}, spinning Ms {rv.nmspinning}, global runq {rv.global_runq}"
        )
    if rv.procs:
        per = " ".join(f"P{p.p}:{p.schedules}/{p.syscalls}" for p in rv.procs[:8])
        more = f" +{len(rv.procs) - 8} Ps" if len(rv.procs) > 8 else ""
        out.append(f"  schedules/syscalls per P: {per}{more}")
    if rv.stw_gc is not None:
        g = rv.stw_gc
        out.append(
            f"  GC stop-the-world (runtime's own): {g.count} pauses, "
            f"total ~{fmt_ns(g.sum)}, max >= {fmt_ns(g.max)}"
        )
    if rv.mutex_wait_ns is not None:
        lock = (
            f", runtime locks {fmt_ns(rv.runtime_lock_wait_ns)}"
            if rv.runtime_lock_wait_ns is not None
            else ""
        )
        out.append(f"  mutex wait total {fmt_ns(rv.mutex_wait_ns)}{lock}")
    out.extend(reader_lines(rv))
    c = rv.census
    if c is not None:
        out.append("")
        out.append(
            f"Goroutine census #{c.seq} (source: {c.source}): {c.goroutines} goroutines "
            f"+ {c.system} runtime"
        )
        out.append(walk_line(c))
        for r in [r for r in c.rows if not r.system][:top]:
            what = f"{r.state} ({r.reason})" if r.reason else r.state
            waited = (
                f"  {r.waited} waited avg {fmt_ns(r.wait_sum_ns / r.waited)} "
                f"max {fmt_ns(r.wait_max_ns)}"
                if r.waited
                else ""
            )
            out.append(f"  {r.count:>8} {what}{waited}"[:80])
        for s in c.sites[:top]:
            out.append(f"  {s.count:>8} {s.start} <- {s.creator}"[:80])
        out.extend(wait_stack_lines(c, top=min(top, 3)))
    return out


def wait_stack_lines(c: CensusView, *, top: int = 3, frames: int = 6) -> list[str]:
    """The largest groups of parked goroutines, each with its stack (leaf first)."""
    if c.stacks is None:
        return ["  wait stacks: not measured"]
    groups = [w for w in c.stacks if not w.system][:top]
    if not groups:
        return []
    out = ["  where they wait (census wait stacks, largest groups):"]
    for w in groups:
        waited = f", waited max {fmt_ns(w.wait_max_ns)}" if w.waited else ""
        what = f"{w.state} ({w.reason})" if w.reason else w.state
        out.append(f"  {w.count:>8} {what}{waited}"[:80])
        lf = w.leaf_first
        for f in lf[:frames]:
            out.append(f"             {f}"[:80])
        if len(lf) > frames:
            out.append(f"             ... {len(lf) - frames} more")
        if w.creator:
            out.append(f"           created by {w.creator} (go {w.start})"[:80])
    return out


def fmt_bytes(n: int | None) -> str:
    if n is None:
        return "not measured"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def gc_lines(gc: GcView | None) -> list[str]:
    """Text-report section: the GC and heap from the runtime's memory (empty if not read)."""
    if gc is None:
        return []
    goal = "off (GOGC=off)" if gc.heap_goal_bytes is None else fmt_bytes(gc.heap_goal_bytes)
    rate = f"{gc.cycles_per_s:.2f}/s" if gc.cycles_per_s is not None else "rate not measured"
    per = fmt_ns(gc.pause_per_cycle_ns) if gc.pause_per_cycle_ns is not None else "-"
    out = [
        "",
        f"GC and heap (source: {gc.source}):",
        f"  heap live {fmt_bytes(gc.heap_live_bytes)} (marked), in use "
        f"{fmt_bytes(gc.heap_in_use_bytes)}, goal {goal}",
        "  GOGC " + ("off" if gc.gogc < 0 else str(gc.gogc)) + ", GOMEMLIMIT "
        + ("none" if gc.memory_limit_bytes is None else fmt_bytes(gc.memory_limit_bytes)),
        f"  cycles {gc.cycles} since attach ({rate}), {gc.cycles_total} in all",
        f"  stop-the-world {fmt_ns(gc.pause_ns)} since attach, {per} a cycle",
    ]
    if gc.goal_note:
        out.append(f"  note: {gc.goal_note}")
    if gc.assist_cpu_ns is not None:
        out.append(
            f"  GC mark CPU since attach: assist {fmt_ns(gc.assist_cpu_ns)}, dedicated "
            f"{fmt_ns(gc.dedicated_cpu_ns or 0)}, idle {fmt_ns(gc.idle_cpu_ns or 0)}")
        out.append(f"  GC pause CPU since attach: {fmt_ns(gc.pause_cpu_ns or 0)} "
                   "(pauses x GOMAXPROCS)")
    for m in gc.missing:
        out.append(f"  not measured: {m}")
    return out


# ---------------------------------------------------------------- kernel sources


def kernel_text(k: KernelView, *, top: int = 5) -> list[str]:
    """The kernel sources' lines (under 80 columns)."""
    lines: list[str] = []
    src = k.sources
    if "samples" in src:
        s = k.samples
        lines.append("")
        if s.off:
            lines.append(s.off[:79])
        else:
            lines.append(
                f"CPU samples (perf, {1_000_000_000 // max(s.period_ns, 1)} Hz/CPU): {s.total}"
                f" = Go {s.go}, runtime g0 {s.g0}, kernel {s.kernel}, not in Go {s.not_go}")
            if k.cpu_by_p:
                lines.append("  per P: " + ", ".join(
                    f"P{p} {fmt_ns(n * s.period_ns)}" for p, n in k.cpu_by_p.items()))
            for g in k.cpu_by_goroutine[:top]:
                lines.append(f"  G{g.goid:<8} {fmt_ns(g.cpu_ns):>9}  {g.function}"[:79])
            if k.long_running:
                lines.append(f"Long-running goroutines (same G on a P >= "
                             f"{fmt_ns(long_run_ns(k.samples.period_ns))}, samples): "
                             f"{k.long_runs_total}")
                for r in k.long_running[:top]:
                    more = " (running)" if r.ongoing else ""
                    lines.append(f"  G{r.goid:<8} P{r.p} {fmt_ns(r.duration_ns):>9}  "
                                 f"{r.function}{more}"[:79])
    if k.runq_latency is not None and src.get("threads") == "tracepoints":
        ms = [t for t in k.threads if t.oncpu_ns or t.runq_ns]
        lq = k.runq_latency
        lines.append("")
        lines.append(f"Ms (tracepoints): {len(ms)} threads, on CPU "
                     f"{fmt_ns(sum(t.oncpu_ns for t in ms))}, kernel run-queue wait "
                     f"{fmt_ns(sum(t.runq_ns for t in ms))} in {lq.count} waits")
        lines.append(f"  run-queue delay p50 {fmt_ns(lq.p50)}  p90 {fmt_ns(lq.p90)}  "
                     f"p99 {fmt_ns(lq.p99)}  max {fmt_ns(lq.max)}")
    if "syscalls" in src:
        lines.append("")
        lines.append(f"Syscalls (tracepoints): {k.syscalls}, {fmt_ns(k.syscall_ns)} total; top: "
                     + ", ".join(f"{s.name} {s.count}" for s in k.syscalls_by_name[:4]))
        for p in k.syscalls_by_p:
            name = f"P{p.p}" if p.p >= 0 else "no P"
            lines.append(f"  {name:<5} {p.count:>8} {fmt_ns(p.ns):>9}  " + ", ".join(
                f"{s.name} {s.count}" for s in p.top[:3]))
    return lines
