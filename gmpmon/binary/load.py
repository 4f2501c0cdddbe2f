"""Build a BinaryInfo from a Go ELF: version, symbols, offsets, enum names, probe sites."""

from __future__ import annotations

import dataclasses
import functools
import mmap
import os
import stat
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, cast

from gmpmon.binary import dwarf, pclntab, table
from gmpmon.binary.buildinfo import go_minor
from gmpmon.binary.elf import ET_DYN, ET_EXEC, STT_FUNC, Elf, cstring
from gmpmon.binary.globals import GC_GLOBALS, GLOBAL_NAMES, find_globals
from gmpmon.binary.goversion import go_version
from gmpmon.binary.info import UNLOADED_FUNCTAB, BinaryInfo, FuncTab, ProbeSite
from gmpmon.binary.symindex import PclntabIndex, SymtabIndex
from gmpmon.errors import (
    BinaryFormatError,
    GmpmonError,
    MissingSymbolsError,
    NotGoError,
    PermissionDenied,
    TargetError,
    UnsupportedError,
)

if TYPE_CHECKING:
    from gmpmon.probetable import Role

MIN_MINOR = 19
# go1.20 had no toolchain to verify against (go-runtime.md): refused rather than guessed.
UNVERIFIED_MINORS = frozenset({20})

# Kept as a name for callers; the list lives in gmpmon.binary.globals.
GLOBALS: tuple[str, ...] = GLOBAL_NAMES
# What the memory sampler (gmpmon/capture/sampler.py) cannot do without.
SAMPLE_GLOBALS: tuple[str, ...] = ("runtime.allp", "runtime.sched")
MAX_STRINGS = 512


class _Funcs:
    """Function symbols: name -> candidate (entry, size) list; all functions for FuncTab.

    Names are looked up one by one in .symtab, else .gopclntab (gmpmon.binary.symindex: the
    answers of a walk of every symbol), and the FuncTab is built in one pass over the table
    with no object per function besides its row: about half the memory of a dict of every
    name and a Symbol each (1.5 M function symbols: 469 MB instead of 820). ``table=False``:
    no FuncTab (UNLOADED_FUNCTAB)."""

    def __init__(self, elf: Elf, *, table: bool = True) -> None:
        self.elf = elf
        self.globals: Mapping[str, tuple[int, int]] = {}
        self._sym: SymtabIndex | None = None
        self._pcln: PclntabIndex | None = None
        self._walked: FuncTab | None = None
        self.functab = UNLOADED_FUNCTAB
        tables = elf.symtab()
        self.from_symtab = tables is not None
        if tables is not None:
            self._sym = SymtabIndex(elf, *tables)
            self.globals = self._sym.objects
            if table:
                self.functab = _symtab_functab(elf, *tables)
            return
        self._pcln = PclntabIndex(elf)
        if table:
            rows = pclntab.read_pclntab(elf, self._pcln.header)
            self.functab = _functab([(start, end, name) for name, start, end in rows])

    @functools.cached_property
    def by_name(self) -> dict[str, list[tuple[int, int]]]:
        """Every function name -> its (entry, size) list, by a walk of the whole table: what
        candidates() answers one name at a time (tests hold the two equal)."""
        out: dict[str, list[tuple[int, int]]] = {}
        syms = self.elf.symbols()
        if syms is not None:
            for sym in syms:
                if sym.type == STT_FUNC:
                    out.setdefault(sym.name, []).append((sym.value, sym.size))
            return out
        for name, start, end in pclntab.read_pclntab(self.elf):
            out.setdefault(name, []).append((start, end - start))
        return out

    @functools.cached_property
    def walked_globals(self) -> dict[str, tuple[int, int]]:
        """Every OBJECT symbol -> (address, size), first wins, by a walk of .symtab: what
        ``globals`` answers one name at a time."""
        out: dict[str, tuple[int, int]] = {}
        for sym in self.elf.symbols() or ():
            if sym.type != STT_FUNC:
                out.setdefault(sym.name, (sym.value, sym.size))
        return out

    def candidates(self, name: str) -> list[tuple[int, int]]:
        if self._sym is not None:
            return self._sym.functions(name)
        assert self._pcln is not None
        return self._pcln.functions(name)

    def name_at(self, pc: int) -> str | None:
        """FuncTab.lookup, also without a FuncTab."""
        if self.functab.loaded:
            return self.functab.lookup(pc)
        if self._pcln is not None:
            return self._pcln.name_at(pc)
        if self._walked is None:  # rare: from_code on a .symtab without objects
            tables = self.elf.symtab()
            self._walked = _symtab_functab(self.elf, *tables) if tables else self.functab
        return self._walked.lookup(pc)

    def code(self, entry: int, size: int) -> bytes:
        return self.elf.read_vaddr(entry, size)

    def resolve(self, name: str) -> tuple[int, int] | None:
        """(entry, size) of the function body. pclntab lists an ABI wrapper under the same
        name as the body it calls; the wrapper is the copy that calls or jumps to the other."""
        cands = self.candidates(name)
        if not cands:
            return None
        if len(cands) == 1:
            return cands[0]
        from gmpmon.binary import probes  # capstone: imported only when code is read

        bodies = [
            c
            for c in cands
            if not any(o != c and probes.calls_target(self.code(*c), c[0], o[0]) for o in cands)
        ]
        return max(bodies or cands, key=lambda c: c[1])


