"""Flight-recorder dumps into a --dump-dir someone else can write to: a name planted there
(a symlink, dangling or not, a file) is skipped and said, never replaced or written
through, and the session goes on to the next dump; so is a dump that cannot be written to
its end. One planted symlink used to stop the whole capture. `gmpmon attach` itself, with
symlinks planted where its dumps go: tests/integration/test_hostile_dumps.py."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from gmpmon.capture.triggers import parse_trigger
from gmpmon.dumps import DumpKeeper, dump_name
from gmpmon.events import Batch, Kind
from gmpmon.record import read_recording

DATA = Path(__file__).resolve().parents[1] / "data"
REPO = Path(__file__).resolve().parents[2]


def trigger_batch(ts: int, burst_ns: int = 1_000_000) -> Batch:
    return Batch([(ts - 10, int(Kind.P_SAMPLE), 0, 1, 1, 2, 3),
                  (ts, int(Kind.TRIGGER), -1, 0, 0, burst_ns, 0)], {})


def two_triggers(keeper: DumpKeeper, t1: int, t2: int) -> None:
    for t in (t1, t2):
        keeper.feed(trigger_batch(t), {})
        keeper.feed(Batch([(t + 900_000_000, int(Kind.P_SAMPLE), 0, 1, 1, 2, 3)], {}), {})
    keeper.close()


def test_a_planted_name_is_skipped_and_the_next_dump_is_written(tmp_path: Path) -> None:
    header = read_recording(str(DATA / "gc.gmp")).header
    spec = parse_trigger("sigusr1")
    keeper = DumpKeeper(header, [spec], str(tmp_path))
    t1 = header.start_ns + 1_000_000_000
    t2 = t1 + 2_000_000_000
    t3 = t2 + 2_000_000_000
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    planted = tmp_path / dump_name(header, t1, spec)
    planted.symlink_to(victim)
    dangling = tmp_path / dump_name(header, t2, spec)
    dangling.symlink_to(tmp_path / "made-through-the-link")

    two_triggers(keeper, t1, t2)
    keeper.feed(trigger_batch(t3), {})
    keeper.feed(Batch([(t3 + 900_000_000, int(Kind.P_SAMPLE), 0, 1, 1, 2, 3)], {}), {})
    keeper.close()

    assert victim.read_text() == "keep me" and os.path.islink(planted)
    assert os.path.islink(dangling) and not (tmp_path / "made-through-the-link").exists()
    notes = keeper.take_notes(final=True)
    assert f"trigger sigusr1 fired; dump {planted} already exists: skipped (not overwritten)" \
        in notes, notes
    assert any(f"dump {dangling} already exists: skipped" in n for n in notes), notes
    assert notes[-1] == f"dumps in {tmp_path}: 1 written, 2 skipped", notes
    assert keeper.take_notes(final=True) == []  # said once
    third = tmp_path / dump_name(header, t3, spec)
    assert keeper.written == [str(third)], keeper.written
    assert keeper.skipped == [str(planted), str(dangling)]
    rec = read_recording(str(third))
    kinds = [e[1] for b in rec for e in b.events]
    assert int(Kind.TRIGGER) in kinds and rec.complete


def test_a_planted_file_is_not_replaced(tmp_path: Path) -> None:
    header = read_recording(str(DATA / "gc.gmp")).header
    spec = parse_trigger("sigusr1")
    keeper = DumpKeeper(header, [spec], str(tmp_path))
    t1 = header.start_ns + 1_000_000_000
    planted = tmp_path / dump_name(header, t1, spec)
    planted.write_text("someone else's")
    inode = planted.stat().st_ino
    two_triggers(keeper, t1, t1 + 2_000_000_000)
    assert planted.read_text() == "someone else's" and planted.stat().st_ino == inode
    assert len(keeper.written) == 1 and keeper.skipped == [str(planted)]


# Run in a child: RLIMIT_FSIZE (writes past it fail with EFBIG once SIGXFSZ is ignored)
# would also cut pytest's own files.
FULL = textwrap.dedent("""
    import resource, signal, sys
    from gmpmon.capture.triggers import parse_trigger
    from gmpmon.dumps import DumpKeeper
    from gmpmon.events import Batch, Kind
    from gmpmon.record import read_recording

    rec = read_recording(sys.argv[1])
    batches = list(rec)
    keeper = DumpKeeper(rec.header, [parse_trigger("sigusr1")], sys.argv[2])
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (8192, resource.RLIM_INFINITY))
    for b in batches:  # the look-back: every batch of the recording, ~30 KB as a dump
        keeper.feed(b, {})
    end = batches[-1].events[-1][0]
    for t in (end + 1000, end + 2_000_000_000):
        keeper.feed(Batch([(t, int(Kind.TRIGGER), -1, 0, 0, 1_000_000, 0)], {}), {})
        keeper.feed(Batch([(t + 900_000_000, int(Kind.P_SAMPLE), 0, 1, 1, 2, 3)], {}), {})
    keeper.close()
    print("\\n".join(keeper.take_notes(final=True)))
    print("written", *keeper.written)
""")


def test_a_dump_that_cannot_be_written_is_given_up_and_the_next_is_written(
        tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-c", FULL, str(DATA / "gc.gmp"), str(tmp_path)],
                       capture_output=True, text=True, timeout=60, cwd=REPO,
                       env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert r.returncode == 0 and not r.stderr, r.stderr
    lines = r.stdout.splitlines()
    assert any(" given up: File too large" in ln for ln in lines), lines
    assert lines[-2].endswith(": 1 written, 1 skipped"), lines
    written = lines[-1].split()[1:]
    assert len(written) == 1, lines
    rec = read_recording(written[0])
    # Its look-back holds the first trigger too (fired 2 s before, its dump given up).
    assert [e[1] for b in rec for e in b.events].count(int(Kind.TRIGGER)) == 2 and rec.complete
