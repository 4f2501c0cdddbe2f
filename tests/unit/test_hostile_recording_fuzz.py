"""A fuzz loop of 240 mutated recordings (seeded: the same files every run), each replayed or
exported by a real `gmpmon` under `prlimit --as=1000000000`: bit flips (in the file, and in
a payload's inflated bytes with the checksums made right again), truncations, splices of two
recordings, length fields that lie, header fields of another type, event fields and
timestamps of any 64-bit value, stacks tables that lie.

Each run ends within the limits (tests/hostile_recordings.py), exits 0 or 9 with one line
when 9, never prints a traceback, and no output silently lacks a part: when the reader
stopped early (this test reads each file itself to know), stderr says where, the text report
and the summary JSON say so too, and an export was written whole."""

from __future__ import annotations

import json
import random
import struct
import zlib
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from gmpmon import errors
from gmpmon.events import Batch
from gmpmon.record import BATCH_FRAME, HEADER_FRAME, PREAMBLE, encode_batch
from gmpmon.recread import read_recording
from tests.hostile_recordings import DATA, Cost, check, forkrun, frame, header_json, recording

SEEDS = ("gc", "spawn", "demo-sites", "wide64", "mutex", "demo-sample-kernel", "leak-stacks")
FUZZ_RUNS = 240
EXIT = errors.RecordingError.exit_code
_WRONG = (None, True, -1, 1 << 64, 1e308, "x", [], [1], {}, {"a": []}, [["x"]], "9" * 400)
_ANY64 = (0, -1, (1 << 63) - 1, -(1 << 63), 1 << 62, 255, 256, 1 << 32)


def _frames_of(data: bytes) -> list[tuple[int, int]]:
    """(offset, length) of each batch frame of a well-formed recording."""
    off = PREAMBLE.size + HEADER_FRAME.size + HEADER_FRAME.unpack_from(data, PREAMBLE.size)[0]
    out = []
    while off + BATCH_FRAME.size <= len(data) and data[off : off + 2] == b"GB":
        size = BATCH_FRAME.unpack_from(data, off)[1]
        out.append((off, BATCH_FRAME.size + size))
        off += BATCH_FRAME.size + size
    return out


def _reframe(data: bytearray, off: int, payload: bytes, n: int | None = None) -> None:
    """The frame at ``off`` with a new payload (and event count), its CRC right."""
    _, size, n0, first, last, _ = BATCH_FRAME.unpack_from(data, off)
    data[off : off + BATCH_FRAME.size + size] = frame(payload, n0 if n is None else n, first,
                                                      last)


