"""Hostile recordings, made from the committed ones (tests/data/*.gmp) the way an attacker
would: every checksum right, so that the reader's caps and the model are what is tested, not
the CRC. Shared by tests/unit/test_hostile_recording*.py.

Runs go through a real `gmpmon` under `prlimit --as=1000000000`, one fresh process each
(run_one) or a fork each from one interpreter (forkrun, tests/hostile_forkrun.py). Each must end
within LIMIT_S seconds of CPU and LIMIT_MB of peak RSS (tests/hostile.py): CPU rather than
wall time, because this 2-CPU machine is shared (other tests, other runs at the same time
made wall times 2-4x the CPU); wall time must stay within WALL_FACTOR times LIMIT_S."""

from __future__ import annotations

import json
import os
import random
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from array import array
from dataclasses import dataclass
from pathlib import Path

from gmpmon import errors
from gmpmon.record import BATCH_FRAME, HEADER_FRAME, MAGIC, PREAMBLE, VERSION, encode_batch
from gmpmon.recread import read_recording
from tests.hostile import LIMIT_MB, LIMIT_S, REPO, TIME, Measured

DATA = REPO / "tests" / "data"
PRLIMIT = ("prlimit", "--as=1000000000")
WALL_FACTOR = 3


@dataclass
class Cost(Measured):
    cpu_s: float = 0.0

    def within_limits(self) -> None:
        assert self.cpu_s <= LIMIT_S, f"{self.cpu_s:.1f} s of CPU: {self.argv}"
        assert self.seconds <= WALL_FACTOR * LIMIT_S, f"{self.seconds:.1f} s: {self.argv}"
        assert self.max_rss_mb <= LIMIT_MB, f"{self.max_rss_mb:.0f} MB: {self.argv}"

    def figure(self) -> str:
        cmd = " ".join("python" if a == sys.executable else a for a in self.argv)
        return (f"{self.seconds:.2f} s ({self.cpu_s:.2f} s CPU), {self.max_rss_mb:.0f} MB "
                f"peak RSS, exit {self.code}: {cmd}")


def header_json(src: Path) -> dict[str, object]:
    raw = src.read_bytes()
    size = HEADER_FRAME.unpack_from(raw, PREAMBLE.size)[0]
    off = PREAMBLE.size + HEADER_FRAME.size
    d: dict[str, object] = json.loads(raw[off : off + size])
    return d


def frame(payload: bytes, n: int, first: int = 0, last: int = 0) -> bytes:
    """A batch frame around ``payload`` claiming ``n`` events, its CRC right."""
    head = BATCH_FRAME.pack(b"GB", len(payload), n, first, last, 0)[:-4]
    return head + struct.pack("<I", zlib.crc32(payload, zlib.crc32(head[2:]))) + payload


def recording(header: dict[str, object] | bytes, frames: list[bytes]) -> bytes:
    hj = header if isinstance(header, bytes) else json.dumps(header).encode()
    return (PREAMBLE.pack(MAGIC, VERSION, 0) + HEADER_FRAME.pack(len(hj), zlib.crc32(hj)) + hj
            + b"".join(frames))


def good_frames(src: Path) -> list[bytes]:
    return [frame(*encode_batch(b)) for b in read_recording(str(src))]


def zeros_bomb(raw_size: int, n: int) -> bytes:
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


def dense_payload(n: int, kinds: tuple[int, ...], ts0: int) -> bytes:
    """``n`` well-formed events that compress ~100x: timestamps 1 ns apart, the kinds in
    turn, P 0/1, goroutines 1-1000, small arguments (a repeating pattern)."""
    idx = [i % 1000 for i in range(n)]
    kind_col = bytes(kinds[i % len(kinds)] for i in range(n))
    return b"".join((
        struct.pack("<IQ", n, ts0), b"b" + bytes([1]) * (n - 1), b"B" + kind_col,
        b"b" + bytes(i % 2 for i in idx), b"B" + bytes(i % 3 for i in idx),
        b"I" + array("I", [1 + i for i in idx]).tobytes(), b"B" + bytes(i % 7 for i in idx),
        b"H" + array("H", [i % 300 for i in idx]).tobytes(), struct.pack("<I", 0),
    ))


