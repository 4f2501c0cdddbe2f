"""The Snapshot, built from the model's parts: each part fills its own fields (its
``section``); what spans parts (a P's row: its state, its latency, its steals; the goroutine
table) is put together here."""

from __future__ import annotations

import heapq
import itertools
from typing import Any, Protocol

from gmpmon.events import Header
from gmpmon.model.cost import CostTracker
from gmpmon.model.gp import G, P
from gmpmon.model.latency import Latency
from gmpmon.model.legal import (
    G_DEAD,
    G_UNKNOWN,
    P_GCSTOP,
    P_IDLE,
    P_RUNNING,
    P_SEARCHING,
    P_SYSCALL,
    P_UNKNOWN,
)
from gmpmon.model.part import Context, Part, View
from gmpmon.model.sched import Sched
from gmpmon.model.snapshot import GoroutineView, GState, ProcView, PState, Snapshot, Span
from gmpmon.model.steals import Steals


class Modelled(Protocol):
    """What the view reads of the model (gmpmon.model.core.Model)."""

    header: Header
    ctx: Context
    parts: list[Part]
    sched: Sched
    latency: Latency
    steals: Steals
    cost: CostTracker
    first_lost_ts: int
    window_ns: int
    snapshot_spans: int
    goroutine_view: int
    applied_ts: int
    first_ts: int
    events_total: int
    events_lost: int
    late_events: int
    windows: int

    @property
    def window(self) -> str: ...

    def covered_ns(self, now: int, start: int) -> int: ...

    def window_spans(self, now: int) -> tuple[tuple[int, int], ...]: ...

    def event_rate(self) -> float: ...


_PSTATES = tuple(PState)
_GSTATES = tuple(GState)
# The census's goroutines in a Snapshot at most (the TUI's table shows as many).
CENSUS_ROWS = 2000
_CENSUS_GSTATE = {st.name.lower(): st for st in (GState.RUNNABLE, GState.RUNNING,
                                                  GState.WAITING, GState.SYSCALL)}


def build(model: Modelled, light: bool = False) -> Snapshot:
    """The Snapshot now; ``light``: without the sections of the parts marked ``costly``
    (their fields keep their defaults), without the Ps' timelines and the census's goroutine
    rows (what a headless line reads has none of them)."""
    now = max(model.applied_ts, 0)
    start = max(model.first_ts, 0)
    at = View(now=now, start=start, cutoff=now - model.window_ns)
    fields: dict[str, Any] = {}
    for part in model.parts:
        if not (light and part.costly):
            fields.update(part.section(at))
    fields["procs"] = procs(model, at, light)
    fields["goroutines"] = recent = goroutines(model)
    if not light:  # no headless line lists goroutines
        fields["census_goroutines"] = census_goroutines(model, recent)
    fields["sources"] = {c.name: c.source for part in model.parts for c in part.sources()}
    missed = [t for t in (model.first_lost_ts, model.cost.first_drop_ts) if t >= 0]
    fields["thinned_since"] = min(missed) if missed else -1
    hdr = model.header
    return Snapshot(
        now=now,
        start=start,
        pid=hdr.pid,
        exe=hdr.exe,
        go_version=hdr.go_version,
        gomaxprocs=hdr.gomaxprocs,
        mode=hdr.mode,
        window=model.window,
        events_total=model.events_total,
        events_lost=model.events_lost,
        event_rate=model.event_rate(),
        window_ns=model.window_ns,
        windows=model.windows,
        windows_covered_ns=model.covered_ns(now, start),
        window_spans=model.window_spans(now),
        late_events=model.late_events,
        **fields,
    )


def procs(model: Modelled, at: View, light: bool = False) -> tuple[ProcView, ...]:
    sched, latency = model.sched, model.latency
    steals_in: dict[int, int] = {}
    steals_out: dict[int, int] = {}
    for (thief, victim), (_a, _o, gs) in model.steals.matrix().items():
        steals_in[thief] = steals_in.get(thief, 0) + gs
        steals_out[victim] = steals_out.get(victim, 0) + gs
    now, keep = at.now, model.snapshot_spans - 1
    kernel_starts = sched.starts.seen
    out = []
    for pid in sorted(sched.procs):
        pp = sched.procs[pid]
        times = list(pp.times)
        spans = closed_spans(pp, keep, at.cutoff) if not light else []
        if pp.state != P_UNKNOWN and now > pp.since:
            if pp.exact:
                times[pp.state] += now - pp.since
            if not light:
                spans.append(Span(pp.since, now, _PSTATES[pp.state], pp.goid))
        out.append(
            ProcView(
                id=pid,
                state=_PSTATES[pp.state],
                goid=pp.goid,
                m=pp.m,
                runq=pp.runq,
                running_ns=times[P_RUNNING],
                idle_ns=times[P_IDLE],
                searching_ns=times[P_SEARCHING],
                syscall_ns=times[P_SYSCALL],
                gcstop_ns=times[P_GCSTOP],
                executes=pp.starts_counter if kernel_starts else pp.executes,
                steals_in=steals_in.get(pid, 0),
                steals_out=steals_out.get(pid, 0),
                latency=latency.of_p(pp),
                timeline=tuple(spans),
                history=pp.folded.view(at.cutoff) if pp.folded is not None else None,
            )
        )
    return tuple(out)


