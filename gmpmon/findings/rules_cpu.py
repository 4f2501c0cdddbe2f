"""Rules about CPU: saturation, cgroup throttling, goroutines that do not yield, spinning Ms."""

from __future__ import annotations

import math
import operator
from typing import Any

from gmpmon.findings import kernel_evidence as kev
from gmpmon.findings.context import Context
from gmpmon.model.findingtypes import Finding, LongRun, Severity
from gmpmon.model.snapshot import PState


def _ms(ns: float) -> float:
    return round(ns / 1e6, 3)


def p_busy(ctx: Context) -> list[tuple[int, float, int]]:
    """(P, running share of its known time, known ns) for every P with known time."""
    out = []
    for p in ctx.snap.procs:
        known = p.running_ns + p.idle_ns + p.searching_ns + p.syscall_ns + p.gcstop_ns
        if known > 0:
            out.append((p.id, p.running_ns / known, known))
    return out


def cpu_saturation(ctx: Context) -> Finding | None:
    snap, th, rq = ctx.snap, ctx.th, ctx.inputs.runq
    busy = p_busy(ctx)
    nprocs = max(snap.gomaxprocs, 1)
    if len(busy) < nprocs or not busy:
        return None
    span = snap.windows_covered_ns if snap.window == "windows" else ctx.duration_ns
    if sum(k for _p, _b, k in busy) < 0.5 * span * nprocs:
        return None  # too little of the run (default mode: of its windows) is known
    min_busy = min(b for _p, b, _k in busy)
    if min_busy < th.busy:
        return None
    mean_runq = rq.local_sum / rq.local_n if rq.local_n else 0.0
    lat, lat_src = snap.sched_latency, snap.sources.get("sched_latency", "events")
    if lat.count < 20 and snap.runtime is not None and snap.runtime.latency.count >= 20:
        # No probe saw the wake-ups (sample mode): the runtime's own histogram.
        lat, lat_src = snap.runtime.latency, "runtime (sched.timeToRun, 1 in 8 sampled)"
    p99 = lat.p99 if lat.count >= 20 else 0
    # Queued goroutines: a long p99 (events), a mean runq of 1+ (samples), a global queue.
    waiting = mean_runq >= th.sat_runq_mean or p99 >= th.sat_p99_ns or rq.max_global >= nprocs
    if not waiting:
        return None
    crit = min_busy >= th.busy_critical and (p99 >= th.sat_p99_critical_ns or mean_runq >= 4)
    att = ctx.attribution
    evidence: dict[str, Any] = {
        "gomaxprocs": snap.gomaxprocs,
        "p_running_share": {str(p): round(b, 3) for p, b, _k in busy},
        "runq_mean": round(mean_runq, 2) if rq.local_n else None,
        "runq_max": rq.max_local,
        "global_runq_max": rq.max_global,
        "sched_latency_p99_ns": p99,
        "sched_latency_samples": lat.count,
        "window_ns": ctx.duration_ns,
        "sources": {
            "p_running_share": ctx.timeline_source,
            "runq": "samples (mean, max)" if rq.sampled else "events (max)",
            "sched_latency": lat_src,
        },
        "sampled": [k for k, s in (("p_running_share", ctx.sampled_mode),
                                   ("runq", rq.sampled),
                                   ("sched_latency", lat_src.startswith("runtime"))) if s],
    }
    if att.samples:
        evidence["tail_wait_all_running_share"] = round(att.share("all_running"), 3)
    return Finding(
        "cpu-saturation",
        Severity.CRITICAL if crit else Severity.WARNING,
        f"All {nprocs} Ps busy ({100 * min_busy:.0f}%+): runnable goroutines wait for a P "
        f"(p99 {_ms(p99)} ms, runq up to {rq.max_local})",
        evidence,
        f"Every P runs all the time and goroutines queue behind them. Give the process more "
        f"CPU (GOMAXPROCS={snap.gomaxprocs} is the most that can run at once; raising it "
        f"above the CPUs really available only adds contention), reduce CPU per request "
        f"(profile with pprof), or shed load before it queues.",
    )


