"""The census's wait stacks through the model, the recording, the summary, the folded export
and the goroutine-leak finding (pure: CENSUS_* events in, as capture/census.py sends them)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gmpmon.events import (
    CENSUS_SITE_BASE,
    CENSUS_STACK_BASE,
    NO_P,
    Batch,
    EventTuple,
    Header,
    Kind,
)
from gmpmon.export.folded import LINE_RE, FoldedExporter
from gmpmon.export.json import summary
from gmpmon.findings.context import Context, Thresholds
from gmpmon.findings.engine import evaluate, snapshot_with_findings
from gmpmon.findings.rules_wait import leaking_stacks
from gmpmon.model import Model
from gmpmon.model.snapshot import Snapshot
from gmpmon.record import RecordingWriter, read_recording
from gmpmon.replay import replay_all
from gmpmon.report import text_report

DATA = Path(__file__).resolve().parents[1] / "data"
WAIT_REASONS = ("", "GC assist marking", "IO wait", "chan receive", "sleep", "select")
G_STATUS = ("idle", "runnable", "running", "syscall", "waiting", "moribund", "dead")
CHANRECV, SELECT, WAITING = 3, 5, 4
NS = 1_000_000_000
T0 = 1_000 * NS
LEAK = CENSUS_STACK_BASE + 1
IDLE = CENSUS_STACK_BASE + 2
SITE_LEAK, SITE_IDLE = CENSUS_SITE_BASE + 1, CENSUS_SITE_BASE + 2
STACKS: dict[int, tuple[str, ...]] = {
    LEAK: ("runtime.goexit", "main.handle", "runtime.chanrecv1", "runtime.chanrecv",
           "runtime.gopark"),
    IDLE: ("runtime.goexit", "main.worker", "runtime.selectgo", "runtime.gopark"),
    SITE_LEAK: ("main.serve", "main.handle"),
    SITE_IDLE: ("main.main", "main.worker"),
}


def header() -> Header:
    return Header(pid=42, exe="/bin/target", go_version="go1.27.3", gomaxprocs=2,
                  mode="sample", start_ns=T0, wall_start=0.0, wait_reasons=WAIT_REASONS,
                  g_status=G_STATUS, p_status=("idle", "running"))


def census(ts: int, seq: int, leaked: int, idle: int = 8, wait_s: float = 0.0,
           stacks: bool = True) -> list[EventTuple]:
    """One complete walk: ``leaked`` goroutines parked in main.handle's chan receive (the
    oldest parked ``wait_s``), ``idle`` workers in a select."""
    key_recv = WAITING | CHANRECV << 16
    key_sel = WAITING | SELECT << 16
    out: list[EventTuple] = [
        (ts, Kind.CENSUS_BEGIN, NO_P, 0, 0, seq, leaked + idle + 4),
        (ts, Kind.CENSUS_STATE, NO_P, 0, 0, key_recv, leaked),
        (ts, Kind.CENSUS_STATE, NO_P, 0, 0, key_sel, idle),
        (ts, Kind.CENSUS_SITE, NO_P, 0, 0, SITE_LEAK, leaked),
        (ts, Kind.CENSUS_SITE, NO_P, 0, 0, SITE_IDLE, idle),
    ]
    if stacks:
        out.append((ts, Kind.CENSUS_STACK, NO_P, SITE_LEAK - CENSUS_SITE_BASE, LEAK, key_recv,
                    leaked))
        if wait_s:
            out.append((ts, Kind.CENSUS_STACK_WAIT, NO_P, leaked // 2,
                        int(leaked // 2 * wait_s / 2 * NS), 0, int(wait_s * NS)))
        out.append((ts, Kind.CENSUS_STACK, NO_P, SITE_IDLE - CENSUS_SITE_BASE, IDLE, key_sel,
                    idle))
    out.append((ts + 1000, Kind.CENSUS_END, NO_P, 0, 1000, leaked + idle + 4, 0))
    return out


def walks(n: int, per_walk: int, *, wait_s: float = 0.0, stacks: bool = True,
          every_s: float = 1.0) -> list[EventTuple]:
    out: list[EventTuple] = []
    for i in range(n):
        ts = T0 + int(i * every_s * NS)
        out += census(ts, i + 1, 10 + per_walk * i, wait_s=wait_s * i / max(n - 1, 1),
                      stacks=stacks)
    return out


def model_of(events: list[EventTuple]) -> Model:
    m = Model(header())
    m.feed(Batch(events, dict(STACKS)))
    m.flush()
    return m


def snap(events: list[EventTuple]) -> Snapshot:
    return snapshot_with_findings(model_of(events))


def finding_ids(events: list[EventTuple], th: Thresholds) -> set[str]:
    m = model_of(events)
    s = m.snapshot()
    found, _ = evaluate(s, m.findings.inputs(s.now), thresholds=th)
    return {f.id for f in found}


def test_groups_by_state_reason_stack_and_creation_site() -> None:
    s = model_of(walks(3, 5, wait_s=4)).snapshot()
    assert s.runtime is not None and s.runtime.census is not None
    groups = s.runtime.census.stacks
    assert groups is not None
    leak, idle = groups
    assert (leak.state, leak.reason, leak.count) == ("waiting", "chan receive", 20)
    assert leak.frames == STACKS[LEAK] and leak.leaf_first[0] == "runtime.gopark"
    assert (leak.creator, leak.start) == ("main.serve", "main.handle")
    assert leak.waited == 10 and leak.wait_max_ns == 4 * NS
    assert (idle.reason, idle.count, idle.waited) == ("select", 8, 0)


def test_a_capture_without_stacks_says_not_measured() -> None:
    s = model_of(walks(3, 5, stacks=False)).snapshot()
    assert s.runtime is not None and s.runtime.census is not None
    assert s.runtime.census.stacks is None
    doc = summary(s)
    assert doc["census"]["wait_stacks"] is None
    assert "wait stacks: not measured" in text_report(s)


def test_summary_and_report_carry_the_top_wait_stacks() -> None:
    s = snap(walks(3, 5, wait_s=4))
    ws = summary(s)["census"]["wait_stacks"]
    assert ws[0] == {
        "state": "waiting", "wait_reason": "chan receive", "count": 20, "waited": 10,
        "wait_sum_ns": 20 * NS, "wait_max_ns": 4 * NS, "created_by": "main.serve",
        "function": "main.handle", "frames": list(reversed(STACKS[LEAK])),
    }
    report = text_report(s)
    assert "where they wait" in report and "created by main.serve (go main.handle)" in report
    assert all(len(line) <= 80 for line in report.splitlines())


@pytest.mark.parametrize(("weight", "leak_value"), [("count", 20), ("wait", 20 * NS)])
def test_folded_waits_are_valid_lines_weighted_by_count_or_wait(
        weight: str, leak_value: int) -> None:
    ex = FoldedExporter(header(), what="waits", weight=weight)
    ex.add(model_of(walks(3, 5, wait_s=4)).snapshot())
    lines = ex.text().splitlines()
    assert all(LINE_RE.match(line) for line in lines), lines
    want = ";".join(STACKS[LEAK]) + f";[chan_receive] {leak_value}"
    assert want in lines
    # by wait time, a group none of which has g.waitsince set weighs nothing
    assert len(lines) == (2 if weight == "count" else 1)


def test_recording_round_trip_keeps_the_stacks(tmp_path: Path) -> None:
    events = walks(4, 5, wait_s=3)
    path = tmp_path / "s.gmp"
    with RecordingWriter(str(path), header()) as w:
        w.write(Batch(events, dict(STACKS)))
    live = summary(snap(events))
    rec = read_recording(str(path))
    model = Model(rec.header)
    replay_all(rec, model=model)
    replayed = summary(snapshot_with_findings(model))
    assert json.dumps(replayed["census"], sort_keys=True) == json.dumps(live["census"],
                                                                        sort_keys=True)


def test_version_1_recordings_still_replay_without_stacks() -> None:
    rec = read_recording(str(DATA / "demo-runtime.gmp"))
    s = replay_all(rec)
    assert s.runtime is not None and s.runtime.census is not None
    assert s.runtime.census.stacks is None


# ---------------------------------------------------------------- goroutine-leak, by stack

def test_a_stack_that_grows_for_minutes_is_a_leak_named_with_its_creation_site() -> None:
    # 2 a walk for 40 walks 5 s apart: +78 in 195 s, far too slow for the gcount series rule
    # (>= 100 in a run); the oldest parked 200 s (g.waitsince).
    s = snap(walks(40, 2, wait_s=200, every_s=5))
    f = {x.id: x for x in s.findings}["goroutine-leak"]
    assert "main.handle" in f.title and "created by main.serve" in f.title
    st = f.evidence["stacks"][0]
    assert st["site"] == "main.handle" and st["wait_reason"] == "chan receive"
    assert st["growth"] == 78 and st["created_by"] == "main.serve"
    assert st["stack"][0] == "runtime.gopark" and st["wait_max_s"] == 200


def test_a_growing_stack_parked_for_seconds_only_is_no_leak_yet() -> None:
    s = snap(walks(40, 2, wait_s=20, every_s=1))  # grows, but followed 39 s, oldest 20 s
    assert "goroutine-leak" not in {x.id for x in s.findings}
    th = Thresholds(leak_stack_wait_ns=10 * NS)  # the threshold is what decides
    assert "goroutine-leak" in finding_ids(walks(40, 2, wait_s=20), th)


def test_a_steady_pool_parked_for_minutes_is_no_leak() -> None:
    s = snap(walks(40, 0, wait_s=600, every_s=5))  # 10 parked for 10 minutes, not growing
    assert "goroutine-leak" not in {x.id for x in s.findings}


# ---------------------------------------------------------------- on real recordings

def test_leak_recording_names_the_growing_stack_and_its_creation_site() -> None:
    """leak-stacks.gmp: main.serve starts 20 main.handle a second, each parked for good on a
    channel nobody sends on (scripts/targets/leak), a GC a second."""
    rec = read_recording(str(DATA / "leak-stacks.gmp"))
    model = Model(rec.header)
    replay_all(rec, model=model)
    s = snapshot_with_findings(model)
    assert s.runtime is not None and s.runtime.census is not None
    top = s.runtime.census.stacks[0] if s.runtime.census.stacks else None
    assert top is not None and top.frames[-1] == "main.handle"
    assert (top.reason, top.creator, top.start) == ("chan receive", "main.serve", "main.handle")
    assert top.waited > 0 and top.wait_max_ns > 5 * NS  # parked across the GCs
    f = {x.id: x for x in s.findings}["goroutine-leak"]
    st = f.evidence["stacks"][0]
    assert (st["site"], st["created_by"], st["wait_reason"]) == (
        "main.handle", "main.serve", "chan receive")
    assert st["growth"] >= 100 and st["rises"] >= 5 and st["falls"] == 0
    # The stack rule by itself: the group grows, but 12 s is not minutes ...
    inputs = model.findings.inputs(s.now)
    ctx = Context(s, inputs, s.latency_attribution)  # type: ignore[arg-type]
    assert leaking_stacks(ctx) == []
    # ... with the wait threshold at 5 s, it is the leak, alone among the groups
    ctx = Context(s, inputs, s.latency_attribution,  # type: ignore[arg-type]
                  Thresholds(leak_stack_wait_ns=5 * NS))
    assert [t.frames[-1] for t in leaking_stacks(ctx)] == ["main.handle"]


def test_demo_recording_has_no_leak_and_valid_wait_flame_lines() -> None:
    rec = read_recording(str(DATA / "demo-stacks.gmp"))
    model = Model(rec.header)
    replay_all(rec, model=model)
    s = snapshot_with_findings(model)
    assert "goroutine-leak" not in {x.id for x in s.findings}
    ex = FoldedExporter(rec.header, what="waits", weight="count")
    ex.add(s)
    lines = ex.text().splitlines()
    assert lines and all(LINE_RE.match(line) for line in lines), lines
    assert "main.worker;[chan_receive] 4" in lines
    assert sum(int(x.rsplit(" ", 1)[1]) for x in lines) == sum(
        w.count for w in s.runtime.census.stacks or () if not w.system)  # type: ignore[union-attr]
