"""Snapshots are built 4 times a second, so the views keep what they built between them:
KernelPart.view (gmpmon/model/kernel.py), the findings' digests of the on-CPU profile
(gmpmon/findings/kernel_evidence.py) and the P timelines' Spans (model/view.py
closed_spans). Each must give exactly what a rebuild from scratch gives: the references below
are the straightforward computations (the code before the incremental one), run on the same
model's raw tables after every batch of real recordings and of a seeded stream made to hit
every edge (late samples, the profile's key cap, the span cap, an earlier instant, the
sampler turning off)."""

from __future__ import annotations

import itertools
import random
from pathlib import Path
from typing import Any

import pytest

from gmpmon.events import (
    SAMPLE_G0,
    SAMPLE_GO,
    SAMPLE_KERNEL,
    SAMPLE_NOT_GO,
    STACK_ID_BASE,
    Batch,
    Header,
    Kind,
)
from gmpmon.findings import kernel_evidence as kev
from gmpmon.model import Model
from gmpmon.model import kernel as km
from gmpmon.model.kernel import KernelPart, user_function
from gmpmon.model.kernelview import GoroutineCpu, KernelView, own_frame
from gmpmon.model.values import PState, Span
from gmpmon.model.view import closed_spans
from gmpmon.record import read_recording

DATA = Path(__file__).resolve().parent.parent / "data"
MS = 1_000_000


# ---------------------------------------------------------------- the reference


def reference(part: KernelPart, now: int) -> dict[str, Any]:
    """The sample blocks of a KernelView computed from the part's raw tables."""
    timeline = {
        p: tuple(Span(s, min(e, max(now, s)), PState.RUNNING if g else PState.SEARCHING, g)
                 for s, e, g in spans)
        for p, spans in sorted(part._spans.items())
    }
    gs = sorted(part.by_g.items(), key=lambda kv: (-kv[1][0], kv[0]))[:km.TOP_GOROUTINES]
    per_g = []
    for goid, (n, pbits) in gs:
        st = part.g_stacks.get(goid, {})
        sid = max(st.items(), key=lambda kv: (kv[1], -kv[0]))[0] if st else 0
        procs = tuple(i for i in range(63) if pbits >> i & 1)
        per_g.append(GoroutineCpu(goid, n, n * part.period_ns,
                                  user_function(part.stacks.get(sid, ())), procs))
    return {
        "timeline": timeline,
        "cpu_by_goroutine": tuple(per_g),
        "profile": tuple(sorted((*k, n) for k, n in part.profile.items())),
    }


def ref_goroutine_stacks(kern: KernelView) -> dict[int, tuple[int, tuple[str, ...]]]:
    per: dict[tuple[int, int], int] = {}
    for sid, goid, _p, outcome, n in kern.profile:
        if goid and outcome in (SAMPLE_GO, SAMPLE_G0) and own_frame(kern.stacks.get(sid, ())):
            per[(goid, sid)] = per.get((goid, sid), 0) + n
    best: dict[int, tuple[int, tuple[str, ...]]] = {}
    for (goid, sid), n in sorted(per.items()):
        cur = best.get(goid)
        if cur is None or n > cur[0]:
            best[goid] = (n, kern.stacks[sid])
    return best


def ref_outside(kern: KernelView) -> dict[tuple[str, ...], int]:
    sites: dict[tuple[str, ...], int] = {}
    for sid, _goid, _p, outcome, n in kern.profile:
        if outcome == SAMPLE_NOT_GO:
            stack = kern.stacks.get(sid, ())
            if stack:
                sites[stack] = sites.get(stack, 0) + n
    return sites


def ref_search(kern: KernelView) -> tuple[int, int]:
    """(search, run) samples: g0 in findRunnable; goroutines in user mode; kernel mode by the
    user stack (findRunnable: search, a goroutine's from runtime.goexit: run)."""
    search = run = 0
    for sid, _goid, _p, outcome, n in kern.profile:
        stack = kern.stacks.get(sid, ())
        finding = any(f.startswith("runtime.findRunnable") for f in stack)
        if outcome == SAMPLE_G0:
            search += n * finding
        elif outcome == SAMPLE_GO:
            run += n
        elif outcome == SAMPLE_KERNEL:
            if finding:
                search += n
            elif any(f in ("runtime.goexit", "runtime.goexit.abi0") for f in stack):
                run += n
    return search, run