def _symtab_functab(elf: Elf, names: bytes, data: bytes) -> FuncTab:
    """The FuncTab of .symtab's FUNC symbols (what Elf.symbols() gives, without a Symbol
    object each: this is ~2x less memory for a large program)."""
    rows: list[tuple[int, int, str]] = []
    for name_off, info, _o, _shndx, value, size in struct.iter_unpack("<IBBHQQ", data):
        if info & 0xF == STT_FUNC and name_off:
            rows.append((value, value + size, cstring(names, name_off, elf.path)))
    return _functab(rows)


def _functab(rows: list[tuple[int, int, str]]) -> FuncTab:
    rows.sort()
    return FuncTab(
        starts=tuple(r[0] for r in rows),
        ends=tuple(r[1] for r in rows),
        names=tuple(r[2] for r in rows),
    )


def _read_go_strings(elf: Elf, addr: int, size: int, what: str) -> tuple[str, ...]:
    n = size // 16
    if n > MAX_STRINGS:
        raise BinaryFormatError(f"{elf.path}: {what} has {n} entries")
    out = []
    for i in range(n):
        ptr = elf.read_ptr(addr + 16 * i)
        (length,) = struct.unpack("<Q", elf.read_vaddr(addr + 16 * i + 8, 8))
        if length == 0:
            out.append("")
            continue
        if length > 256:
            raise BinaryFormatError(f"{elf.path}: {what}[{i}] is {length} bytes long")
        out.append(elf.read_vaddr(ptr, length).decode("utf-8", "replace"))
    return tuple(out)


def _check_version(path: str, version: str) -> int:
    minor = go_minor(version)
    if minor is None:
        raise UnsupportedError(f"{path}: cannot parse the Go version {version!r}")
    if minor < MIN_MINOR:
        raise UnsupportedError(f"{path}: built by {version}; gmpmon needs Go 1.19 or newer")
    if minor in UNVERIFIED_MINORS:
        raise UnsupportedError(
            f"{path}: built by {version}; Go 1.20 was never verified by "
            "gmpmon (1.19 and 1.21+ are supported)"
        )
    return minor


def load_elf(
    data: bytes, path: str, *, readers_only: bool = False, functab: bool = True,
    gc: bool = True,
) -> BinaryInfo:
    """BinaryInfo from the bytes of an executable (the work of :func:`load`).

    ``readers_only`` (``gmpmon ps``: memory reads, never a probe) skips what only probes
    need, the probe sites (no ``probe_sites``), and takes the struct offsets from gmpmon's
    table when it has one for this very Go minor (the test matrix holds every table equal to
    the DWARF of its version; the live process must still pass validate_layout) instead of
    parsing DWARF: together ~70 ms of the ~120 a binary takes.

    ``functab=False`` (``gmpmon ps``, which names no PC): no function table
    (``UNLOADED_FUNCTAB``), and the few functions and globals needed are looked up by name
    instead of walking every symbol (gmpmon.binary.symindex).

    ``gc=False`` (``gmpmon ps``, which shows no GC): in a stripped build the GC panel's
    globals (``GC_GLOBALS``) are not looked for; their finders decode the GC's largest
    functions."""
    try:
        return _load_elf(data, path, readers_only, functab, gc)
    except GmpmonError:
        raise
    except (
        struct.error,
        IndexError,
        ValueError,
        KeyError,
        OverflowError,
        UnicodeError,
        MemoryError,
        RecursionError,
    ) as e:
        # Damaged bytes that slipped past the bounds checks; never a traceback for a file.
        raise BinaryFormatError(f"{path}: malformed binary ({type(e).__name__}: {e})") from e


