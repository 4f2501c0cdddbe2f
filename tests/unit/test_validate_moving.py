"""The procs layout check on a synthetic address space: a running P caught mid-hand-off
(its curg's g.m already cleared, or its M already given another P) is set aside; the pass
holds when most running Ps held, and fails when none or too few did (a wrong offset)."""

from __future__ import annotations

import struct

from gmpmon.binary.info import UNLOADED_FUNCTAB, BinaryInfo
from gmpmon.binary.validate import validate_layout

OFF = {
    "runtime.p.id": 0, "runtime.p.status": 4, "runtime.p.runqhead": 8,
    "runtime.p.runqtail": 12, "runtime.p.m": 16,
    "runtime.m.p": 0, "runtime.m.g0": 8, "runtime.m.curg": 16, "runtime.m.procid": 24,
    "runtime.g.m": 0, "runtime.g.atomicstatus": 8,
}
GOMAXPROCS, ALLP = 0x1000, 0x1100
TIDS = frozenset({100, 101, 102, 103})


def info() -> BinaryInfo:
    return BinaryInfo(
        path="synthetic", go_version="go1.27.0", go_minor=27, arch="amd64", pie=False,
        stripped=False, dwarf=True, offsets_source="dwarf", symbols={}, symbol_sizes={},
        offsets=OFF, wait_reasons=(), g_status=(), p_status=(), stw_reasons=(),
        probe_sites={}, missing_optional={}, functab=UNLOADED_FUNCTAB,
        globals={"runtime.gomaxprocs": GOMAXPROCS, "runtime.allp": ALLP},
    )


class Memory:
    """Four running Ps, each with its M, g0 and curg; ``moving`` Ps read mid-hand-off."""

    def __init__(self, moving: set[int]) -> None:
        self.words: dict[int, int] = {}
        n = 4
        self.put32(GOMAXPROCS, n)
        array = 0x2000
        for a, v in ((ALLP, array), (ALLP + 8, n), (ALLP + 16, n)):
            self.put64(a, v)
        for i in range(n):
            pp, mp, g0, gp = 0x3000 + 0x100 * i, 0x4000 + 0x100 * i, 0x5000 + 0x100 * i, \
                0x6000 + 0x100 * i
            self.put64(array + 8 * i, pp)
            self.put32(pp, i)
            self.put32(pp + 4, 1)  # _Prunning
            self.put32(pp + 8, 0)
            self.put32(pp + 12, 0)
            self.put64(pp + 16, mp)
            self.put64(mp, pp)
            self.put64(mp + 8, g0)
            self.put64(mp + 16, gp)
            self.put64(mp + 24, 100 + i)
            self.put64(g0, mp)
            self.put64(gp, 0 if i in moving else mp)  # dropg: g.m cleared before m.curg
            self.put32(gp + 8, 2)  # _Grunning

    def put64(self, a: int, v: int) -> None:
        for k, b in enumerate(struct.pack("<Q", v)):
            self.words[a + k] = b

    def put32(self, a: int, v: int) -> None:
        for k, b in enumerate(struct.pack("<I", v)):
            self.words[a + k] = b

    def read(self, addr: int, size: int) -> bytes:
        return bytes(self.words.get(addr + k, 0) for k in range(size))


def check(moving: set[int]) -> dict[str, str]:
    return validate_layout(info(), Memory(moving).read, groups=("procs",), tids=TIDS,
                           attempts=2, pause_s=0).failed


def test_all_running_ps_consistent_hold() -> None:
    assert check(set()) == {}


def test_one_p_frozen_mid_hand_off_is_set_aside() -> None:
    assert check({2}) == {}


def test_most_ps_mid_hand_off_fail_naming_the_check() -> None:
    failed = check({0, 1, 3})
    assert failed == {"procs": "m.curg.m == m for allp[0]'s M (read 0x0)"}


def test_half_the_ps_mid_hand_off_is_not_enough() -> None:
    assert "m.curg.m == m" in check({1, 3}).get("procs", "")


def _with_curg_status(status: dict[int, int]) -> dict[str, str]:
    mem = Memory(set())
    for i, st in status.items():
        mem.put32(0x6000 + 0x100 * i + 8, st)
    return validate_layout(info(), mem.read, groups=("procs",), tids=TIDS, attempts=2,
                           pause_s=0).failed


def test_every_p_frozen_between_casgstatus_and_dropg_holds() -> None:
    # park_m (_Gwaiting) and goschedImpl (_Grunnable) set the status before dropg: on a
    # loaded host the kernel held Prometheus's and Caddy's Ms there for every pass.
    assert _with_curg_status({0: 4, 1: 1, 2: 4, 3: 4}) == {}


def test_a_curg_status_no_running_p_can_have_fails() -> None:
    # _Gdead (6) or garbage at a wrong atomicstatus offset, on every P
    failed = _with_curg_status({0: 6, 1: 6, 2: 6, 3: 6})
    assert failed == {"procs": "a running P's curg is running (allp[0]: read 6)"}