def check(model: Model, rnd: random.Random) -> int:
    """The model's KernelView now against the reference; returns the profile's size."""
    part = next(p for p in model.parts if isinstance(p, KernelPart))
    now = max(model.applied_ts, 0)
    kern = part.view(now)
    if kern is None:
        return 0
    ref = reference(part, now)
    assert kern.timeline == ref["timeline"]
    assert kern.cpu_by_goroutine == ref["cpu_by_goroutine"]
    assert kern.profile == ref["profile"]
    # The findings' digests against the whole profile.
    best = ref_goroutine_stacks(kern)
    assert {g: kev.goroutine_stack(kern, g) for g in best} == best
    goids = {g for _s, g, *_r in kern.profile}
    assert all(kev.goroutine_stack(kern, g) is None for g in goids - best.keys())
    sites = ref_outside(kern)
    if kern.samples.total:
        want = list(reversed(max(sites.items(), key=lambda kv: (kv[1], kv[0]))[0]))[:10] \
            if sites else None
        assert kev.outside_go(kern).get("outside_go_stack") == want
    if kern.samples.period_ns:
        assert kev.search_samples(kern)[:2] == ref_search(kern)
    some = set(rnd.sample(sorted(goids), min(len(goids), 5)))
    got = kev.syscall_names(kern, some)
    ref_sites: dict[tuple[str, ...], int] = {}
    for g, (n, stack) in best.items():
        if g in some:
            ref_sites[stack] = ref_sites.get(stack, 0) + n
    if ref_sites:
        stack, n = max(ref_sites.items(), key=lambda kv: (kv[1], kv[0]))
        assert (got["syscall_stack"], got["syscall_site_samples"]) == \
            (list(reversed(stack))[:10], n)
    else:
        assert "syscall_stack" not in got
    rows: list[dict[str, Any]] = [{"goid": g} for g in sorted(some)]
    ref_rows: list[dict[str, Any]] = [dict(r) for r in rows]
    kev.name_goroutines(kern, rows)
    long_fn = {r.goid: (r.function, r.stack) for r in reversed(kern.long_running)
               if own_frame(r.stack)}
    for row in ref_rows:
        fn, stack = long_fn.get(row["goid"], ("", ()))
        if not stack and row["goid"] in best:
            stack = best[row["goid"]][1]
        if stack:
            fn = own_frame(stack) or fn
        if fn:
            row["function"] = fn
        if stack:
            row["stack"] = list(reversed(stack))[:10]
    assert rows == ref_rows
    return len(kern.profile)


# ---------------------------------------------------------------- real recordings


@pytest.mark.parametrize("name", ["kernel-cpuprof.gmp", "demo-sites.gmp"])
def test_view_after_every_batch_of_a_recording_equals_a_rebuild(name: str) -> None:
    rec = read_recording(str(DATA / name))
    model = Model(rec.header)
    rnd = random.Random(1)
    views = 0
    for batch in rec:
        model.feed(batch)
        check(model, rnd)
        views += 1
    model.flush()
    assert check(model, rnd) > 20 and views > 10


# ---------------------------------------------------------------- a stream made for the edges


STACKS = {
    STACK_ID_BASE + 1: ("runtime.goexit", "main.main", "main.work"),
    STACK_ID_BASE + 2: ("runtime.goexit", "main.worker", "runtime.memmove"),
    STACK_ID_BASE + 3: ("runtime.mstart", "runtime.schedule", "runtime.findRunnable",
                        "runtime.netpoll"),
    STACK_ID_BASE + 4: ("runtime.goexit", "runtime.gcBgMarkWorker"),
    STACK_ID_BASE + 5: ("[unknown 0x1]", "cgo.call"),
    STACK_ID_BASE + 6: ("runtime.goexit", "main.worker", "sync.(*Mutex).Lock"),
    STACK_ID_BASE + 7: ("runtime.goexit", "main.worker", "main.hash"),
}


def sample(ts: int, p: int, goid: int, outcome: int, sid: int) -> tuple[int, ...]:
    return (ts, Kind.CPU_SAMPLE, p, 100 + p, goid, outcome | (sid << 32), 0)