def _load_elf(
    data: bytes, path: str, readers_only: bool = False, with_functab: bool = True,
    gc: bool = True,
) -> BinaryInfo:
    elf = Elf(data, path)
    if elf.section(".go.buildinfo") is None and elf.section(".gopclntab") is None:
        raise NotGoError(f"{path} is not a Go program (no .go.buildinfo or .gopclntab)")
    if elf.arch != "amd64" or not elf.is64:
        raise UnsupportedError(f"{path}: a Go program for {elf.arch}; gmpmon supports amd64 only")
    if elf.etype not in (ET_EXEC, ET_DYN):
        raise UnsupportedError(f"{path}: ELF type {elf.etype} is not an executable")
    funcs = _Funcs(elf, table=with_functab)
    # build info; without it runtime.buildVersion, checked against the pclntab and the
    # runtime functions present (gmpmon.binary.goversion)
    gv = go_version(elf, funcs.globals, lambda name: bool(funcs.candidates(name)))
    version = gv.version
    minor = _check_version(path, version)

    symbols: dict[str, int] = {}
    sizes: dict[str, int] = {}
    sites: dict[str, ProbeSite] = {}
    missing: dict[str, str] = {}
    resolved: dict[str, tuple[str, int, int]] = {}
    # readers_only: no probe sites, so no role is resolved at all (and capstone, which
    # probes imports, is left for the finders of a stripped binary)
    roles: tuple[Role, ...] = ()
    if not readers_only:
        from gmpmon.binary import probes
        from gmpmon.binary.exits import find_exit_edges

        roles = (*probes.REQUIRED_ROLES, *probes.OPTIONAL_ROLES)
    for role in roles:
        for sym in role.symbols:
            r = funcs.resolve(sym)
            if r is not None:
                resolved[role.name] = (sym, *r)
                break
    callee_entries = {name: r[1] for name, r in resolved.items()}
    # callees of call and call-result sites need not be roles themselves
    for role in roles:
        for callee in (*role.calls, *role.call_sites):
            r = funcs.resolve(callee) if callee not in callee_entries else None
            if r is not None:
                callee_entries[callee] = r[0]
    for role in roles:
        if role.name not in resolved:
            if role in probes.REQUIRED_ROLES:
                raise MissingSymbolsError(
                    f"{path}: required runtime function {role.name} not found ({version})"
                )
            missing[role.name] = probes.OPTIONAL_WHY[role.name]
            continue
        sym, entry, size = resolved[role.name]
        if size <= 0 or size > 1 << 20:
            raise BinaryFormatError(f"{path}: {sym} has a bad size {size}")
        symbols[sym] = entry
        sizes[sym] = size
        code = funcs.code(entry, size)
        site = probes.make_site(role, sym, entry, code, callee_entries)
        if role.rets:  # the way out on emulated branches, where the RETs allow it
            site = dataclasses.replace(site, exits=find_exit_edges(
                code, entry, probes.disasm_lite(code, entry)))
        sites[role.name] = site
    runqsteal = sites.get("runtime.runqsteal")
    if runqsteal is not None and not runqsteal.call_results.get("runtime.runqgrab"):
        missing["steal_count"] = (
            "no jcc after runqsteal's call to runqgrab: the number stolen needs runqgrab's RETs"
        )

    tab = table.table_for(minor)
    tab_minor = minor
    # readers_only with a table for this minor: no DWARF parse (the table's offsets below).
    offsets = None
    bad_dwarf: BinaryFormatError | None = None
    if not (readers_only and tab is not None):
        try:
            offsets = dwarf.read_offsets(elf)
        except BinaryFormatError as e:
            # DWARF over gmpmon's caps or damaged (a hostile binary: a compressed bomb):
            # gmpmon needs it only for struct offsets, which its table also has; those are
            # used as for a build without DWARF (checked on the live process).
            bad_dwarf = e
    has_dwarf = offsets is not None
    known = table.table_minors()
    if tab is None and known and minor > int(known[-1].split(".")[1]):
        # Newer than every table: with DWARF its offsets are used; without, the newest
        # table's, and only on a process where validate_layout() holds (capture refuses
        # otherwise). The enum names come from the newest table either way.
        tab_minor = int(known[-1].split(".")[1])
        tab = table.table_for(tab_minor)
        if not has_dwarf:
            missing["offsets"] = (
                f"{version} is newer than gmpmon's offsets table (newest go{known[-1]}): "
                f"go{known[-1]}'s offsets are used only if they validate on the live process"
            )
    if offsets is None:
        if tab is None and bad_dwarf is not None:
            raise bad_dwarf
        if tab is None:
            raise UnsupportedError(
                f"{path}: no DWARF and no offsets table for {version} "
                f"(table has: {', '.join(known) or 'none'})",
                hint="rebuild without -ldflags=-w, or run scripts/gen-offsets-table",
            )
        offsets = {k: int(v) for k, v in tab["offsets"].items()}
        if bad_dwarf is not None:
            missing["dwarf"] = (
                f"its DWARF is not used ({bad_dwarf.one_line().removeprefix(path + ': ')}); "
                f"struct offsets come from gmpmon's go1.{tab_minor} table instead"
            )
    offsets_source = "dwarf" if has_dwarf else "table"

    found, not_found = find_globals(
        elf, funcs.globals, funcs.resolve, funcs.name_at, offsets,
        frozenset() if gc else GC_GLOBALS,
    )
    for g, f in found.items():
        if f.how == "symtab":
            symbols[g], sizes[g] = f.addr, f.size
    absent = [g for g in SAMPLE_GLOBALS if g not in found]
    if absent:
        missing["sample"] = (
            f"{', '.join(absent)} not found"
            + (" (no symbol table)" if not funcs.from_symtab else "")
            + ": sampling runtime state from memory is disabled"
        )
    if "runtime.sched" not in found:
        missing["global_runq"] = "runtime.sched not found: the global run queue length is unknown"

    def strings(sym: str, key: str) -> tuple[str, ...]:
        f = found.get(sym)
        if f is not None and f.size:
            return _read_go_strings(elf, f.addr, f.size, sym)
        return tuple(tab.get(key, ())) if tab else ()

    wait_reasons = strings("runtime.waitReasonStrings", "wait_reasons")
    if not wait_reasons:
        missing["wait_reasons"] = f"no runtime.waitReasonStrings and no table for {version}"
    stw_reasons = strings("runtime.stwReasonStrings", "stw_reasons")
    # The runtime's own names (gStatusStrings, from the binary or the table) where it has
    # them; it leaves unused states ("moribund_unused") empty: those come from runtime2.go.
    const_names = table.g_status_names(minor)
    runtime_names = strings("runtime.gStatusStrings", "g_status")
    g_status = tuple(
        (runtime_names[i] if i < len(runtime_names) else "")
        or (const_names[i] if i < len(const_names) else f"status{i}")
        for i in range(max(len(runtime_names), len(const_names)))
    )

    return BinaryInfo(
        path=path,
        go_version=version,
        go_minor=minor,
        go_version_source=gv.source,
        arch=elf.arch,
        pie=elf.etype == ET_DYN,
        stripped=not funcs.from_symtab,
        dwarf=has_dwarf or (readers_only and elf.section(".debug_info") is not None),
        offsets_source=offsets_source,
        symbols=symbols,
        symbol_sizes=sizes,
        offsets=offsets,
        wait_reasons=wait_reasons,
        g_status=g_status,
        p_status=table.p_status_names(minor),
        stw_reasons=stw_reasons,
        probe_sites=sites,
        missing_optional=missing,
        functab=funcs.functab,
        globals={g: f.addr for g, f in found.items()},
        global_how={g: f.how for g, f in found.items()},
        global_sizes={g: f.size for g, f in found.items()},
        globals_missing=not_found,
        offsets_table="" if has_dwarf else f"1.{tab_minor}",
    )


