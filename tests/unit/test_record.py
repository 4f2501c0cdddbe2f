"""Recording files: round trip, safety of the output path, damaged and hostile input."""

from __future__ import annotations

import os
import random
import stat
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gmpmon.errors import RecordingError, UsageError
from gmpmon.events import U64_MAX, Batch, EventTuple, Header, Kind
from gmpmon.record import (
    BATCH_FRAME,
    MAGIC,
    RecordingWriter,
    decode_batch,
    encode_batch,
    read_recording,
)

HDR = Header(
    pid=4242,
    exe="/srv/app",
    go_version="go1.22.10",
    gomaxprocs=4,
    mode="default",
    start_ns=5_000,
    wall_start=1_700_000_000.25,
    wait_reasons=("", "GC assist marking", "IO wait", "sleep"),
    stw_reasons=("", "GC mark termination"),
    g_status=("idle", "runnable", "running"),
    p_status=("_Pidle", "_Prunning"),
    duty_window_ms=200,
    duty_period_ms=1000,
    features=("mutex", "steal"),
)


def batches(n: int, per: int, seed: int = 7) -> list[Batch]:
    rnd = random.Random(seed)
    ts = 10**15
    out = []
    for b in range(n):
        ev: list[EventTuple] = []
        for _ in range(per):
            ts += rnd.randint(0, 50_000)
            ev.append(
                (
                    ts,
                    rnd.choice([int(k) for k in Kind]),
                    rnd.randint(-1, 7),
                    rnd.randint(0, 1 << 22),
                    rnd.randint(0, 1 << 40),
                    rnd.choice([0, 1, rnd.randint(0, U64_MAX)]),
                    rnd.choice([0, U64_MAX, rnd.randint(0, 1 << 33)]),
                )
            )
        stacks = {b: ("main.main", f"main.f{b}", "[unknown 0x4011aa]")} if b % 2 else {}
        out.append(Batch(ev, stacks))
    return out


def write(path: Path, bs: list[Batch], close: bool = True) -> RecordingWriter:
    w = RecordingWriter(str(path), HDR, extra={"binary": {"symbols": 3}})
    for b in bs:
        w.write(b)
    if close:
        w.close()
    return w


def test_round_trip_keeps_every_field(tmp_path: Path) -> None:
    bs = batches(5, 300)
    path = tmp_path / "r.gmp"
    write(path, bs)
    rec = read_recording(str(path))
    assert rec.header == HDR
    assert rec.extra == {"binary": {"symbols": 3}}
    assert list(rec) == bs
    assert rec.error is None and rec.stopped_at is None and rec.complete
    assert rec.batches_read == 5
    assert list(rec) == bs  # iterable more than once


def test_the_background_writer_writes_the_same_file(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The live session's writer packs, compresses and writes in a thread of its own: the
    same bytes as the caller's own writes, in order, however far behind it falls (a backlog
    bound of 500 events makes write() wait for it, here at every other batch)."""
    import gmpmon.record as record

    monkeypatch.setattr(record, "BACKLOG_EVENTS", 500)
    bs = batches(40, 300, seed=3)
    write(tmp_path / "a.gmp", bs)
    w = RecordingWriter(str(tmp_path / "b.gmp"), HDR, extra={"binary": {"symbols": 3}},
                        background=True)
    for b in bs:
        w.write(b)
    w.close()
    assert (tmp_path / "a.gmp").read_bytes() == (tmp_path / "b.gmp").read_bytes()
    assert w.batches == 40 and w.events == 40 * 300
    assert list(read_recording(str(tmp_path / "b.gmp"))) == bs


def test_a_background_write_error_is_raised_not_lost(tmp_path: Path) -> None:
    """A failed write in the writer's thread (a full disk) is raised by the next write() or
    by close(), as the caller's own write would have raised it."""
    import errno

    class Full:
        def write(self, data: object) -> int:
            raise OSError(errno.ENOSPC, "No space left on device")

        def close(self) -> None:
            pass

    w = RecordingWriter(str(tmp_path / "r.gmp"), HDR, background=True)
    w._f = Full()  # type: ignore[assignment]
    with pytest.raises(OSError, match="No space"):
        for b in batches(20, 10):
            w.write(b)
        w.close()


def test_file_is_private_and_symlinks_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "r.gmp"
    write(path, batches(1, 3))
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    target = tmp_path / "victim"
    target.write_text("keep me")
    link = tmp_path / "link.gmp"
    link.symlink_to(target)
    with pytest.raises(UsageError, match="symbolic link"):
        RecordingWriter(str(link), HDR)
    assert target.read_text() == "keep me"
    with pytest.raises(UsageError):
        RecordingWriter(str(tmp_path / "no" / "such" / "dir.gmp"), HDR)


def test_unclosed_recording_reads_up_to_the_last_batch(tmp_path: Path) -> None:
    bs = batches(3, 50)
    path = tmp_path / "r.gmp"
    w = write(path, bs, close=False)  # a killed gmpmon never writes the end frame
    try:
        rec = read_recording(str(path))
        assert list(rec) == bs
        assert rec.error is None and not rec.complete
    finally:
        w.close()


