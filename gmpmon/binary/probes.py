"""Probe roles and where exactly to put each uprobe (capstone, x86-64).

Why the entry site is not the function's first byte: Go functions begin with the stack-growth
check (``cmp rsp,[r14+0x10]; jbe morestack``), and the kernel single-steps a ``cmp`` out of
line (~25 µs a hit measured here) while it *emulates* ``push reg``, conditional jumps and
direct call/jmp (~0.5 µs; arch/x86/kernel/uprobes.c: push_setup_xol_ops,
branch_setup_xol_ops). So the site is the first emulated instruction after the check that
still sees the registers the probe reads: ``push rbp`` on Go 1.21+; on 1.19, whose prologue
is ``sub rsp; mov [rsp+x],rbp; lea rbp`` (nothing emulated), it is the check's ``jbe`` (which
fires a second time when the stack grows and the body restarts: consumers should expect a
rare duplicate) or a later straight-line call/jcc when the role reads no register that the
instructions before it write.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import capstone

from gmpmon.binary.info import ProbeSite
from gmpmon.probetable import ROLES, Role

# The roles (runtime functions) come from the one probe table.
REQUIRED_ROLES: tuple[Role, ...] = tuple(r for r in ROLES if r.required)
# Optional roles: absent -> what OPTIONAL_WHY says is disabled.
OPTIONAL_ROLES: tuple[Role, ...] = tuple(r for r in ROLES if not r.required)
OPTIONAL_WHY: dict[str, str] = {r.name: r.why for r in OPTIONAL_ROLES}

_REG_FAMILY: dict[str, str] = {}
for _fam, _subs in {
    "rax": ("eax", "ax", "al", "ah"),
    "rbx": ("ebx", "bx", "bl", "bh"),
    "rcx": ("ecx", "cx", "cl", "ch"),
    "rdx": ("edx", "dx", "dl", "dh"),
    "rsi": ("esi", "si", "sil"),
    "rdi": ("edi", "di", "dil"),
    "rsp": ("esp", "sp", "spl"),
    "rbp": ("ebp", "bp", "bpl"),
    **{f"r{n}": (f"r{n}d", f"r{n}w", f"r{n}b") for n in range(8, 16)},
}.items():
    _REG_FAMILY[_fam] = _fam
    for _s in _subs:
        _REG_FAMILY[_s] = _fam


def _md() -> Any:
    md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    md.detail = True
    md.skipdata = True
    return md


_MD = _md()
_LITE = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
_LITE.skipdata = True


def is_emulated(code: bytes) -> bool:
    """Would the x86 uprobe code emulate (not single-step) this instruction?"""
    if not code:
        return False
    b = code[0]
    if b == 0x41 and len(code) == 2 and 0x50 <= code[1] <= 0x57:  # push r8..r15
        return True
    if 0x50 <= b <= 0x57 and len(code) == 1:  # push rax..rdi
        return True
    if b in (0xE8, 0xE9, 0xEB) or 0x70 <= b <= 0x7F:  # call/jmp rel, jcc rel8
        return True
    return b == 0x0F and len(code) == 6 and 0x80 <= code[1] <= 0x8F  # jcc rel32


def insn_text(insn: Any) -> str:
    return f"{insn.mnemonic} {insn.op_str}".strip()


def _writes(insn: Any) -> set[str]:
    try:
        _r, w = insn.regs_access()
    except capstone.CsError:
        return {"*"}
    return {_REG_FAMILY.get(insn.reg_name(x), insn.reg_name(x)) for x in w}


def jcc_cc(code: bytes) -> int | None:
    """The condition nibble of a jcc (rel8 0x7X, rel32 0x0F 0x8X), else None."""
    if code and 0x70 <= code[0] <= 0x7F:
        return code[0] & 0xF
    if len(code) == 6 and code[0] == 0x0F and 0x80 <= code[1] <= 0x8F:
        return code[1] & 0xF
    return None


def _is_jcc(insn: Any) -> bool:
    return jcc_cc(bytes(insn.bytes)) is not None


# (address, size, mnemonic, op_str): capstone's lite mode, ~5x faster than full detail; the
# detailed decoder is used only for the prologue and the few instructions after a call.
Lite = tuple[int, int, str, str]


def disasm_lite(code: bytes, addr: int) -> list[Lite]:
    return list(_LITE.disasm_lite(code, addr))


def disasm(code: bytes, addr: int, count: int = 0) -> list[Any]:
    return list(_MD.disasm(code, addr, count))


def lite_target(insn: Lite) -> int | None:
    """Target of a direct jump or call, else None."""
    _a, _s, mnem, op = insn
    if (mnem == "call" or mnem.startswith("j")) and op.startswith("0x"):
        try:
            return int(op, 16)
        except ValueError:
            return None
    return None


@dataclass(frozen=True, slots=True)
class EntrySite:
    addr: int
    insn: str
    sp_delta: int  # RSP at the site minus RSP at function entry (0 before any push/sub)
    emulated: bool


def _is_stack_check_cmp(insn: Any) -> bool:
    if insn.mnemonic != "cmp":
        return False
    for op in insn.operands:
        if (
            op.type == capstone.x86.X86_OP_MEM
            and insn.reg_name(op.mem.base) == "r14"
            and op.mem.disp in (0x10, 0x18)  # stackguard0; stackguard1 on systemstack code
        ):
            return True
    return False


PROLOGUE_INSNS = 30


def find_entry_site(
    code: bytes, entry: int, reads: tuple[str, ...], targets: set[int]
) -> EntrySite:
    """The cheapest correct entry site (see the module docstring). `targets`: every direct
    branch target in the function; a site must not be one (it would fire more than once)."""
    insns = disasm(code[: PROLOGUE_INSNS * 15], entry, PROLOGUE_INSNS)
    if not insns:
        raise ValueError("no instructions")
    first = insns[0]
    first_site = EntrySite(first.address, insn_text(first), 0, is_emulated(bytes(first.bytes)))
    if "*" in reads:
        return first_site
    start = 0
    check_jcc: Any = None
    for k, insn in enumerate(insns[:6]):
        if _is_stack_check_cmp(insn) and k + 1 < len(insns) and _is_jcc(insns[k + 1]):
            check_jcc = insns[k + 1]
            start = k + 2
            break
    needed = set(reads) | {"r14"}
    delta = 0
    for insn in insns[start:]:
        if insn.address in targets and insn.address != entry:
            break
        code1 = bytes(insn.bytes)
        if is_emulated(code1):
            return EntrySite(insn.address, insn_text(insn), delta, True)
        if insn.group(capstone.CS_GRP_RET) or insn.group(capstone.CS_GRP_JUMP):
            break
        w = _writes(insn)
        if "*" in w or w & needed:
            break
        if "rsp" in w:
            if insn.mnemonic == "sub" and insn.operands[1].type == capstone.x86.X86_OP_IMM:
                delta -= insn.operands[1].imm
            else:
                break
    if check_jcc is not None:
        return EntrySite(check_jcc.address, insn_text(check_jcc), 0, True)
    return first_site


def find_rets(lite: list[Lite]) -> tuple[int, ...]:
    return tuple(i[0] for i in lite if i[2] == "ret")


def find_call_results(
    code: bytes, entry: int, lite: list[Lite], callee_entry: int
) -> tuple[int, ...]:
    """The first jcc after each CALL callee with nothing in between writing RAX."""
    out = []
    for addr, size, mnem, _op in lite:
        if mnem != "call" or lite_target((addr, size, mnem, _op)) != callee_entry:
            continue
        after = addr + size - entry
        for nxt in disasm(code[after : after + 8 * 15], addr + size, 8):
            if _is_jcc(nxt):
                out.append(nxt.address)
                break
            w = _writes(nxt)
            if "*" in w or "rax" in w:
                break
            if (
                nxt.group(capstone.CS_GRP_JUMP)
                or nxt.group(capstone.CS_GRP_CALL)
                or nxt.group(capstone.CS_GRP_RET)
            ):
                break
    return tuple(out)


def make_site(
    role: Role,
    symbol: str,
    entry: int,
    code: bytes,
    resolve: dict[str, int],
) -> ProbeSite:
    """Disassemble one function and build its ProbeSite. `resolve`: callee name -> entry."""
    lite = disasm_lite(code, entry)
    targets = {t for i in lite if (t := lite_target(i)) is not None}
    site = find_entry_site(code, entry, role.reads, targets)
    rets = find_rets(lite) if role.rets else ()
    calls: dict[str, tuple[int, ...]] = {}
    for callee in role.calls:
        if callee in resolve:
            calls[callee] = find_call_results(code, entry, lite, resolve[callee])
    call_sites: dict[str, tuple[int, ...]] = {}
    for callee in role.call_sites:
        if callee in resolve:
            call_sites[callee] = tuple(
                i[0] for i in lite if i[2] == "call" and lite_target(i) == resolve[callee]
            )
    return ProbeSite(
        function=role.name,
        symbol=symbol,
        entry=entry,
        size=len(code),
        entry_site=site.addr,
        entry_insn=site.insn,
        rets=rets,
        call_results=calls,
        call_sites=call_sites,
        entry_sp_delta=site.sp_delta,
        entry_emulated=site.emulated,
    )


def calls_target(code: bytes, addr: int, target: int) -> bool:
    """Does this code call or jump to `target`? (tells an ABI wrapper from its body)"""
    return any(lite_target(i) == target for i in disasm_lite(code, addr))
