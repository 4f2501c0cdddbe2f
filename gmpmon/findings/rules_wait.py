"""Rules about waiting: syscall hand-offs, STW, locks, leaks, run queues, pinned threads."""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any

from gmpmon.findings import kernel_evidence as kev
from gmpmon.findings.context import Context
from gmpmon.model.findingtypes import Finding, Severity
from gmpmon.model.snapshot import GState
from gmpmon.model.waitstacks import StackTrend, wait_site

SYSCALL_CAUSES = ("syscall-retake", "syscall-block", "unknown")


def _ms(ns: float) -> float:
    return round(ns / 1e6, 3)


def _inner_frames(stack: tuple[str, ...], n: int = 8) -> list[str]:
    """The innermost ``n`` frames, leaf first (stacks are stored root first)."""
    return list(reversed(stack))[:n]


def _site(stack: tuple[str, ...], skip: tuple[str, ...] = ("runtime.", "sync.",
                                                           "internal/")) -> str:
    """The innermost frame that is the program's own code (not runtime/sync)."""
    for f in reversed(stack):
        if not f.startswith(skip) and not f.startswith("["):
            return f
    return stack[-1] if stack else ""


def split_handoffs(ctx: Context) -> tuple[float, float, str]:
    """(syscall hand-offs, locked-thread hand-offs, how the unknown ones were split). A
    hand-off's cause is seen only with the hot probes (the PARK or SYSCALL_ENTER before it on
    the same M); the others are split like the ones seen in windows, else by the runtime's
    per-P syscall ticks (a locked M that blocks makes no syscall through entersyscall), else
    counted as syscalls."""
    bc = ctx.inputs.handoffs.by_cause
    sysc = bc.get("syscall-retake", 0) + bc.get("syscall-block", 0)
    locked = bc.get("locked-thread", 0)
    unknown = bc.get("unknown", 0)
    if not unknown:
        return sysc, locked, ""
    if sysc + locked >= 10:
        share = sysc / (sysc + locked)
        how = f"{unknown} of unknown cause split like the {sysc + locked} seen in windows"
    elif ctx.snap.runtime is not None and ctx.snap.runtime.procs:
        ticks = sum(p.syscalls for p in ctx.snap.runtime.procs)
        share = min(1.0, ticks / unknown)
        how = (f"cause not seen in this mode: {ticks} syscalls (runtime syscalltick) for "
               f"{unknown} hand-offs")
    else:
        share, how = 1.0, f"{unknown} of unknown cause counted as syscalls"
    return sysc + share * unknown, locked + (1 - share) * unknown, how


