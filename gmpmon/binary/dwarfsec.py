"""DWARF sections read within caps, for pyelftools (gmpmon.binary.dwarf).

The binary is not trusted: a SHF_COMPRESSED .debug_info claiming 3 GiB used to be inflated
whole (6.3 GB, 35 s), and pyelftools read every debug section, and the file itself, into
memory. Here only the sections that struct offsets need are read (.debug_info, .debug_abbrev
and the string tables: not the line, frame, location or range tables, which are most of
Go's DWARF); an uncompressed one is a window on the mapped file (no copy); a compressed one
is inflated a piece at a time into memory of the size its header claims, after that size
was checked against the caps, and must end exactly there. The section headers come from
gmpmon's own ELF reader (gmpmon.binary.elf), not pyelftools'.
"""

from __future__ import annotations

import inspect
import mmap
import struct
import zlib
from typing import IO, Any, Protocol, cast

from gmpmon.binary.elf import SHF_COMPRESSED, SHT_NOBITS, Elf, Section
from gmpmon.errors import BinaryFormatError

# What DWARF may take: each section (compressed or not), all of them together, and the
# number of units in .debug_info. Go's .debug_info is ~25% of its executable's size
# (2.5 MB for a 10 MB server; ~60 MB for the largest programs), in one unit a package
# (~200 for a small server, a few thousand for the largest).
MAX_DWARF_SECTION = 128 << 20
MAX_DWARF_TOTAL = 160 << 20
MAX_UNITS = 20_000
# Sections whose keyword in pyelftools' DWARFInfo is <name>_sec; the rest are passed as None.
NEEDED = (".debug_info", ".debug_abbrev", ".debug_str", ".debug_line_str",
          ".debug_str_offsets", ".debug_addr", ".debug_types")
ELFCOMPRESS_ZLIB = 1
ELFCOMPRESS_ZSTD = 2
_PIECE = 4 << 20  # inflated per step: the most one step holds besides the output


class Stream(Protocol):
    """What pyelftools and the name search read a section through."""

    def seek(self, pos: int, whence: int = 0) -> int: ...
    def tell(self) -> int: ...
    def read(self, n: int = -1) -> bytes: ...
    def find(self, sub: bytes, start: int = 0, end: int | None = None) -> int: ...


class Window:
    """A read-only stream over ``data[base:base + size]`` (an mmap or bytes), copying only
    what is read."""

    def __init__(self, data: Any, base: int, size: int) -> None:
        self.data, self.base, self.size, self.pos = data, base, size, 0

    def seek(self, pos: int, whence: int = 0) -> int:
        self.pos = pos + (self.pos if whence == 1 else self.size if whence == 2 else 0)
        return self.pos

    def tell(self) -> int:
        return self.pos

    def read(self, n: int = -1) -> bytes:
        start = min(max(self.pos, 0), self.size)
        end = self.size if n < 0 else min(start + n, self.size)
        self.pos = end
        out: bytes = self.data[self.base + start : self.base + end]
        return out

    def find(self, sub: bytes, start: int = 0, end: int | None = None) -> int:
        hi = self.base + (self.size if end is None else min(end, self.size))
        pos: int = self.data.find(sub, self.base + start, hi)
        return pos - self.base if pos >= 0 else -1


def _over(path: str, name: str, what: str, size: int, cap: int) -> BinaryFormatError:
    return BinaryFormatError(
        f"{path}: DWARF section {name} {what} {size >> 20} MiB, over gmpmon's cap of "
        f"{cap >> 20} MiB"
    )