def dense_recording(kinds: tuple[int, ...], size: int, src: Path = DATA / "gc.gmp") -> bytes:
    """``size`` bytes of recording whose batches (2^16 events each, the pattern of
    dense_payload) hold 32 times the file's size of events, then random bytes: the padding
    raises what the file's size allows, as an attacker would pad it."""
    n = 1 << 16
    frames: list[bytes] = []
    ts = 1_000
    raw_total = 0
    while raw_total < 32 * size:
        raw = dense_payload(n, kinds, ts)
        frames.append(frame(zlib.compress(raw, 9), n, ts, ts + n))
        ts += n
        raw_total += len(raw)
    data = recording(header_json(src), frames)
    return data + random.Random(size).randbytes(max(0, size - len(data)))


def many_frames_recording(size: int, src: Path = DATA / "gc.gmp") -> bytes:
    """``size`` bytes of the same ~1 KB batch: 149,000 EXECUTE events of one goroutine, 1 MiB
    inflated. Each stayed within the old per-batch caps (128x, or 1 MiB whatever the
    payload): 500 KB of them held 70M events, and replaying them took over 100 s and 1 GB."""
    n = 149_000
    ones, zeros = bytes([1]) * n, bytes(n)
    raw = b"".join((struct.pack("<IQ", n, 1_000), b"b" + ones[1:], b"B" + ones, b"b" + zeros,
                    b"B" + zeros, b"B" + ones, b"B" + zeros, b"B" + zeros, struct.pack("<I", 0)))
    one = frame(zlib.compress(raw, 9), n, 1_000, 1_000 + n)
    head = recording(header_json(src), [])
    return head + one * ((size - len(head)) // len(one))


def run_one(path: Path, *args: str, timeout: float = 60) -> Cost:
    """`gmpmon CMD FILE ARGS...` in a fresh process under PRLIMIT; its CPU time and peak RSS
    by GNU time (which forks it from its own small process), its wall time from here."""
    argv = [*PRLIMIT, sys.executable, "-m", "gmpmon", *args[:1], str(path), *args[1:]]
    with tempfile.NamedTemporaryFile("w+") as res:
        t0 = time.monotonic()
        p = subprocess.run([TIME, "-q", "-f", "%U %S %M", "-o", res.name, *argv],
                           capture_output=True, text=True, stdin=subprocess.DEVNULL, cwd=REPO,
                           env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=timeout)
        took = time.monotonic() - t0
        user, sys_s, kb = Path(res.name).read_text().split()[-3:]
    return Cost(argv, p.returncode, p.stdout, p.stderr, took, int(kb) / 1024,
                float(user) + float(sys_s))


def forkrun(cases: list[list[str]]) -> list[Cost]:
    """Each case a real `gmpmon` run in its own process under PRLIMIT (tests/hostile_forkrun.py:
    one interpreter imports gmpmon, a fork per case: a fresh interpreter costs ~0.3 s)."""
    p = subprocess.run([*PRLIMIT, sys.executable, "-m", "tests.hostile_forkrun"],
                       input=json.dumps(cases), capture_output=True, text=True, cwd=REPO,
                       timeout=600, env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert p.returncode == 0, p.stderr[-3000:]
    return [Cost([*PRLIMIT, "gmpmon", *r["argv"]], r["code"], r["out"], r["err"],
                 r["seconds"], r["max_rss_mb"], r["cpu_s"]) for r in json.loads(p.stdout)]


def check(r: Cost) -> str:
    """Exit 0 or 9, stderr only `gmpmon: ...` lines (one, when it failed), no traceback,
    within the limits; -> the last stderr line."""
    assert "Traceback" not in r.out + r.err, (r.argv, r.err[-2000:])
    assert r.code in (0, errors.RecordingError.exit_code), (r.argv, r.code, r.err[-2000:])
    lines = r.lines()
    assert all(ln.startswith("gmpmon: ") for ln in lines), (r.argv, lines)
    if r.code:
        assert len(lines) == 1, (r.argv, lines)
    r.within_limits()
    return lines[-1] if lines else ""