def cpu_throttled(ctx: Context) -> Finding | None:
    cg, th, snap = ctx.inputs.cgroup, ctx.th, ctx.snap
    if cg is None:
        return None
    minor = ctx.go_minor()
    cpus = cg.cpus
    over = cpus > 0 and snap.gomaxprocs > math.ceil(cpus - 1e-9)
    ratio = cg.nr_throttled / cg.nr_periods if cg.nr_periods else 0.0
    throttled = cg.nr_throttled >= th.throttle_min and ratio >= th.throttle_ratio
    if not throttled:  # Ps above the quota alone: gomaxprocs-above-cpus says so
        return None
    share = cg.throttled_ns / ctx.duration_ns if ctx.duration_ns else 0.0
    crit = throttled and (ratio >= th.throttle_ratio_critical or share >= 0.10)
    if minor >= 25:
        ver = (f"{snap.go_version} sizes GOMAXPROCS from the quota by default (Go 1.25+); "
               f"GOMAXPROCS={snap.gomaxprocs} above it means it was set explicitly "
               f"(GOMAXPROCS env, runtime.GOMAXPROCS) or GODEBUG=updatemaxprocs=0")
    else:
        ver = (f"{snap.go_version} ignores CPU quotas (only Go 1.25+ reads them): GOMAXPROCS "
               f"defaults to the machine's CPU count")
    parts = []
    if throttled:
        parts.append(f"throttled in {100 * ratio:.0f}% of CFS periods "
                     f"({_ms(cg.throttled_ns):.0f} ms stalled)")
    if over:
        parts.append(f"GOMAXPROCS={snap.gomaxprocs} > quota {cpus:g} CPUs")
    quota_fix = max(1, math.floor(cpus)) if cpus else snap.gomaxprocs
    advice = (f"{ver}. Set GOMAXPROCS to the quota ({quota_fix}), upgrade to Go 1.25+, or use "
              f"go.uber.org/automaxprocs; or raise the cgroup's quota. Throttling stalls every "
              f"thread of the process until the next period: it shows up as tail latency of "
              f"up to a period ({cg.period_us // 1000} ms).")
    return Finding(
        "cpu-throttled",
        Severity.CRITICAL if crit else Severity.WARNING,
        "CPU quota: " + "; ".join(parts),
        {
            "cgroup_version": cg.version,
            "quota_us": cg.quota_us,
            "period_us": cg.period_us,
            "quota_cpus": round(cpus, 3),
            "gomaxprocs": snap.gomaxprocs,
            "go_version": snap.go_version,
            "go_reads_quota": minor >= 25,
            "nr_periods": cg.nr_periods,
            "nr_throttled": cg.nr_throttled,
            "throttled_ns": cg.throttled_ns,
            "throttled_ratio": round(ratio, 3),
            "window_ns": cg.last_ts - cg.first_ts,
            "sources": {"cgroup": f"cgroup v{cg.version} cpu.stat / "
                        + ("cpu.max" if cg.version == 2 else "cpu.cfs_quota_us")},
            "sampled": [],
        },
        advice,
    )


RUNTIME_USER_STARTS = ("runtime.main", "runtime.handleAsyncEvent")  # isSystemGoroutine's


def _runtime_goroutines(ctx: Context) -> set[int]:
    """Goids of the runtime's own goroutines (GC mark workers, sweeper, scavenger...: start
    function runtime.*, as isSystemGoroutine decides), among the goroutines the model knows.
    A dedicated GC mark worker runs until preempted by design: not the program's loop."""
    return {g.goid for g in ctx.snap.goroutines
            if g.start.startswith("runtime.") and g.start not in RUNTIME_USER_STARTS}


