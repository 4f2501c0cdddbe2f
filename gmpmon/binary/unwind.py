"""A goroutine's stack from its saved registers and stack bytes, as the runtime unwinds it.

Pure: the caller reads the target (g.sched or g.syscallpc/sp, and the stack from sp up to
g.stack.hi) and passes the bytes; nothing here touches /proc. The walk is the runtime's own
(runtime/traceback.go ``unwinder``, symtab.go, symtabinl.go at go1.19.8 and go1.21-1.27):

- ``findfunc(pc)`` in the functab; the frame's size from the pcsp table at pc
  (``funcspdelta``): fp = sp + spdelta + 8 (amd64 has no link register), the caller's pc is
  the word at fp - 8 and its sp is fp;
- a function flagged TopFrame (goexit, mstart, rt0_go, ...) ends the stack;
- the symbolic pc is pc - 1 (the CALL, not the return address; saved g.sched and
  syscallpc are return addresses too) for file:line and the inline tree;
- inlined calls: FUNCDATA_InlTree + PCDATA_InlTreeIndex at that pc give the innermost
  inlined function; its parentPc is a pc in the caller where the lookup starts again, until
  the index is < 0 (the physical function). Go prints each inlined frame as ``f(...)`` with
  no pc offset.

``_func`` (runtime2.go): entryOff, nameOff, args, deferreturn, pcsp, pcfile, pcln, npcdata,
cuOffset, [startLine: 1.20+], funcID u8, flag u8, pad u8, nfuncdata u8; then npcdata u32
pcdata table offsets and nfuncdata u32 funcdata offsets (from moduledata.gofunc).
``inlinedCall``: 1.18-1.19 {parent i16, funcID u8, pad, file, line, func_, parentPc} (20
bytes); 1.20+ {funcID u8, pad[3], nameOff, parentPc, startLine} (16 bytes).
"""

from __future__ import annotations

import bisect
import struct
from dataclasses import dataclass

from gmpmon.binary import pclntab
from gmpmon.binary.elf import Elf
from gmpmon.binary.pcline import LineTable
from gmpmon.errors import BinaryFormatError

FUNCFLAG_TOPFRAME = 1
FUNCFLAG_SPWRITE = 2
PCDATA_INLTREEINDEX = 2
FUNCDATA_INLTREE = 3
NO_FUNCDATA = 0xFFFFFFFF
MAX_FRAMES = 1000  # physical frames walked at most (the runtime's own traceback prints 100)

# moduledata.gofunc: after rodata; the field list grew (covctrs in 1.20, typedesclen and
# itaboffset/itabsize in 1.27), so the candidates are checked against the file.
_GOFUNC_OFFSETS_118 = (304,)
_GOFUNC_OFFSETS_120 = (320, 344)

# Unwind results.
OK = "ok"
TRUNCATED = "truncated"  # a caller's frame lies outside the stack bytes given
BAD_PC = "bad pc"  # a pc outside every function: the stack changed under the read
SPWRITE = "spwrite"  # a function that writes SP (assembly): the runtime stops there too
TOO_DEEP = "too deep"


@dataclass(frozen=True, slots=True)
class Frame:
    """One logical frame as Go prints it."""

    func: str
    file: str
    line: int
    pc: int  # link-time pc of the physical frame (the return address for callers)
    offset: int | None  # pc - entry ("+0x25"); None for an inlined frame or pc == entry
    inlined: bool
    func_id: int
    entry: int  # link-time entry of the physical function


