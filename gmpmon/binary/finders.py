"""Finding the runtime's globals in the code of a `-s -w` build (no .symtab, no DWARF).

.gopclntab still names every function and its entry. A few runtime functions touch each
global in a way no other variable is touched there; the global's address is the RIP-relative
operand of that instruction. Each finder is one such rule, on one function, verified on the
Go versions listed (HACKING.md "Finding globals in stripped binaries";
tests/unit/test_globals.py compares every address with .symtab of the same program built
without -s -w). A candidate must also lie in moduledata's data/bss ranges (pointer-holding
globals in data/bss, plain numbers in noptrdata/noptrbss) or it is dropped.

The decoder is a straight-line tracker: ``lea reg, [rip+X]`` / ``mov reg, [rip+X]`` /
``mov reg, imm`` are remembered per 64-bit register until the register is written again, a
call or jump, or a branch target; ``xchg [reg], r`` and ``lock xadd [reg], r`` are then
atomic stores/adds to X. That is how Go compiles ``atomic.Store*(&global, v)`` and
``global.Add(n)``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import capstone
from capstone import x86

_MD = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
_MD.detail = True
_LITE = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)  # no detail: disasm_lite

# Version range every rule below was checked on (tests/unit/test_globals.py, the full matrix).
VERIFIED = "1.19, 1.21-1.27"


@dataclass(frozen=True, slots=True)
class Ref:
    """One RIP-relative data access (or atomic through a lea'd register) in a function."""

    off: int  # instruction offset in the function
    target: int  # link-time address
    kind: str  # "load" | "store" | "lea" | "cmp" | "xchg" | "xadd" | "other"
    size: int  # operand size in bytes (8 for lea)
    value: tuple[str, int] | None = None  # xchg/xadd: what the source register held


@dataclass(frozen=True, slots=True)
class Decoded:
    name: str
    entry: int
    refs: tuple[Ref, ...]
    calls: tuple[tuple[int, int], ...]  # (offset, target) of each direct call

    def slices(self) -> dict[int, int]:
        """Slice headers: base B with qword accesses at B, B+8 and B+16 and a store to one
        of them (a global slice that is assigned here) -> number of accesses to it."""
        q = {r.target for r in self.refs if r.size == 8}
        stored = {r.target for r in self.refs if r.kind in ("store", "xchg")}
        out: dict[int, int] = {}
        for b in q:
            if b + 8 in q and b + 16 in q and stored & {b, b + 8, b + 16}:
                out[b] = sum(1 for r in self.refs if b <= r.target < b + 24)
        return out

    def first_ref(self, target: int) -> int:
        return min(r.off for r in self.refs if r.target == target)


_REG64: dict[str, str] = {}
for _n in ("ax", "bx", "cx", "dx", "si", "di", "bp", "sp"):
    for _v in (f"r{_n}", f"e{_n}", _n, f"{_n[0]}l" if _n[1] == "x" else f"{_n}l"):
        _REG64[_v] = f"r{_n}"
for _i in range(8, 16):
    for _v in (f"r{_i}", f"r{_i}d", f"r{_i}w", f"r{_i}b"):
        _REG64[_v] = f"r{_i}"


_R64_BY_ID: dict[int, str] = {}


def _r64(md: Any, reg: int) -> str:
    r = _R64_BY_ID.get(reg)
    if r is None:
        name: str = md.reg_name(reg) or ""
        r = _R64_BY_ID[reg] = _REG64.get(name, name)
    return r


_JUMP, _CALL, _RET = capstone.CS_GRP_JUMP, capstone.CS_GRP_CALL, capstone.CS_GRP_RET
_IMM, _MEM, _REG, _RIP = x86.X86_OP_IMM, x86.X86_OP_MEM, x86.X86_OP_REG, x86.X86_REG_RIP
_OPERANDS_OF = frozenset({"mov", "xchg", "xadd"})  # the mnemonics whose operands matter


def _track(insns: list[Any], entry: int, targets: set[int], refs: list[Ref],
           calls: list[tuple[int, int]]) -> None:
    """The tracker over detailed instructions (a whole function, or one straight-line
    segment of it: the register state starts empty at either). Each instruction's groups
    are read once, its operands only when it is a branch, names a RIP-relative address
    ("rip" in its text) or is a mov/xchg/xadd, and its register writes only while some
    register is tracked or it sets one."""
    regs: dict[str, tuple[str, int]] = {}  # r64 -> ("addr"|"load"|"imm", value)
    for ins in insns:
        g = ins.groups
        address = ins.address
        off = address - entry
        if address in targets:
            regs.clear()
        if _CALL in g:
            ops = ins.operands
            if ops and ops[0].type == _IMM:
                calls.append((off, ops[0].imm))
            regs.clear()
            continue
        if _JUMP in g or _RET in g:
            regs.clear()
            continue
        mn = ins.mnemonic.removeprefix("lock ")
        has_rip = "rip" in ins.op_str
        if not has_rip and mn not in _OPERANDS_OF:
            if regs:  # nothing to learn from it but which tracked registers it writes
                _forget_written(ins, regs)
            continue
        ops = ins.operands
        new: tuple[str, int] | None = None
        ref = _rip_ref(ins, ops, mn, off) if has_rip else None
        if ref is not None:
            refs.append(ref[0])
            new = ref[1]
        elif mn in ("xchg", "xadd") and len(ops) == 2 and ops[0].type == _MEM:
            m = ops[0].mem
            base = _r64(_MD, m.base) if m.base else ""
            held = regs.get(base)
            if held and held[0] == "addr" and m.index == 0 and m.disp == 0:
                src = regs.get(_r64(_MD, ops[1].reg)) if ops[1].type == _REG else None
                refs.append(Ref(off, held[1], mn, ops[0].size, src))
        elif mn == "mov" and len(ops) == 2 and ops[0].type == _REG and ops[1].type == _IMM:
            new = ("imm", ops[1].imm & 0xFFFFFFFF if ops[0].size == 4 else ops[1].imm)
        if regs or new is not None:
            if not _forget_written(ins, regs):
                continue
            if new is not None and ops and ops[0].type == _REG:
                regs[_r64(_MD, ops[0].reg)] = new


def _forget_written(ins: Any, regs: dict[str, tuple[str, int]]) -> bool:
    """Drop the tracked registers ``ins`` writes; False (and nothing tracked any more) when
    capstone cannot say which those are."""
    try:
        _read, written = ins.regs_access()
    except capstone.CsError:
        regs.clear()
        return False
    for w in written:
        regs.pop(_r64(_MD, w), None)
    return True


def _rip_ref(ins: Any, ops: Any, mn: str, off: int) -> tuple[Ref, tuple[str, int] | None] | None:
    """The Ref of an instruction with a RIP-relative operand, and what it puts in its
    destination register (lea: the address, mov: a load of it), or None."""
    rip = [o for o in ops if o.type == _MEM and o.mem.base == _RIP]
    if not rip:
        return None
    o = rip[0]
    target = ins.address + ins.size + o.mem.disp
    new: tuple[str, int] | None = None
    if mn == "lea":
        kind, new = "lea", ("addr", target)
    elif mn in ("mov", "movsxd", "movzx") and ops[0].type == _REG:
        kind, new = "load", ("load", target)
    elif mn == "mov":
        kind = "store"
    elif mn == "cmp":
        kind = "cmp"
    elif mn == "xchg":
        kind = "xchg"
    else:
        kind = "other"
    return Ref(off, target, kind, 8 if mn == "lea" else o.size), new


_RIP_TEXT = re.compile(r"(?:(\w+) ptr )?\[rip ([+-]) (0x[0-9a-f]+|[0-9]+)\]")
_PTR_SIZE = {"byte": 1, "word": 2, "dword": 4, "qword": 8, "xmmword": 16, "ymmword": 32,
             "zmmword": 64}


def _rip_ref_lite(address: int, size: int, mn: str, op_str: str, off: int) -> Ref | None:
    """_rip_ref from capstone's text of the instruction, when it says everything: the
    displacement, and the operand's size as "<size> ptr" (lea: 8). None: ask the details."""
    m = _RIP_TEXT.search(op_str)
    if m is None or op_str.count("[") != 1:
        return None
    word, sign, num = m.groups()
    disp = int(num, 16) if num.startswith("0x") else int(num)
    target = address + size + (-disp if sign == "-" else disp)
    if mn == "lea":
        return Ref(off, target, "lea", 8)
    width = _PTR_SIZE.get(word or "")
    if width is None:
        return None
    first_is_reg = "[" not in op_str.split(",", 1)[0] and "," in op_str
    if mn in ("mov", "movsxd", "movzx") and first_is_reg:
        kind = "load"
    elif mn == "mov":
        kind = "store"
    elif mn in ("cmp", "xchg"):
        kind = mn
    else:
        kind = "other"
    return Ref(off, target, kind, width)


# Per mnemonic: (jump, call, ret) as capstone's groups say, learnt from the first
# instruction seen with that mnemonic (the same text is the same instruction to capstone).
_FLOW: dict[str, tuple[bool, bool, bool]] = {}


def _detail(code: bytes, entry: int, lo: int, hi: int) -> list[Any]:
    return list(_MD.disasm(code[lo:hi], entry + lo))


def _flow(mn: str, code: bytes, entry: int, off: int, size: int) -> tuple[bool, bool, bool]:
    f = _FLOW.get(mn)
    if f is None:
        (ins,) = _detail(code, entry, off, off + size)
        g = ins.groups
        f = _FLOW[mn] = (_JUMP in g, _CALL in g, _RET in g)
    return f


def _imm_target(op_str: str, code: bytes, entry: int, off: int, size: int) -> int | None:
    """A branch's immediate target: capstone prints it as a bare number; anything else
    (a register, memory) is asked of capstone's operands."""
    if op_str.startswith("0x") and op_str[2:].isalnum():
        return int(op_str, 16)
    if op_str.isdigit():
        return int(op_str)
    (ins,) = _detail(code, entry, off, off + size)
    ops = ins.operands
    return int(ops[0].imm) if ops and ops[0].type == _IMM else None


def decode(name: str, entry: int, code: bytes) -> Decoded:
    """The refs and calls of one function, as the tracker over every detailed instruction
    would give them (tests/unit/test_psload.py compares, function by function).

    Capstone's detail objects cost most of ``ps``'s time on a stripped binary, so the code
    is decoded lite (address, size, mnemonic, operand text) and in detail only where it
    can matter: the tracker's register state is cleared at every branch, call, return and
    branch target, so it is only read in a straight-line segment holding an xchg/xadd;
    such a segment is tracked in full; elsewhere an instruction with a RIP-relative operand
    gives its ref from its text when that says everything ("<size> ptr [rip + disp]"), in
    detail otherwise (its ref depends on nothing before it)."""
    lite = list(_LITE.disasm_lite(code, entry))
    n = len(lite)
    flows: list[tuple[bool, bool, bool]] = []
    targets: set[int] = set()
    for address, size, mn, op_str in lite:
        f = _flow(mn, code, entry, address - entry, size)
        flows.append(f)
        if f[0]:
            t = _imm_target(op_str, code, entry, address - entry, size)
            if t is not None:
                targets.add(t)
    refs: list[Ref] = []
    calls: list[tuple[int, int]] = []
    i = 0
    while i < n:
        j = i  # the segment is lite[i..j]
        while not any(flows[j]) and j + 1 < n and lite[j + 1][0] not in targets:
            j += 1
        seg = lite[i : j + 1]
        lo, hi = seg[0][0] - entry, seg[-1][0] + seg[-1][1] - entry
        if any(mn.removeprefix("lock ") in ("xchg", "xadd") for _a, _s, mn, _o in seg):
            insns = _detail(code, entry, lo, hi)
            if [x.address for x in insns] != [a for a, _s, _m, _o in seg]:
                return _decode_all(name, entry, code)  # never expected: the plain way
            _track(insns, entry, targets, refs, calls)
        else:
            for (address, size, mn, op_str), f in zip(seg, flows[i : j + 1], strict=True):
                off = address - entry
                if f[1]:
                    t = _imm_target(op_str, code, entry, off, size)
                    if t is not None:
                        calls.append((off, t))
                elif not any(f) and "rip" in op_str:
                    lite_ref = _rip_ref_lite(address, size, mn.removeprefix("lock "), op_str, off)
                    if lite_ref is not None:
                        refs.append(lite_ref)
                        continue
                    (ins,) = _detail(code, entry, off, off + size)
                    ref = _rip_ref(ins, ins.operands, mn.removeprefix("lock "), off)
                    if ref is not None:
                        refs.append(ref[0])
        i = j + 1
    return Decoded(name, entry, tuple(refs), tuple(calls))


def _decode_all(name: str, entry: int, code: bytes) -> Decoded:
    insns = list(_MD.disasm(code, entry))
    targets: set[int] = set()
    for ins in insns:
        if _JUMP in ins.groups:
            ops = ins.operands
            if ops and ops[0].type == _IMM:
                targets.add(ops[0].imm)
    refs: list[Ref] = []
    calls: list[tuple[int, int]] = []
    _track(insns, entry, targets, refs, calls)
    return Decoded(name, entry, tuple(refs), tuple(calls))


# -- the rules ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Context:
    """What a rule may look at: decoded functions (by pclntab name), names of call targets,
    and the struct offsets in use (sched is found through one of its fields)."""

    function: Callable[[str], Decoded | None]
    name_at: Callable[[int], str | None]
    offsets: dict[str, int]


@dataclass(frozen=True, slots=True)
class Hit:
    addr: int
    function: str
    off: int  # offset of the deciding instruction
    note: str = ""

    @property
    def how(self) -> str:
        return f"disasm {self.function}+{self.off:#x}" + (f" ({self.note})" if self.note else "")


@dataclass(frozen=True, slots=True)
class Finder:
    name: str
    rule: str
    pointers: bool  # holds pointers: must be in data/bss (else noptrdata/noptrbss)
    find: Callable[[Context], Hit | None]
    needs: tuple[str, ...] = field(default=())  # other globals it builds on


def _one(cands: list[Any]) -> Any | None:
    return cands[0] if len(set(cands)) == 1 else None


def _allp(ctx: Context) -> Hit | None:
    d = ctx.function("runtime.procresize")
    if d is None:
        return None
    sl = d.slices()
    if not sl:
        return None
    best = max(sl.values())
    top = [b for b, n in sl.items() if n == best]
    if len(top) != 1:
        return None
    return Hit(top[0], d.name, d.first_ref(top[0]))


def _gomaxprocs(ctx: Context) -> Hit | None:
    d = ctx.function("runtime.procresize")
    if d is None:
        return None
    loaded = {r.target for r in d.refs if r.kind == "load" and r.size == 4}
    hits = [r for r in d.refs if r.kind == "xchg" and r.size == 4 and r.target in loaded]
    h = _one([r.target for r in hits])
    return None if h is None else Hit(h, d.name, hits[0].off)


def _ncpu(ctx: Context) -> Hit | None:
    d = ctx.function("runtime.osinit")
    if d is None:
        return None
    for off, target in d.calls:
        if ctx.name_at(target) in ("runtime.getproccount", "runtime.getCPUCount"):
            after = [r for r in d.refs if r.off > off]
            if after and after[0].kind == "store" and after[0].size == 4:
                return Hit(after[0].target, d.name, after[0].off)
            return None
    return None


def _allgs(ctx: Context) -> Hit | None:
    d = ctx.function("runtime.allgadd")
    if d is None:
        return None
    sl = d.slices()
    if len(sl) != 1:
        return None
    (b,) = sl
    return Hit(b, d.name, d.first_ref(b))


def _allglen(ctx: Context) -> Hit | None:
    d = ctx.function("runtime.allgadd")
    allgs = _allgs(ctx)
    if d is None or allgs is None:
        return None
    hits = [
        r
        for r in d.refs
        if r.kind == "xchg" and r.size == 8 and r.value == ("load", allgs.addr + 8)
    ]
    h = _one([r.target for r in hits])
    return None if h is None else Hit(h, d.name, hits[0].off)


def _allm(ctx: Context) -> Hit | None:
    d = ctx.function("runtime.mcommoninit")
    if d is None:
        return None
    loaded = {r.target for r in d.refs if r.kind == "load" and r.size == 8}
    hits = [r for r in d.refs if r.kind == "xchg" and r.size == 8 and r.target in loaded]
    h = _one([r.target for r in hits])
    return None if h is None else Hit(h, d.name, hits[0].off)


def _sched(ctx: Context) -> Hit | None:
    off = ctx.offsets.get("runtime.schedt.npidle")
    if off is None:
        return None
    found: list[Hit] = []
    for fn, delta in (("runtime.pidleput", 1), ("runtime.pidleget", 0xFFFFFFFF)):
        d = ctx.function(fn)
        if d is None:
            continue
        hits = [r for r in d.refs if r.kind == "xadd" and r.size == 4 and r.value == ("imm", delta)]
        t = _one([r.target for r in hits])
        if t is None:
            return None  # the function is there but the rule does not hold: don't guess
        found.append(Hit(t - off, d.name, hits[0].off))
    if not found or len({h.addr for h in found}) != 1:
        return None
    return found[0]


def _lea_before_call(d: Decoded, ctx: Context, callee: str) -> list[int]:
    """The address lea'd last before each call of ``callee`` (a method's receiver in RAX)."""
    out = []
    for off, target in d.calls:
        if ctx.name_at(target) == callee:
            leas = [r for r in d.refs if r.kind == "lea" and r.off < off]
            if leas:
                out.append(max(leas, key=lambda r: r.off).target)
    return out


def _gc_controller(ctx: Context) -> Hit | None:
    d = ctx.function("runtime.gcControllerCommit")
    if d is None:
        return None
    got = [a for m in ("commit", "revise")
           for a in _lea_before_call(d, ctx, f"runtime.(*gcControllerState).{m}")]
    h = _one(got)
    return None if h is None or len(got) < 2 else Hit(h, d.name, d.first_ref(h))


def _memstats(ctx: Context) -> Hit | None:
    off = ctx.offsets.get("runtime.mstats.numgc")
    d = ctx.function("runtime.gcMarkTermination")
    if off is None or d is None:
        return None
    # memstats.numgc++, and numgc % len(pause_ns) (256) read as its low byte
    incs = {r.target for r in d.refs if r.kind == "other" and r.size == 4}
    bytes_read = {r.target for r in d.refs if r.kind == "load" and r.size == 1}
    h = _one(sorted(incs & bytes_read))
    return None if h is None else Hit(h - off, d.name, d.first_ref(h))


def _work(ctx: Context) -> Hit | None:
    off = ctx.offsets.get("runtime.workType.cycles")
    d = ctx.function("runtime.gcStart")
    if off is None or d is None:
        return None
    # work.cycles.Add(1) (1.21+: lock xadd of 1 through a lea) or work.cycles++ (1.19: inc)
    hits = [r for r in d.refs if r.kind == "xadd" and r.size == 4 and r.value == ("imm", 1)]
    if not hits:  # 1.19: the last dword inc before `call (*gcControllerState).startCycle`
        calls = [o for o, t in d.calls
                 if ctx.name_at(t) == "runtime.(*gcControllerState).startCycle"]
        incs = [r for r in d.refs if r.kind == "other" and r.size == 4
                and calls and r.off < calls[0]]
        hits = [max(incs, key=lambda r: r.off)] if len(calls) == 1 and incs else []
    h = _one([r.target for r in hits])
    return None if h is None else Hit(h - off, d.name, hits[0].off)


FINDERS: tuple[Finder, ...] = (
    Finder(
        "runtime.allp",
        "procresize: the slice header (qword accesses at B, B+8, B+16, one of them stored) "
        "accessed most often",
        True,
        _allp,
    ),
    Finder(
        "runtime.gomaxprocs",
        "procresize: the dword it reads (old := gomaxprocs) and later atomically stores "
        "with xchg through a lea",
        False,
        _gomaxprocs,
    ),
    Finder(
        "runtime.ncpu",
        "osinit: the dword stored right after `call getproccount` (<=1.24) or "
        "`call getCPUCount` (1.25+, numCPUStartup)",
        False,
        _ncpu,
    ),
    Finder(
        "runtime.allgs",
        "allgadd: the only slice header it assigns (allgs = append(allgs, gp))",
        True,
        _allgs,
    ),
    Finder(
        "runtime.allglen",
        "allgadd: the qword target of the xchg whose value was just loaded from len(allgs)",
        False,
        _allglen,
        ("runtime.allgs",),
    ),
    Finder(
        "runtime.allm",
        "mcommoninit: the qword it reads (mp.alllink = allm) and stores with xchg "
        "(atomicstorep(&allm, mp))",
        True,
        _allm,
    ),
    Finder(
        "runtime.sched",
        "pidleput / pidleget: the dword target of `lock xadd` of +1 / -1 through a lea is "
        "sched.npidle; sched = it - offset(schedt.npidle); both must agree",
        True,
        _sched,
    ),
    Finder(
        "runtime.gcController",
        "gcControllerCommit: the address lea'd into the receiver before both "
        "`call (*gcControllerState).commit` and `.revise`",
        False,
        _gc_controller,
    ),
    Finder(
        "runtime.memstats",
        "gcMarkTermination: the dword it increments (numgc++) and reads as a byte "
        "(numgc % 256); memstats = it - offset(mstats.numgc)",
        False,
        _memstats,
    ),
    Finder(
        "runtime.work",
        "gcStart: the dword target of `lock xadd` of 1 through a lea (work.cycles.Add(1), "
        "1.21+) or of the last `inc` before `call startCycle` (1.19); "
        "work = it - offset(workType.cycles)",
        True,
        _work,
    ),
)
