"""Hostile recordings, built by the test from the committed ones (tests/data/*.gmp): bombs
(a 16M-event batch in a few hundred KB, a payload that inflates 1000x, a stacks table of
nested lists, header fields of the wrong type) and a fuzz loop of 240 mutated recordings
whose checksums are made right again (as an attacker would), each replayed or exported by a
real `gmpmon` under `prlimit --as=1000000000`.

Every run ends within LIMIT_S and LIMIT_MB, with exit 0 (a recording cut short: the good
batches are used, one note says where it stopped) or 9 (RecordingError: one line), and never
a traceback."""

from __future__ import annotations

import json
import os
import random
import struct
import subprocess
import sys
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from gmpmon import errors
from gmpmon.events import Batch
from gmpmon.record import (
    BATCH_FRAME,
    BATCH_TAG,
    HEADER_FRAME,
    MAGIC,
    PREAMBLE,
    VERSION,
    encode_batch,
    read_recording,
)
from tests.hostile import REPO, Measured, gmpmon

DATA = REPO / "tests" / "data"
PRLIMIT = ("prlimit", "--as=1000000000")
SEEDS = ("gc", "spawn", "demo-sites", "wide64", "mutex", "demo-sample-kernel")
FUZZ_RUNS = 240


def header_json(src: Path) -> dict[str, object]:
    raw = src.read_bytes()
    size = HEADER_FRAME.unpack_from(raw, PREAMBLE.size)[0]
    off = PREAMBLE.size + HEADER_FRAME.size
    d: dict[str, object] = json.loads(raw[off : off + size])
    return d


def frame(payload: bytes, n: int, first: int = 0, last: int = 0) -> bytes:
    head = BATCH_FRAME.pack(BATCH_TAG, len(payload), n, first, last, 0)[:-4]
    return head + struct.pack("<I", zlib.crc32(payload, zlib.crc32(head[2:]))) + payload


def recording(header: dict[str, object], frames: list[bytes]) -> bytes:
    hj = json.dumps(header).encode()
    return (PREAMBLE.pack(MAGIC, VERSION, 0) + HEADER_FRAME.pack(len(hj), zlib.crc32(hj)) + hj
            + b"".join(frames))


def good_frames(src: Path) -> list[bytes]:
    rec = read_recording(str(src))
    return [frame(*encode_batch(b)) for b in rec]


def _bomb(raw_size: int, n: int) -> bytes:
    """A valid zlib stream of the batch count ``n`` then ``raw_size`` zero bytes, made in
    well under a second: one self-contained deflate block of 1 MiB of zeros (a full flush
    resets the window), repeated."""
    def raw_deflate(data: bytes, mode: int) -> bytes:
        c = zlib.compressobj(9, zlib.DEFLATED, -15)
        return c.compress(data) + c.flush(mode)

    chunk = bytes(1 << 20)
    block = raw_deflate(chunk, zlib.Z_FULL_FLUSH)
    head = struct.pack("<I", n)
    adler = zlib.adler32(head)
    for _ in range(raw_size >> 20):
        adler = zlib.adler32(chunk, adler)
    return (b"\x78\xda" + raw_deflate(head, zlib.Z_FULL_FLUSH) + block * (raw_size >> 20)
            + raw_deflate(b"", zlib.Z_FINISH) + struct.pack(">I", adler))


def run_case(path: Path, *args: str) -> Measured:
    return gmpmon(*args[:1], str(path), *args[1:], prefix=PRLIMIT, timeout=30)


def check(r: Measured) -> str:
    """Exit 0 or 9, stderr only `gmpmon: ...` lines (one, when it failed), no traceback,
    within the limits."""
    assert "Traceback" not in r.out + r.err, (r.argv, r.err[-2000:])
    assert r.code in (0, errors.RecordingError.exit_code), (r.argv, r.code, r.err[-2000:])
    lines = r.lines()
    assert all(ln.startswith("gmpmon: ") for ln in lines), (r.argv, lines)
    if r.code:
        assert len(lines) == 1, (r.argv, lines)
    r.within_limits()
    return lines[0] if lines else ""


