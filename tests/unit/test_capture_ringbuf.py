"""The bulk ring-buffer reader on a memfd laid out like a BPF ring buffer (no BPF needed).

Layout (kernel/bpf/ringbuf.c): consumer page, producer page, then the data area, which the
kernel maps twice in a row so that a record crossing the end is contiguous. Here the test
writes both copies itself.
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Iterator

import pytest

from gmpmon.capture.ringbuf import BUSY_BIT, DISCARD_BIT, REC_STRIDE, RingBufReader
from gmpmon.events import RECORD, RECORD_SIZE, EventTuple

PAGE = mmap.PAGESIZE
SIZE = 4 * PAGE  # data area (a power of two)


class FakeRing:
    def __init__(self) -> None:
        self.fd = os.memfd_create("gm-ring")
        os.ftruncate(self.fd, 2 * PAGE + 2 * SIZE)
        self.m = mmap.mmap(self.fd, 2 * PAGE + 2 * SIZE)
        self.prod = 0

    def put_raw(self, hdr_len: int, payload: bytes) -> int:
        """Append a record at the producer position (in both copies); returns its position."""
        pos = self.prod
        rec = struct.pack("<II", hdr_len, 0) + payload
        rec += b"\0" * ((-len(rec)) % 8)
        for i, b in enumerate(rec):
            off = (pos + i) % SIZE
            self.m[2 * PAGE + off] = b
            self.m[2 * PAGE + SIZE + off] = b
        self.prod += len(rec)
        self.m[PAGE : PAGE + 8] = struct.pack("<Q", self.prod)
        return pos

    def put(self, e: EventTuple, flags: int = 0) -> int:
        ts, kind, p, m, g, a0, a1 = e
        return self.put_raw(RECORD_SIZE | flags, RECORD.pack(ts, kind, p, m, 0, g, a0, a1))

    def set_hdr(self, pos: int, hdr_len: int) -> None:
        for base in (2 * PAGE, 2 * PAGE + SIZE):
            off = base + pos % SIZE
            self.m[off : off + 4] = struct.pack("<I", hdr_len)

    def consumer(self) -> int:
        v: int = struct.unpack_from("<Q", self.m, 0)[0]
        return v

    def set_consumer(self, pos: int) -> None:
        self.m[0:8] = struct.pack("<Q", pos)


@pytest.fixture
def ring() -> Iterator[tuple[FakeRing, RingBufReader]]:
    r = FakeRing()
    reader = RingBufReader(r.fd, SIZE)
    yield r, reader
    reader.close()
    r.m.close()
    os.close(r.fd)


def ev(i: int) -> EventTuple:
    return (1000 + i, 1 + i % 16, i % 4 - 1, 100 + i, 7 * i, (1 << 63) + i, i * i)


def test_decodes_every_complete_record_and_advances_the_consumer(
    ring: tuple[FakeRing, RingBufReader],
) -> None:
    r, reader = ring
    want = [ev(i) for i in range(50)]
    for e in want:
        r.put(e)
    out: list[EventTuple] = []
    assert reader.read(out) == 50
    assert out == want
    assert r.consumer() == 50 * REC_STRIDE
    assert reader.read(out) == 0


def test_stops_at_a_busy_record_and_resumes_once_it_is_submitted(
    ring: tuple[FakeRing, RingBufReader],
) -> None:
    r, reader = ring
    r.put(ev(0))
    busy = r.put(ev(1), BUSY_BIT)
    r.put(ev(2))
    out: list[EventTuple] = []
    assert reader.read(out) == 1
    assert out == [ev(0)]
    assert r.consumer() == busy
    r.set_hdr(busy, RECORD_SIZE)  # submitted
    assert reader.read(out) == 2
    assert out == [ev(0), ev(1), ev(2)]


def test_skips_discarded_records_and_records_of_another_size(
    ring: tuple[FakeRing, RingBufReader],
) -> None:
    r, reader = ring
    r.put(ev(0))
    r.put(ev(1), DISCARD_BIT)
    r.put_raw(12, b"x" * 12)
    r.put(ev(3))
    out: list[EventTuple] = []
    assert reader.read(out) == 2
    assert out == [ev(0), ev(3)]
    assert r.consumer() == r.prod


def test_records_crossing_the_end_of_the_data_area(
    ring: tuple[FakeRing, RingBufReader],
) -> None:
    r, reader = ring
    # Start two and a half records before the end, as after many laps.
    start = 10 * SIZE - 2 * REC_STRIDE - REC_STRIDE // 2
    r.prod = start
    r.set_consumer(start)
    want = [ev(i) for i in range(6)]
    for e in want:
        r.put(e)
    out: list[EventTuple] = []
    assert reader.read(out) == 6
    assert out == want
    assert r.consumer() == start + 6 * REC_STRIDE