def _on_cpu(runs: tuple[LongRun, ...], period: int) -> tuple[list[LongRun], int, int]:
    """(the runs that were on a CPU in Go code for at least the long-run threshold, each
    cut to that time; runs dropped for lack of it; runs not measured). A run's time in Go is
    its user-mode perf samples x the sampling period (capped at its length): a goroutine in
    a syscall is sampled in kernel mode, a descheduled thread is not sampled at all."""
    kept: list[LongRun] = []
    dropped = unmeasured = 0
    for r in runs:
        if r.user_samples < 0 or not period:
            unmeasured += 1
            kept.append(r)
            continue
        go_ns = min(r.ns, r.user_samples * period)
        # ... from 2 samples at least: one says the G ran at one tick, not for a period
        # (Caddy under wrk: three 1-sample "10 ms" runs made a warning).
        if go_ns >= LONG_RUN_GO_NS and r.user_samples >= 2:
            kept.append(LongRun(r.goid, r.p, r.start, go_ns, r.sampled, r.user_samples,
                                r.kernel_samples))
        else:
            dropped += 1
    return kept, dropped, unmeasured


LONG_RUN_GO_NS = 10_000_000  # sysmon's forcePreemptNS, in user-mode CPU time


def long_running(ctx: Context) -> Finding | None:
    inp, th, kern = ctx.inputs, ctx.th, ctx.snap.kernel
    runs = inp.long_runs
    period = inp.sample_period_ns
    if not runs and kern is not None and kern.long_running:
        # The perf sampler saw them (same G on the same P across consecutive perf samples).
        runs = tuple(LongRun(r.goid, r.p, r.start, r.end - r.start, True, r.user_samples,
                             r.samples - r.user_samples if r.user_samples >= 0 else -1)
                     for r in kern.long_running)
        period = period or kern.samples.period_ns
    system = _runtime_goroutines(ctx)
    seen = runs
    ours = tuple(r for r in seen if r.goid not in system)
    kept, not_on_cpu, unmeasured = _on_cpu(ours, period)
    runs = tuple(sorted(kept, key=lambda r: (-r.ns, r.start)))
    by_g: dict[int, tuple[int, int]] = dict(inp.long_by_goid)
    count = max(inp.long_run_count, len(runs))
    if not_on_cpu or len(ours) < len(seen) or not inp.long_runs:
        # Some runs were dropped (or only the perf sampler's are here): count the kept ones
        # (the tracker's table of every run cannot tell which were on a CPU).
        by_g = {}
        for r in runs:
            n, mx = by_g.get(r.goid, (0, 0))
            by_g[r.goid] = (n + 1, max(mx, r.ns))
        count = len(runs)
    pre = {g: n for g, n in inp.preempt_by_goid.items() if n > 0 and g not in system}
    if not runs and sum(pre.values()) < th.long_run_warn_count:
        return None
    longest = runs[0].ns if runs else 0
    # Preemption requests alone are not enough: the GC asks every running G to stop too.
    many = count >= th.long_run_warn_count
    if runs and all(r.sampled for r in runs) and count < th.long_run_warn_count:
        # A few runs seen only by P samples: a goroutine woken into runnext inherits its
        # time slice (same schedtick), so a busy but yielding G can look like one run.
        many, longest = False, min(longest, th.long_run_warn_ns - 1)
    checked = bool(runs) and unmeasured == 0
    if not runs:
        if max(pre.values(), default=0) < th.preempt_only_info:
            return None
        sev = Severity.INFO
    elif longest < th.long_run_warn_ns and not many:
        sev = Severity.INFO
    elif longest >= th.long_run_critical_ns and checked:
        sev = Severity.CRITICAL
    else:
        sev = Severity.WARNING  # unchecked runs (no perf samples) are never critical
    top = sorted(by_g.items(), key=lambda kv: (-kv[1][0], -kv[1][1], kv[0]))[:5]
    goroutines = [
        {"goid": g, "runs": n, "longest_ns": mx, "preempt_requests": pre.get(g, 0)}
        for g, (n, mx) in top
    ]
    for g, n in sorted(pre.items(), key=lambda kv: -kv[1])[:5]:
        if g not in by_g:
            goroutines.append({"goid": g, "runs": 0, "longest_ns": 0, "preempt_requests": n})
    sampled = any(r.sampled for r in runs)
    exact = any(not r.sampled for r in runs)
    lead = goroutines[0]["goid"] if goroutines else 0
    function = kev.name_goroutines(kern, goroutines)
    where = f" in {function}" if function else ""
    samples = sum(max(r.user_samples, 0) for r in runs)
    if runs:
        g0 = goroutines[0]
        how = " on a CPU in Go code" if checked else ""
        note = "" if checked else "; not checked against the kernel: no perf samples"
        title = (f"Goroutine {lead}{where} ran up to {_ms(g0['longest_ns']):.0f} ms{how} "
                 f"without yielding ({g0['runs']} of {count} runs >= "
                 f"{th.long_run_ns // 1_000_000} ms; {sum(pre.values())} preemption "
                 f"requests{note})")
    else:
        title = (f"Goroutine {lead}{where} was asked to stop "
                 f"{goroutines[0]['preempt_requests']} times (no run of "
                 f"{th.long_run_ns // 1_000_000} ms on a CPU in Go code seen)")
    return Finding(
        "long-running-goroutine",
        sev,
        title,
        {
            "function": function,
            "stack": goroutines[0].get("stack", []) if goroutines else [],
            "long_runs": count,
            "longest_ns": longest,
            "threshold_ns": th.long_run_ns,
            "goroutines": goroutines,
            "preempt_requests": sum(pre.values()),
            # The kernel's view: runs held by the P but mostly in a syscall or descheduled
            # (too few user-mode perf samples) are not counted; nor are the runtime's own.
            "runs_not_on_cpu": not_on_cpu,
            "runs_not_checked": unmeasured,
            "runtime_goroutine_runs": len(inp.long_runs) - len(ours) if inp.long_runs else 0,
            "user_mode_samples": samples if period else None,
            "sample_period_ns": period or None,
            "sources": {
                "long_runs": "+".join(
                    s for s, ok in (("events", exact), ("samples", sampled)) if ok
                ) or "none",
                "on_cpu": "perf samples (user vs kernel mode)" if period else "not measured",
                "preempt_requests": "events (preemptone)",
                "function": "perf samples (user stacks)" if function else "none",
            },
            "sampled": (["long_runs"] if sampled else []) + (["longest_ns"] if period else [])
                       + (["function", "stack"] if function else []),
        },
        "A goroutine that runs 10 ms or more on a CPU holds its P: others queue behind it "
        "until sysmon preempts it (SIGURG). Break the loop into chunks, move it off the "
        "latency path, or call runtime.Gosched() in tight loops; check the stack for an "
        "unexpected hot loop.",
    )


