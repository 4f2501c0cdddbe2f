"""The branches into a function's RET tails (gmpmon/binary/exits.py): on hand-assembled code
whose answer is known, then on the real lockSlow and semacquire1 of every Go version built
here, where each exit must be an emulated instruction whose taken (or fall-through) path runs
straight into a RET, and every RET must be reached only through them."""

from __future__ import annotations

import pytest

from gmpmon.binary.exits import COND, MAX_TAIL, find_exit_edges
from gmpmon.binary.probes import disasm_lite, is_emulated, lite_target

BASE = 0x1000


def edges(code: bytes) -> tuple[tuple[int, int], ...]:
    return find_exit_edges(code, BASE, disasm_lite(code, BASE))


def test_a_fall_through_and_a_call_into_tails() -> None:
    code = bytes.fromhex(
        "4885c0"      # 1000 test rax, rax
        "7503"        # 1003 jne 1008: not taken falls into the first tail
        "90" "90"     # 1005 nop; 1006 nop
        "c3"          # 1007 ret
        "e800000000"  # 1008 call 100d: returns into the second tail
        "90" "c3")    # 100d nop; 100e ret
    # jne is cc 5; its fall-through fires on the opposite condition, je (cc 4)
    assert edges(code) == ((0x1003, COND | 4), (0x1008, 0))


def test_a_taken_jcc_into_a_tail() -> None:
    code = bytes.fromhex(
        "4885c0"   # 1000 test rax, rax
        "7402"     # 1003 je 1007
        "ebf9"     # 1005 jmp 1000 (no fall-through)
        "5d" "c3")  # 1007 pop rbp; 1008 ret
    assert edges(code) == ((0x1003, COND | 4),)


def test_a_jcc_whose_both_ways_lead_into_the_tail_always_fires() -> None:
    code = bytes.fromhex("4885c0" "7400" "c3")  # je to the next instruction, then ret
    assert edges(code) == ((0x1003, 0),)


@pytest.mark.parametrize("code,why", [
    (bytes.fromhex("4885c0" "7402" "ffe0" "90" "c3"), "an indirect jump"),
    (bytes.fromhex("4885c0" "7401" "c3" + "90" * MAX_TAIL + "c3"), "a tail too long"),
    (bytes.fromhex("90" "c3"), "a tail from the function's first instruction"),
    (bytes.fromhex("4885c0" "7402" "ffd0" "c3"), "an indirect call returning into the tail"),
])
def test_what_keeps_the_rets(code: bytes, why: str) -> None:
    assert edges(code) == (), why


def _code(path: str, entry: int, size: int) -> bytes:
    from elftools.elf.elffile import ELFFile

    with open(path, "rb") as f:
        for seg in ELFFile(f).iter_segments():
            va = seg["p_vaddr"]
            if seg["p_type"] == "PT_LOAD" and va <= entry < va + seg["p_filesz"]:
                f.seek(seg["p_offset"] + entry - va)
                return f.read(size)
    raise AssertionError(f"{entry:#x} not in a segment")


def _straight_to_ret(lite: list[tuple[int, int, str, str]], start: int) -> bool:
    """From address ``start``: no branch or call before a RET."""
    idx = {i[0]: k for k, i in enumerate(lite)}
    k = idx[start]
    while lite[k][2] != "ret":
        if lite[k][2].startswith("j") or lite[k][2] == "call":
            return False
        k += 1
    return True


@pytest.mark.parametrize("go", ["1.19", "1.21", "1.27"])
@pytest.mark.parametrize("fn", ["mutex.lockSlow", "runtime.semacquire1"])
def test_real_exits_cover_every_ret(go: str, fn: str) -> None:
    from gmpmon.binary.load import load
    from tests.gotargets import build

    exe = str(build("lockhot", go=go))
    ps = load(exe).probe_sites[fn]
    assert ps.exits, f"{fn} on go{go}: its RETs would be single-stepped"
    code = _code(exe, ps.entry, ps.size)
    lite = disasm_lite(code, ps.entry)
    at = {i[0]: i for i in lite}
    nxt = {a: lite[k + 1][0] for k, (a, *_r) in enumerate(lite[:-1])}
    entered: set[int] = set()  # tail starts the exits lead into
    for addr, cond in ps.exits:
        insn = at[addr]
        raw = code[addr - ps.entry: addr - ps.entry + insn[1]]
        assert is_emulated(raw), (fn, go, hex(addr), insn)
        target = lite_target(insn)
        # Where the probe's condition says it fires, execution runs straight into a RET.
        jcc = insn[2] not in ("call", "jmp")
        cc = (raw[1] if raw[0] == 0x0F else raw[0]) & 0xF
        if insn[2] == "call":
            dests = [nxt[addr]]
        elif not jcc:
            dests = [target]
        elif cond == 0:  # a jcc whose both ways lead into a tail
            dests = [target, nxt[addr]]
        elif cond & 0xF == cc:  # fires when taken
            dests = [target]
        else:  # fires when not taken
            assert cond & 0xF == cc ^ 1
            dests = [nxt[addr]]
        for d in dests:
            assert d is not None and _straight_to_ret(lite, d), (fn, go, hex(addr), hex(d or 0))
            entered.add(d)
    # Every RET: its straight-line tail is entered only at places the exits lead to.
    for k, insn in enumerate(lite):
        if insn[2] != "ret":
            continue
        j = k
        while j > 0 and not (lite[j - 1][2].startswith("j") or lite[j - 1][2] in ("call", "ret")):
            j -= 1
        tail = {i[0] for i in lite[j:k + 1]}
        for other in lite:
            t = lite_target(other)
            if other[0] not in tail and t in tail and other[2] != "call":
                assert other[0] in dict(ps.exits), (fn, go, hex(other[0]), "enters unprobed")
        assert lite[j][0] in entered or any(lite_target(o) == lite[j][0] for o in lite), (
            fn, go, hex(insn[0]))
