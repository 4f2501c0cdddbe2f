"""A few functions and globals by name, without reading every symbol (``gmpmon ps``).

Reading all of a Go binary's symbols into dicts (``load._Funcs``) costs a Python step per
symbol: tens of milliseconds for a server with 50,000 functions, for ``ps`` that needs about
ten names. Here a name is found by searching its bytes in the string table, then the records
that point at each place it occurs, at the speed of ``bytes.find``. The answers are those of
the full walk: every record whose name is exactly ``name`` points at some occurrence of
``name\\0``, and every candidate record is checked to be one (tests/unit/test_binary.py
compares both on every build). What is not checked is the rest of the table: a damaged
record elsewhere, which the full walk refuses, goes unseen; the live process is validated
before anything it points to is read, as always.
"""

from __future__ import annotations

import bisect
import struct
from array import array
from collections.abc import Iterator, Mapping

from gmpmon.binary import pclntab
from gmpmon.binary.elf import STT_FUNC, STT_OBJECT, Elf
from gmpmon.errors import BinaryFormatError

SYM_SIZE = 24  # Elf64_Sym: st_name u32, st_info u8, st_other u8, st_shndx u16, value, size
_SYM = struct.Struct("<IBBHQQ")
_U32 = struct.Struct("<I")
_I32 = struct.Struct("<i")


def occurrences(buf: bytes, name: bytes, lo: int = 0, hi: int | None = None) -> list[int]:
    """Offsets in ``buf[lo:hi]`` where the NUL-terminated string ``name`` starts (also one
    that runs unterminated to ``hi``, as ELF string readers allow)."""
    hi = len(buf) if hi is None else hi
    needle = name + b"\0"
    out = []
    pos = buf.find(needle, lo, hi)
    while pos >= 0:
        out.append(pos)
        pos = buf.find(needle, pos + 1, hi)
    if hi - len(name) >= lo and buf[hi - len(name) : hi] == name:
        out.append(hi - len(name))
    return out


def aligned(buf: bytes, needle: bytes, lo: int, hi: int, start: int, step: int) -> Iterator[int]:
    """Positions p of ``needle`` in ``buf[lo:hi]`` with (p - start) % step == 0."""
    pos = buf.find(needle, lo, hi)
    while pos >= 0:
        if (pos - start) % step == 0:
            yield pos
        pos = buf.find(needle, pos + 1, hi)