class Unwinder:
    """Per binary; every pc and address given in and out is link-time (subtract the PIE load
    bias before calling)."""

    def __init__(self, elf: Elf, lines: LineTable | None = None) -> None:
        self.lines = lines or LineTable(elf)
        lt = self.lines
        d = lt.data
        self.data = d
        magic = struct.unpack_from("<I", d, lt.base)[0]
        self.old = magic == pclntab.MAGIC_118
        self.hdr = 40 if self.old else 44
        self.funcname_off = lt.base + struct.unpack_from("<Q", d, lt.base + 8 + 3 * 8)[0]
        self.text: int = lt.text
        self.elf = elf
        self._gofunc: int | None = None
        self._names: dict[int, str] = {}
        self._wrapper_id: int | None = None
        self._phys: dict[tuple[int, bool], tuple[list[Frame], int | None, int]] = {}
        # Every pc path unwound so far, a trie (innermost pc first): its node number names
        # a stack cheaply (a cache key for what is derived from the frames).
        self._paths: dict[tuple[int, int], int] = {}

    # -- function table ---------------------------------------------------------------------

    def findfunc(self, pc: int) -> int | None:
        """Offset of the _func holding pc in the pclntab data, or None."""
        lt = self.lines
        off = pc - self.text
        i = bisect.bisect_right(lt.entries, off) - 1
        if off < 0 or i < 0 or i >= len(lt.funcs) or off >= lt.entries[-1]:
            return None
        return int(lt.func_off + lt.funcs[i])

    def entry(self, fo: int) -> int:
        e: int = struct.unpack_from("<I", self.data, fo)[0]
        return self.text + e

    def name(self, fo: int) -> str:
        return self._name_at(struct.unpack_from("<i", self.data, fo + 4)[0])

    def func_id(self, fo: int) -> int:
        return self.data[fo + self.hdr - 4]

    def flag(self, fo: int) -> int:
        return self.data[fo + self.hdr - 3]

    def func_name(self, pc: int) -> str | None:
        fo = self.findfunc(pc)
        return None if fo is None else self.name(fo)

    def _name_at(self, name_off: int) -> str:
        s = self._names.get(name_off)
        if s is None:
            d = self.data
            start = self.funcname_off + name_off
            end = d.find(b"\0", start)
            s = d[start:end].decode("utf-8", "replace") if 0 <= start < end else "?"
            self._names[name_off] = s
        return s

    @property
    def wrapper_id(self) -> int:
        """FuncIDWrapper: the last FuncID in every version (the enum grows before it), so the
        largest funcID any function carries."""
        if self._wrapper_id is None:
            lt, d, at = self.lines, self.data, self.hdr - 4
            self._wrapper_id = max(d[lt.func_off + f + at] for f in lt.funcs)
        return self._wrapper_id

    def _pcvalue(self, fo: int, table: int, pc: int) -> int | None:
        return self.lines._value(table, self.entry(fo) - self.text, pc - self.text)

    def spdelta(self, fo: int, pc: int) -> int | None:
        return self._pcvalue(fo, struct.unpack_from("<I", self.data, fo + 16)[0], pc)

    def file_line(self, fo: int, pc: int) -> tuple[str, int]:
        d = self.data
        pcfile, pcln = struct.unpack_from("<II", d, fo + 20)
        cu = struct.unpack_from("<I", d, fo + 32)[0]
        entry = self.entry(fo) - self.text
        fileno = self.lines._value(pcfile, entry, pc - self.text)
        line = self.lines._value(pcln, entry, pc - self.text)
        if fileno is None or line is None or fileno < 0:
            return "?", 0
        return self.lines._file(cu + fileno), line

    def _pcdata(self, fo: int, table: int, pc: int) -> int:
        npcdata = struct.unpack_from("<I", self.data, fo + 28)[0]
        if table >= npcdata:
            return -1
        off = struct.unpack_from("<I", self.data, fo + self.hdr + 4 * table)[0]
        if off == 0:
            return -1
        v = self._pcvalue(fo, off, pc)
        return -1 if v is None else v

    def _funcdata(self, fo: int, i: int) -> int | None:
        d = self.data
        nfuncdata = d[fo + self.hdr - 1]
        if i >= nfuncdata:
            return None
        npcdata = struct.unpack_from("<I", d, fo + 28)[0]
        off = struct.unpack_from("<I", d, fo + self.hdr + 4 * npcdata + 4 * i)[0]
        if off == NO_FUNCDATA:
            return None
        gofunc = self.gofunc()
        return None if gofunc is None else gofunc + off

    def gofunc(self) -> int | None:
        """moduledata.gofunc (link-time): where funcdata offsets point from."""
        if self._gofunc is None:
            self._gofunc = _find_gofunc(self.elf, self.old) or 0
        return self._gofunc or None

    # -- frames -----------------------------------------------------------------------------

    def frames_at(self, fo: int, pc: int, trap: bool = False) -> list[Frame]:
        """The logical frames (inlined ones first) of the physical frame at pc. Like the
        runtime's ``symPC``, file:line and the inline tree are looked up at pc - 1 (the
        CALL) unless pc is the function's entry or a trapping instruction (a sample)."""
        entry = self.entry(fo)
        sym = pc if trap or pc <= entry else pc - 1
        out: list[Frame] = []
        tree = self._funcdata(fo, FUNCDATA_INLTREE)
        if tree is not None:
            size = 20 if self.old else 16
            for _ in range(100):
                ix = self._pcdata(fo, PCDATA_INLTREEINDEX, sym)
                if ix < 0:
                    break
                try:
                    raw = self.elf.read_vaddr(tree + ix * size, size)
                except BinaryFormatError:
                    break
                if self.old:
                    _par, fid, _p, _f, _l, name_off, parent_pc = struct.unpack("<hBBiiii", raw)
                else:
                    fid, name_off, parent_pc, _sl = struct.unpack("<B3xiii", raw)
                file, line = self.file_line(fo, sym)
                out.append(Frame(self._name_at(name_off), file, line, pc, None, True, fid, entry))
                sym = entry + parent_pc
        file, line = self.file_line(fo, sym)
        off = pc - entry if pc > entry else None
        out.append(Frame(self.name(fo), file, line, pc, off, False, self.func_id(fo), entry))
        return out

    def physical(self, pc: int, trap: bool) -> tuple[list[Frame], int | None, int] | None:
        """(logical frames, sp delta, flag) of the physical frame at pc, cached: goroutines
        parked at one site repeat the same pcs."""
        key = (pc, trap)
        got = self._phys.get(key)
        if got is None:
            fo = self.findfunc(pc)
            if fo is None:
                return None
            got = (self.frames_at(fo, pc, trap), self.spdelta(fo, pc), self.flag(fo))
            self._phys[key] = got
        return got

    def unwind(self, pc: int, sp: int, stack: bytes, stack_base: int,
               bias: int = 0, trap: bool = False) -> tuple[list[Frame], str]:
        """Frames from (pc, sp), innermost first. ``pc`` is link-time; ``sp`` and
        ``stack_base`` are the target's addresses; ``stack`` holds the bytes at
        [stack_base, stack_base + len(stack)) and should cover sp up to the stack's top;
        return addresses read from it are runtime pcs (``bias`` is subtracted). ``trap``:
        the first pc was interrupted (a sample), not a return address (saved registers).
        Returns the frames and OK, or what stopped the walk early."""
        frames, why, _path = self._walk(pc, sp, stack, stack_base, bias, trap, None)
        return frames, why

    def unwind_path(self, pc: int, sp: int, stack: bytes, stack_base: int,
                    bias: int = 0, trap: bool = False) -> tuple[list[Frame], str, int]:
        """``unwind``, and a number naming the path of pcs walked: equal numbers, equal
        frames (same binary, same ``trap``). The paths are kept (one dict entry per pc
        of each distinct stack): for one-shot dumps, not for a long-running census."""
        return self._walk(pc, sp, stack, stack_base, bias, trap, self._paths)

    def _walk(self, pc: int, sp: int, stack: bytes, stack_base: int, bias: int, trap: bool,
              paths: dict[tuple[int, int], int] | None) -> tuple[list[Frame], str, int]:
        node = -1 if trap else 0
        frames: list[Frame] = []
        innermost = True
        end = stack_base + len(stack)
        for _ in range(MAX_FRAMES):
            got = self.physical(pc, trap and innermost)
            if got is None:
                return frames, BAD_PC, node
            logical, delta, flag = got
            if paths is not None:
                step = paths.get((node, pc))
                if step is None:
                    step = paths[(node, pc)] = len(paths) + 1
                node = step
            frames.extend(logical)
            if flag & FUNCFLAG_TOPFRAME:
                return frames, OK, node
            if flag & FUNCFLAG_SPWRITE and not innermost:
                return frames, SPWRITE, node
            if delta is None:
                return frames, BAD_PC, node
            fp = sp + delta + 8
            at = fp - 8 - stack_base
            if at < 0 or fp > end:
                return frames, TRUNCATED, node
            ret = struct.unpack_from("<Q", stack, at)[0]
            if ret == 0:
                return frames, OK, node
            pc = ret - bias
            sp = fp
            innermost = False
        return frames, TOO_DEEP, node


