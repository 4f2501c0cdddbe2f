"""The raw bpf(2) map readers (gmpmon/capture/bpfsys.py) against BCC's own table access, on
real maps: a `counters`-shaped hash with more keys than one batch holds, and a per-CPU
array of hit counters. (Stack maps are compared on a live sampler in
test_kernel_sources.py.)"""

from __future__ import annotations

import ctypes as ct

import pytest


@pytest.mark.bpf
def test_batch_readers_answer_what_bcc_reads() -> None:
    from gmpmon._bcc import import_bcc, scalar_items
    from gmpmon.capture.bpfsys import PerCpuU64Array, U64Hash

    bcc = import_bcc()
    b = bcc.BPF(text=b"BPF_HASH(counters, u64, u64, 32768); BPF_PERCPU_ARRAY(hits, u64, 32);"
                b"int gm_nop(void *ctx) { return 0; }")
    try:
        h = b[b"counters"]
        raw = U64Hash(h.map_fd)
        assert raw.items() == []
        n = 3 * U64Hash.CHUNK + 17  # several batches, the last one short
        for k in range(n):
            h[ct.c_uint64((k * 0x9E3779B97F4A7C15) & (2**64 - 1))] = ct.c_uint64(k * 7 + 1)
        items = raw.items()
        assert len(items) == n
        assert items == scalar_items(h)  # same pairs, in the kernel's bucket order
        assert raw.items() == items  # the buffers are reused between calls

        a = b[b"hits"]
        arr = PerCpuU64Array(a.map_fd)
        ncpu = arr.ncpu
        for i in range(32):
            a[ct.c_int(i)] = a.Leaf(*[(i * 1000 + c) for c in range(ncpu)])
        want = [int(sum(a[ct.c_int(i)])) for i in range(32)]
        assert want[5] == sum(5000 + c for c in range(ncpu))
        assert arr.totals(32) == want == [arr.total(i) for i in range(32)]
        assert arr.totals(26) == want[:26]
    finally:
        b.cleanup()


@pytest.mark.bpf
def test_wait_rows_are_read_as_deltas_of_a_real_hash() -> None:
    """RawHash reads a struct-keyed hash (gmpmon.bpf.c's wait_rows) as BCC does, and
    WaitRows hands on each row's growth once: a count without its ns (a read between the
    kernel's two adds) is followed by the ns alone."""
    from gmpmon._bcc import import_bcc
    from gmpmon.capture.bpfsys import RawHash
    from gmpmon.capture.waitrows import WaitRows
    from gmpmon.events import Kind

    bcc = import_bcc()
    b = bcc.BPF(text=b"struct k { u64 addr; u64 stack; u64 kind; }; struct v { u64 n; u64 ns; };"
                b"BPF_HASH(wait_rows, struct k, struct v, 4096);"
                b"int gm_nop(void *ctx) { return 0; }")
    try:
        h = b[b"wait_rows"]
        n = 2 * RawHash.CHUNK + 5
        for i in range(n):
            h[h.Key(0xC000000 + 16 * i, (0x4A0000 + i) << 16 | i, 1 + i % 3)] = h.Leaf(i + 1,
                                                                                 1000 * i)
        keys, vals = RawHash(h.map_fd, 24, 16).items()
        want = list(h.items())
        assert keys == b"".join(bytes(k) for k, _ in want)
        assert vals == b"".join(bytes(v) for _, v in want)

        rows = WaitRows(h)
        words: list[int] = []

        def sid(word: int) -> int:
            words.append(word)
            return len(words)

        out: list = []
        assert rows.read(5, out, sid) == n
        got = {(e[4], e[3]): (e[5], e[6] >> 32) for e in out}
        assert got == {(0xC000000 + 16 * i, 1 + i % 3): (1000 * i, i + 1) for i in range(n)}
        assert {e[1] for e in out} == {int(Kind.MUTEX_ROWS)} and len(words) == n
        assert rows.read(6, out, sid) == 0  # nothing grew
        k = h.Key(0xC000000, 0x4A0000 << 16, 1)
        h[k] = h.Leaf(3, 0)  # two waits counted, their ns not yet added
        h[h.Key(0xD000000, 7, 4)] = h.Leaf(1, 50)  # a new row
        new: list = []
        assert rows.read(7, new, sid) == 2
        assert sorted((e[4], e[5], e[6] >> 32) for e in new) == [(0xC000000, 0, 2),
                                                                (0xD000000, 50, 1)]
        h[k] = h.Leaf(3, 900)
        last: list = []
        assert rows.read(8, last, sid) == 1
        assert [(e[4], e[5], e[6] >> 32) for e in last] == [(0xC000000, 900, 0)]
    finally:
        b.cleanup()
