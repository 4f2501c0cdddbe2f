"""The perf sampler's stack ids (capture/perfsample.py) against the computation they replace.

``Reference`` is PerfSampler's stack code as it was before its memos (pc names, leaf-CALL
checks, one Batch id per kernel stack as walked): fed the same samples, the new code must
give every sample the same (Batch stack id, leaf pc) and define the same stacks in the same
Batches. The kernel's stack map is stood in for by a dict of stacks made of the demo's real
code (each walk is what bpf_get_stackid stored: pcs, leaf first), so the leaf-CALL check
reads real instruction bytes: real CALL sites, random words, the caller itself, 0.
"""

from __future__ import annotations

import bisect
import os
import random

import pytest

from gmpmon.binary.info import BinaryInfo
from gmpmon.binary.load import load
from gmpmon.capture.perfsample import CACHE_MAX, FLAG_A1_PC, PerfSampler
from gmpmon.capture.sites import BinaryText
from gmpmon.events import STACK_ID_BASE, Kind
from tests import gotargets

CPU_SAMPLE = int(Kind.CPU_SAMPLE)


class Reference:
    """perfsample.PerfSampler's stack ids before this change (c0117c2^), verbatim but for
    the kernel walk."""

    def __init__(self, info: BinaryInfo, walks: dict[int, list[int]]) -> None:
        self.info = info
        self.walks = walks
        self._stack_ids: dict[tuple[int, int], tuple[int, int]] = {}
        self._leaf_ids: dict[int, int] = {}
        self._pcs: dict[int, tuple[int, ...]] = {}
        self._by_pcs: dict[tuple[int, ...], int] = {}
        self._by_frames: dict[tuple[str, ...], int] = {}
        self._nstacks = 0
        self._bt = BinaryText(info.path)
        self._fd = os.open(info.path, os.O_RDONLY)

    def stack_id(self, kid: int, top: int, stacks: dict[int, tuple[str, ...]]
                 ) -> tuple[int, int]:
        key = (kid, top)
        hit = self._stack_ids.get(key)
        if hit is not None:
            return hit
        if kid >= (1 << 31):
            return 0, 0
        walked = self._pcs.get(kid)
        if walked is None:
            walked = tuple(self.walks.get(kid, []))
            if walked and len(self._pcs) < CACHE_MAX:
                self._pcs[kid] = walked
        if not walked:
            return 0, 0
        pcs = list(walked)
        if top and (len(pcs) < 2 or pcs[1] != top) and self._calls_leaf(top, pcs[0]):
            pcs.insert(1, top)
        sid = self._sid_of(tuple(pcs), stacks)
        if len(self._stack_ids) < CACHE_MAX:
            self._stack_ids[key] = (sid, pcs[0])
        return sid, pcs[0]

    def leaf_stack(self, pc: int, stacks: dict[int, tuple[str, ...]]) -> int:
        sid = self._leaf_ids.get(pc)
        if sid is None:
            sid = self._sid_of((pc,), stacks)
            if len(self._leaf_ids) < CACHE_MAX:
                self._leaf_ids[pc] = sid
        return sid

    def _sid_of(self, pcs: tuple[int, ...], stacks: dict[int, tuple[str, ...]]) -> int:
        sid = self._by_pcs.get(pcs)
        if sid is not None:
            return sid
        frames = self._symbolize(list(pcs))
        sid = self._by_frames.get(frames)
        if sid is None:
            self._nstacks += 1
            sid = STACK_ID_BASE + self._nstacks
            stacks[sid] = frames
            if len(self._by_frames) < CACHE_MAX:
                self._by_frames[frames] = sid
        if len(self._by_pcs) < CACHE_MAX:
            self._by_pcs[pcs] = sid
        return sid

    def _calls_leaf(self, ra: int, leaf: int) -> bool:
        bias = self.info.load_bias
        ft = self.info.functab
        i = bisect.bisect_right(ft.starts, leaf - bias) - 1
        if i < 0 or ft.lookup(ra - bias - 1) is None:
            return False
        off = self._bt.file_offset(ra - bias - 5)
        b = os.pread(self._fd, 5, off) if off is not None else b""
        if len(b) < 5:
            return False
        if b[0] == 0xE8:
            return ra - bias + int.from_bytes(b[1:], "little", signed=True) == ft.starts[i]
        return bool(b[3] == 0xFF and 0xD0 <= b[4] <= 0xD7)

    def _symbolize(self, pcs: list[int]) -> tuple[str, ...]:
        bias = self.info.load_bias
        frames = []
        for i, pc in enumerate(pcs):
            name = self.info.functab.lookup(pc - bias - (1 if i else 0))
            frames.append(name if name else f"[unknown {pc:#x}]")
        return tuple(reversed(frames))


class Fed(PerfSampler):
    """The new code, its kernel walk answered from the same dict."""

    def __init__(self, info: BinaryInfo, walks: dict[int, list[int]]) -> None:
        super().__init__(info, 1, defs={})
        self.walks = walks

    def _walk(self, kid: int) -> list[int]:
        return list(self.walks.get(kid, []))


