"""A small, bounds-checked ELF reader: header, sections, symbols, reads by virtual address.

pyelftools is used only for DWARF; everything else is parsed here because the inputs may be
hostile or damaged (the parser must fail with :class:`BinaryFormatError`, never an arbitrary
exception) and because the Go symbol table is large enough that per-symbol objects are slow.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from gmpmon.errors import BinaryFormatError, NotGoError, UnsupportedError

ELF_MAGIC = b"\x7fELF"
ET_EXEC = 2
ET_DYN = 3
EM_X86_64 = 62
SHT_NOBITS = 8
SHT_SYMTAB = 2
SHF_ALLOC = 0x2
SHF_COMPRESSED = 0x800
PT_LOAD = 1
STT_OBJECT = 1
STT_FUNC = 2
R_X86_64_RELATIVE = 8

# The most one read of the file may copy (a section, a symbol or string table): the file is
# mapped, not read (binary/load.py), so this bounds what a binary costs. Go's largest tables
# (.gopclntab, .symtab, .strtab of a 150 MB program) are tens of MB.
MAX_TABLE = 256 << 20
# What each table may hold, so that what is built from it stays bounded too (each symbol
# or function becomes Python objects, ~0.3 KB: a table at the cap takes ~300 MB): a Go
# .symtab has ~1.35 symbols a function, the largest Go programs ~150,000 functions
# (binary/pclntab.py: MAX_FUNCS).
MAX_SYMBOLS = 1 << 20
MAX_RELOCS = 1 << 20  # a PIE Go server has ~10,000 RELATIVE relocations
# The section name table: a few hundred bytes in any real binary.
MAX_SECTION_NAMES = 1 << 20

# e_machine -> GOARCH, for naming what we refuse.
MACHINES: dict[int, str] = {
    3: "386",
    8: "mips",
    20: "ppc",
    21: "ppc64",
    22: "s390x",
    40: "arm",
    62: "amd64",
    183: "arm64",
    243: "riscv64",
    258: "loong64",
}


@dataclass(frozen=True, slots=True)
class Section:
    name: str
    type: int
    flags: int
    addr: int
    offset: int
    size: int
    link: int
    entsize: int


@dataclass(frozen=True, slots=True)
class Segment:
    type: int
    offset: int
    vaddr: int
    filesz: int
    memsz: int


@dataclass(frozen=True, slots=True)
class Symbol:
    name: str
    value: int
    size: int
    type: int  # STT_*


class Elf:
    """An ELF file held in memory (bytes, or an mmap of the file). Every accessor checks
    bounds against the file, and no read copies more than MAX_TABLE."""

    def __init__(self, data: bytes, path: str = "<bytes>") -> None:
        self.data = data
        self.path = path
        if len(data) < 16 or data[:4] != ELF_MAGIC:
            raise NotGoError(f"{path} is not an ELF executable, so not a Go program")
        ei_class, ei_data = data[4], data[5]
        if ei_class not in (1, 2):
            raise BinaryFormatError(f"{path}: bad ELF class {ei_class}")
        if ei_data != 1:
            raise UnsupportedError(f"{path}: big-endian ELF is not supported (amd64 only)")
        self.is64 = ei_class == 2
        hdr_fmt = "<HHIQQQIHHHHHH" if self.is64 else "<HHIIIIIHHHHHH"
        hdr = self._unpack(hdr_fmt, 16, "ELF header")
        (
            self.etype,
            self.machine,
            _ver,
            self.entry,
            phoff,
            shoff,
            _flags,
            _ehsize,
            phentsize,
            phnum,
            shentsize,
            shnum,
            shstrndx,
        ) = hdr
        self.arch = MACHINES.get(self.machine, f"e_machine={self.machine}")
        self.segments = self._read_segments(phoff, phentsize, phnum)
        # By name for lookups; by index for sh_link references (.symtab -> .strtab).
        self._by_index = self._read_sections(shoff, shentsize, shnum, shstrndx)
        self.sections: dict[str, Section] = {}
        for sec in self._by_index:
            if sec.name and sec.name not in self.sections:
                self.sections[sec.name] = sec

    # -- raw access -------------------------------------------------------------------------

    def _unpack(self, fmt: str, off: int, what: str) -> tuple[int, ...]:
        size = struct.calcsize(fmt)
        if off < 0 or off + size > len(self.data):
            raise BinaryFormatError(f"{self.path}: truncated ELF ({what} out of the file)")
        return struct.unpack_from(fmt, self.data, off)

    def bytes_at(self, off: int, size: int, what: str, cap: int = MAX_TABLE) -> bytes:
        if off < 0 or size < 0 or off + size > len(self.data):
            raise BinaryFormatError(f"{self.path}: truncated ELF ({what} out of the file)")
        if size > cap:
            raise over_cap(self.path, f"{what} is {_size(size)}", _size(cap))
        return self.data[off : off + size]

    def _read_segments(self, phoff: int, phentsize: int, phnum: int) -> tuple[Segment, ...]:
        if phnum == 0:
            return ()
        fmt = "<IIQQQQQQ" if self.is64 else "<IIIIIIII"
        need = struct.calcsize(fmt)
        if phentsize < need:
            raise BinaryFormatError(f"{self.path}: bad program header size {phentsize}")
        segs = []
        for i in range(phnum):
            f = self._unpack(fmt, phoff + i * phentsize, "program header")
            if self.is64:
                ptype, _fl, off, vaddr, _pa, filesz, memsz, _al = f
            else:
                ptype, off, vaddr, _pa, filesz, memsz, _fl, _al = f
            segs.append(Segment(ptype, off, vaddr, filesz, memsz))
        return tuple(segs)

    def _read_sections(
        self, shoff: int, shentsize: int, shnum: int, shstrndx: int
    ) -> tuple[Section, ...]:
        if shnum == 0 or shoff == 0:
            return ()
        fmt = "<IIQQQQIIQQ" if self.is64 else "<IIIIIIIIII"
        if shentsize < struct.calcsize(fmt):
            raise BinaryFormatError(f"{self.path}: bad section header size {shentsize}")
        if shnum > len(self.data) // max(shentsize, 1):
            raise BinaryFormatError(f"{self.path}: truncated ELF (section headers)")
        raw = [self._unpack(fmt, shoff + i * shentsize, "section header") for i in range(shnum)]
        if not 0 <= shstrndx < shnum:
            raise BinaryFormatError(f"{self.path}: bad section name table index {shstrndx}")
        strtab = raw[shstrndx]
        str_off, str_size = strtab[4], strtab[5]
        names = self.bytes_at(str_off, str_size, "section name table", MAX_SECTION_NAMES)
        out: list[Section] = []
        for r in raw:
            name_off, stype, flags, addr, off, size, link, _info, _align, entsize = r
            name = cstring(names, name_off, self.path)
            # The program's own sections must lie in the file; the others (symbols, DWARF)
            # are checked where they are read, so that bad DWARF alone need not stop gmpmon.
            if flags & SHF_ALLOC and stype != SHT_NOBITS and off + size > len(self.data):
                raise BinaryFormatError(
                    f"{self.path}: section {name or '#' + str(len(out))} ({size} bytes at "
                    f"offset {off}) lies beyond the end of the file ({len(self.data)} bytes)",
                    hint="a damaged or hostile binary",
                )
            out.append(Section(name, stype, flags, addr, off, size, link, entsize))
        return tuple(out)

    # -- sections ---------------------------------------------------------------------------

    def section(self, name: str) -> Section | None:
        return self.sections.get(name)

    def section_data(self, name: str, limit: int | None = None) -> bytes | None:
        """The section's bytes (its first ``limit`` bytes at most), None if it has none."""
        s = self.sections.get(name)
        if s is None or s.type == SHT_NOBITS:
            return None
        size = s.size if limit is None else min(s.size, limit)
        return self.bytes_at(s.offset, size, f"section {name}")

    def read_vaddr(self, addr: int, size: int) -> bytes:
        """Bytes at a link-time virtual address, from the file (not .bss)."""
        for s in self.sections.values():
            if (
                s.flags & SHF_ALLOC
                and s.type != SHT_NOBITS
                and s.addr <= addr
                and addr + size <= s.addr + s.size
            ):
                return self.bytes_at(s.offset + addr - s.addr, size, f"data at {addr:#x}")
        for g in self.segments:
            if g.type == PT_LOAD and g.vaddr <= addr and addr + size <= g.vaddr + g.filesz:
                return self.bytes_at(g.offset + addr - g.vaddr, size, f"data at {addr:#x}")
        raise BinaryFormatError(f"{self.path}: address {addr:#x} is not in the file")

    def read_ptr(self, addr: int) -> int:
        """A pointer stored at `addr`, with PIE's load-time RELATIVE relocations applied."""
        raw: int = struct.unpack("<Q", self.read_vaddr(addr, 8))[0]
        if raw == 0 and self.etype == ET_DYN:
            return self.relative_relocs().get(addr, 0)
        return raw

    _relocs: dict[int, int] | None = None

    def relative_relocs(self) -> dict[int, int]:
        """R_X86_64_RELATIVE relocations (target address -> addend) of a PIE, cached."""
        if self._relocs is None:
            relocs: dict[int, int] = {}
            for s in self.sections.values():
                if s.type != 4 or s.entsize != 24:  # SHT_RELA, Elf64_Rela
                    continue
                if s.size // 24 > MAX_RELOCS:
                    raise over_cap(self.path, f"{s.name} holds {s.size // 24} relocations",
                                   str(MAX_RELOCS))
                data = self.bytes_at(s.offset, s.size - s.size % 24, f"section {s.name}")
                for off, info, addend in struct.iter_unpack("<QQq", data):
                    if info & 0xFFFFFFFF == R_X86_64_RELATIVE:
                        relocs[off] = addend
            self._relocs = relocs
        return self._relocs

    # -- symbols ----------------------------------------------------------------------------

    def symtab(self) -> tuple[bytes, bytes] | None:
        """(.strtab, .symtab) bytes, or None when the binary is stripped."""
        s = self.sections.get(".symtab")
        if s is None or s.type != SHT_SYMTAB or not self.is64:
            return None
        if not 0 < s.link < 1 << 16:
            raise BinaryFormatError(f"{self.path}: .symtab has no string table")
        if s.link >= len(self._by_index):
            raise BinaryFormatError(f"{self.path}: .symtab string table index {s.link} is bad")
        if s.size // 24 > MAX_SYMBOLS:
            raise over_cap(self.path, f".symtab holds {s.size // 24} symbols", str(MAX_SYMBOLS))
        strsec = self._by_index[s.link]
        names = self.bytes_at(strsec.offset, strsec.size, ".strtab")
        return names, self.bytes_at(s.offset, s.size - s.size % 24, ".symtab")

    def symbols(self) -> list[Symbol] | None:
        """Function and object symbols from .symtab, or None when the binary is stripped."""
        tables = self.symtab()
        if tables is None:
            return None
        names, data = tables
        out: list[Symbol] = []
        for name_off, info, _other, _shndx, value, size in struct.iter_unpack("<IBBHQQ", data):
            stype = info & 0xF
            if stype in (STT_FUNC, STT_OBJECT) and name_off:
                out.append(Symbol(cstring(names, name_off, self.path), value, size, stype))
        return out


def over_cap(path: str, what: str, cap: str) -> BinaryFormatError:
    """The one line for a binary over one of gmpmon's caps (docs/safety.md)."""
    return BinaryFormatError(
        f"{path}: {what}, over gmpmon's cap of {cap}; refusing to read it",
        hint="a damaged or hostile binary",
    )


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n} bytes"


def cstring(buf: bytes, off: int, path: str) -> str:
    if not 0 <= off <= len(buf):
        raise BinaryFormatError(f"{path}: string offset {off} out of its table")
    end = buf.find(b"\0", off)
    if end < 0:
        end = len(buf)
    return buf[off:end].decode("utf-8", "replace")
