"""Where the runtime's global variables are: from .symtab, or found in stripped code.

``find_globals`` returns, for each name in :data:`GLOBAL_NAMES` it could place, the link-time
address (add ``BinaryInfo.load_bias`` for a PIE) and how it was found: ``"symtab"``, or
``"disasm <function>+0x<off>"`` for a `-s -w` build, where the address is the RIP-relative
operand of one instruction of that runtime function (gmpmon/binary/finders.py).

Nothing here says the address is *right* for a live process: readers call
:func:`gmpmon.binary.validate.validate_layout` first (GLOBALS_API.md in the notes, HACKING.md).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gmpmon.binary import pclntab
from gmpmon.binary.elf import Elf

if TYPE_CHECKING:
    from gmpmon.binary import finders

# The globals gmpmon reads from a target's memory (or, for the string arrays, from the file).
GLOBAL_NAMES: tuple[str, ...] = (
    "runtime.allp",  # []*p: ptr, len, cap (24 bytes)
    "runtime.allgs",  # []*g
    "runtime.allglen",  # uintptr: len(allgs), updated under allglock
    "runtime.allm",  # *m, linked through m.alllink
    "runtime.sched",  # schedt
    "runtime.gomaxprocs",  # int32
    "runtime.ncpu",  # int32
    "runtime.buildVersion",  # string
    "runtime.waitReasonStrings",  # [N]string
    "runtime.stwReasonStrings",  # [N]string (1.21+)
    "runtime.gStatusStrings",  # [N]string
)


@dataclass(frozen=True, slots=True)
class Found:
    addr: int
    size: int  # bytes (0 when only the address is known)
    how: str  # "symtab" | "disasm runtime.procresize+0x1a3" | ...


# Same variable, renamed: Go 1.25 replaced ncpu with numCPUStartup (os_linux.go).
ALIASES: dict[str, tuple[str, ...]] = {"runtime.ncpu": ("runtime.numCPUStartup",)}


def from_symtab(symtab_globals: Mapping[str, tuple[int, int]]) -> dict[str, Found]:
    """The wanted globals present in .symtab (name -> (value, size))."""
    out: dict[str, Found] = {}
    for name in GLOBAL_NAMES:
        for sym in (name, *ALIASES.get(name, ())):
            hit = symtab_globals.get(sym)
            if hit is not None:
                how = "symtab" if sym == name else f"symtab {sym}"
                out[name] = Found(hit[0], hit[1], how)
                break
    return out


# Globals without a finder: what a stripped build uses instead.
NO_FINDER: dict[str, str] = {
    "runtime.buildVersion": "no symbol; see 'version from' above",
    "runtime.waitReasonStrings": "no finder; names from gmpmon's table",
    "runtime.stwReasonStrings": "no finder; names from gmpmon's table",
    "runtime.gStatusStrings": "no finder; names from gmpmon's table",
}


def _in_ranges(addr: int, ranges: dict[str, tuple[int, int]], pointers: bool) -> bool:
    kinds = ("data", "bss") if pointers else ("noptrdata", "noptrbss")
    return any(ranges[k][0] <= addr < ranges[k][1] for k in kinds)


def from_code(
    elf: Elf,
    resolve: Callable[[str], tuple[int, int] | None],
    name_at: Callable[[int], str | None],
    offsets: dict[str, int],
) -> tuple[dict[str, Found], dict[str, str]]:
    """Globals found by the disassembly finders, and why each other one was not."""
    from gmpmon.binary import finders  # capstone: imported only for a stripped binary

    ranges = pclntab.moduledata_ranges(elf)
    if ranges is None:
        return {}, {f.name: "no moduledata: data/bss bounds unknown" for f in finders.FINDERS}
    cache: dict[str, finders.Decoded | None] = {}

    def function(name: str) -> finders.Decoded | None:
        if name not in cache:
            r = resolve(name)
            cache[name] = None if r is None else finders.decode(name, r[0], elf.read_vaddr(*r))
        return cache[name]

    ctx = finders.Context(function, name_at, offsets)
    found: dict[str, Found] = {}
    why: dict[str, str] = {}
    for f in finders.FINDERS:
        hit = f.find(ctx)
        if hit is None:
            why[f.name] = f"rule did not match: {f.rule}"
        elif not _in_ranges(hit.addr, ranges, f.pointers):
            why[f.name] = f"{hit.how} gave {hit.addr:#x}, outside moduledata's " + (
                "data/bss" if f.pointers else "noptrdata/noptrbss"
            )
        else:
            found[f.name] = Found(hit.addr, 0, hit.how)
    return found, why


def find_globals(
    elf: Elf,
    symtab_globals: Mapping[str, tuple[int, int]],
    resolve: Callable[[str], tuple[int, int] | None],
    name_at: Callable[[int], str | None],
    offsets: dict[str, int],
) -> tuple[dict[str, Found], dict[str, str]]:
    """.symtab where it has the global, else the disassembly finders. Returns (found, why
    each wanted global without a finder or symbol is absent)."""
    found = from_symtab(symtab_globals)
    why: dict[str, str] = {}
    if symtab_globals:
        return found, {g: "not in .symtab" for g in GLOBAL_NAMES if g not in found}
    code, why = from_code(elf, resolve, name_at, offsets)
    for g in GLOBAL_NAMES:
        if g not in found and g in code:
            found[g] = code[g]
        elif g not in found and g not in why:
            why[g] = NO_FINDER.get(g, "no finder")
    return found, why