def test_truncated_recording_stops_at_the_last_good_batch(tmp_path: Path) -> None:
    bs = batches(4, 200)
    path = tmp_path / "r.gmp"
    write(path, bs)
    data = path.read_bytes()
    rec_full = read_recording(str(path))
    offsets = [info.offset for info, _ in rec_full.frames()]
    cut = offsets[3] + 40  # in the middle of the 4th batch
    path.write_bytes(data[:cut])
    rec = read_recording(str(path))
    assert list(rec) == bs[:3]
    assert rec.stopped_at == offsets[3]
    assert rec.error is not None and "truncated batch 4" in rec.error
    assert str(offsets[3]) in rec.error


def test_corrupted_batch_fails_its_checksum(tmp_path: Path) -> None:
    bs = batches(4, 200)
    path = tmp_path / "r.gmp"
    write(path, bs)
    data = bytearray(path.read_bytes())
    offsets = [info.offset for info, _ in read_recording(str(path)).frames()]
    data[offsets[2] + BATCH_FRAME.size + 10] ^= 0x40
    path.write_bytes(bytes(data))
    rec = read_recording(str(path))
    assert list(rec) == bs[:2]
    assert rec.stopped_at == offsets[2]
    assert rec.error is not None and "checksum" in rec.error


@pytest.mark.parametrize(
    "content",
    [b"", b"GMPMON", b"hello world, not a recording at all", b"\x7fELF" + b"\0" * 60],
)
def test_not_a_recording_is_one_clear_error(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "x.gmp"
    path.write_bytes(content)
    with pytest.raises(RecordingError, match="not a gmpmon recording"):
        read_recording(str(path))


def test_future_format_version_and_bad_header(tmp_path: Path) -> None:
    path = tmp_path / "x.gmp"
    path.write_bytes(MAGIC + struct.pack("<HH", 99, 0))
    with pytest.raises(RecordingError, match="version 99"):
        read_recording(str(path))
    hj = b'{"pid": "nope"}'
    import zlib

    path.write_bytes(MAGIC + struct.pack("<HHII", 1, 0, len(hj), zlib.crc32(hj)) + hj)
    with pytest.raises(RecordingError, match="corrupt recording header"):
        read_recording(str(path))
    with pytest.raises(RecordingError, match="no such file"):
        read_recording(str(tmp_path / "missing.gmp"))
    with pytest.raises(RecordingError, match="directory"):
        read_recording(str(tmp_path))


def test_batch_codec_handles_edges() -> None:
    for b in (
        Batch([], {}),
        Batch([], {3: ("a",)}),
        Batch([(0, 1, -1, 0, 0, 0, 0)]),
        Batch([(U64_MAX, 255, 2**31 - 1, 2**32 - 1, U64_MAX, U64_MAX, U64_MAX)]),
        Batch([(10, 1, 0, 0, 0, 0, 0), (5, 1, -(2**31), 0, 0, 0, 0)]),  # out of order
    ):
        payload, n, _first, _last = encode_batch(b)
        assert decode_batch(payload, n) == b


_SEED_PATH: dict[str, bytes] = {}


def _seed_bytes(tmp: Path) -> bytes:
    if "b" not in _SEED_PATH:
        p = tmp / "seed.gmp"
        write(p, batches(3, 30))
        _SEED_PATH["b"] = p.read_bytes()
    return _SEED_PATH["b"]


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    cut=st.integers(min_value=0, max_value=4000),
    flips=st.lists(st.tuples(st.integers(0, 4000), st.integers(1, 255)), max_size=4),
    junk=st.binary(max_size=64),
)
def test_hostile_recordings_only_raise_recording_error(
    tmp_path: Path, cut: int, flips: list[tuple[int, int]], junk: bytes
) -> None:
    data = bytearray(_seed_bytes(tmp_path))
    for pos, x in flips:
        if pos < len(data):
            data[pos] ^= x
    data = data[: cut if cut < len(data) else len(data)] + junk
    path = tmp_path / "h.gmp"
    path.write_bytes(bytes(data))
    try:
        rec = read_recording(str(path))
    except RecordingError as e:
        assert "\n" not in str(e)
        return
    got = list(rec)  # never raises
    assert len(got) <= 3
    if rec.error is not None:
        assert rec.stopped_at is not None


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.binary(max_size=300))
def test_arbitrary_bytes_after_magic(tmp_path: Path, tail: bytes) -> None:
    path = tmp_path / "a.gmp"
    path.write_bytes(MAGIC + tail)
    try:
        rec = read_recording(str(path))
    except RecordingError:
        return
    list(rec)


def test_recording_started_mid_run_carries_known_stacks(tmp_path: Path) -> None:
    known = {7: ("main.main", "main.hold", "sync.(*Mutex).Lock")}
    path = tmp_path / "mid.gmp"
    late = Batch([(100, int(Kind.MUTEX), 0, 1, 9, 500, 7)])  # uses stack 7, defined earlier
    with RecordingWriter(str(path), HDR, stacks=known) as w:
        w.write(late)
    from gmpmon.replay import replay_all

    snap = replay_all(read_recording(str(path)))
    assert snap.mutex_stacks[0].stack == known[7]