def _find_gofunc(elf: Elf, old: bool) -> int | None:
    sec = elf.section(pclntab.pclntab_section(elf))
    if sec is None:
        return None
    md = pclntab.find_moduledata(elf, sec.addr)
    if md is None:
        return None
    for off in _GOFUNC_OFFSETS_118 if old else _GOFUNC_OFFSETS_120:
        try:
            v = elf.read_ptr(md + off)
            rodata = elf.read_ptr(md + off - 8)
        except BinaryFormatError:
            continue
        if not 0 < rodata <= v:
            continue
        for s in elf.sections.values():
            if s.addr <= v < s.addr + s.size and s.name not in (".text", ".bss", ".noptrbss"):
                return v
    return None


def exported_runtime(name: str) -> bool:
    """runtime/traceback.go isExportedRuntime (1.21+)."""
    n = len("runtime.")
    if len(name) <= n or not name.startswith("runtime."):
        return False
    rest = name[n:]
    rcvr = ""
    i = rest.rfind(".")
    if i >= 0:
        rcvr, rest = rest[:i], rest[i + 1 :]
        if len(rcvr) >= 3 and rcvr.startswith("(*") and rcvr.endswith(")"):
            rcvr = rcvr[2:-1]
    return bool(rest) and rest[0].isupper() and rest[0].isascii() and (
        not rcvr or (rcvr[0].isupper() and rcvr[0].isascii()))


def visible(frame: Frame, first: bool, callee_id: int, wrapper_id: int,
            gopanic_id: int | None = None) -> bool:
    """runtime/traceback.go showfuncinfo at GOTRACEBACK=single (what debug=2 prints):
    wrappers elided, runtime frames hidden except exported ones and gopanic."""
    if frame.func_id == wrapper_id and wrapper_id != 0:
        # elideWrapperCalling: keep a wrapper only when it called gopanic/sigpanic/panicwrap
        return False
    name = frame.func
    if name == "runtime.gopanic" and not first:
        return True
    return "." in name and (not name.startswith("runtime.") or exported_runtime(name))
