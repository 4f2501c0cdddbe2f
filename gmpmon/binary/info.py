"""BinaryInfo: everything gmpmon needs to know about a Go executable, as plain data.

Produced by :func:`gmpmon.binary.load` (pure: reads files, never BPF), consumed by capture
(probe addresses, struct offsets as -D flags), the model (enum names) and ``inspect``.
All addresses are *link-time virtual addresses* from the ELF (for PIE add ``load_bias`` to
get a runtime address; BCC's ``attach_uprobe(name=path, addr=...)`` wants the file's
virtual address for non-PIE and ``sym=..., sym_off=...`` or a file offset for PIE).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class ProbeSite:
    """Where to put uprobes on one runtime function.

    ``entry_site`` is the first instruction after the stack-growth check that the kernel
    *emulates* (``push rbp``, a conditional jump, call/jmp) rather than single-steps: a
    single-stepped uprobe hit costs ~25 µs on these machines, an emulated one ~0.5 µs.
    The registers there still hold the function's arguments.

    ``rets`` are the addresses of every RET instruction (single-stepped: ~25 µs a hit; use
    only on cold paths). Never a uretprobe.

    ``call_results`` maps a callee's name to emulated sites right after a call to it inside
    this function (the first conditional jump after the CALL, with no instruction in between
    writing RAX), where RAX still holds the callee's result: a cheap way to see a result
    without probing the callee's RETs (e.g. runqsteal -> runqgrab's n).
    """

    function: str  # canonical role name, e.g. "runtime.execute"
    symbol: str  # the symbol actually found in this binary (may differ: fallbacks)
    entry: int  # function entry address
    size: int
    entry_site: int
    entry_insn: str  # e.g. "push rbp"
    rets: tuple[int, ...] = ()
    # (address, condition) of the emulated branches into the RETs' tails, () where the RETs
    # cannot be covered so (gmpmon/binary/exits.py): ~0.7 µs a hit instead of ~25.
    exits: tuple[tuple[int, int], ...] = ()
    call_results: dict[str, tuple[int, ...]] = field(default_factory=dict)
    # callee name -> the CALL instructions to it inside this function (emulated; the
    # arguments of the call are in registers there: newproc.func1's CALL runqput).
    call_sites: dict[str, tuple[int, ...]] = field(default_factory=dict)
    # RSP at entry_site minus RSP at the function's entry: 0 at `push rbp` / the check's jbe;
    # negative when the site lies past `sub rsp` (Go 1.19 prologues). The return address is
    # at [RSP - entry_sp_delta] there.
    entry_sp_delta: int = 0
    # False when no emulated site was usable and entry_site is single-stepped (~25 µs/hit).
    entry_emulated: bool = True


@dataclass(frozen=True, slots=True)
class FuncTab:
    """Sorted function table for symbolizing PCs (from .symtab or .gopclntab)."""

    starts: tuple[int, ...]
    ends: tuple[int, ...]
    names: tuple[str, ...]
    # False for a BinaryInfo loaded without it (``load_elf(functab=False)``, ``gmpmon ps``):
    # a lookup then is a bug, not an unknown frame.
    loaded: bool = True

    def _check(self) -> None:
        if not self.loaded:
            raise RuntimeError("this BinaryInfo was loaded without its function table")

    def lookup(self, pc: int) -> str | None:
        if not self.loaded:
            self._check()
        i = bisect.bisect_right(self.starts, pc) - 1
        if i >= 0 and pc < self.ends[i]:
            return self.names[i]
        return None

    def range_of(self, name: str) -> tuple[int, int] | None:
        self._check()
        for s, e, n in zip(self.starts, self.ends, self.names, strict=True):
            if n == name:
                return s, e
        return None


UNLOADED_FUNCTAB = FuncTab((), (), (), loaded=False)


@dataclass(frozen=True, slots=True)
class BinaryInfo:
    path: str  # the file that was read (for a pid: /proc/PID/root/<exe> or /proc/PID/exe)
    go_version: str  # "go1.27.3"
    go_minor: int  # 27 for go1.27.3
    arch: str  # "amd64" (the only one supported)
    pie: bool
    stripped: bool  # no .symtab
    dwarf: bool
    offsets_source: str  # "dwarf" | "table"
    symbols: dict[str, int]  # function and global names -> address (those gmpmon needs)
    symbol_sizes: dict[str, int]
    offsets: dict[str, int]  # "runtime.g.goid" -> 152, ...
    wait_reasons: tuple[str, ...]  # index = waitReason value
    g_status: tuple[str, ...]
    p_status: tuple[str, ...]
    stw_reasons: tuple[str, ...]
    probe_sites: dict[str, ProbeSite]  # canonical role name -> site
    missing_optional: dict[str, str]  # feature -> why it is disabled (e.g. "mutex": "...")
    functab: FuncTab
    load_bias: int = 0  # runtime - link address; set when resolved from a live pid (PIE)
    pid: int | None = None
    # The runtime's global variables (gmpmon.binary.globals.GLOBAL_NAMES) that were found:
    # link-time address (add load_bias), and how ("symtab", "disasm runtime.procresize+0x1a3").
    # Present is not proven: validate_layout() checks them against the live process.
    globals: dict[str, int] = field(default_factory=dict)
    global_how: dict[str, str] = field(default_factory=dict)
    global_sizes: dict[str, int] = field(default_factory=dict)  # 0: only the address known
    globals_missing: dict[str, str] = field(default_factory=dict)  # name -> why not found
    # offsets_source "table": whose table ("1.27"); differs from go_minor for a Go release
    # newer than the table (then trusted only after validate_layout on the live process).
    offsets_table: str = ""
    # Where go_version came from: "build info", or runtime.buildVersion and what it was
    # checked against (gmpmon.binary.goversion).
    go_version_source: str = "build info"