_IDENTITY = ("st_dev", "st_ino", "st_size", "st_mtime_ns", "st_ctime_ns")


def read_file(path: str) -> bytes:
    return read_file_stat(path)[0]


def read_file_stat(path: str) -> tuple[bytes, os.stat_result | None]:
    """The file's bytes, and its fstat when it did not change while read (else None)."""
    try:
        # stat first: opening a FIFO would block, reading /dev/zero would never end
        st = os.stat(path)
        if stat.S_ISDIR(st.st_mode):
            raise NotGoError(f"{path} is a directory, not a Go program")
        if not stat.S_ISREG(st.st_mode):
            raise NotGoError(f"{path} is not a regular file, so not a Go program")
        with open(path, "rb") as f:
            before = os.fstat(f.fileno())
            # Mapped, not read: only the pages of the headers and sections used are ever
            # read (a Go binary padded to 3.9 GB took 4-8 GB when read whole), so its size
            # is no limit; what is read from it is (MAX_TABLE and the caps beside it). An mmap
            # serves every use the readers make of the bytes (len, slices, unpack_from,
            # find); the mapping outlives the file object.
            data = cast(bytes, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
                        if before.st_size else b"")
            after = os.fstat(f.fileno())
        same = all(getattr(before, k) == getattr(after, k) for k in _IDENTITY)
        return data, (after if same and len(data) == after.st_size else None)
    except FileNotFoundError as e:
        raise TargetError(f"{path}: no such file") from e
    except PermissionError as e:
        raise PermissionDenied(f"{path}: permission denied") from e
    except IsADirectoryError as e:
        raise NotGoError(f"{path} is a directory, not a Go program") from e
    except OSError as e:
        raise TargetError(f"{path}: cannot read ({e.strerror})") from e


def load(path: str) -> BinaryInfo:
    """BinaryInfo of the Go executable at `path`."""
    return load_elf(read_file(str(Path(path))), str(path))
