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
