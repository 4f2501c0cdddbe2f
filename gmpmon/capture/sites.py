"""Where each probe goes: resolve gmpmon's probe list against one binary's BinaryInfo.

BinaryInfo.probe_sites gives the cheap (emulated) entry site, the RETs and call-result sites
of the runtime functions. Two sites are capture's own: the ``CALL runtime.runqput`` inside
``runtime.newproc.func1`` (the goroutine-creation probe) and, when BinaryInfo lacks a role,
the same entry-site rule applied here with capstone on the function's bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

from gmpmon.binary.info import BinaryInfo, ProbeSite

# Instructions the kernel's uprobe code emulates (arch/x86/kernel/uprobes.c: branch_setup_xol_ops
# and push_setup_xol_ops): a hit costs ~0.5 µs instead of ~25 µs single-stepped.
_EMULATED_PREFIXES = ("push", "j", "call")


@dataclass(frozen=True, slots=True)
class Site:
    """One uprobe to attach: a BPF function on a file-virtual address."""

    fn_name: str  # BPF function in probes/gmpmon.bpf.c
    addr: int  # link-time virtual address in the file
    role: str  # which runtime function (for messages and docs)
    hot: bool  # hot probes are duty-cycled in default mode and absent in sample mode


class BinaryText:
    """Reads code bytes of an ELF file by virtual address (for capstone)."""

    def __init__(self, path: str) -> None:
        from elftools.elf.elffile import ELFFile

        with open(path, "rb") as f:
            elf = ELFFile(f)
            self._segs = [
                (s["p_vaddr"], s["p_filesz"], s["p_offset"])
                for s in elf.iter_segments()
                if s["p_type"] == "PT_LOAD"
            ]
        self.path = path

    def file_offset(self, vaddr: int) -> int | None:
        for va, size, off in self._segs:
            if va <= vaddr < va + size:
                return int(off + vaddr - va)
        return None

    def read(self, vaddr: int, size: int) -> bytes:
        off = self.file_offset(vaddr)
        if off is None:
            return b""
        with open(self.path, "rb") as f:
            f.seek(off)
            return f.read(size)


def _insns(text: BinaryText, start: int, size: int) -> list[tuple[int, str, str, int]]:
    import capstone

    md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    code = text.read(start, size)
    return [(i.address, i.mnemonic, i.op_str, i.size) for i in md.disasm(code, start)]


def entry_site(text: BinaryText, start: int, size: int) -> int:
    """First emulated instruction before the body writes any argument register.

    Go's prologue is ``cmp rsp,[r14+0x10]; jbe morestack; push rbp; mov rbp,rsp; ...``.
    Both the jbe and the push are emulated, but only the push fires once per call: when the
    stack must grow, morestack jumps back to the entry and the jbe is hit a second time.
    """
    first = _insns(text, start, min(size, 48))[:4]
    for addr, mnem, _ops, _sz in first:
        if mnem == "push":
            return addr
    for addr, mnem, _ops, _sz in first:
        if mnem.startswith(_EMULATED_PREFIXES):
            return addr
    return start


def call_result_site(text: BinaryText, start: int, size: int, callee: int) -> int | None:
    """The first conditional jump after ``call callee`` with only flag-setting compares in
    between: there RAX still holds the callee's first result, and the jcc is emulated."""
    want = hex(callee)
    insns = _insns(text, start, size)
    for i, (_a, m, o, _s) in enumerate(insns):
        if m == "call" and o == want:
            for addr, m2, _o2, _s2 in insns[i + 1 : i + 4]:
                if m2.startswith("j") and m2 != "jmp":
                    return addr
                if m2 not in ("test", "cmp"):
                    break
    return None


def rets(text: BinaryText, start: int, size: int) -> tuple[int, ...]:
    return tuple(a for a, m, _o, _s in _insns(text, start, size) if m == "ret")


def call_sites(text: BinaryText, start: int, size: int, callee: int) -> tuple[int, ...]:
    """Addresses of ``call callee`` inside [start, start+size)."""
    want = hex(callee)
    return tuple(a for a, m, o, _s in _insns(text, start, size) if m == "call" and o == want)


def func_range(info: BinaryInfo, name: str) -> tuple[int, int] | None:
    if name in info.symbols:
        start = info.symbols[name]
        size = info.symbol_sizes.get(name, 0)
        if size:
            return start, size
    r = info.functab.range_of(name)
    if r is None:
        return None
    return r[0], r[1] - r[0]


def probe_site(info: BinaryInfo, text: BinaryText, *names: str) -> ProbeSite | None:
    """The ProbeSite for the first of ``names`` this binary has (BinaryInfo's, else our own)."""
    for name in names:
        site = info.probe_sites.get(name)
        if site is not None:
            return site
    for name in names:
        r = func_range(info, name)
        if r is None:
            continue
        start, size = r
        return ProbeSite(
            function=names[0],
            symbol=name,
            entry=start,
            size=size,
            entry_site=entry_site(text, start, size),
            entry_insn="",
            rets=rets(text, start, size),
        )
    return None
