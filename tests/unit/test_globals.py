"""BinaryInfo.globals against `go tool nm` of the same toolchain, over the version x mode matrix.

A stripped (-s -w) build has no names for its globals; gmpmon finds them in the code. The
truth for it is the .symtab of the same program built without -s -w (test_binary's twin).
"""

from __future__ import annotations

import functools
import json
import shutil
from pathlib import Path

import pytest

from gmpmon.binary import BinaryInfo, load
from gmpmon.binary.elf import Elf
from gmpmon.binary.finders import FINDERS
from gmpmon.binary.globals import ALIASES, GLOBAL_NAMES
from gmpmon.binary.pclntab import moduledata_ranges
from gmpmon.binary.table import table_minors
from tests import gotargets
from tests.cli import inspect
from tests.unit.test_binary import IDS, MATRIX, SNAPSHOTS, WORKLOAD, has_symtab, info, nm

# Builds with a .symtab; the stripped ones are the finder tests' below.
SYMTAB_CASES = [(v, m) for v, m in MATRIX if has_symtab(m)]


@pytest.mark.parametrize(("version", "mode"), SYMTAB_CASES,
                         ids=[f"go{v}-{m}" for v, m in SYMTAB_CASES])
def test_symtab_globals_equal_go_tool_nm(version: str, mode: str) -> None:
    i = info(version, mode)
    truth = nm(version, mode)
    for g in GLOBAL_NAMES:
        names = [n for n in (g, *ALIASES.get(g, ())) if n in truth]
        if not names:
            assert g not in i.globals, f"{g} found but go tool nm has no such symbol"
            continue
        assert g in i.globals, f"{g} in go tool nm but not found"
        assert i.globals[g] == truth[names[0]][0], g
        assert i.global_sizes[g] == truth[names[0]][1], g
        assert i.global_how[g].startswith("symtab"), i.global_how[g]
    for g in ("runtime.allp", "runtime.allgs", "runtime.allglen", "runtime.allm",
              "runtime.sched", "runtime.gomaxprocs", "runtime.ncpu"):
        assert g in i.globals, f"{g} missing in go{version} {mode}"


# -- stripped builds: the disassembly finders ---------------------------------------------------

# The globals every finder must place, on every version.
FOUND_BY_CODE = tuple(f.name for f in FINDERS)
# (stripped mode, its twin with .symtab): same source, same toolchain, same flags otherwise.
TWINS: tuple[tuple[str, str], ...] = (("stripped", "default"), ("pie-stripped", "pie"))
TWIN_CASES = [(v, s, t) for v in gotargets.versions() for s, t in TWINS]
TWIN_IDS = [f"go{v}-{s}" for v, s, _ in TWIN_CASES]


@functools.cache
def load_build(version: str, mode: str) -> BinaryInfo:
    """A private copy, so both twins are read as they are now even if rebuilt meanwhile."""
    out = SNAPSHOTS / f"go{version}-{mode}"
    if not out.exists():
        shutil.copy2(gotargets.build(WORKLOAD, go=version, mode=mode), out)
    return load(str(out))


@pytest.mark.parametrize(("version", "stripped", "twin"), TWIN_CASES, ids=TWIN_IDS)
def test_stripped_globals_equal_symtab_of_the_twin(version: str, stripped: str, twin: str) -> None:
    bare, full = load_build(version, stripped), load_build(version, twin)
    assert bare.stripped and not full.stripped
    # The assumption under the comparison: the same code at the same addresses, the same
    # data layout (pclntab functions of -s -w == .symtab functions; moduledata ranges equal).
    pcln = dict(zip(bare.functab.starts, bare.functab.names, strict=True))
    symtab = {
        a: n.removesuffix(".abi0").replace("·", ".")
        for a, n in zip(full.functab.starts, full.functab.names, strict=True)
    }
    assert set(pcln) <= set(symtab) and len(set(symtab) - set(pcln)) < 0.02 * len(symtab)
    for fn in ("runtime.procresize", "runtime.allgadd", "runtime.mcommoninit",
               "runtime.pidleput", "runtime.pidleget", "runtime.osinit"):
        assert bare.functab.range_of(fn) == full.functab.range_of(fn) or (
            bare.functab.range_of(fn) is not None
            and full.functab.range_of(fn) is not None
            and bare.functab.range_of(fn)[0] == full.functab.range_of(fn)[0]  # type: ignore[index]
        ), fn
    e_bare, e_full = (Elf(Path(i.path).read_bytes(), i.path) for i in (bare, full))
    assert moduledata_ranges(e_bare) == moduledata_ranges(e_full) is not None
    for g in FOUND_BY_CODE:
        assert g in bare.globals, f"{g}: {bare.globals_missing.get(g)}"
        assert bare.globals[g] == full.globals[g], (
            f"{g}: {bare.global_how[g]} gave {bare.globals[g]:#x}, .symtab of the {twin} build "
            f"says {full.globals[g]:#x}"
        )
        assert bare.global_how[g].startswith("disasm runtime."), bare.global_how[g]
    assert "sample" not in bare.missing_optional


