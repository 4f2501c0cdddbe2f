"""File and line of a PC from `.gopclntab`'s pc-value tables (what stripped binaries keep).

The runtime's own lookup (runtime/symtab.go: ``pcvalue``, ``funcline1``), Go 1.18+ layout:
each ``_func`` (see pclntab.py) has ``pcfile`` at +20, ``pcln`` at +24 and ``cuOffset`` at
+32: offsets into the pctab of two pc-value tables. A table is a run of (value delta, pc
delta) pairs, each a uvarint; the value delta is zig-zag coded, the pc delta is in units of
``minLC``; the value starts at -1 and the pc at the function's entry; a zero value delta
(after the first pair) ends it. The file number indexes the CU's slice of ``cutab`` (u32
offsets into ``filetab``, NUL-terminated names).

For inlined code the tables give the innermost position: the line of the ``go`` statement
even when it sits in a function inlined into its caller.
"""

from __future__ import annotations

import bisect
import struct
from array import array

from gmpmon.binary import pclntab
from gmpmon.binary.elf import Elf
from gmpmon.errors import GmpmonError

_FUNC_PCFILE, _FUNC_PCLN, _FUNC_CU = 20, 24, 32


class LineTable:
    """``at(pc)`` -> ``(file, line)`` for link-time PCs; None outside every function."""

    def __init__(self, elf: Elf) -> None:
        # Read in place from the ELF's data (the mapped file, gosites and unwind): a copy of
        # .gopclntab is 18 MB for Caddy, and the entry table as Python ints ~5 MB more.
        name = pclntab.pclntab_section(elf)
        sec = elf.section(name)
        data = elf.data
        if sec is None or sec.size < 72 or not 0 <= sec.offset <= len(data) - sec.size:
            raise GmpmonError(f"{elf.path}: no .gopclntab")
        base = self.base = sec.offset  # where .gopclntab starts in ``data``
        self.end = base + sec.size
        magic = struct.unpack_from("<I", data, base)[0]
        if magic not in (pclntab.MAGIC_118, pclntab.MAGIC_120):
            raise GmpmonError(f"{elf.path}: .gopclntab magic {magic:#x}")
        self.min_lc = data[base + 6] or 1
        (nfunc, _nfiles, text, _names, cu_off, file_off, pc_off,
         func_off) = struct.unpack_from("<8Q", data, base + 8)
        self.cu_off, self.file_off = base + cu_off, base + file_off
        self.pc_off, self.func_off = base + pc_off, base + func_off
        pclntab.check_nfunc(elf, nfunc)
        if text == 0:
            text = pclntab.text_start_from_moduledata(elf, sec.addr) or 0
        self.text = text
        n = 4 * (2 * nfunc + 1)
        if not 0 <= func_off <= sec.size - n:
            raise GmpmonError(f"{elf.path}: .gopclntab function table out of the section")
        tab = array("I", data[self.func_off : self.func_off + n])
        self.entries = tab[0::2]  # nfunc entry offsets and the end offset
        self.funcs = tab[1::2]
        self.data = data
        self._files: dict[int, str] = {}

    def at(self, pc: int) -> tuple[str, int] | None:
        off = pc - self.text
        i = bisect.bisect_right(self.entries, off) - 1
        if off < 0 or i < 0 or i >= len(self.funcs):
            return None
        fo = self.func_off + self.funcs[i]
        d = self.data
        if fo + 36 > self.end:
            return None
        pcfile, pcln = struct.unpack_from("<II", d, fo + _FUNC_PCFILE)
        cu = struct.unpack_from("<I", d, fo + _FUNC_CU)[0]
        entry = self.entries[i]
        fileno = self._value(pcfile, entry, off)
        line = self._value(pcln, entry, off)
        if fileno is None or line is None or fileno < 0:
            return None
        return self._file(cu + fileno), line

    def _value(self, table: int, entry: int, target: int) -> int | None:
        d = self.data
        p = self.pc_off + table
        end = self.end
        if not table or p >= end:
            return None
        val, pc, first = -1, entry, True
        while p < end:
            uv, p = _uvarint(d, p, end)
            if uv == 0 and not first:
                return None
            first = False
            val += -(uv & 1) ^ (uv >> 1)
            delta, p = _uvarint(d, p, end)
            pc += delta * self.min_lc
            if target < pc:
                return val
        return None

    def _file(self, idx: int) -> str:
        name = self._files.get(idx)
        if name is None:
            d = self.data
            at = self.cu_off + 4 * idx
            name = "?"
            if at + 4 <= self.end:
                off = struct.unpack_from("<I", d, at)[0]
                start = self.file_off + off
                end = d.find(b"\0", start, self.end)
                if off != 0xFFFFFFFF and start < self.end and end > start:
                    name = d[start:end].decode("utf-8", "replace")
            self._files[idx] = name
        return name


def _uvarint(d: bytes, p: int, end: int) -> tuple[int, int]:
    v = shift = 0
    while p < end:
        b = d[p]
        p += 1
        v |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
    return v, p


def short_path(path: str) -> str:
    """The last two parts of a source path (``demo/main.go``), as pprof's -lines does."""
    parts = path.rsplit("/", 2)
    return "/".join(parts[-2:])
