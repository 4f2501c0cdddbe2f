"""Property: whatever bytes of a real Go binary are damaged, gmpmon.binary either reads it or
raises one of gmpmon's own errors (which the CLI turns into one line and an exit code).

Mutations land where a parser trusts the file: the ELF header, program and section headers,
.go.buildinfo, the .gopclntab header and function table, .symtab entries, and (for DWARF
builds) .debug_info's struct DIEs. Bounded by default; GMPMON_FULL_MATRIX=1 runs many more.
"""

from __future__ import annotations

import functools
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gmpmon.binary import load_elf
from gmpmon.binary.elf import Elf
from gmpmon.errors import GmpmonError
from tests import gotargets

FULL = gotargets.full_matrix()
EXAMPLES = int(os.environ.get("GMPMON_FUZZ_EXAMPLES", 1500 if FULL else 40))
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=not FULL,  # the default run is reproducible; the full run explores
)


@functools.cache
def original(mode: str) -> bytes:
    version = gotargets.versions()[-1]
    return gotargets.build("sleeper", go=version, mode=mode).read_bytes()


@functools.cache
def regions(mode: str) -> dict[str, tuple[int, int]]:
    """region name -> (file offset, length) worth mutating."""
    data = original(mode)
    elf = Elf(data, mode)
    shoff = int.from_bytes(data[0x28:0x30], "little")
    shnum = int.from_bytes(data[0x3C:0x3E], "little")
    phoff = int.from_bytes(data[0x20:0x28], "little")
    phnum = int.from_bytes(data[0x38:0x3A], "little")
    out = {
        "elf_header": (0, 64),
        "program_headers": (phoff, 56 * phnum),
        "section_headers": (shoff, 64 * shnum),
    }
    for name, length in ((".go.buildinfo", 96), (".gopclntab", 8192), (".symtab", 1 << 20)):
        sec = elf.section(name)
        if sec is not None:
            out[name] = (sec.offset, min(length, sec.size))
    dbg = elf.section(".debug_info")
    if dbg is not None:
        out[".debug_info"] = (dbg.offset, min(dbg.size, 1 << 20))
    return out


def mutations(mode: str) -> st.SearchStrategy[tuple[str, list[tuple[int, int]], int | None]]:
    names = sorted(regions(mode))
    return st.tuples(
        st.sampled_from(names),
        st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(0, 255)), min_size=1, max_size=8),
        st.one_of(st.none(), st.integers(0, len(original(mode)))),
    )


def apply(mode: str, region: str, edits: list[tuple[int, int]], cut: int | None) -> bytes:
    data = bytearray(original(mode))
    off, length = regions(mode)[region]
    for pos, value in edits:
        data[off + pos % max(length, 1)] = value
    return bytes(data if cut is None else data[:cut])


def check(data: bytes) -> None:
    try:
        load_elf(data, "mutant")
    except GmpmonError as e:
        assert str(e)  # a message the CLI can print


@pytest.mark.parametrize("mode", ["stripped", "default"])
def test_damaged_binaries_raise_only_gmpmon_errors(mode: str) -> None:
    @SETTINGS
    @given(mutations(mode))
    def prop(m: tuple[str, list[tuple[int, int]], int | None]) -> None:
        check(apply(mode, *m))

    prop()


def test_unmodified_binaries_load() -> None:
    # the property above would pass trivially if every input were rejected
    for mode in ("stripped", "default"):
        assert load_elf(original(mode), mode).go_version.startswith("go1.")
