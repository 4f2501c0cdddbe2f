"""Which Go built an executable, also when it has no ``.go.buildinfo`` (npm's esbuild).

In order of trust:

1. ``.go.buildinfo`` (gmpmon.binary.buildinfo): what ``go version`` reads.
2. ``runtime.buildVersion``: a Go string header {ptr, len} in .data (the linker sets it to
   the toolchain's version, ``cmd/link/internal/ld/main.go``: ``-X runtime.buildVersion``).
   By name from .symtab; in a stripped binary, by a scan: every "go1.N[.P]" in the
   read-only data whose exact address and length sit as a string header in a data section
   (for a PIE, the pointer is a RELATIVE relocation). A stray "go1.x" in a message has no
   such header; two headers that disagree are refused.

Without build info, the version is cross-checked with what the binary is made of:

- the pclntab header's magic: 0xfffffff0 for Go 1.18-1.19, 0xfffffff1 for 1.20+;
- runtime functions that exist only from, or only until, a version (go-runtime.md §1.2,
  checked on builds of every toolchain 1.19-1.27): a version outside their range is refused.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from gmpmon.binary.buildinfo import go_minor, read_buildinfo_version
from gmpmon.binary.elf import ET_DYN, Elf
from gmpmon.binary.pclntab import MAGIC_118, MAGIC_120
from gmpmon.errors import BinaryFormatError, UnsupportedError

# "go1.26.5", "go1.27rc1", and a GOEXPERIMENT suffix ("go1.25.1 X:nodwarf5").
_FULL_RE = re.compile(rb"go1\.\d{1,3}(?:\.\d{1,3}|rc\d{1,2}|beta\d{1,2})?(?: X:[\w,.-]{1,200})?")
_START_RE = re.compile(rb"go1\.\d")
_RODATA = (".rodata", ".go.string", ".noptrdata", ".data.rel.ro")
_HEADERS = (".data", ".noptrdata", ".go.module", ".data.rel.ro")

# (function, lowest minor with it or None, highest minor with it or None, counts when absent)
# Absence counts only for functions every Go program links (the scheduler's own).
MARKERS: tuple[tuple[str, int | None, int | None, bool], ...] = (
    ("runtime.goready", None, 20, False),  # inlined from 1.21
    ("runtime.gdestroy", 22, None, True),  # split out of goexit0 in 1.22
    ("runtime.(*timers).run", 23, None, False),  # timers rewritten in 1.23
    ("sync.(*Mutex).lockSlow", None, 23, False),  # moved to internal/sync in 1.24
    ("internal/sync.(*Mutex).lockSlow", 24, None, False),
    ("runtime.globrunqgetbatch", 25, None, False),
    ("runtime.exitsyscall0", None, 25, True),  # syscall exit rewritten in 1.26
    ("runtime.exitsyscallTryGetP", 26, None, True),
)


@dataclass(frozen=True, slots=True)
class GoVersion:
    version: str  # "go1.26.5"
    minor: int
    source: str  # where it came from and what checked it, for inspect


def _bounds(lo: int | None, hi: int | None) -> str:
    if lo is None and hi is None:
        return "any"
    if lo is None:
        return f"<= 1.{hi}"
    if hi is None:
        return f"1.{lo}+"
    return f"1.{lo}" if lo == hi else f"1.{lo}-1.{hi}"


def pclntab_range(elf: Elf) -> tuple[int | None, int | None] | None:
    """The minors the pclntab header's magic allows, or None without a known magic."""
    data = elf.section_data(".gopclntab")
    if data is None or len(data) < 8:
        return None
    (magic,) = struct.unpack_from("<I", data, 0)
    if magic == MAGIC_118:
        return 18, 19
    if magic == MAGIC_120:
        return 20, None
    return None


def marker_checks(
    has: Callable[[str], bool],
) -> list[tuple[str, int | None, int | None]]:
    """Each marker that says something here: (what, lowest, highest)."""
    out = []
    for name, lo, hi, absence in MARKERS:
        if has(name):
            out.append((name, lo, hi))
        elif absence:
            # gone where it exists: a version outside its range
            if lo is not None:
                out.append((f"no {name}", None, lo - 1))
            elif hi is not None:
                out.append((f"no {name}", hi + 1, None))
    return out


