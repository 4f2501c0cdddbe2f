"""Every total from its in-kernel counter (issue 30), on recordings gmpmon made.

spawn-counters.gmp (tests/data/README.md: `spawn -n 1000`, full mode) carries the COUNTER
tables the probe handlers add to (GO_START, GO_CREATE, GO_EXIT, SYS_ENTER, ...): thinning its
per-event records as a full reader queue does (capture/pipeline.py) changes no total, the
counter and the per-event records of one total are never both added, and "exact" is said
only of what is. spawn.gmp, made before the counters, still counts from its records.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gmpmon.capture.pipeline import thin
from gmpmon.events import Batch, Stage
from gmpmon.export.json import summary
from gmpmon.model import Model
from gmpmon.model.counts import Lifecycle
from gmpmon.model.snapshot import Snapshot
from gmpmon.model.thinning import fidelity, thinning
from gmpmon.record import read_recording
from gmpmon.report import text_report

DATA = Path(__file__).resolve().parents[1] / "data"
TOTALS = ("goroutine_starts", "goroutines_created", "goroutines_exited", "syscalls",
          "park_count", "sched_latency")


def replay(name: str, thinned: bool = False) -> Model:
    r = read_recording(str(DATA / name))
    m = Model(r.header)
    for b in r:
        if thinned:  # every batch, as a queue that never drains would
            b = Batch(thin(b.events, Stage.READER_QUEUE)[0], b.stacks)
        m.feed(b)
    m.flush()
    return m


def totals(s: Snapshot) -> dict[str, Any]:
    return {
        "starts": {p.id: p.executes for p in s.procs},
        "created": s.goroutines_created, "exited": s.goroutines_exited,
        "syscalls": s.syscalls, "syscall_exits": s.syscall_exits, "handoffs": s.handoffs,
        "preempted": s.preempted, "gosched": s.gosched, "requests": s.preempt_requested,
        "parks": {r.reason: r.count for r in s.park_reasons},
        "latency_samples": s.sched_latency.count,
        "steals": (s.steals.attempts, s.steals.count, s.steals.goroutines),
        "stw": (s.stw_count, s.stw_total_ns, s.stw_reasons),
    }


def test_thinning_every_per_event_record_changes_no_total() -> None:
    whole, thinned = replay("spawn-counters.gmp").snapshot(), \
        replay("spawn-counters.gmp", thinned=True).snapshot()
    assert whole.goroutines_created == 1000 == whole.goroutines_exited  # spawn -n 1000
    assert sum(p.executes for p in whole.procs) >= 1000
    assert whole.syscalls >= 1
    assert thinned.dropped["reader_queue"] >= 4000  # the executes, creations, exits...
    assert totals(thinned) == totals(whole)
    for name in TOTALS:
        assert whole.sources[name] == thinned.sources[name] == "counters", name


def test_a_counter_and_its_records_are_never_both_added() -> None:
    m = replay("spawn-counters.gmp")
    s = m.snapshot()
    life = next(p for p in m.parts if isinstance(p, Lifecycle))
    # nothing was lost: both sides saw the 1000, and the total is one of them, not the sum
    assert life.created.events == life.created.kernel == {0: 1000}
    assert s.goroutines_created == 1000
    events_side = sum(pp.executes for pp in m.sched.procs.values())
    kernel_side = sum(pp.starts_counter for pp in m.sched.procs.values())
    assert events_side == kernel_side == sum(p.executes for p in s.procs)
    assert sum(m.latency.hist.events) == sum(m.latency.hist.kernel) == s.sched_latency.count


def test_a_recording_made_before_the_counters_counts_from_its_records() -> None:
    s = replay("spawn.gmp").snapshot()
    assert s.goroutines_created == 1000 == s.goroutines_exited
    assert s.sources["goroutines_created"] == s.sources["goroutine_starts"] == "events"
    assert sum(p.executes for p in s.procs) >= 1000
    assert fidelity(s) == "exact" and summary(s)["window"] == "exact"


def test_exact_is_said_only_of_the_counts_when_records_were_thinned() -> None:
    whole = replay("spawn-counters.gmp").snapshot()
    assert not thinning(whole).thinned
    assert fidelity(whole) == "exact"
    assert "(exact)" in text_report(whole).splitlines()[0]
    s = replay("spawn-counters.gmp", thinned=True).snapshot()
    t = thinning(s)
    assert t.thinned and t.counts_whole and t.since_s is not None
    assert fidelity(s) == "counts exact; thinned"
    doc = summary(s)
    assert doc["window"] == "thinned"
    assert doc["events"]["thinned"]["counts"] == "counters"
    assert doc["events"]["thinned"]["records"] == s.dropped["reader_queue"]
    report = text_report(s)
    assert "per-event detail thinned: " in report
    for ln in report.splitlines():
        assert "exact" not in ln.replace("counts exact; thinned", "").lower(), ln
    # the same thinning where some counts come from records (a recording made before the
    # counters): nothing is exact
    old = replay("spawn.gmp", thinned=True).snapshot()
    assert fidelity(old) == "thinned; counts short"
    assert "exact" not in text_report(old).lower()


def test_the_tui_header_says_the_thinning_beside_the_counts() -> None:
    from gmpmon.tui.widgets.status import StatusHeader

    for thinned, said in ((False, None), (True, "counts exact; thinned 4,033/4,036")):
        m = replay("spawn-counters.gmp", thinned=thinned)
        h = StatusHeader(m.header)
        h.snapshot = m.snapshot()
        text = str(h.render())
        if said is None:
            assert "thinned" not in text and "exact" not in text
        else:
            assert said in text, text