def syscall_handoff(ctx: Context) -> Finding | None:
    ho, th, snap = ctx.inputs.handoffs, ctx.th, ctx.snap
    nf, _locked, how = split_handoffs(ctx)
    n = round(nf)
    if n < th.handoff_min:
        return None
    rate = n / ctx.seconds
    ptime = ctx.duration_ns * max(snap.gomaxprocs, 1)
    # Time without an M is timed by events only (full mode, default mode's windows); the
    # hand-offs a P sample saw end get the mean of the timed ones.
    no_m_ns = ho.no_m_ns
    if ho.no_m_untimed and ho.no_m_timed >= th.no_m_min_timed:
        no_m_ns = round(ho.no_m_ns * (1 + ho.no_m_untimed / ho.no_m_timed))
    elif ho.no_m_untimed:
        no_m_ns = 0  # too few timed to say: not judged (the evidence keeps the raw sum)
    no_m_share = no_m_ns / ptime if ptime else 0.0
    # Hand-offs against the syscalls made (events: full mode, default mode's windows): an
    # occasional retake among many fast syscalls is the runtime working as designed.
    # (Other modes: the runtime's own count, its per-P syscallticks.)
    sys_n, sys_src = (snap.syscalls, "events") if snap.window == "exact" else (0, "")
    if not sys_n and snap.runtime is not None and snap.runtime.procs:
        sys_n, sys_src = sum(p.syscalls for p in snap.runtime.procs), "runtime (syscalltick)"
    if not sys_n and snap.window == "windows" and snap.syscalls and snap.windows_covered_ns:
        # default mode without the runtime's counters: the windows' syscalls, scaled
        sys_n = round(snap.syscalls * ctx.duration_ns / snap.windows_covered_ns)
        sys_src = "events (windows), scaled to the run"
    share = n / sys_n if sys_n else None
    many = rate >= th.handoff_rate and (share is None or share >= th.handoff_share)
    if not many and no_m_share < th.no_m_share:
        return None
    crit = (many and rate >= th.handoff_rate_critical) or no_m_share >= th.no_m_critical
    gs = sorted(ho.goroutines.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
    names = kev.syscall_names(snap.kernel, {g for g, _c in gs})
    site = names.get("syscall_site", "")
    top_sys = next(iter(names.get("syscalls_by_name", {})), "")
    what = (f" in {site} ({names['syscall_site_samples']} perf samples, "
            f"{100 * names['syscall_site_share']:.0f}% of them)") if site else ""
    what += f" ({top_sys})" if top_sys else ""
    return Finding(
        "syscall-handoff",
        Severity.CRITICAL if crit else Severity.WARNING,
        f"{n} P hand-offs from blocked syscalls{what} ({rate:.0f}/s); Ps spent "
        f"{_ms(no_m_ns):.0f} ms without an M",
        {
            **names,
            "handoffs": n,
            "per_second": round(rate, 1),
            "share_of_syscalls": None if share is None else round(share, 4),
            "syscalls_counted": sys_n or None,
            "by_cause": {c: ho.by_cause.get(c, 0) for c in SYSCALL_CAUSES if ho.by_cause.get(c)},
            "cause_note": how or None,
            "syscalls": snap.syscalls,
            "syscalls_blocking": snap.syscalls_blocking,
            "no_m_ns": no_m_ns,
            "no_m_timed_ns": ho.no_m_ns,
            "no_m_max_ns": ho.no_m_max_ns,
            "no_m_share": round(no_m_share, 4),
            "no_m_timed": ho.no_m_timed,
            "no_m_untimed": ho.no_m_untimed,
            "goroutines": [{"goid": g, "handoffs": c} for g, c in gs],
            "sources": {"handoffs": "events (handoffp)",
                        "syscall_site": "perf samples in the kernel (user stacks)",
                        "syscalls_by_name": "tracepoints (sys_enter/exit)",
                        "causes": "events" if snap.window != "sampled" else "unknown (sample)",
                        "syscalls_counted": sys_src or "not measured",
                        "no_m_ns": "events" if not ho.no_m_untimed
                        else "events (timed hand-offs), scaled to all"},
            "sampled": (["no_m_ns"] if snap.window != "exact" else [])
                       + (["by_cause"] if how else [])
                       + (["syscall_site", "syscall_stack"] if "syscall_stack" in names
                          else []),
        },
        "Syscalls block long enough (more than a sysmon tick, 20 us to 10 ms) that sysmon takes "
        "their P and hands it to another M, which may have to be started. Use the netpoller "
        "(non-blocking sockets, os.File with pollable fds) instead of blocking calls, batch "
        "small syscalls (bufio), and move unavoidable blocking calls (disk I/O, DNS via cgo) "
        "to a bounded worker pool.",
    )


def gc_stw_latency(ctx: Context) -> Finding | None:
    snap, th, att = ctx.snap, ctx.th, ctx.attribution
    share = att.share("stw")
    time_share = snap.stw_total_ns / ctx.duration_ns if ctx.duration_ns else 0.0
    tail_hit = att.samples >= th.stw_tail_min_samples and share >= th.stw_tail_share
    # Pauses alone: a run of them (one slow GC cycle, e.g. while the host is busy compiling
    # gmpmon's probes, is not a pattern: an idle Prometheus got a warning from 3 pauses).
    slow = sum(1 for a, b in snap.stw_spans if b - a >= th.stw_max_ns)  # recent ones
    pause_hit = snap.stw_count >= th.stw_min_count and (time_share >= th.stw_time_share
                                                        or slow >= th.stw_min_slow)
    if not (tail_hit or pause_hit):
        return None
    crit = tail_hit and share >= th.stw_tail_share_critical
    reasons = sorted(snap.stw_reasons.items(), key=lambda kv: -kv[1][1])
    title = (f"Stop-the-world pauses explain {100 * share:.0f}% of the tail scheduling "
             f"latency" if tail_hit else
             f"Stop-the-world pauses: {snap.stw_count}, {100 * time_share:.1f}% of the time, "
             f"max {_ms(snap.stw_max_ns):.1f} ms")
    return Finding(
        "gc-stw-latency",
        Severity.CRITICAL if crit else Severity.WARNING,
        title,
        {
            "stw_count": snap.stw_count,
            "stw_total_ns": snap.stw_total_ns,
            "stw_max_ns": snap.stw_max_ns,
            "stw_time_share": round(time_share, 4),
            "stw_slow_recent": slow,
            "by_reason": {k: {"count": c, "total_ns": t} for k, (c, t) in reasons},
            "tail_threshold_ns": att.threshold_ns,
            "tail_samples": att.samples,
            "tail_stw_share": round(share, 3),
            "sources": {"stw": "events (stopTheWorldWithSema)",
                        "tail": att.source or "unavailable"},
            "sampled": [],
        },
        "GC (or runtime.ReadMemStats, GOMAXPROCS changes...) stops every goroutine; waits "
        "that overlap a pause land in the tail. Allocate less (pprof alloc_space), raise GOGC "
        "or set GOMEMLIMIT so GC runs less often, and avoid calls that stop the world on "
        "the hot path (see by_reason).",
    )


def lock_contention(ctx: Context) -> Finding | None:
    snap, th = ctx.snap, ctx.th
    if not snap.mutex_by_addr or snap.mutex_contentions < th.lock_min:
        return None
    addr, (count, wait) = max(snap.mutex_by_addr.items(), key=lambda kv: (kv[1][1], -kv[0]))
    share = wait / snap.mutex_wait_ns if snap.mutex_wait_ns else 0.0
    wall = wait / ctx.duration_ns if ctx.duration_ns else 0.0
    if share < th.lock_share or wall < th.lock_wait_share or count < th.lock_min:
        return None
    # The named lock's own waiters' stack (the heaviest stack overall may be another lock's:
    # Prometheus, sample mode, named the Tracer mutex at headIndexReader.Series).
    stack = snap.mutex_addr_stack.get(addr, ())
    site = _site(stack)
    # Critical: as many goroutines wait on it, on average, as there are Ps to run them
    # (one waiter among 16 requests in flight on 2 Ps is contention, not a stall).
    crit = wall >= th.lock_wait_critical * max(snap.gomaxprocs, 1)
    return Finding(
        "lock-contention",
        Severity.CRITICAL if crit else Severity.WARNING,
        f"One mutex (0x{addr:x}) holds {100 * share:.0f}% of mutex wait: "
        f"{count} waits, {_ms(wait):.0f} ms" + (f", at {site}" if site else ""),
        {
            "addr": f"0x{addr:x}",
            "count": count,
            "wait_ns": wait,
            "share_of_mutex_wait": round(share, 3),
            "wait_per_second_ns": int(wait / ctx.seconds),
            "site": site,
            "contended_stack": _inner_frames(stack),
            "holder_stack": None,
            "holder_note": "gmpmon sees the waiters (lockSlow), not the holder; the holder is "
                           "the code between Lock and Unlock of the same mutex",
            "sources": {"mutex": "events (lockSlow)"},
            "sampled": ["contended_stack"] if snap.window == "windows" else [],
        },
        f"Goroutines queue on one sync.Mutex{(' taken in ' + site) if site else ''}. Shorten "
        "the critical section (no I/O or allocation under the lock), shard the state (one "
        "lock per key range), use sync.RWMutex for read-mostly data or atomics for counters; "
        "go test -mutexprofile / runtime.SetMutexProfileFraction shows the holder side.",
    )


def _runtime_series(ctx: Context) -> tuple[tuple[int, int], ...]:
    """The runtime's own goroutine count (gcount, ~10 Hz samples), one point per second."""
    rt = ctx.snap.runtime
    if rt is None or len(rt.goroutines_series) < 2:
        return ()
    t0 = ctx.snap.start
    per_s: dict[int, int] = {}
    for ts, n in rt.goroutines_series:
        per_s[max(0, ts - t0) // 1_000_000_000] = n
    return tuple(sorted(per_s.items()))


def leaking_stacks(ctx: Context) -> list[StackTrend]:
    """Census wait-stack groups that look leaked: user goroutines parked at one stack, from
    one creation site, growing across census walks, and parked for minutes (docs/findings.md
    says why each threshold)."""
    th = ctx.th
    out = []
    for t in ctx.inputs.stack_trends:
        if t.system or not t.reason or t.passes < th.leak_stack_passes:
            continue
        if t.growth < th.leak_stack_min or t.rises < th.leak_stack_rises * max(t.falls, 1):
            continue
        followed_ns = t.last_ts - t.first_ts
        if t.wait_max_ns < th.leak_stack_wait_ns and not (
                t.falls == 0 and followed_ns >= th.leak_stack_wait_ns):
            continue
        out.append(t)
    return out


def _stack_evidence(t: StackTrend) -> dict[str, Any]:
    return {
        "site": wait_site(t.frames),
        "wait_reason": t.reason,
        "created_by": t.creator,
        "function": t.start,
        "first_count": t.first_count,
        "count": t.last_count,
        "growth": t.growth,
        "census_walks": t.passes,
        "rises": t.rises,
        "falls": t.falls,
        "seconds": round(t.seconds, 1),
        "wait_max_s": round(t.wait_max_ns / 1e9, 1) if t.wait_max_ns else None,
        "stack": list(reversed(t.frames)),  # leaf first, as Go prints it
    }


def _stack_leak_only(ctx: Context, leaks: list[StackTrend]) -> Finding:
    """The census saw a leak the goroutine count alone does not show (too slow, or hidden
    by goroutines that come and go elsewhere)."""
    t = leaks[0]
    waited = (f", the oldest parked {t.wait_max_ns / 60e9:.0f} min" if t.wait_max_ns >= 60e9
              else f", the oldest parked {t.wait_max_ns / 1e9:.0f} s" if t.wait_max_ns
              else f", none left in {t.seconds / 60:.0f} min")
    created = f", created by {t.creator} (go {t.start})" if t.creator else ""
    return Finding(
        "goroutine-leak",
        Severity.CRITICAL if t.growth >= ctx.th.leak_critical else Severity.WARNING,
        f"Goroutines parked at {wait_site(t.frames)} ({t.reason}) grow: +{t.growth} in "
        f"{t.seconds:.0f} s to {t.last_count}{waited}{created}",
        {
            "growth": t.growth,
            "seconds": round(t.seconds),
            "per_second": round(t.growth / max(t.seconds, 1e-9), 2),
            "wait_reason": t.reason,
            "creation_site": f"{t.creator} -> go {t.start}" if t.creator else "",
            "stacks": [_stack_evidence(x) for x in leaks[:5]],
            "sources": {"series": "census (wait-stack groups across walks)",
                        "wait_reasons": "census", "creation_sites": "census (g.gopc, "
                        "g.startpc)", "stacks": "census (g.sched unwound)"},
            "sampled": [],
        },
        "Goroutines that park at the same place and never leave wait for something that "
        "will not happen (a reply nobody sends, a channel nobody closes, a context never "
        "cancelled). Look at the stack: the frame after the runtime's is the wait; the "
        "creation site is the go statement that starts them.",
    )


def goroutine_leak(ctx: Context) -> Finding | None:
    gr, th, snap = ctx.inputs.growth, ctx.th, ctx.snap
    leaks = leaking_stacks(ctx)
    pts = _runtime_series(ctx)
    source = "runtime (gcount samples)"
    if len(pts) < 2:
        pts, source = gr.points, "events (creates - exits)"
    if len(pts) < 2:
        return _stack_leak_only(ctx, leaks) if leaks else None
    span = pts[-1][0] - pts[0][0]
    growth = pts[-1][1] - pts[0][1]
    if span < th.leak_min_seconds or growth < th.leak_min:
        return _stack_leak_only(ctx, leaks) if leaks else None
    ups = sum(1 for a, b in itertools.pairwise(pts) if b[1] > a[1])
    steady = ups / (len(pts) - 1)
    if steady < th.leak_steady:
        return _stack_leak_only(ctx, leaks) if leaks else None
    cg = ctx.inputs.census_growth
    site = ""
    sites: list[dict[str, Any]] = []
    if cg is not None and cg.by_reason:
        reasons = {k: v for k, v in cg.by_reason.items() if v > 0}
        reason_src = "census (growth between the first and last walk)"
    else:
        waiting = Counter(g.wait_reason or "?" for g in snap.goroutines
                          if g.state == GState.WAITING)
        reasons = dict(waiting.most_common(5))
        reason_src = "events (last 500 goroutines seen)"
    reason, nreason = max(reasons.items(), key=lambda kv: (kv[1], kv[0])) if reasons else ("", 0)
    if cg is not None and cg.by_site:
        sites = [{"creator": c, "start": s, "growth": n} for c, s, n in cg.by_site if n > 0]
    elif snap.runtime is not None and snap.runtime.census is not None:
        sites = [{"creator": x.creator, "start": x.start, "count": x.count}
                 for x in snap.runtime.census.sites[:5]]
    if sites:
        site = f"{sites[0]['creator']} -> go {sites[0]['start']}"
    parents = sorted(gr.parents.items(), key=lambda kv: (-kv[1], kv[0]))[:3]
    grown = leaks or [t for t in ctx.inputs.stack_trends
                      if t.growth > 0 and not t.system and t.reason][:3]
    sampled = ["wait_reasons"] if not reason_src.startswith("census") else []
    if source.startswith("runtime") or snap.window == "windows":
        sampled.append("series")
    return Finding(
        "goroutine-leak",
        Severity.CRITICAL if growth >= th.leak_critical else Severity.WARNING,
        f"Live goroutines grow steadily: +{growth} in {span} s ({growth / span:.0f}/s)"
        + (f", waiting in {reason!r}" if reason else "")
        + (f" at {wait_site(grown[0].frames)}" if grown else "")
        + (f", created at {site}" if site else ""),
        {
            "growth": growth,
            "seconds": span,
            "per_second": round(growth / span, 1),
            "rising_share": round(steady, 2),
            "series": [list(p) for p in pts[-30:]],
            "wait_reason": reason,
            "wait_reason_count": nreason,
            "wait_reasons": reasons,
            "creation_site": site,
            "creation_sites": sites,
            "creators": [{"goid": g, "live_created": n} for g, n in parents],
            "sources": {"series": source, "wait_reasons": reason_src,
                        "creation_sites": "census (g.gopc, g.startpc)" if sites else "none"},
            "sampled": sampled,
            # where they wait: the leaking census stack groups, else the ones that grew most
            "stacks": [_stack_evidence(t) for t in grown[:5]],
        },
        "Goroutines are created faster than they end and pile up blocked"
        + (f" (created in {sites[0]['creator']})" if sites else "") + ". Give every "
        "goroutine a way out: a context with cancel/timeout, a closed channel, a "
        "select with ctx.Done(); make sure channel sends have a receiver.",
    )


def runq_overflow(ctx: Context) -> Finding | None:
    rq, th = ctx.inputs.runq, ctx.th
    series = rq.global_series
    rising = False
    if len(series) >= 3:
        vals = [v for _s, v in series[-10:]]
        rising = vals[-1] > vals[0] and sum(
            1 for a, b in itertools.pairwise(vals) if b >= a) >= 0.7 * (len(vals) - 1)
    full = rq.full_local > 0
    big_global = rq.max_global >= th.global_runq
    if not (full or (big_global and rising) or rq.max_global >= 4 * th.global_runq):
        return None
    title = (f"Local run queue of P{rq.max_local_p} at its {th.runq_limit} limit "
             f"({rq.full_local} times): goroutines spill to the global queue"
             if full else f"Global run queue grows to {rq.max_global}")
    return Finding(
        "runq-overflow",
        Severity.CRITICAL if full and big_global else Severity.WARNING,
        title,
        {
            "max_local": rq.max_local,
            "max_local_p": rq.max_local_p,
            "full_local": rq.full_local,
            "limit": th.runq_limit,
            "max_global": rq.max_global,
            "global_rising": rising,
            "global_series": [list(p) for p in series[-30:]],
            "sources": {"runq": "samples" if rq.sampled else "events"},
            "sampled": ["runq"] if rq.sampled else [],
        },
        "More goroutines become runnable at once than the Ps can take: a burst of go "
        "statements (one per item/request) or mass wake-ups. Bound the concurrency with a "
        "worker pool or a semaphore (golang.org/x/sync/semaphore, a buffered channel) "
        "instead of one goroutine per item.",
    )


def cgo_pinning(ctx: Context) -> Finding | None:
    ho, th = ctx.inputs.handoffs, ctx.th
    _sysc, nf, how = split_handoffs(ctx)
    n = round(nf)
    rate = n / ctx.seconds
    if n < th.locked_min or rate < th.locked_rate:
        return None
    # Evidence that threads are pinned: locked-thread hand-offs seen (the PARK before the
    # hand-off on the same M), or the perf sampler's samples outside Go code (cgo). Hand-offs
    # of unknown cause split by syscall ticks are not that evidence on their own.
    seen = ho.by_cause.get("locked-thread", 0)
    outside = kev.outside_go(ctx.snap.kernel)
    if seen < th.locked_min and outside.get("samples_outside_go", 0) < th.cgo_min_samples:
        return None
    gs = sorted(ho.locked_goroutines.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
    rows: list[dict[str, Any]] = [{"goid": g, "handoffs": c} for g, c in gs]
    site = kev.name_goroutines(ctx.snap.kernel, rows)
    evidence: dict[str, Any] = {
        "site": site,
        **outside,
        "locked_handoffs": n,
        "locked_handoffs_seen": seen,
        "per_second": round(rate, 1),
        "locked_goroutines": rows,
        "no_m_ns": ho.no_m_ns,
        "cause_note": how or None,
        "sources": {"locked_handoffs": "events (handoffp after gopark on the same M)"
                    + (" + inferred" if how else ""),
                    "site": "perf samples (user stacks)"},
        "sampled": (["locked_handoffs"] if how else []) + (["site"] if site else []),
    }
    return Finding(
        "cgo-pinning",
        Severity.WARNING,
        f"Goroutines locked to their thread{(' in ' + site) if site else ''} block {n} times "
        f"({rate:.0f}/s): each time the M sleeps with them and hands its P off",
        evidence,
        "A goroutine pinned with runtime.LockOSThread (or held in a cgo call) keeps its M: "
        "when it blocks, its P must be handed to another M and back. Lock the thread only "
        "around the code that needs it (UnlockOSThread after), keep locked goroutines from "
        "blocking on channels, and batch cgo calls so fewer, longer calls cross the boundary.",
    )
