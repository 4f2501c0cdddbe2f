"""Function names and entry addresses from `.gopclntab` (what stripped binaries still have).

pcHeader (runtime/symtab.go, Go 1.18+): magic u32, pad u8 x2, minLC u8, ptrSize u8, then
eight uintptrs at offset 8: nfunc, nfiles, textStart, funcnameOffset, cuOffset,
filetabOffset, pctabOffset, pclnOffset. The functab at pclnOffset holds nfunc pairs
{entryoff u32, funcoff u32} and a final end offset; each _func (at pclnOffset+funcoff) starts
with {entryOff u32, nameOff i32}; the name is a C string at funcnameOffset+nameOff.

Go 1.26+ writes textStart = 0; the real start is moduledata.text. moduledata begins with a
pointer to the pcHeader, so it is found by looking for the .gopclntab address in
.noptrdata (up to 1.25) or .go.module (1.26+); ``text`` sits at moduledata+176.
"""

from __future__ import annotations

import struct
from array import array
from dataclasses import dataclass

from gmpmon.binary.elf import ET_DYN, SHT_NOBITS, Elf, over_cap
from gmpmon.errors import BinaryFormatError, UnsupportedError

MAGIC_118 = 0xFFFFFFF0  # Go 1.18-1.19
MAGIC_120 = 0xFFFFFFF1  # Go 1.20+
OLD_MAGICS = {0xFFFFFFFB: "1.2-1.15", 0xFFFFFFFA: "1.16-1.17"}
MODULEDATA_TEXT_OFFSET = 176
# Functions a .gopclntab may list (each becomes Python objects in a function table: a table
# at the cap takes ~300 MB): ~5.7 times the largest Go program seen (138,446 functions in a
# 127 MB binary of the Google Cloud SDK).
MAX_FUNCS = 3 << 18


# moduledata (runtime/symtab.go), the same in 1.19-1.27 up to ``bss``'s end: after the
# pcHeader pointer and six slices, findfunctab, minpc, maxpc, then these uintptr pairs.
MODULEDATA_RANGES: dict[str, int] = {
    "text": 176,
    "etext": 184,
    "noptrdata": 192,
    "enoptrdata": 200,
    "data": 208,
    "edata": 216,
    "bss": 224,
    "ebss": 232,
    "noptrbss": 240,
    "enoptrbss": 248,
}


def find_moduledata(elf: Elf, pcln_addr: int) -> int | None:
    """Address of firstmoduledata, through its first field (the pcHeader pointer), checked
    by its text field lying in .text."""
    needle = struct.pack("<Q", pcln_addr)
    for name in (".go.module", ".noptrdata", ".data.rel.ro", ".data"):
        sec = elf.section(name)
        if sec is None or sec.type == SHT_NOBITS:
            continue
        # searched in place (the mapped file), not copied: .noptrdata can be megabytes
        lo, hi = sec.offset, sec.offset + sec.size
        if hi > len(elf.data):
            raise BinaryFormatError(f"{elf.path}: section {name} lies beyond the end of the file")
        candidates = []
        pos = elf.data.find(needle, lo, hi)
        while pos >= 0:
            if (pos - lo) % 8 == 0:
                candidates.append(sec.addr + pos - lo)
            pos = elf.data.find(needle, pos + 1, hi)
        if not candidates and elf.etype == ET_DYN:  # PIE: the pointer is a load-time relocation
            candidates = sorted(
                a
                for a, v in elf.relative_relocs().items()
                if v == pcln_addr and sec.addr <= a < sec.addr + sec.size
            )
        for md in candidates:
            try:
                text = elf.read_ptr(md + MODULEDATA_TEXT_OFFSET)
            except BinaryFormatError:
                continue
            txt = elf.section(".text")
            if txt is None or txt.addr <= text < txt.addr + txt.size:
                return md
    return None


def text_start_from_moduledata(elf: Elf, pcln_addr: int) -> int | None:
    """moduledata.text."""
    md = find_moduledata(elf, pcln_addr)
    return None if md is None else elf.read_ptr(md + MODULEDATA_TEXT_OFFSET)


def moduledata_ranges(elf: Elf) -> dict[str, tuple[int, int]] | None:
    """{"noptrdata": (start, end), "data": ..., "bss": ..., "noptrbss": ...} from moduledata,
    or None when it cannot be found or its ranges are not ordered inside the file's image."""
    sec = elf.section(pclntab_section(elf))
    if sec is None:
        return None
    md = find_moduledata(elf, sec.addr)
    if md is None:
        return None
    try:
        v = {k: elf.read_ptr(md + off) for k, off in MODULEDATA_RANGES.items()}
    except BinaryFormatError:
        return None
    out = {k: (v[k], v["e" + k]) for k in ("noptrdata", "data", "bss", "noptrbss")}
    if any(not 0 < a <= b for a, b in out.values()):
        return None
    return out