# --- bombs -------------------------------------------------------------------------------


def test_sixteen_million_event_batch_in_half_a_megabyte(tmp_path: Path) -> None:
    n = 16 << 20
    bomb = _bomb(64 * n, n)  # 1 GiB of zeros: what the old reader inflated and decoded
    path = tmp_path / "bomb16m.gmp"
    path.write_bytes(recording(header_json(DATA / "gc.gmp"), [frame(bomb, n)]))
    assert path.stat().st_size < 2 << 20
    r = run_case(path, "replay", "--no-tui")
    line = check(r)
    assert r.code == errors.RecordingError.exit_code, r.err
    assert "implausible batch size" in line, line
    print(f"\n16M-event batch ({path.stat().st_size:,} B): {r.figure()}\n  {line}")


def test_bomb_after_good_batches_uses_them_and_says_where(tmp_path: Path) -> None:
    n = 400_000  # under the per-batch cap, but the payload inflates ~1000x
    path = tmp_path / "ratio.gmp"
    good = good_frames(DATA / "gc.gmp")
    path.write_bytes(recording(header_json(DATA / "gc.gmp"), [*good, frame(_bomb(64 * n, n), n)]))
    r = run_case(path, "replay", "--no-tui")
    line = check(r)
    assert r.code == 0 and "within its bounds" in line and "good batches" in line, line
    assert "STW" in r.out or "goroutine" in r.out.lower()
    print(f"\ninflating batch after {len(good)} good ones: {r.figure()}\n  {line}")


def test_nested_stacks_table_is_one_line(tmp_path: Path) -> None:
    sj = b"[" * 200_000 + b"]" * 200_000
    raw = struct.pack("<I", 0) + struct.pack("<I", len(sj)) + sj
    path = tmp_path / "nested.gmp"
    path.write_bytes(recording(header_json(DATA / "gc.gmp"), [frame(zlib.compress(raw), 0)]))
    r = run_case(path, "replay", "--no-tui")
    assert r.code == errors.RecordingError.exit_code, r.err
    check(r)


HEADER_CASES = [
    ("g_status", 7), ("wait_reasons", "x"), ("p_status", [1, 2]), ("gomaxprocs", 10**12),
    ("gomaxprocs", True), ("wall_start", "now"), ("sample_hz", 1.5), ("exe", None),
    ("features", {"a": 1}), ("start_ns", 1 << 70), ("duty_window_ms", []),
]


def test_header_of_the_wrong_type_is_one_line(tmp_path: Path) -> None:
    """g_status as an integer used to end in "TypeError: object of type 'int' has no len()"."""
    cases = []
    for i, (field, value) in enumerate(HEADER_CASES):
        h = header_json(DATA / "gc.gmp")
        h[field] = value
        path = tmp_path / f"header{i}.gmp"
        path.write_bytes(recording(h, good_frames(DATA / "gc.gmp")[:3]))
        cases.append(["replay", str(path), "--no-tui"])
    for (field, value), r in zip(HEADER_CASES, forkrun(cases), strict=True):
        line = check(r)
        assert r.code == errors.RecordingError.exit_code, (field, value, r.err)
        assert "corrupt recording header" in line and field in line, line


# --- fuzz --------------------------------------------------------------------------------

_WRONG = (None, True, -1, 1 << 64, 1e308, "x", [], [1], {}, {"a": []}, [["x"]], "9" * 400)


