"""Flight-recorder dumps into a --dump-dir someone else can write to: a name planted there
(a symlink, a file) is skipped and said, never written through, and the session goes on to
the next dump. One planted symlink used to stop the whole capture."""

from __future__ import annotations

import os
from pathlib import Path

from gmpmon.capture.triggers import parse_trigger
from gmpmon.dumps import DumpKeeper, dump_name
from gmpmon.events import Batch, Kind
from gmpmon.record import read_recording

DATA = Path(__file__).resolve().parents[1] / "data"


def trigger_batch(ts: int, burst_ns: int = 1_000_000) -> Batch:
    return Batch([(ts - 10, int(Kind.P_SAMPLE), 0, 1, 1, 2, 3),
                  (ts, int(Kind.TRIGGER), -1, 0, 0, burst_ns, 0)], {})


def test_a_planted_name_is_skipped_and_the_next_dump_is_written(tmp_path: Path) -> None:
    header = read_recording(str(DATA / "gc.gmp")).header
    spec = parse_trigger("sigusr1")
    keeper = DumpKeeper(header, [spec], str(tmp_path))
    t1 = header.start_ns + 1_000_000_000
    t2 = t1 + 2_000_000_000
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    planted = tmp_path / dump_name(header, t1, spec)
    planted.symlink_to(victim)

    keeper.feed(trigger_batch(t1), {})
    keeper.feed(Batch([(t1 + 900_000_000, int(Kind.P_SAMPLE), 0, 1, 1, 2, 3)], {}), {})
    keeper.feed(trigger_batch(t2), {})
    keeper.feed(Batch([(t2 + 900_000_000, int(Kind.P_SAMPLE), 0, 1, 1, 2, 3)], {}), {})
    keeper.close()

    assert victim.read_text() == "keep me" and os.path.islink(planted)
    assert any(f"dump {planted} already exists: skipped" in n for n in keeper.notes), keeper.notes
    second = tmp_path / dump_name(header, t2, spec)
    assert keeper.written == [str(second)], keeper.written
    rec = read_recording(str(second))
    kinds = [e[1] for b in rec for e in b.events]
    assert int(Kind.TRIGGER) in kinds and rec.complete