class _Reader:
    def __init__(self, elf: Elf) -> None:
        self.elf = elf
        self.path = elf.path
        self.taken = 0

    def take(self, name: str, size: int, what: str, *, held: bool = True) -> None:
        """Check ``size`` against the cap of a section, and (``held``: what will be in
        memory or read) against what all of DWARF may take."""
        if size > MAX_DWARF_SECTION:
            raise _over(self.path, name, what, size, MAX_DWARF_SECTION)
        if not held:
            return
        if self.taken + size > MAX_DWARF_TOTAL:
            raise _over(self.path, name, "would bring DWARF to", self.taken + size,
                        MAX_DWARF_TOTAL)
        self.taken += size

    def section(self, name: str, sec: Section) -> Stream:
        data, path = self.elf.data, self.path
        if sec.type == SHT_NOBITS:
            return Window(b"", 0, 0)
        if sec.offset + sec.size > len(data):
            raise BinaryFormatError(f"{path}: DWARF section {name} lies beyond the end of "
                                    f"the file")
        compressed = bool(sec.flags & SHF_COMPRESSED) or name.startswith(".zdebug")
        self.take(name, sec.size, "is", held=not compressed)  # compressed: read in pieces
        if sec.flags & SHF_COMPRESSED:  # Elf64_Chdr: type u32, reserved u32, size, align
            if sec.size < 24:
                raise BinaryFormatError(f"{path}: DWARF section {name} is truncated")
            ctype, claim = struct.unpack_from("<IxxxxQ", data, sec.offset)
            if ctype == ELFCOMPRESS_ZSTD:
                raise BinaryFormatError(f"{path}: DWARF section {name} is compressed with "
                                        "zstd, which gmpmon does not read")
            if ctype != ELFCOMPRESS_ZLIB:
                raise BinaryFormatError(f"{path}: DWARF section {name}: unknown compression "
                                        f"type {ctype}")
            return self.inflate(name, sec.offset + 24, sec.size - 24, claim)
        if name.startswith(".zdebug"):  # the older GNU form: "ZLIB", big-endian u64 size
            if sec.size < 12 or data[sec.offset : sec.offset + 4] != b"ZLIB":
                raise BinaryFormatError(f"{path}: DWARF section {name} has a bad header")
            (claim,) = struct.unpack_from(">Q", data, sec.offset + 4)
            return self.inflate(name, sec.offset + 12, sec.size - 12, claim)
        return Window(data, sec.offset, sec.size)

    def inflate(self, name: str, off: int, size: int, claim: int) -> Stream:
        """The zlib stream at ``data[off:off+size]``, which must inflate to ``claim`` bytes
        exactly: read and inflated a piece at a time, never past claim + 1 bytes."""
        self.take(name, claim, "inflates to")
        if claim == 0:
            return Window(b"", 0, 0)
        data = self.elf.data
        out = mmap.mmap(-1, claim)  # anonymous: only the pages written are ever resident
        d = zlib.decompressobj()
        at, pos, end = 0, off, off + size
        try:
            while pos < end and not d.eof:
                buf = data[pos : min(pos + _PIECE, end)]
                pos += len(buf)
                while buf and not d.eof:
                    piece = d.decompress(buf, min(claim + 1 - at, _PIECE))
                    if at + len(piece) > claim:
                        raise BinaryFormatError(
                            f"{self.path}: DWARF section {name} inflates past the {claim} "
                            "bytes it claims"
                        )
                    out[at : at + len(piece)] = piece
                    at += len(piece)
                    buf = d.unconsumed_tail
        except zlib.error as e:
            out.close()
            raise BinaryFormatError(f"{self.path}: DWARF section {name}: damaged zlib "
                                    f"({e})") from e
        except BinaryFormatError:
            out.close()
            raise
        if at != claim or not d.eof:
            out.close()
            raise BinaryFormatError(
                f"{self.path}: DWARF section {name} does not inflate to the {claim} bytes "
                "it claims"
            )
        return out  # type: ignore[return-value]  # an mmap is a Stream


def _count_units(path: str, info: Stream, size: int) -> None:
    """Refuse a .debug_info of more than MAX_UNITS units before pyelftools parses any: it
    makes an object per unit, and finds a DIE by parsing every unit before it."""
    pos = n = 0
    while pos < size:
        n += 1
        if n > MAX_UNITS:
            raise BinaryFormatError(f"{path}: .debug_info holds more units than gmpmon's "
                                    f"cap of {MAX_UNITS}")
        info.seek(pos)
        head = info.read(12)
        if len(head) < 4:
            raise BinaryFormatError(f"{path}: .debug_info is truncated")
        (length,) = struct.unpack_from("<I", head)
        if length == 0xFFFFFFFF and len(head) == 12:  # 64-bit DWARF
            pos += 12 + struct.unpack_from("<Q", head, 4)[0]
        elif length >= 0xFFFFFFF0:
            raise BinaryFormatError(f"{path}: .debug_info unit at {pos}: bad length")
        else:
            pos += 4 + length


def dwarf_info(elf: Elf) -> Any | None:
    """pyelftools' DWARFInfo over the sections in NEEDED, read within the caps; None when
    the binary has no .debug_info."""
    from elftools.dwarf.dwarfinfo import DebugSectionDescriptor, DwarfConfig, DWARFInfo

    zform = elf.section(".debug_info") is None and elf.section(".zdebug_info") is not None
    reader = _Reader(elf)
    kw: dict[str, Any] = {}
    for name in NEEDED:
        in_file = ".z" + name[1:] if zform else name
        sec = elf.section(in_file)
        if sec is None:
            continue
        stream = reader.section(in_file, sec)
        stream.seek(0, 2)
        size = stream.tell()
        stream.seek(0)
        kw[name[1:] + "_sec"] = DebugSectionDescriptor(
            stream=cast(IO[bytes], stream), name=name, global_offset=sec.offset, size=size,
            address=sec.addr,
        )
    info = kw.get("debug_info_sec")
    if info is None:
        return None
    _count_units(elf.path, info.stream, info.size)
    # Every other section pyelftools knows of (keywords vary by version) is absent.
    params = inspect.signature(DWARFInfo.__init__).parameters
    args = {p: kw.get(p) for p in params if p.endswith("_sec")}
    config = DwarfConfig(little_endian=True, machine_arch="x64", default_address_size=8)
    return DWARFInfo(config=config, **args)