class SymtabIndex:
    """.symtab by name: ``functions(name)`` in table order, ``objects`` as a Mapping (first
    wins), like ``load._Funcs`` over ``Elf.symbols()``."""

    def __init__(self, elf: Elf, names: bytes, data: bytes) -> None:
        self.elf = elf
        self.names = names
        self.data = data  # a whole number of Elf64_Sym
        self.objects = _Objects(self)

    def _named(self, name: str) -> list[tuple[int, int, int, int]]:
        """(index, type, value, size) of the FUNC and OBJECT symbols called ``name``."""
        out = []
        for off in occurrences(self.names, name.encode()):
            if off == 0:  # st_name 0 is "no name": elf.symbols() skips it
                continue
            for pos in aligned(self.data, _U32.pack(off), 0, len(self.data), 0, SYM_SIZE):
                _n, info, _o, _shndx, value, size = _SYM.unpack_from(self.data, pos)
                if info & 0xF in (STT_FUNC, STT_OBJECT):
                    out.append((pos // SYM_SIZE, info & 0xF, value, size))
        out.sort()
        return out

    def functions(self, name: str) -> list[tuple[int, int]]:
        return [(v, s) for _i, t, v, s in self._named(name) if t == STT_FUNC]

    def object(self, name: str) -> tuple[int, int] | None:
        return next(((v, s) for _i, t, v, s in self._named(name) if t == STT_OBJECT), None)


class _Objects(Mapping[str, tuple[int, int]]):
    """The OBJECT symbols by name; lookups are targeted, iteration walks the whole table."""

    def __init__(self, index: SymtabIndex) -> None:
        self._index = index
        self._all: dict[str, tuple[int, int]] | None = None
        self._nonempty: bool | None = None

    def __getitem__(self, name: str) -> tuple[int, int]:
        hit = self._index.object(name)
        if hit is None:
            raise KeyError(name)
        return hit

    def _walk(self) -> dict[str, tuple[int, int]]:
        if self._all is None:
            self._all = {}
            for s in self._index.elf.symbols() or ():
                if s.type != STT_FUNC:
                    self._all.setdefault(s.name, (s.value, s.size))
        return self._all

    def __iter__(self) -> Iterator[str]:
        return iter(self._walk())

    def __len__(self) -> int:
        return len(self._walk())

    def __bool__(self) -> bool:
        if self._nonempty is None:
            self._nonempty = any(
                info & 0xF == STT_OBJECT and n
                for n, info, _o, _s, _v, _z in _SYM.iter_unpack(self._index.data)
            )
        return self._nonempty


class PclntabIndex:
    """.gopclntab by name and by address, reading only the records it needs: the same
    (entry, size) lists and names as ``pclntab.read_pclntab``."""

    def __init__(self, elf: Elf) -> None:
        self.elf = elf
        h = self.header = pclntab.read_header(elf)
        self.data = h.data
        self.text_start = h.text_start
        self.funcname_off = h.funcname_off
        self.names_end = h.names_end
        self.pcln_off = h.pcln_off
        self.nfunc = h.nfunc
        # an array, not a tuple of ints: 8 bytes a function instead of ~70
        tab = array("I", h.data[h.pcln_off : h.pcln_off + 4 * (2 * h.nfunc + 1)])
        self._entries = tab[0::2]  # nfunc entry offsets, then the end of the last function
        self._funcoffs = tab[1::2]
        self._by_funcoff: dict[int, int] | None = None  # only if _func records are unordered
        if list(self._funcoffs) != sorted(self._funcoffs):
            self._by_funcoff = {f: i for i, f in reversed(list(enumerate(self._funcoffs)))}

    def _index_of_funcoff(self, funcoff: int) -> int | None:
        if self._by_funcoff is not None:
            return self._by_funcoff.get(funcoff)
        i = bisect.bisect_left(self._funcoffs, funcoff)
        return i if i < self.nfunc and self._funcoffs[i] == funcoff else None

    def _name_at_index(self, i: int) -> str:
        data = self.data
        fo = self.pcln_off + self._funcoffs[i]
        if fo + 8 > len(data):
            raise BinaryFormatError(f"{self.elf.path}: .gopclntab _func {i} out of the table")
        (name_off,) = _I32.unpack_from(data, fo + 4)
        start = self.funcname_off + name_off
        if not 0 <= name_off < len(data) - self.funcname_off:
            raise BinaryFormatError(f"{self.elf.path}: .gopclntab name {i} out of the table")
        nul = data.find(b"\0", start)
        if nul < 0:
            raise BinaryFormatError(f"{self.elf.path}: .gopclntab name {i} not terminated")
        return data[start:nul].decode("utf-8", "replace")

    def functions(self, name: str) -> list[tuple[int, int]]:
        """(entry, size) of every function called ``name``, in table (address) order."""
        data = self.data
        found: set[int] = set()
        funcs_lo = self.pcln_off
        for q in occurrences(data, name.encode(), self.funcname_off, self.names_end):
            if q + len(name) >= self.names_end:
                continue  # unterminated: read_pclntab refuses those
            needle = _I32.pack(q - self.funcname_off)
            pos = data.find(needle, funcs_lo + 4)
            while pos >= 0:
                i = self._index_of_funcoff(pos - 4 - funcs_lo)
                if i is not None:
                    found.add(i)
                pos = data.find(needle, pos + 1)
        e = self._entries
        return [(self.text_start + e[i], e[i + 1] - e[i]) for i in sorted(found)]

    def name_at(self, pc: int) -> str | None:
        """The function holding ``pc`` (FuncTab.lookup over the whole table)."""
        off = pc - self.text_start
        i = bisect.bisect_right(self._entries, off, 0, self.nfunc) - 1
        if i >= 0 and off < self._entries[i + 1]:
            return self._name_at_index(i)
        return None
