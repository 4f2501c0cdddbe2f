"""Where the runtime's global variables are: from .symtab, or found in stripped code.

``find_globals`` returns, for each name in :data:`GLOBAL_NAMES` it could place, the link-time
address (add ``BinaryInfo.load_bias`` for a PIE) and how it was found: ``"symtab"``, or
``"disasm <function>+0x<off>"`` for a `-s -w` build, where the address is the RIP-relative
operand of one instruction of that runtime function (gmpmon/binary/finders.py).

Nothing here says the address is *right* for a live process: readers call
:func:`gmpmon.binary.validate.validate_layout` first (GLOBALS_API.md in the notes, HACKING.md).
"""

from __future__ import annotations

from dataclasses import dataclass

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


def find_globals(symtab_globals: dict[str, tuple[int, int]]) -> dict[str, Found]:
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