def call_sites(info: BinaryInfo, text: bytes, base: int, n: int, rnd: random.Random
               ) -> list[tuple[int, int]]:
    """(return address, callee pc) of ``n`` direct CALLs in the text (E8 rel32 landing on a
    function's entry): a frameless leaf called from there puts that return address at [RSP]."""
    ft = info.functab
    starts = set(ft.starts)
    out = []
    pos = 0
    while len(out) < n:
        pos = text.find(b"\xe8", pos + 1)
        if pos < 0:
            break
        ra = base + pos + 5
        target = ra + int.from_bytes(text[pos + 1 : pos + 5], "little", signed=True)
        if target in starts and ft.lookup(ra - 1) is not None and rnd.random() < 0.3:
            i = ft.starts.index(target)
            out.append((ra, rnd.randrange(target, max(target + 1, ft.ends[i]))))
    return out


@pytest.mark.parametrize("bias", [0, 0x7F0000000000 - 0x400000])
def test_stack_ids_equal_the_old_computation(bias: int) -> None:
    import dataclasses

    exe = gotargets.build("demo", go="1.27")
    info = load(str(exe))
    ft = info.functab
    from gmpmon.binary.elf import Elf

    elf = Elf(exe.read_bytes(), str(exe))
    sec = elf.section(".text")
    text = elf.section_data(".text")
    assert sec is not None and text is not None
    rnd = random.Random(11)
    sites = call_sites(info, text, sec.addr, 200, rnd)
    assert len(sites) == 200
    info = dataclasses.replace(info, load_bias=bias)

    def pc_in(i: int) -> int:
        return bias + rnd.randrange(ft.starts[i], max(ft.starts[i] + 1, ft.ends[i]))

    funcs = [i for i in range(len(ft.starts)) if ft.ends[i] > ft.starts[i]]
    walks: dict[int, list[int]] = {}
    for kid in range(400):
        depth = rnd.randrange(1, 25)
        if kid % 4 == 0:  # a frameless leaf called from a real site: its caller is missing
            _ra, leaf = rnd.choice(sites)
            walks[kid] = [bias + leaf, *[pc_in(rnd.choice(funcs)) for _ in range(depth)]]
        else:
            walks[kid] = [pc_in(rnd.choice(funcs)) for _ in range(depth)]
        if kid % 7 == 0 and kid:  # the same pcs under another id (a re-stored stack)
            walks[kid] = list(walks[kid - 1])
        if kid % 11 == 0:  # the same functions at other pcs: one Batch id by frames
            walks[kid] = [walks[kid][0], *[
                bias + ft.starts[bisect.bisect_right(ft.starts, pc - bias) - 1] + 1
                for pc in walks[kid][1:]]]
    walks[400] = [0xDEAD0000]  # no function there: [unknown]
    ref, new = Reference(info, walks), Fed(info, walks)
    ra_of = {kid: ra for kid in walks for ra, leaf in sites if walks[kid][0] == bias + leaf}
    inserted = 0
    for batch in range(60):
        ref_stacks: dict[int, tuple[str, ...]] = {}
        new_stacks: dict[int, tuple[str, ...]] = {}
        raw: list[tuple[int, int, int, int, int, int, int]] = []
        want: list[tuple[int, int]] = []
        for _ in range(300):
            kid = rnd.choice([*walks, 1 << 31, (1 << 32) - 14, 9999])  # also no stack, unknown
            r = rnd.random()
            w = walks.get(kid, [0, 0])
            if r < 0.3 and kid in ra_of:
                top = bias + ra_of[kid]  # the leaf's caller: inserted
                inserted += 1
            elif r < 0.45:
                top = w[1] if len(w) > 1 else 0  # already frame 1
            elif r < 0.55:
                top = 0
            elif r < 0.7:
                top = bias + rnd.choice(sites)[0]  # a call site, of another function
            else:
                top = rnd.getrandbits(64)  # a local variable
            if r > 0.97:  # no kernel stack id: a1 is the leaf pc (FLAG_A1_PC)
                leaf = pc_in(rnd.choice(funcs))
                raw.append((len(raw), CPU_SAMPLE, 0, 1, 7, (FLAG_A1_PC << 16) | 14 << 32, leaf))
                want.append((ref.leaf_stack(leaf, ref_stacks), leaf))
                continue
            raw.append((len(raw), CPU_SAMPLE, 0, 1, 7, kid << 32, top))
            want.append(ref.stack_id(kid, top, ref_stacks))
        out: list[tuple[int, ...]] = []
        new.ring = Ring(raw)  # type: ignore[assignment]
        assert new.poll(out, new_stacks) == len(raw)  # type: ignore[arg-type]
        got = [(e[5] >> 32, e[6]) for e in out]
        assert got == want, batch
        assert new_stacks == ref_stacks
    assert ref._nstacks > 300 and inserted > 500


class Ring:
    """The samples of one poll, as the BPF ring would give them."""

    def __init__(self, raw: list[tuple[int, int, int, int, int, int, int]]) -> None:
        self.raw = raw

    def read(self, out: list[tuple[int, ...]]) -> int:
        out.extend(self.raw)
        return len(self.raw)