_STATE = operator.attrgetter("state")
_SEARCH_THEN_IDLE = bytes((PState.SEARCHING, PState.IDLE))


def failed_searches(ctx: Context) -> tuple[int, int, int]:
    """(searches that ended idle, their ns, ns of P timeline looked at): a SEARCHING span
    followed by IDLE is an M that looked for work, found none and gave its P up.

    Each P's states become a bytes string searched in C: the Python walk over every span
    of every P was a sixth of a sample-mode snapshot's findings on net/http."""
    n = ns = covered = 0
    for p in ctx.snap.procs:
        tl = p.timeline
        if not tl:
            continue
        states = bytes(map(_STATE, tl))
        i = states.find(_SEARCH_THEN_IDLE)
        while i >= 0:
            a = tl[i]
            n += 1
            ns += a.end - a.start
            i = states.find(_SEARCH_THEN_IDLE, i + 1)
        covered += tl[-1].end - tl[0].start
    return n, ns, covered


def idle_spinning(ctx: Context) -> Finding | None:
    snap, th, sp = ctx.snap, ctx.th, ctx.inputs.spin
    run = sum(p.running_ns for p in snap.procs)
    spin = sum(p.searching_ns for p in snap.procs)
    # Time the P states were known: the whole run in full mode, the windows in default mode.
    covered = snap.windows_covered_ns if snap.window == "windows" else ctx.duration_ns
    n, wasted, _tl = failed_searches(ctx)
    # Without pidleput events a P that went idle stays "searching": no judgement from those.
    ev_ok = not ctx.sampled_mode and ctx.inputs.p_idles > 0 and covered > 0 and run + spin > 0
    cpu_share = spin / covered if covered else 0.0  # in CPUs: 0.05 = 5% of one CPU
    busy_share = spin / (run + spin) if run + spin else 0.0
    ev_hit = ev_ok and cpu_share >= th.spin_cpu and busy_share >= th.spin_busy
    sample_share = sp.spinning_samples / sp.samples if sp.samples else 0.0
    sample_hit = sp.samples >= th.spin_min_samples and sample_share >= th.spin_sample_share
    # The perf sampler: CPU samples of Ms in runtime.findRunnable against goroutines' samples.
    k_search, k_run, k_period = kev.search_samples(snap.kernel)
    k_cpu = k_search * k_period / ctx.duration_ns if ctx.duration_ns else 0.0
    k_share = k_search / (k_search + k_run) if k_search + k_run else 0.0
    k_enough = (k_search >= th.spin_min_cpu_samples
                and k_search * k_period >= th.spin_min_sampled_ns)
    k_hit = k_enough and k_cpu >= th.spin_cpu and k_share >= th.spin_busy
    # Spinning is CPU burnt: when the perf sampler ran, the kernel must see some of it (a
    # searching M that the kernel descheduled is "searching" to the events, not spinning;
    # Prometheus under wrk: 12% of a CPU from the events, 1.7% in the samples).
    sampler = snap.kernel is not None and k_period > 0 and snap.kernel.samples.total > 0
    kernel_agrees = not sampler or k_cpu >= th.spin_cpu_kernel
    if not (k_hit or ((ev_hit or sample_hit) and kernel_agrees)):
        return None
    st = snap.steals
    failed = st.attempts - st.count
    if ev_hit:
        title = (f"Ms spin looking for work: {100 * busy_share:.0f}% of the Ps' busy time is "
                 f"spent searching ({100 * cpu_share:.0f}% of a CPU), {failed} failed steals")
    elif k_hit:
        title = (f"Ms spin looking for work: {100 * k_share:.0f}% of the CPU samples are in "
                 f"findRunnable ({100 * k_cpu:.0f}% of a CPU)")
    else:
        title = (f"Ms spin looking for work: nmspinning > 0 in {100 * sample_share:.0f}% of "
                 f"samples")
    return Finding(
        "idle-spinning",
        Severity.WARNING,
        title,
        {
            "searching_ns": spin,
            "running_ns": run,
            "searching_share_of_busy": round(busy_share, 3),
            "searching_cpus": round(cpu_share, 3),
            "failed_searches": n,
            "failed_search_ns": wasted,
            "steal_attempts": st.attempts,
            "steal_failed": failed,
            "nmspinning_sample_share": round(sample_share, 3),
            "sched_samples": sp.samples,
            "cpu_samples_in_findrunnable": k_search,
            "findrunnable_cpus": round(k_cpu, 3),
            "findrunnable_share_of_busy_samples": round(k_share, 3),
            "sources": {"searching_ns": ctx.timeline_source + " (findRunnable .. pidleput)",
                        "failed_searches": "timeline (last ~2,000 spans a P)",
                        "nmspinning": "samples",
                        "findrunnable_cpus": "perf samples (g0 stacks)",
                        "steals": snap.sources.get("steal_attempts", "events")},
            "sampled": ["nmspinning", "findrunnable_cpus"]
                       + (["searching_ns"] if snap.window == "windows" else []),
        },
        "Many short wake-ups keep waking Ms that find nothing to run, then sleep again: CPU "
        "burnt in findRunnable (futex wake/sleep, steal attempts). Batch the work (fewer, "
        "larger hand-offs between goroutines), use fewer timers/tickers with coarser "
        "periods, or lower GOMAXPROCS toward the real parallelism of the load.",
    )