def scan_build_version(elf: Elf) -> list[str]:
    """runtime.buildVersion's value(s) found without a symbol: every "go1.N..." string in
    read-only data that a Go string header in a data section points at with its exact
    length. Usually one; [] when there is none."""
    starts: list[tuple[int, bytes]] = []  # (vaddr, the longest version-like bytes there)
    for name in _RODATA:
        sec = elf.section(name)
        data = elf.section_data(name)
        if sec is None or data is None:
            continue
        for m in _START_RE.finditer(data):
            full = _FULL_RE.match(data, m.start())
            if full is not None:
                starts.append((sec.addr + m.start(), full.group(0)))
    if not starts:
        return []
    relocs_by_value: dict[int, list[int]] | None = None
    found: set[str] = set()
    for addr, text in starts:
        where = _pointers_to(elf, addr)
        if not where and elf.etype == ET_DYN:
            if relocs_by_value is None:
                relocs_by_value = {}
                for a, v in elf.relative_relocs().items():
                    relocs_by_value.setdefault(v, []).append(a)
            where = relocs_by_value.get(addr, [])
        for at in where:
            try:
                (length,) = struct.unpack("<Q", elf.read_vaddr(at + 8, 8))
            except BinaryFormatError:
                continue
            # the header's length must end the string exactly at a version's end
            if 5 <= length <= len(text) and _FULL_RE.fullmatch(text[:length]):
                found.add(text[:length].decode("ascii"))
    return sorted(found)


def _pointers_to(elf: Elf, addr: int) -> list[int]:
    needle = struct.pack("<Q", addr)
    out = []
    for name in _HEADERS:
        sec = elf.section(name)
        data = elf.section_data(name)
        if sec is None or data is None:
            continue
        pos = data.find(needle)
        while pos >= 0:
            if pos % 8 == 0 and pos + 16 <= len(data):
                out.append(sec.addr + pos)
            pos = data.find(needle, pos + 1)
    return out


def symtab_build_version(elf: Elf, objects: Mapping[str, tuple[int, int]]) -> str | None:
    """runtime.buildVersion through its .symtab entry."""
    if "runtime.buildVersion" not in objects:
        return None
    addr, _ = objects["runtime.buildVersion"]
    ptr = elf.read_ptr(addr)
    (length,) = struct.unpack("<Q", elf.read_vaddr(addr + 8, 8))
    if not 0 < length <= 256:
        raise BinaryFormatError(f"{elf.path}: runtime.buildVersion is {length} bytes long")
    return elf.read_vaddr(ptr, length).decode("utf-8", "replace")


def go_version(
    elf: Elf,
    objects: Mapping[str, tuple[int, int]],
    has_function: Callable[[str], bool],
) -> GoVersion:
    """The Go version that built `elf`, and where it came from.

    ``objects``: .symtab's data symbols ({} when stripped); ``has_function``: whether a
    function of that name is in the binary (.symtab or pclntab). Raises UnsupportedError
    when nothing tells the version, BinaryFormatError when the sources disagree."""
    path = elf.path
    info = read_buildinfo_version(elf)
    sym = symtab_build_version(elf, objects)
    if info is not None:
        if sym is not None and sym != info:
            raise BinaryFormatError(
                f"{path}: .go.buildinfo says {info} but runtime.buildVersion says {sym}"
            )
        return GoVersion(info, _minor(path, info), "build info")
    if sym is not None:
        version, how = sym, "runtime.buildVersion (by its symbol)"
    else:
        found = scan_build_version(elf)
        if len(found) > 1:
            raise BinaryFormatError(
                f"{path}: no build info, and several Go versions in its data ({', '.join(found)})"
            )
        if not found:
            raise UnsupportedError(
                f"{path}: cannot tell which Go version built it (no build info, "
                "no runtime.buildVersion)"
            )
        version, how = found[0], "runtime.buildVersion (found by a scan of its data)"
    minor = _minor(path, version)
    checks: list[tuple[str, int | None, int | None]] = []
    magic = pclntab_range(elf)
    if magic is not None:
        checks.append(("pclntab magic", *magic))
    checks += marker_checks(has_function)
    for what, lo, hi in checks:
        if (lo is not None and minor < lo) or (hi is not None and minor > hi):
            raise BinaryFormatError(
                f"{path}: no build info; runtime.buildVersion says {version} but "
                f"{what} says Go {_bounds(lo, hi)}"
            )
    parts = []
    if magic is not None:
        parts.append(f"the pclntab magic (Go {_bounds(*magic)})")
    funcs = checks[1:] if magic is not None else checks
    if funcs:
        lo = max((c[1] for c in funcs if c[1] is not None), default=None)
        hi = min((c[2] for c in funcs if c[2] is not None), default=None)
        parts.append(f"{len(funcs)} runtime functions (Go {_bounds(lo, hi)})")
    agree = " and ".join(parts) or "nothing else (no pclntab magic, no marker function)"
    return GoVersion(version, minor, f"{how}, no build info; agrees with {agree}")


def _minor(path: str, version: str) -> int:
    minor = go_minor(version)
    if minor is None:
        raise UnsupportedError(f"{path}: cannot parse the Go version {version!r}")
    return minor
