"""Stacks of running goroutines, from perf samples (capture/perfsample.py): a running G has no
saved registers to unwind, so the dump takes the user stack of the last sample that caught it
(R14 = its g, validated in BPF), over a short window. The pcs (runtime addresses, leaf first;
the frame-pointer walk misses a leaf's caller, which [RSP] gives back, as the sampler does)
are symbolized by the caller with the pclntab unwinder (gmpmon/binary/unwind.py)."""

from __future__ import annotations

import time

from gmpmon.binary.info import BinaryInfo
from gmpmon.capture.perfsample import FLAG_A1_PC, PerfSampler
from gmpmon.events import SAMPLE_GO, EventTuple, Kind

HZ = 999


def running_stacks(info: BinaryInfo, pid: int, goids: set[int],
                   seconds: float) -> dict[int, list[int]]:
    """{goid: user pcs, leaf first} of the last sample of each goroutine in ``goids`` taken
    within ``seconds`` (those never caught are absent)."""
    got: dict[int, list[int]] = {}
    if not goids or seconds <= 0:
        return got
    s = PerfSampler(info, pid, hz=HZ)
    s.start()
    try:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and len(got) < len(goids):
            time.sleep(0.02)
            if s.ring is None:
                break
            raw: list[EventTuple] = []
            s.ring.read(raw)
            for e in raw:
                if e[1] != Kind.CPU_SAMPLE or e[4] not in goids or e[5] & 0xFF != SAMPLE_GO:
                    continue
                a0 = e[5]
                if a0 & (FLAG_A1_PC << 16):
                    pcs = [e[6]]
                else:
                    kid = a0 >> 32
                    if kid >= 1 << 31:
                        continue
                    pcs = s._walk(kid)
                    top = e[6]
                    if not pcs:
                        continue
                    if top and (len(pcs) < 2 or pcs[1] != top) and s._calls_leaf(top, pcs[0]):
                        pcs = [pcs[0], top, *pcs[1:]]
                got[e[4]] = pcs
    finally:
        s.close()
    return got
