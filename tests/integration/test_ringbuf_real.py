"""The bulk ring-buffer reader against a real BPF ring buffer (the unit tests use a memfd
laid out like one): records the kernel itself wrote, some of them discarded
(bpf_ringbuf_discard leaves the record in place with its DISCARD bit set), some of another
size, across many wrap-arounds of a one-page ring, and a ring filled until reserve fails.

The program runs by BPF_PROG_TEST_RUN (a raw-tracepoint program, run on this CPU, on
demand), so every record's sequence number, and which were discarded, is known. A BUSY
record (reserved, not yet submitted) exists only while a program runs on another CPU; the
verifier refuses a program that never submits, so no test can hold one: the memfd test
covers the reader's stop at BUSY.
"""

from __future__ import annotations

import ctypes as ct
import mmap
import os
from collections.abc import Iterator

import pytest

from gmpmon.capture.ringbuf import REC_STRIDE, RingBufReader
from gmpmon.events import EventTuple

pytestmark = pytest.mark.bpf

PER_RUN = 16
PROG = r"""
struct rec { u64 ts; u32 kind; s32 p; u32 m; u32 pad; u64 g; u64 a0; u64 a1; };
struct odd { u64 a; u64 b; };
BPF_RINGBUF_OUTPUT(events, 1);
/* cfg[0]: bit (seq % 64) set = discard that record; cfg[1]: next sequence number;
 * cfg[2]: reserves that failed (ring full); cfg[3]: 1 = also write an odd-sized record */
BPF_ARRAY(cfg, u64, 4);

int emit(void *ctx)
{
    int k0 = 0, k1 = 1, k2 = 2, k3 = 3;
    u64 *mask = cfg.lookup(&k0);
    u64 *seq = cfg.lookup(&k1);
    u64 *full = cfg.lookup(&k2);
    u64 *odd = cfg.lookup(&k3);
    if (!mask || !seq || !full || !odd)
        return 0;
    for (int i = 0; i < PER_RUN; i++) {
        struct rec *e = events.ringbuf_reserve(sizeof(struct rec));
        if (!e) {
            __sync_fetch_and_add(full, 1);
            continue;
        }
        u64 s = *seq;
        *seq = s + 1;
        e->ts = s;
        e->kind = 1;
        e->p = (s32)(s & 0xffff);
        e->m = 7;
        e->pad = 0;
        e->g = s;
        e->a0 = s * 3;
        e->a1 = ~s;
        if ((*mask >> (s & 63)) & 1)
            events.ringbuf_discard(e, BPF_RB_NO_WAKEUP);
        else
            events.ringbuf_submit(e, BPF_RB_NO_WAKEUP);
        if (*odd && i == PER_RUN / 2) {
            struct odd *o = events.ringbuf_reserve(sizeof(struct odd));
            if (o) {
                o->a = 1;
                o->b = 2;
                events.ringbuf_submit(o, BPF_RB_NO_WAKEUP);
            }
        }
    }
    return 0;
}
"""

BPF_PROG_TEST_RUN = 10


class Ring:
    def __init__(self) -> None:
        from gmpmon._bcc import import_bcc

        bcc = import_bcc()
        self.bpf = bcc.BPF(text=PROG.encode(), cflags=[f"-DPER_RUN={PER_RUN}"])
        self.fd = self.bpf.load_func(b"emit", bcc.BPF.RAW_TRACEPOINT).fd
        self.cfg = self.bpf[b"cfg"]
        self.reader = RingBufReader(self.bpf[b"events"].map_fd, mmap.PAGESIZE)

    def set(self, i: int, v: int) -> None:
        self.cfg[ct.c_int(i)] = ct.c_uint64(v)

    def get(self, i: int) -> int:
        return int(self.cfg[ct.c_int(i)].value)

    def run(self) -> None:
        attr = ct.create_string_buffer(128)
        ct.c_uint32.from_buffer(attr, 0).value = self.fd
        libc = ct.CDLL(None, use_errno=True)
        if libc.syscall(321, BPF_PROG_TEST_RUN, attr, 128) < 0:
            e = ct.get_errno()
            raise OSError(e, f"BPF_PROG_TEST_RUN: {os.strerror(e)}")

    def close(self) -> None:
        self.reader.close()
        self.bpf.cleanup()


@pytest.fixture
def ring() -> Iterator[Ring]:
    r = Ring()
    yield r
    r.close()


def want(seqs: range, mask: int) -> list[EventTuple]:
    return [(s, 1, s & 0xFFFF, 7, s, s * 3, (~s) & (2**64 - 1))
            for s in seqs if not (mask >> (s & 63)) & 1]


def test_discarded_and_odd_sized_records_are_skipped_across_wraps(ring: Ring) -> None:
    """Every third record discarded, an odd-sized record in each run: the reader returns
    exactly the submitted records, in order, over ~20 wraps of a one-page ring, whether it
    reads after every run or after several."""
    mask = sum(1 << b for b in range(0, 64, 3))
    ring.set(0, mask)
    ring.set(3, 1)
    out: list[EventTuple] = []
    runs = 0
    for batch in (1, 2, 3, 4) * 10:  # 1..4 runs (16..64 records + odd ones) between reads
        for _ in range(batch):
            ring.run()
            runs += 1
        ring.reader.read(out)
    assert ring.get(2) == 0, "the ring filled: the test reads too rarely"
    seq = ring.get(1)
    assert seq == runs * PER_RUN
    assert seq * REC_STRIDE > 20 * mmap.PAGESIZE  # it wrapped, many times
    expect = want(range(seq), mask)
    assert len(out) == len(expect)
    assert out == expect
    assert ring.reader.backlog() == 0


def test_a_full_ring_loses_only_what_reserve_refused(ring: Ring) -> None:
    """Runs without reading until reserve fails: what the reader then gets plus what the
    program could not reserve is every record written; after the drain it reads on."""
    ring.set(0, 1 << 5)  # one discard in 64
    cap = mmap.PAGESIZE // REC_STRIDE
    runs = cap // PER_RUN + 3  # more than fit
    for _ in range(runs):
        ring.run()
    refused = ring.get(2)
    assert refused > 0
    out: list[EventTuple] = []
    got = ring.reader.read(out)
    attempts = runs * PER_RUN
    written = ring.get(1)
    assert written + refused == attempts
    assert got == len(want(range(written), 1 << 5))
    assert out == want(range(written), 1 << 5)
    ring.run()  # room again: the next run is read whole
    more: list[EventTuple] = []
    ring.reader.read(more)
    assert more == want(range(written, written + PER_RUN), 1 << 5)