def closed_spans(pp: P, keep: int, cutoff: int) -> list[Span]:
    """The P's last ``keep`` closed spans that end at or after ``cutoff``. A closed span
    never changes, so each becomes a Span once: ``pp.span_views`` holds them for the
    timeline's tail, matched to it by start time (strictly increasing along a timeline)."""
    tl, cv = pp.timeline, pp.span_views
    n = len(tl)
    first = max(0, n - keep) if keep > 0 else n
    if first >= n:
        cv.clear()
        return []
    s0 = tl[first][0]
    while cv and cv[0].start < s0:
        cv.popleft()  # left the timeline, or older than its last ``keep``
    m = len(cv)
    if m and (m > n - first or cv[0].start != s0 or cv[-1].start != tl[first + m - 1][0]):
        cv.clear()  # not the timeline's spans (cannot happen; a rebuild is always right)
        m = 0
    if first + m < n:
        cv.extend(Span(s, t, _PSTATES[st], gid)
                  for s, t, st, gid in itertools.islice(tl, first + m, None))
    return [sp for sp in cv if sp.end >= cutoff]


def goroutines(model: Modelled) -> tuple[GoroutineView, ...]:
    sched, n = model.sched, model.goroutine_view
    recent = heapq.nlargest(n, sched.gs.values(), key=_since_goid)
    views = [gview(model, gg) for gg in recent]
    room = n - len(views)
    if room > 0:
        views.extend(gview(model, gg) for gg in list(sched.dead)[::-1][:room])
    return tuple(views)


def gview(model: Modelled, gg: G) -> GoroutineView:
    st = gg.state if gg.epoch == model.sched.epoch or gg.state == G_DEAD else G_UNKNOWN
    site = model.ctx.stacks.get(gg.site, ()) if gg.site else ()
    start, created_at = _site_words(site)
    return GoroutineView(
        goid=gg.goid,
        state=_GSTATES[st],
        p=gg.p,
        wait_reason=model.ctx.reason_name(gg.reason) if gg.reason >= 0 else "",
        since=gg.since,
        parent=gg.parent,
        executes=gg.executes,
        wait_ns=gg.wait_ns,
        start=start,
        created_at=created_at,
    )


def _since_goid(gg: G) -> tuple[int, int]:
    return (gg.since, gg.goid)


def census_goroutines(model: Modelled,
                      recent: tuple[GoroutineView, ...]) -> tuple[GoroutineView, ...] | None:
    """The census's user goroutines, each in its state and wait reason as of the newest walk,
    with what the probes measured of it where they saw it (``probed``). At most CENSUS_ROWS:
    those the probes saw last first, then in the census's order. A row is made again only
    when what it shows changed (``Sched.census_views``: 2,000 new rows a snapshot took 6 ms)."""
    sched = model.sched
    states = sched.census_gs
    if not states:
        return None
    g_status, epoch, gs, sites = model.header.g_status, sched.epoch, sched.gs, sched.sites
    cache = sched.census_views
    fresh: dict[int, tuple[object, GoroutineView]] = {}
    out: list[GoroutineView] = []

    def row(goid: int, key: int) -> None:
        gg = gs.get(goid)
        sid = sites.get(goid) or (gg.site if gg else 0)
        seen = (gg.state if gg.epoch == epoch else G_UNKNOWN) if gg is not None else -1
        token = (key, sid) if gg is None else (key, sid, seen, gg.since, gg.executes,
                                                gg.wait_ns, gg.p, gg.parent, gg.reason)
        hit = cache.get(goid)
        if hit is not None and hit[0] == token:
            fresh[goid] = hit
            out.append(hit[1])
            return
        status, reason = key & 0xFFFF, (key >> 16) & 0xFFFF
        word = g_status[status] if 0 <= status < len(g_status) else f"#{status}"
        state = _CENSUS_GSTATE.get(word, GState.UNKNOWN)
        why = model.ctx.reason_name(reason) if word == "waiting" else ""
        start, created_at = _site_words(model.ctx.stacks.get(sid, ()))
        if gg is None:
            v = GoroutineView(goid=goid, state=state, p=-1, wait_reason=why, since=0, parent=0,
                              executes=0, wait_ns=0, start=start, created_at=created_at,
                              census_state=word, probed=False)
        else:
            # In this state since the probes saw it enter it, when they saw the same state.
            agree = _GSTATES[seen] is state and (state is not GState.WAITING or
                                                 model.ctx.reason_name(gg.reason) == why)
            v = GoroutineView(goid=goid, state=state, p=gg.p, wait_reason=why,
                              since=gg.since if agree else 0, parent=gg.parent,
                              executes=gg.executes, wait_ns=gg.wait_ns, start=start,
                              created_at=created_at, census_state=word)
        fresh[goid] = (token, v)
        out.append(v)

    for g in recent:
        key = states.get(g.goid)
        if key is not None and not key >> 32 and len(out) < CENSUS_ROWS \
                and g.goid not in fresh:
            row(g.goid, key)
    for goid, key in states.items():
        if len(out) >= CENSUS_ROWS:
            break
        if not key >> 32 and goid not in fresh:
            row(goid, key)
    sched.census_views = fresh
    return tuple(out)


def _site_words(site: tuple[str, ...]) -> tuple[str, str]:
    """(start function, creation site) of a go site's frames (capture/gosites.py)."""
    if len(site) != 3:
        return "", ""
    return site[0], f"{site[1]} {site[2]}" if site[2] else site[1]