@pytest.mark.parametrize(("version", "mode"), MATRIX, ids=IDS)
def test_moduledata_ranges_equal_the_linker_symbols(version: str, mode: str) -> None:
    i = info(version, mode)
    ranges = moduledata_ranges(Elf(Path(i.path).read_bytes(), i.path))
    assert ranges is not None
    if not has_symtab(mode):
        return  # equal to the twin's: test_stripped_globals_equal_symtab_of_the_twin
    truth = nm(version, mode)
    for k, (start, end) in ranges.items():
        assert (start, end) == (truth[f"runtime.{k}"][0], truth[f"runtime.e{k}"][0]), k


def test_a_finder_result_outside_data_and_bss_is_dropped() -> None:
    """The moduledata bounds are a real filter: with the pointer globals' ranges swapped for
    the plain ones, every pointer-holding global is refused, with the reason."""
    i = load_build(gotargets.versions()[-1], "stripped")
    elf = Elf(Path(i.path).read_bytes(), i.path)
    real = moduledata_ranges(elf)
    assert real is not None
    swapped = dict(real, data=real["noptrdata"], bss=real["noptrbss"])
    from gmpmon.binary import globals as gl

    funcs: dict[str, tuple[int, int]] = {}
    for s, e, n in zip(i.functab.starts, i.functab.ends, i.functab.names, strict=True):
        if e - s > funcs.get(n, (0, 0))[1]:  # an ABI wrapper and its body share a name
            funcs[n] = (s, e - s)
    orig = gl.pclntab.moduledata_ranges
    try:
        gl.pclntab.moduledata_ranges = lambda _elf: swapped  # type: ignore[assignment]
        found, why = gl.from_code(elf, funcs.get, i.functab.lookup, i.offsets)
    finally:
        gl.pclntab.moduledata_ranges = orig  # type: ignore[assignment]
    for f in FINDERS:
        if f.pointers:
            assert f.name not in found and "outside moduledata's data/bss" in why[f.name]
        else:
            assert found[f.name].addr == i.globals[f.name]


def patched_version(tmp: Path, src: Path, old: str, new: str) -> Path:
    """A copy of `src` whose .go.buildinfo claims Go `new` (same length as `old`)."""
    data = bytearray(src.read_bytes())
    sec = Elf(bytes(data), str(src)).section(".go.buildinfo")
    assert sec is not None and len(old) == len(new)
    at = data.find(old.encode(), sec.offset, sec.offset + sec.size)
    assert at > 0, f"{old} not in .go.buildinfo"
    data[at : at + len(old)] = new.encode()
    out = tmp / f"{src.name}-{new}"
    out.write_bytes(bytes(data))
    out.chmod(0o755)
    return out


def future_minor() -> str:
    return f"1.{int(table_minors()[-1].split('.')[1]) + 1}"


def test_a_newer_go_without_dwarf_takes_the_newest_table_and_says_so(tmp_path: Path) -> None:
    newest = table_minors()[-1]
    src = Path(load_build(newest, "stripped").path)
    real = load(str(src)).go_version
    fut = patched_version(tmp_path, src, real, f"go{future_minor()}.0".ljust(len(real), "0"))
    i = load(str(fut))
    assert i.go_version.startswith(f"go{future_minor()}.")
    assert i.offsets_source == "table" and i.offsets_table == newest
    assert "newer than gmpmon's offsets table" in i.missing_optional["offsets"]
    r = inspect(str(fut))
    assert r.returncode == 0, r.stderr
    assert f"is newer than the table: go{newest} offsets, used only if they validate live" in (
        r.stdout.replace("\n", " ")
    )
    j = json.loads(inspect(str(fut), "--json").stdout)
    assert j["offsets_table"] == newest and j["offsets_origin"] == f"table go{newest} (newest)"


def test_trusted_drops_exactly_the_globals_of_failed_groups() -> None:
    from gmpmon.binary.validate import GROUP_GLOBALS, GROUPS, Layout, trusted

    i = info(*MATRIX[0])
    assert trusted(i, Layout()) is i
    for group in GROUPS:
        t = trusted(i, Layout(failed={group: "x == y (read 3)"}, source="s"))
        gone = set(i.globals) - set(t.globals)
        assert gone == set(GROUP_GLOBALS[group]) & set(i.globals), group
        for g in gone:
            assert t.globals_missing[g] == "layout check failed: x == y (read 3)"
        assert t.missing_optional["layout"].startswith(
            "layout check failed: x == y (read 3) [s]; off: "
        )


def test_a_newer_go_with_dwarf_uses_its_dwarf(tmp_path: Path) -> None:
    newest = table_minors()[-1]
    src = Path(load_build(newest, "default").path)
    real = load(str(src)).go_version
    new = f"go{future_minor()}.0".ljust(len(real), "0")
    data = src.read_bytes()
    assert data.count(real.encode()) >= 2  # .go.buildinfo and runtime.buildVersion's bytes
    fut = tmp_path / "fut"
    fut.write_bytes(data.replace(real.encode(), new.encode()))
    i = load(str(fut))
    assert i.go_version == new and i.dwarf and i.offsets_source == "dwarf"
    assert i.offsets_table == "" and "offsets" not in i.missing_optional
    assert i.offsets == load(str(src)).offsets
