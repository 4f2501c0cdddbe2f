"""The Goroutines table's rows: the census's goroutines in the census's states (issue 27).

- a recording of Prometheus under load, default mode: after every census walk the model's
  per-goroutine states (CENSUS_G, told only when they change) add up to the walk's own counts
  by state and wait reason (CENSUS_STATE), goroutine for goroutine;
- the model: a state told, changed and gone; system goroutines left out; the probes' numbers
  joined where they saw the goroutine and marked unmeasured where not;
- a recording made before the census told states has no census rows (the table lists the
  probes' goroutines and says so).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path

from gmpmon.binary.table import G_STATUS_BASE
from gmpmon.events import CENSUS_G_STATE, GO_SITE_BASE, Batch, Kind
from gmpmon.model import Model
from gmpmon.model.snapshot import GState, Snapshot
from gmpmon.recread import read_recording
from tests.unit.test_model_scenarios import CHANRECV, SLEEP, ev, header

DATA = Path(__file__).resolve().parents[1] / "data"


def census_counts(snap: Snapshot) -> Counter[tuple[str, str]]:
    assert snap.runtime is not None and snap.runtime.census is not None
    return Counter({(r.state, r.reason): r.count for r in snap.runtime.census.rows
                    if not r.system})


def test_after_every_walk_the_rows_are_the_census() -> None:
    rec = read_recording(str(DATA / "prometheus-wrk-default.gmp"))
    assert rec.header.mode == "default"
    model = Model(rec.header)
    walks: list[dict[int, tuple[str, str]]] = []
    told: list[set[int]] = []
    telling: set[int] = set()  # user goroutines told since the last walk ended
    for batch in rec:
        model.feed(batch)
        telling |= {e[4] for e in batch.events
                    if e[1] == Kind.CENSUS_G and e[5] and not (e[6] >> 32) & 1}
        if not any(e[1] == Kind.CENSUS_END for e in batch.events):
            continue
        model.flush()
        snap = model.snapshot()
        rows = snap.census_goroutines
        assert rows is not None and snap.runtime is not None and snap.runtime.census
        c = snap.runtime.census
        assert len(rows) == len({g.goid for g in rows}) == c.goroutines > 0, c.seq
        assert Counter((g.census_state, g.wait_reason) for g in rows) == census_counts(snap)
        assert c.seq == len(walks) + 1
        walks.append({g.goid: (g.census_state, g.wait_reason) for g in rows})
        told.append(telling)
        telling = set()
    assert len(walks) >= 4
    # Each walk told the goroutines that are new or whose state changed, and only those; the
    # states moved between walks (a server under load) and the rows followed them.
    for before, after, said in zip(walks, walks[1:], told[1:], strict=False):
        changed = {g for g, st in after.items() if before.get(g) != st}
        assert said == changed, (said ^ changed)
        assert any(g in before for g in changed), changed


def test_the_model_keeps_each_goroutines_newest_census_state() -> None:
    def key(status: str, reason: int = 0, system: bool = False) -> int:
        return (G_STATUS_BASE.index(status) | reason << 16 | int(system) << 32
                | CENSUS_G_STATE)

    site = GO_SITE_BASE + 1
    hdr = dataclasses.replace(header("full"), g_status=G_STATUS_BASE)
    model = Model(hdr)
    model.feed(Batch([], {site: ("main.worker", "main.main", "demo/main.go:181")}))
    model.feed(Batch([
        ev(0, Kind.CENSUS_G, g=10, a0=site, a1=key("waiting", CHANRECV)),
        ev(0, Kind.CENSUS_G, g=11, a0=site, a1=key("runnable")),
        ev(0, Kind.CENSUS_G, g=12, a0=site, a1=key("waiting", SLEEP)),
        ev(0, Kind.CENSUS_G, g=2, a0=site, a1=key("waiting", CHANRECV, system=True)),
        ev(1, Kind.GO_CREATE, p=0, g=13, a0=11),  # seen by a probe, not yet by the census
        ev(2, Kind.EXECUTE, p=1, g=11),
        ev(3, Kind.PARK, p=1, g=11, a0=SLEEP),
        ev(5, Kind.CENSUS_G, g=11, a0=site, a1=key("waiting", SLEEP)),  # the next walk
        ev(5, Kind.CENSUS_G, g=12, a0=0),  # gone
    ]))
    model.flush()
    rows = {g.goid: g for g in model.snapshot().census_goroutines or ()}
    assert sorted(rows) == [10, 11]  # 12 left, 2 is the runtime's, 13 not walked yet
    g10, g11 = rows[10], rows[11]
    assert (g10.state, g10.census_state, g10.wait_reason) == (GState.WAITING, "waiting",
                                                              "chan receive")
    assert not g10.probed and g10.start == "main.worker"
    assert (g11.state, g11.wait_reason, g11.probed) == (GState.WAITING, "sleep", True)
    assert (g11.p, g11.executes, g11.since) == (1, 1, ev(3, Kind.PARK)[0])  # the probes'
    # The next snapshot follows what changed since (its rows are made again only then).
    model.feed(Batch([
        ev(6, Kind.READY, g=11, a1=SLEEP),
        ev(7, Kind.EXECUTE, p=0, g=11),
        ev(8, Kind.CENSUS_G, g=10, a0=site, a1=key("runnable")),
        ev(8, Kind.CENSUS_G, g=11, a0=site, a1=key("running")),
    ]))
    model.flush()
    again = {g.goid: g for g in model.snapshot().census_goroutines or ()}
    assert again[10] is not g10 and (again[10].census_state, again[10].wait_reason) == (
        "runnable", "")
    assert (again[11].census_state, again[11].p, again[11].executes) == ("running", 0, 2)
    assert again[11].since == ev(7, Kind.EXECUTE)[0]  # the probes saw it start running
    model.feed(Batch([ev(9, Kind.CENSUS_G, g=30, a0=site, a1=key("syscall"))]))
    model.flush()
    last = {g.goid: g for g in model.snapshot().census_goroutines or ()}
    assert last[10] is again[10] and sorted(last) == [10, 11, 30]  # unchanged: the same row


def test_a_recording_whose_census_told_no_states_has_no_census_rows() -> None:
    rec = read_recording(str(DATA / "demo-sites.gmp"))
    model = Model(rec.header)
    for batch in rec:
        model.feed(batch)
    model.flush()
    snap = model.snapshot()
    assert snap.runtime is not None and snap.runtime.census is not None
    assert snap.census_goroutines is None and snap.goroutines