def go_default_gomaxprocs(affinity: int, leaf_quota_cpus: float) -> int:
    """GOMAXPROCS as Go 1.25+ sets it by default (runtime defaultGOMAXPROCS): the CPUs in
    the affinity mask, lowered to the target's own cgroup's quota rounded up, but not below
    2 (adjustCgroupGOMAXPROCS: ceil(limit), max(limit, 2)). 0 when the affinity is unknown."""
    if affinity <= 0:
        return 0
    if leaf_quota_cpus > 0:
        return min(affinity, max(2, math.ceil(leaf_quota_cpus - 1e-9)))
    return affinity


def gomaxprocs_above_cpus(ctx: Context) -> Finding | None:
    """More Ps than CPUs the process may use (its affinity mask, its cgroup quota): the
    runtime runs GOMAXPROCS Ms at once and the kernel time-slices them, so a goroutine
    "running" on a P waits for a CPU, sysmon preempts it, STW waits for descheduled Ms."""
    snap, th, cg = ctx.snap, ctx.th, ctx.inputs.cgroup
    affinity = ctx.inputs.cpus_allowed
    quota = cg.cpus if cg is not None else 0.0
    limits = [n for n in (affinity, math.ceil(quota - 1e-9) if quota > 0 else 0) if n > 0]
    if not limits:
        return None
    usable = min(limits)  # whole CPUs: a quota of 1.5 lets 2 threads run at once
    # The runtime's own gomaxprocs, read from its memory (a program may call
    # runtime.GOMAXPROCS after gmpmon read the header's), else the header's.
    rt = snap.runtime
    live = rt is not None and rt.gomaxprocs > 0
    procs = rt.gomaxprocs if rt is not None and live else snap.gomaxprocs
    if procs <= usable:
        return None
    leaf = cg.leaf_quota_us / cg.leaf_period_us if (
        cg is not None and cg.leaf_quota_us > 0 and cg.leaf_period_us > 0) else 0.0
    if cg is not None and cg.leaf_quota_us == -2:
        leaf = quota  # a recording made before the leaf's own quota was read
    go_default = go_default_gomaxprocs(affinity, leaf)
    minor = ctx.go_minor()
    # Go 1.25+ rounds a quota below 2 up to 2 Ps: that is the runtime's own choice, not worth
    # a warning; anything above both that and the usable CPUs was set by someone.
    if procs <= max(2, usable):
        sev = Severity.INFO
    elif procs >= th.procs_over_critical * usable:
        sev = Severity.CRITICAL
    else:
        sev = Severity.WARNING
    why = []
    if affinity:
        why.append(f"{affinity} CPUs in its affinity mask")
    if quota > 0:
        why.append(f"a cgroup quota of {quota:g} CPUs")
    if minor >= 25:
        ver = (f"{snap.go_version} would pick {go_default or '?'} by default (Go 1.25+ reads "
               f"the affinity and the quota): GOMAXPROCS={procs} was set explicitly "
               f"(GOMAXPROCS env, runtime.GOMAXPROCS) or GODEBUG=updatemaxprocs=0")
    else:
        ver = (f"{snap.go_version} sizes GOMAXPROCS from the affinity mask only (cgroup "
               f"quotas are read from Go 1.25 on)")
    return Finding(
        "gomaxprocs-above-cpus",
        sev,
        f"GOMAXPROCS={procs} but the process may use {usable} CPUs ({', '.join(why)}): "
        f"{procs - usable} Ps have no CPU to run on",
        {
            "gomaxprocs": procs,
            "usable_cpus": usable,
            "affinity_cpus": affinity or None,
            "quota_cpus": round(quota, 3) if quota > 0 else None,
            "leaf_quota_cpus": round(leaf, 3) if leaf > 0 else None,
            "go125_default": go_default or None,
            "go_version": snap.go_version,
            "ratio": round(procs / usable, 2),
            "sources": {"affinity_cpus": "sched_getaffinity(target)" if affinity
                        else "not measured",
                        "quota_cpus": (f"cgroup v{cg.version} "
                                       + ("cpu.max" if cg.version == 2 else "cpu.cfs_quota_us"))
                        if cg is not None and quota > 0 else "not measured",
                        "gomaxprocs": "runtime counters (sched.gomaxprocs)" if live
                        else "at attach"},
            "sampled": [],
        },
        f"{ver}. With more Ps than CPUs the kernel time-slices the Ms that hold Ps: a "
        f"goroutine that is 'running' waits for a CPU, sysmon preempts it, stop-the-world "
        f"pauses wait for descheduled threads, and idle Ms spin. Set GOMAXPROCS={usable} "
        f"(or unset it on Go 1.25+), or give the process more CPUs. Long runs, scheduling "
        f"latency and saturation reported with this are its symptoms.",
    )