def stream(seed: int, n: int) -> list[Batch]:
    rnd = random.Random(seed)
    sids = [0, *STACKS]
    batches, ts = [], 1_000 * MS
    first = True
    while n > 0:
        ev = []
        for _ in range(rnd.randint(1, 40)):
            # Mostly 1 ms apart per P, sometimes a gap (ends spans and runs), sometimes late.
            ts += rnd.choice((500_000, 1_000_000, 1_000_000, 1_000_000, 7 * MS, 13))
            t = ts - rnd.randint(0, 12 * MS) if rnd.random() < 0.05 else ts  # > reorder_ns
            p = rnd.randint(0, 2)
            outcome = rnd.choice((SAMPLE_GO, SAMPLE_GO, SAMPLE_GO, SAMPLE_G0, SAMPLE_NOT_GO,
                                  SAMPLE_KERNEL, 7))
            goid = rnd.choice((0, rnd.randint(1, 8), rnd.randint(1, 400)))
            ev.append(sample(t, p, goid, outcome, rnd.choice(sids)))
            n -= 1
        batches.append(Batch(ev, dict(STACKS) if first else {}))
        first = False
    return batches


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_view_equals_a_rebuild_at_every_edge(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(km, "MAX_PROFILE", 300)  # the "other" row fills
    monkeypatch.setattr(km, "MAX_SPANS", 64)  # spans fall off the left
    monkeypatch.setattr(km, "_REBUILD", 20)  # both ways of updating the sorted rows
    monkeypatch.setattr(km, "TOP_GOROUTINES", 7)
    hdr = Header(pid=1, exe="x", go_version="go1.27.3", gomaxprocs=3, mode="sample",
                 start_ns=0, wall_start=0.0, wait_reasons=("",))
    model = Model(hdr)
    part = next(p for p in model.parts if isinstance(p, KernelPart))
    rnd = random.Random(seed)
    sizes = []
    for i, batch in enumerate(stream(seed, 6000)):
        model.feed(batch)
        if rnd.random() < 0.7:
            sizes.append(check(model, rnd))
        if i % 37 == 5:
            # An instant before the last view's: what was settled must not be reused.
            now = max(model.applied_ts - rnd.randint(0, 2 * MS), 0)
            kern = part.view(now)
            assert kern is not None and kern.timeline == reference(part, now)["timeline"]
    model.flush()
    sizes.append(check(model, rnd))
    assert max(sizes) == 300 and model.late_events > 0  # the key cap held
    assert part.profile.get((0, 0, -1, SAMPLE_NOT_GO), 0) > 0
    assert any(len(s) == 64 for s in part._spans.values())
    # The sampler turns off: everything sample-derived goes, the digests with it.
    model.feed(Batch([(model.applied_ts + 1, Kind.SAMPLER_OFF, -1, 0, 0, 1, 1000)], {}))
    model.flush()
    kern = part.view(model.applied_ts)
    assert kern is not None and not (kern.profile or kern.timeline or kern.cpu_by_goroutine)
    assert not (kern.own_stacks or kern.not_go_sites or kern.search_samples or kern.run_samples)


# ---------------------------------------------------------------- the P timelines (view.py)


@pytest.mark.parametrize("name", ["demo-default.gmp", "demo-sample.gmp", "wide64.gmp",
                                  "spawn.gmp", "gc.gmp"])
def test_p_timeline_spans_after_every_batch_equal_a_rebuild(name: str) -> None:
    rec = read_recording(str(DATA / name))
    # Few spans per view and a short window: spans leave by the view's bound, by the
    # window's cutoff and by the timeline's own bound (what a Snapshot carries: beyond, the
    # oldest quarter is folded into the P's buckets) while the views go on.
    model = Model(rec.header, window_ns=300 * MS, max_spans=1_000, snapshot_spans=128)
    keep = 64
    pstates = tuple(PState)
    compared = 0
    for batch in rec:
        model.feed(batch)
        cutoff = max(model.applied_ts, 0) - model.window_ns
        for pp in model.sched.procs.values():
            tl = pp.timeline
            last = list(itertools.islice(tl, max(0, len(tl) - keep), None))
            want = [Span(s, t, pstates[st], gid) for s, t, st, gid in last if t >= cutoff]
            assert closed_spans(pp, keep, cutoff) == want
            compared += len(want)
    assert compared > 200
