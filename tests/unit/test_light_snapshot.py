"""The headless printer's light snapshots (Model.snapshot(light=True): no findings, no
kernel views, no P timelines) say the same interval lines as full ones, on every committed
recording."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from gmpmon.findings.engine import snapshot_with_findings
from gmpmon.interval import interval_line
from gmpmon.model import Model
from gmpmon.record import read_recording

DATA = Path(__file__).resolve().parent.parent / "data"
RECORDINGS = sorted(DATA.glob("*.gmp"))


def lines(path: Path, light: bool) -> list[str]:
    """An interval line after each batch (the live printer takes one a second), and one
    after the model's flush at the end."""
    rec = read_recording(str(path))
    model = Model(rec.header)
    out: list[str] = []
    prev = None
    for batch in [*rec, None]:
        if batch is None:
            model.flush()
        elif batch.events:
            model.feed(batch)
        else:
            continue
        snap = model.snapshot(light=True) if light else snapshot_with_findings(model)
        out.append(interval_line(snap, prev))
        prev = snap
    return out


@pytest.mark.parametrize("path", RECORDINGS, ids=[p.stem for p in RECORDINGS])
def test_light_snapshots_say_the_same_lines(path: Path) -> None:
    full = lines(path, light=False)
    assert len(full) >= 2, f"{path.name}: too short for lines"
    assert lines(path, light=True) == full


def test_a_light_snapshot_has_no_kernel_view_no_findings_no_timelines() -> None:
    rec = read_recording(str(DATA / "kernel-cpuprof.gmp"))
    model = Model(rec.header)
    for batch in rec:
        model.feed(batch)
    full = snapshot_with_findings(model)
    light = model.snapshot(light=True)
    assert full.kernel is not None and full.findings
    assert light.kernel is None and light.findings == ()
    assert light.sched_latency == full.sched_latency
    # the Ps as the full snapshot has them, but for their timelines (no line shows them)
    assert any(p.timeline for p in full.procs)
    assert all(p.timeline == () for p in light.procs)
    assert light.procs == tuple(dataclasses.replace(p, timeline=()) for p in full.procs)
