"""Replay: same batches -> same summary as the live model; seekable source; the command."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from gmpmon import recformat
from gmpmon.cli import main
from gmpmon.events import Batch
from gmpmon.export.json import summary
from gmpmon.findings.engine import snapshot_with_findings
from gmpmon.model import Model
from gmpmon.record import RecordingWriter, read_recording
from gmpmon.replay import ReplaySource, replay_all
from gmpmon.source import SeekControl, SnapshotSource
from tests.unit.test_model_scenarios import T0, header
from tests.unit.test_report import busy_run

STACKS = {i: ("main.main", f"main.worker{i}", "sync.(*Mutex).Lock") for i in range(3)}


def live_batches() -> list[Batch]:
    # stretched x10 (40 ms): longer than the model's 5 ms reorder window
    events = [(T0 + (e[0] - T0) * 10, *e[1:]) for e in busy_run(4)]
    out = [Batch(events[i : i + 150]) for i in range(0, len(events), 150)]
    out[0].stacks.update(STACKS)
    return out


@pytest.fixture()
def recorded(tmp_path: Path) -> tuple[Path, dict[str, object]]:
    """A 'live' run: batches go to the model and the recording, as session.py does."""
    path = tmp_path / "run.gmp"
    model = Model(header(gomaxprocs=4))
    with RecordingWriter(str(path), model.header) as w:
        for b in live_batches():
            model.feed(b)
            w.write(b)
    model.flush()
    return path, summary(snapshot_with_findings(model))


def test_replay_summary_equals_live_summary(recorded: tuple[Path, dict[str, object]]) -> None:
    path, live = recorded
    assert summary(replay_all(read_recording(str(path)))) == live


class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_replay_source_plays_pauses_steps_and_seeks(
    recorded: tuple[Path, dict[str, object]],
) -> None:
    path, live = recorded
    clock = FakeClock()
    src = ReplaySource(str(path), autostart=False, clock=clock)
    assert isinstance(src, SnapshotSource) and isinstance(src, SeekControl)
    assert src.live is False
    start, pos, end = src.position()
    assert pos == start and end > start
    first = src.latest()
    assert first is not None and first.events_total <= 1
    # play 10 ms of wall time at 1x: the recording is ~40 ms long
    clock.t += 0.010
    src.tick()
    _, pos1, _ = src.position()
    assert pos1 == start + 10_000_000
    snap1 = src.latest()
    assert snap1 is not None and 0 < snap1.events_total < live["events"]["total"]  # type: ignore[index]
    assert "playing" in src.status()
    src.set_paused(True)
    clock.t += 1.0
    src.tick()
    assert src.position()[1] == pos1 and src.paused() and "paused" in src.status()
    src.step(5_000_000)
    assert src.position()[1] == pos1 + 5_000_000
    src.step(-10_000_000)  # back: re-fed from the start
    assert src.position()[1] == pos1 - 5_000_000
    back = src.latest()
    assert back is not None and back.events_total < snap1.events_total
    src.seek(1.0)
    assert src.position()[1] == end and "end of recording" in src.status()
    final = src.latest()
    assert final is not None and summary(final) == live
    src.seek(0.0)
    assert src.position()[1] == start
    src.close()


def test_replay_source_thread_advances(recorded: tuple[Path, dict[str, object]]) -> None:
    path, live = recorded
    src = ReplaySource(str(path), speed=1000.0, tick_s=0.01)
    try:
        for _ in range(300):
            snap = src.latest()
            if snap is not None and "end" in src.status():
                break
            import time

            time.sleep(0.01)
        assert "end of recording" in src.status()
        final = src.latest()
        assert final is not None and summary(final) == live
    finally:
        src.close()


def test_replay_command_summary_json_and_report(
    recorded: tuple[Path, dict[str, object]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, live = recorded
    out = tmp_path / "s.json"
    assert main(["replay", str(path), "--summary-json", str(out)]) == 0
    assert json.loads(out.read_text()) == json.loads(json.dumps(live))
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o600
    assert capsys.readouterr().out == ""
    assert main(["replay", str(path), "--no-tui"]) == 0
    text = capsys.readouterr().out
    # Not a terminal (#27): the whole report, no line cut at 80 columns.
    from gmpmon.report import text_report

    whole = text_report(snapshot_with_findings_of(path), width=None)
    assert "Scheduling latency" in text and text == whole
    assert max(map(len, text.splitlines())) > 80 >= max(map(len, text_report(
        snapshot_with_findings_of(path)).splitlines()))
    assert main(["replay", str(path), "--no-tui", "--interval", "0.01"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert sum(1 for ln in lines if "grq=" in ln) >= 3


def snapshot_with_findings_of(path: Path):  # type: ignore[no-untyped-def]
    return replay_all(read_recording(str(path)))


def test_replay_command_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bogus = tmp_path / "x.gmp"
    bogus.write_bytes(b"\x89PNG\r\n\x1a\n....")
    assert main(["replay", str(bogus), "--no-tui"]) == 9
    assert main(["replay", str(tmp_path / "none.gmp"), "--no-tui"]) == 9
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and all(line.startswith("gmpmon: ") for line in err)
    assert "not a gmpmon recording" in err[0]


def test_replay_of_truncated_recording_reports_where_it_stopped(
    recorded: tuple[Path, dict[str, object]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, _ = recorded
    data = path.read_bytes()
    cut = tmp_path / "cut.gmp"
    cut.write_bytes(data[: len(data) * 2 // 3])
    assert main(["replay", str(cut), "--no-tui"]) == 0
    captured = capsys.readouterr()
    assert "Scheduling latency" in captured.out
    (line,) = captured.err.splitlines()
    assert "truncated batch" in line and "stopped at byte" in line
    src = ReplaySource(str(cut), autostart=False)
    assert src.error is not None and "stopped at byte" in src.error
    src.seek(1.0)
    assert "end of good batches" in src.status()


def test_seeking_back_from_checkpoints_equals_refeeding(
    recorded: tuple[Path, dict[str, object]],
) -> None:
    path, _live = recorded
    clock = FakeClock()
    with_ck = ReplaySource(str(path), autostart=False, clock=clock, checkpoint_events=300)
    with_ck.seek(1.0)  # forward to the end: checkpoints every ~300 events
    assert len(with_ck._checkpoints) >= 4
    for fraction in (0.9, 0.55, 0.2, 0.75):
        with_ck.seek(fraction)
        fresh = ReplaySource(str(path), autostart=False, clock=clock, checkpoint_events=10**9)
        fresh.seek(fraction)
        assert with_ck.position() == fresh.position()
        a, b = with_ck.latest(), fresh.latest()
        assert a is not None and b is not None
        assert summary(a) == summary(b)
        assert a.procs == b.procs  # timelines too


def test_a_batch_handed_on_in_chunks_replays_and_seeks_as_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch bigger than CHUNK_EVENTS reaches the model a chunk at a time (memory bounded
    whatever the batch): the same summary as the live model fed it whole, and going back to
    a checkpoint taken inside that batch replays from that chunk."""
    monkeypatch.setattr(recformat, "CHUNK_EVENTS", 97)
    events = [e for b in live_batches() for e in b.events]
    path = tmp_path / "one.gmp"
    model = Model(header(gomaxprocs=4))
    with RecordingWriter(str(path), model.header) as w:
        w.write(Batch(events, dict(STACKS)))
    model.feed(Batch(events, dict(STACKS)))
    model.flush()
    rec = read_recording(str(path))
    infos = [info for info, _ in rec.frames()]
    assert len(infos) == -(-len(events) // 97) and {i.offset for i in infos} == {infos[0].offset}
    assert summary(replay_all(rec)) == summary(snapshot_with_findings(model))
    clock = FakeClock()
    with_ck = ReplaySource(str(path), autostart=False, clock=clock, checkpoint_events=300)
    with_ck.seek(1.0)
    assert any(with_ck._frame_chunks[idx] for _, idx, _ in with_ck._checkpoints)
    for fraction in (0.8, 0.3, 0.6):
        with_ck.seek(fraction)
        fresh = ReplaySource(str(path), autostart=False, clock=clock, checkpoint_events=10**9)
        fresh.seek(fraction)
        a, b = with_ck.latest(), fresh.latest()
        assert a is not None and b is not None
        assert summary(a) == summary(b) and a.procs == b.procs