def mutate(rng: random.Random, src: Path) -> bytes:
    """One mutation of a committed recording, with every checksum made right again."""
    header = header_json(src)
    rec = read_recording(str(src))
    batches = list(rec)
    how = rng.randrange(6)
    if how == 0:  # a header field of another type or range
        header[rng.choice(sorted(header))] = rng.choice(_WRONG)
    elif how == 1:  # random values in random event fields
        for b in rng.sample(batches, min(3, len(batches))):
            for i in rng.sample(range(len(b.events)), min(20, len(b.events))):
                ev = list(b.events[i])
                k = rng.randrange(1, 7)
                # Any 64-bit value a column can hold together with the others (a column
                # is stored signed when it holds a negative value).
                ev[k] = rng.choice((0, -1, (1 << 63) - 1, 1 << 62, rng.getrandbits(63),
                                    rng.randrange(0, 80), rng.randrange(-5, 300)))
                b.events[i] = tuple(ev)  # type: ignore[assignment]
    elif how == 2:  # events moved between batches, reordered, duplicated
        evs = [e for b in batches for e in b.events]
        rng.shuffle(evs)
        cut = rng.randrange(1, max(len(evs), 2))
        batches = [Batch(evs[:cut], {}), Batch(evs[cut:] + evs[: cut // 2], {})]
    elif how == 3:  # stacks tables that lie
        for b in rng.sample(batches, min(3, len(batches))):
            b.stacks[rng.getrandbits(40)] = tuple("f" * rng.randrange(1, 5000)
                                                 for _ in range(rng.randrange(0, 300)))
    frames = [frame(*encode_batch(b)) for b in batches]
    data = bytearray(recording(header, frames))
    if how == 4:  # raw bit flips (checksums catch them: the reader must say where)
        for _ in range(rng.randrange(1, 20)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    elif how == 5:  # a batch frame whose n and size lie, CRC right
        i = rng.randrange(len(frames))
        off = len(data) - sum(len(f) for f in frames[i:])
        _, size, n, first, last, _ = BATCH_FRAME.unpack_from(data, off)
        n2 = rng.choice((0, n + 1, n * 1000, (1 << 32) - 1))
        payload = bytes(data[off + BATCH_FRAME.size : off + BATCH_FRAME.size + size])
        data[off : off + BATCH_FRAME.size + size] = frame(payload, n2, first, last)
    return bytes(data)


def forkrun(cases: list[list[str]]) -> list[Measured]:
    """Each case a real `gmpmon` run in its own process under PRLIMIT (tests/hostile_forkrun.py:
    one interpreter imports gmpmon, a fork per case)."""
    p = subprocess.run([*PRLIMIT, sys.executable, "-m", "tests.hostile_forkrun"],
                       input=json.dumps(cases), capture_output=True, text=True, cwd=REPO,
                       timeout=600, env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert p.returncode == 0, p.stderr[-3000:]
    return [Measured(["prlimit", "--as=1000000000", "gmpmon", *r["argv"]], r["code"], r["out"],
                     r["err"], r["seconds"], r["max_rss_mb"]) for r in json.loads(p.stdout)]


def test_fuzz_240_mutated_recordings_under_a_1gb_address_space(tmp_path: Path) -> None:
    rng = random.Random(31)
    cases: list[list[str]] = []
    for i in range(FUZZ_RUNS):
        path = tmp_path / f"fuzz{i}.gmp"
        path.write_bytes(mutate(rng, DATA / f"{SEEDS[i % len(SEEDS)]}.gmp"))
        cmd = (["replay", str(path), "--no-tui"] if i % 3 else
               ["export", str(path), "--format", rng.choice(("folded", "pprof", "perfetto")),
                "-o", str(tmp_path / f"out{i}")])
        cases.append(cmd)
    with ThreadPoolExecutor(2) as pool:  # two at a time: the machine has 2 CPUs
        halves = list(pool.map(forkrun, [cases[0::2], cases[1::2]]))
    results = [r for h in halves for r in h]
    codes = [r.code for r in results]
    worst_s = max(r.seconds for r in results)
    worst_mb = max(r.max_rss_mb for r in results)
    print(f"\nfuzz: {len(results)} runs, exit 0: {codes.count(0)}, exit 9: {codes.count(9)}, "
          f"slowest {worst_s:.2f} s, largest {worst_mb:.0f} MB (prlimit --as=1000000000)")
    assert len(results) == FUZZ_RUNS
    for r in results:
        check(r)