def pclntab_section(elf: Elf) -> str:
    """Internally linked PIEs of Go <= 1.25 name it .data.rel.ro.gopclntab."""
    for name in (".gopclntab", ".data.rel.ro.gopclntab"):
        if elf.section(name) is not None:
            return name
    return ".gopclntab"


@dataclass(frozen=True, slots=True)
class Header:
    """What read_pclntab needs of .gopclntab, checked."""

    data: bytes  # the section
    text_start: int
    nfunc: int
    funcname_off: int
    names_end: int  # end of funcnametab (cuOffset)
    pcln_off: int


def read_header(elf: Elf) -> Header:
    name = pclntab_section(elf)
    sec = elf.section(name)
    data = elf.section_data(name)
    if sec is None or data is None:
        raise BinaryFormatError(f"{elf.path}: no .gopclntab section")
    if len(data) < 72:
        raise BinaryFormatError(f"{elf.path}: .gopclntab truncated")
    magic, _p1, _p2, _min_lc, ptr_size = struct.unpack_from("<IBBBB", data, 0)
    if magic in OLD_MAGICS:
        raise UnsupportedError(f"{elf.path}: built by Go {OLD_MAGICS[magic]}; gmpmon needs 1.19+")
    if magic not in (MAGIC_118, MAGIC_120):
        raise BinaryFormatError(f"{elf.path}: .gopclntab has an unknown magic {magic:#x}")
    if ptr_size != 8:
        raise BinaryFormatError(f"{elf.path}: .gopclntab pointer size {ptr_size}")
    nfunc, _nfiles, text_start, funcname_off, cu_off, _ft, _pct, pcln_off = struct.unpack_from(
        "<8Q", data, 8
    )
    check_nfunc(elf, nfunc)
    if text_start == 0:
        found = text_start_from_moduledata(elf, sec.addr)
        if found is None:
            txt = elf.section(".text")
            if txt is None:
                raise BinaryFormatError(f"{elf.path}: cannot find the text start")
            found = txt.addr
        text_start = found
    end_tab = pcln_off + (2 * nfunc + 1) * 4
    if nfunc == 0 or pcln_off >= len(data) or end_tab > len(data) or funcname_off >= len(data):
        raise BinaryFormatError(f"{elf.path}: .gopclntab header is inconsistent")
    names_end = cu_off if funcname_off < cu_off <= len(data) else len(data)
    return Header(data, text_start, nfunc, funcname_off, names_end, pcln_off)


def check_nfunc(elf: Elf, nfunc: int) -> None:
    if nfunc > MAX_FUNCS:
        raise over_cap(elf.path, f".gopclntab lists {nfunc} functions", str(MAX_FUNCS))


def read_pclntab(elf: Elf, h: Header | None = None) -> list[tuple[str, int, int]]:
    """[(name, entry, end)] for every function, in pclntab (address) order (``h``: its
    header, if read already: the section is not copied again)."""
    h = h or read_header(elf)
    data, nfunc, funcname_off, pcln_off = h.data, h.nfunc, h.funcname_off, h.pcln_off
    text_start = h.text_start
    tab = array("I", data[pcln_off : pcln_off + 4 * (2 * nfunc + 1)])
    names = memoryview(data)[funcname_off:]
    out: list[tuple[str, int, int]] = []
    for i in range(nfunc):
        entry_off, func_off = tab[2 * i], tab[2 * i + 1]
        end_off = tab[2 * i + 2]
        fo = pcln_off + func_off
        if fo + 8 > len(data):
            raise BinaryFormatError(f"{elf.path}: .gopclntab _func {i} out of the table")
        _eo, name_off = struct.unpack_from("<Ii", data, fo)
        if not 0 <= name_off < len(names):
            raise BinaryFormatError(f"{elf.path}: .gopclntab name {i} out of the table")
        nul = data.find(b"\0", funcname_off + name_off)
        if nul < 0:
            raise BinaryFormatError(f"{elf.path}: .gopclntab name {i} not terminated")
        name = data[funcname_off + name_off : nul].decode("utf-8", "replace")
        out.append((name, text_start + entry_off, text_start + end_off))
    return out