def mutate(rng: random.Random, src: Path, other: Path) -> tuple[str, bytes]:
    """One mutation of a committed recording (``other`` for splices): (what, the bytes)."""
    header = header_json(src)
    batches = list(read_recording(str(src)))
    how = rng.choice(("header", "values", "timestamps", "moved", "stacks", "flips",
                      "payload-flips", "truncated", "spliced", "frames-spliced", "n-lies",
                      "size-lies", "header-size-lies", "stacks-length-lies"))
    if how == "header":
        header[rng.choice(sorted(header))] = rng.choice(_WRONG)
    elif how in ("values", "timestamps"):  # any 64-bit value a column can hold
        for b in rng.sample(batches, min(3, len(batches))):
            for i in rng.sample(range(len(b.events)), min(20, len(b.events))):
                ev = list(b.events[i])
                if how == "timestamps":  # deltas must fit in 64 bits: 0..2^62 (payload-flips
                    ev[0] = rng.choice((0, 1, 1 << 62, rng.getrandbits(62), ev[0] + 10**12))
                else:  # reach the rest)
                    ev[rng.randrange(1, 7)] = rng.choice((*_ANY64, rng.getrandbits(63),
                                                          rng.randrange(-5, 300)))
                b.events[i] = tuple(ev)  # type: ignore[assignment]
    elif how == "moved":  # events moved between batches, reordered, duplicated
        evs = [e for b in batches for e in b.events]
        rng.shuffle(evs)
        cut = rng.randrange(1, max(len(evs), 2))
        batches = [Batch(evs[:cut], {}), Batch(evs[cut:] + evs[: cut // 2], {})]
    elif how == "stacks":  # stacks tables that lie: huge ids, long and many frames
        for b in rng.sample(batches, min(3, len(batches))):
            b.stacks[rng.choice((rng.getrandbits(40), -1, 0))] = tuple(
                "f" * rng.randrange(1, 5000) for _ in range(rng.randrange(0, 300)))
    data = bytearray(recording(header, [frame(*encode_batch(b)) for b in batches]))
    frames = _frames_of(bytes(data))
    off, length = rng.choice(frames) if frames else (len(data), 0)
    if how == "flips":  # raw bit flips: the checksums catch them, the reader says where
        for _ in range(rng.randrange(1, 20)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    elif how == "payload-flips" and frames:  # inflated bytes flipped, deflated again
        n = BATCH_FRAME.unpack_from(data, off)[2]
        raw = bytearray(zlib.decompress(data[off + BATCH_FRAME.size : off + length]))
        for _ in range(rng.randrange(1, 8)):
            raw[rng.randrange(len(raw))] ^= 1 << rng.randrange(8)
        _reframe(data, off, zlib.compress(bytes(raw)), n)
    elif how == "truncated":
        del data[rng.choice((rng.randrange(len(data)), off + rng.randrange(-2, 3))):]
    elif how == "spliced":  # the start of one recording, the end of another
        tail = other.read_bytes()
        data = data[: rng.randrange(len(data))] + tail[rng.randrange(len(tail)) :]
    elif how == "frames-spliced" and frames:  # whole frames of another run among these
        theirs = _frames_of(other.read_bytes())
        raw_other = other.read_bytes()
        for o, ln in rng.sample(theirs, min(4, len(theirs))):
            at = rng.choice([f[0] for f in _frames_of(bytes(data))] or [len(data)])
            data[at:at] = raw_other[o : o + ln]
    elif how == "n-lies" and frames:  # a frame's event count lies, CRC right
        payload = bytes(data[off + BATCH_FRAME.size : off + length])
        n = BATCH_FRAME.unpack_from(data, off)[2]
        _reframe(data, off, payload, rng.choice((0, n + 1, n * 1000, (1 << 19), (1 << 32) - 1)))
    elif how == "size-lies" and frames:  # a frame's length lies: the CRC is of what it says
        size = max(0, length - BATCH_FRAME.size + rng.choice((-5, -1, 1, 7, 1000)))
        head = bytearray(data[off : off + BATCH_FRAME.size])
        struct.pack_into("<I", head, 2, size)
        body = bytes(data[off + BATCH_FRAME.size : off + BATCH_FRAME.size + size])
        crc = zlib.crc32(body, zlib.crc32(bytes(head[2:-4])))
        struct.pack_into("<I", head, BATCH_FRAME.size - 4, crc)
        data[off : off + BATCH_FRAME.size] = head
    elif how == "header-size-lies":  # the header's length lies, its CRC of what it says
        size = HEADER_FRAME.unpack_from(data, PREAMBLE.size)[0] + rng.choice((-3, -1, 1, 40))
        body = bytes(data[PREAMBLE.size + HEADER_FRAME.size :][:size])
        data[PREAMBLE.size : PREAMBLE.size + HEADER_FRAME.size] = HEADER_FRAME.pack(
            size, zlib.crc32(body))
    elif how == "stacks-length-lies" and frames:  # the stacks table's length, inflated
        n = BATCH_FRAME.unpack_from(data, off)[2]
        raw = bytearray(zlib.decompress(data[off + BATCH_FRAME.size : off + length]))
        slen_at = len(raw) - 4 - _stacks_len(raw)
        struct.pack_into("<I", raw, slen_at, rng.choice((0, 1, 1 << 24, (1 << 32) - 1)))
        _reframe(data, off, zlib.compress(bytes(raw)), n)
    return how, bytes(data)


def _stacks_len(raw: bytes) -> int:
    """The length of a payload's stacks table (its last field): the u32 before it says."""
    for slen in range(len(raw) - 3):  # the JSON is the tail; find the length that fits
        at = len(raw) - 4 - slen
        if struct.unpack_from("<I", raw, at)[0] == slen:
            return slen
    return 0


COMMANDS = (
    ["replay", "{rec}", "--no-tui"],
    ["replay", "{rec}", "--no-tui", "--interval", "0.05"],
    ["replay", "{rec}", "--summary-json", "{out}.json"],
    ["export", "{rec}", "--format", "folded", "-o", "{out}"],
    ["export", "{rec}", "--format", "folded", "--what", "latency", "-o", "{out}"],
    ["export", "{rec}", "--format", "folded", "--what", "waits", "--weight", "count",
     "-o", "{out}"],
    ["export", "{rec}", "--format", "pprof", "-o", "{out}"],
    ["export", "{rec}", "--format", "pprof", "--what", "cpu", "-o", "{out}"],
    ["export", "{rec}", "--format", "perfetto", "-o", "{out}"],
    ["export", "{rec}", "--format", "json", "-o", "{out}.json"],
)


def expect(path: Path) -> tuple[bool, str | None]:
    """What the reader makes of ``path``, read here: (the header is good, why reading
    stopped early or None). A header that is not good must be exit 9."""
    try:
        rec = read_recording(str(path))
    except errors.RecordingError:
        return False, None
    for _ in rec:
        pass
    return True, rec.error


def check_parts(argv: list[str], r: Cost, readable: bool, stopped: str | None) -> None:
    """Nothing silently missing: a stop is said on stderr and in the report or summary JSON;
    an export exists whole."""
    if not readable:
        assert r.code == EXIT, (argv, r.err)
        return
    if r.code:
        assert stopped is not None or "malformed recording content" in r.err, (argv, r.err)
        return
    out = argv[argv.index("-o") + 1] if "-o" in argv else ""
    summary = argv[argv.index("--summary-json") + 1] if "--summary-json" in argv else ""
    if stopped is not None:
        assert stopped in r.err and "good batches before it" in r.err, (argv, r.err)
        if argv[:1] == ["replay"] and not summary:
            assert "recording read in part" in r.out, (argv, r.out[-500:])
    else:
        assert "before it" not in r.err, (argv, r.err)
    for doc in (out, summary):
        if doc.endswith(".json"):
            got = json.loads(Path(doc).read_text())
            assert ("recording" in got) == (stopped is not None), (argv, got.get("recording"))
    if out:
        said = r.err.rstrip().rsplit("(", 1)[-1]  # "wrote F to OUT (N bytes)": all of it
        assert said == f"{Path(out).stat().st_size:,} bytes)", (argv, r.err)
    elif not summary:
        assert "\ngmpmon: pid" in "\n" + r.out, (argv, r.out[:300])  # the report


def test_fuzz_240_mutated_recordings_under_a_1gb_address_space(tmp_path: Path) -> None:
    rng = random.Random(31)
    cases: list[list[str]] = []
    what: list[tuple[str, bool, str | None]] = []
    for i in range(FUZZ_RUNS):
        src = DATA / f"{SEEDS[i % len(SEEDS)]}.gmp"
        other = DATA / f"{SEEDS[(i * 5 + 3) % len(SEEDS)]}.gmp"
        how, data = mutate(rng, src, other)
        path = tmp_path / f"fuzz{i}.gmp"
        path.write_bytes(data)
        cmd = COMMANDS[i % len(COMMANDS)]
        cases.append([a.format(rec=path, out=tmp_path / f"out{i}") for a in cmd])
        what.append((how, *expect(path)))
    with ThreadPoolExecutor(2) as pool:  # two at a time: the machine has 2 CPUs
        halves = list(pool.map(forkrun, [cases[0::2], cases[1::2]]))
    results = [r for h in halves for r in h]
    results = [results[(i // 2) + (i % 2) * len(halves[0])] for i in range(len(results))]
    codes = Counter(r.code for r in results)
    kinds = Counter(w[0] for w in what)
    print(f"\nfuzz: {len(results)} runs {dict(sorted(kinds.items()))}; exit 0: {codes[0]}, "
          f"exit 9: {codes[EXIT]}, read in part: {sum(1 for w in what if w[2])}; slowest "
          f"{max(r.seconds for r in results):.2f} s ({max(r.cpu_s for r in results):.2f} s "
          f"CPU), largest {max(r.max_rss_mb for r in results):.0f} MB")
    assert len(results) == FUZZ_RUNS
    for argv, r, (_how, readable, stopped) in zip(cases, results, what, strict=True):
        assert r.argv[-len(argv):] == argv
        check(r)
        check_parts(argv, r, readable, stopped)
    assert len(kinds) == 14 and codes[0] > 50 and codes[EXIT] > 20, (kinds, codes)
