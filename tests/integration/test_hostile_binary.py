"""Hostile binaries (issue 31), each built here from a real Go executable of the test matrix:

- a compressed-DWARF bomb: .debug_info rewritten as a SHF_COMPRESSED section whose header
  claims 3 GiB (and one whose zlib stream inflates far past the little it claims). `inspect`
  and `attach` took 35 s and 6.3 GB before "damaged DWARF"; gmpmon needs DWARF only for
  struct offsets, which its table also has, so it now goes on without it, and says so;
- a sparse executable padded to 3.9 GB with truncate, which still runs: `ps` took 4 GB and
  `attach` 8.1 GB and 17 s (the file was read whole, then copied);
- hostile section headers and tables (offsets and sizes past the file, absurd counts): one
  `gmpmon: ...` line and exit 6 (BinaryFormatError), and `ps` says why on the process's line.

Each case ends within tests/hostile.py's LIMIT_S and LIMIT_MB (a live capture: within
LIMIT_S of the same capture of the unmodified program), with no traceback."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gmpmon import errors
from gmpmon.binary.elf import Elf
from tests.gotargets import build
from tests.hostile import LIMIT_MB, LIMIT_S, Measured, gmpmon
from tests.integration.test_hardening_common import Target, start_target

BOMB_CLAIM = 3 << 30
BOMB_REAL = 512 << 20  # what the lying bomb's stream really inflates to
SPARSE_SIZE = 3_900_000_000
DWARF_NOTE = "its DWARF is not used ("

# ELF header fields (Elf64_Ehdr) and section header fields (Elf64_Shdr): offset, format.
EHDR = {"e_phoff": (0x20, "Q"), "e_shoff": (0x28, "Q"), "e_phnum": (0x38, "H"),
        "e_shentsize": (0x3A, "H"), "e_shnum": (0x3C, "H"), "e_shstrndx": (0x3E, "H")}
SHDR = {"sh_name": (0x0, "I"), "sh_flags": (0x8, "Q"), "sh_offset": (0x18, "Q"),
        "sh_size": (0x20, "Q"), "sh_link": (0x28, "I")}


def go_binary(tmp_path: Path, name: str = "parked", mode: str = "default") -> Path:
    exe = tmp_path / name
    shutil.copy2(build("parked", "1.27", mode), exe)
    return exe


def set_ehdr(data: bytearray, field: str, value: int) -> None:
    off, fmt = EHDR[field]
    struct.pack_into("<" + fmt, data, off, value)


def set_shdr(data: bytearray, section: str, field: str, value: int) -> None:
    elf = Elf(bytes(data))
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize = struct.unpack_from("<H", data, 0x3A)[0]
    idx = [s.name for s in elf._by_index].index(section)
    off, fmt = SHDR[field]
    struct.pack_into("<" + fmt, data, shoff + idx * shentsize + off, value)


def rewrite(exe: Path, change: Callable[[bytearray], None]) -> None:
    data = bytearray(exe.read_bytes())
    change(data)
    exe.write_bytes(bytes(data))


def zeros_stream(n: int) -> bytes:
    c = zlib.compressobj(1)
    chunk = bytes(16 << 20)
    return b"".join(c.compress(chunk) for _ in range(n // len(chunk))) + c.flush()


def plant_debug_info(exe: Path, claim: int, stream: bytes) -> None:
    """Point .debug_info's section header at a new SHF_COMPRESSED body appended to the
    file: an Elf64_Chdr (zlib, ``claim`` bytes) and ``stream``."""
    data = bytearray(exe.read_bytes())
    body = struct.pack("<IIQQ", 1, 0, claim, 1) + stream
    set_shdr(data, ".debug_info", "sh_offset", len(data))
    set_shdr(data, ".debug_info", "sh_size", len(body))
    set_shdr(data, ".debug_info", "sh_flags", 0x800)  # SHF_COMPRESSED
    exe.write_bytes(bytes(data) + body)


@pytest.fixture(scope="module")
def bomb_stream() -> bytes:
    return zeros_stream(BOMB_REAL)


def no_traceback(r: Measured) -> None:
    assert "Traceback" not in r.out + r.err, r.err[-3000:]


# --- files: gmpmon inspect ---------------------------------------------------------------


@pytest.mark.parametrize("claim, why", [
    (BOMB_CLAIM, "inflates to 3072 MiB, over gmpmon's cap of 128 MiB"),
    (300_000, "inflates past the 300000 bytes it claims"),
], ids=["claims-3GiB", "lies-small"])
def test_compressed_dwarf_bomb_is_not_inflated_and_not_needed(
    tmp_path: Path, bomb_stream: bytes, claim: int, why: str
) -> None:
    exe = go_binary(tmp_path)
    plant_debug_info(exe, claim, bomb_stream)
    assert os.path.getsize(exe) < 8 << 20
    r = gmpmon("inspect", str(exe))
    no_traceback(r)
    assert r.code == 0, r.err
    assert "offsets: table go1.27" in r.out, r.out
    note = " ".join(r.out.split())  # inspect wraps its lines
    assert f"{DWARF_NOTE}DWARF section .debug_info {why})" in note, r.out
    print(f"\nDWARF bomb ({claim} claimed, {BOMB_REAL} real): {r.figure()}")
    r.within_limits()


def test_sparse_3_9_gb_executable_still_reads_in_bounded_memory(tmp_path: Path) -> None:
    exe = go_binary(tmp_path)
    os.truncate(exe, SPARSE_SIZE)
    assert os.stat(exe).st_blocks * 512 < 64 << 20  # sparse: holes take no disk
    # The padded program still runs.
    run = subprocess.run([str(exe), "-n", "3", "-d", "1ms"], capture_output=True, text=True,
                         timeout=30)
    assert run.returncode == 0 and "done 4" in run.stdout, run
    r = gmpmon("inspect", str(exe))
    no_traceback(r)
    assert r.code == 0, r.err
    assert "go1.27" in r.out and "offsets: dwarf" in r.out
    print(f"\nsparse 3.9 GB executable: {r.figure()}")
    r.within_limits()


def _nfunc(data: bytearray) -> None:
    sec = Elf(bytes(data)).section(".gopclntab")
    assert sec is not None
    struct.pack_into("<Q", data, sec.offset + 8, 1 << 40)  # pcHeader.nfunc


HUGE = 1 << 40
HOSTILE: dict[str, tuple[str, Callable[[bytearray], None], str]] = {
    # id: (build mode, change, what the one line says)
    "pclntab-offset-past-the-file": ("default", lambda d: set_shdr(
        d, ".gopclntab", "sh_offset", 1 << 62), "section .gopclntab ("),
    "text-size-2^64": ("default", lambda d: set_shdr(d, ".text", "sh_size", 2**64 - 1),
                       "lies beyond the end of the file"),
    "buildinfo-size-1TiB": ("default", lambda d: set_shdr(
        d, ".go.buildinfo", "sh_size", HUGE), "section .go.buildinfo (1099511627776 bytes"),
    "shnum-65535": ("default", lambda d: set_ehdr(d, "e_shnum", 65535),
                    "truncated ELF (section headers"),
    "shoff-2^63": ("default", lambda d: set_ehdr(d, "e_shoff", 2**63),
                   "truncated ELF (section header"),
    "shstrndx-60000": ("default", lambda d: set_ehdr(d, "e_shstrndx", 60000),
                       "bad section name table index 60000"),
    "shentsize-0": ("default", lambda d: set_ehdr(d, "e_shentsize", 0),
                    "bad section header size 0"),
    "phoff-2^63": ("default", lambda d: set_ehdr(d, "e_phoff", 2**63),
                   "truncated ELF (program header"),
    "shstrtab-size-1TiB": ("default", lambda d: set_shdr(d, ".shstrtab", "sh_size", HUGE),
                           "section name table out of the file"),
    "name-offset-past-its-table": ("default", lambda d: set_shdr(
        d, ".text", "sh_name", 0xFFFFFFF0), "string offset 4294967280 out of its table"),
    "symtab-size-1TiB": ("default", lambda d: set_shdr(d, ".symtab", "sh_size", HUGE),
                         ".symtab holds 45812984490 symbols, over gmpmon's cap"),
    "symtab-link-9999": ("default", lambda d: set_shdr(d, ".symtab", "sh_link", 9999),
                         ".symtab string table index 9999 is bad"),
    "strtab-size-1TiB": ("default", lambda d: set_shdr(d, ".strtab", "sh_size", HUGE),
                         "truncated ELF (.strtab out of the file)"),
    "pclntab-nfunc-2^40": ("stripped", _nfunc,
                           ".gopclntab lists 1099511627776 functions, over gmpmon's cap"),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_section_headers_are_one_line(tmp_path: Path, case: str) -> None:
    mode, change, says = HOSTILE[case]
    exe = go_binary(tmp_path, mode=mode)
    rewrite(exe, change)
    r = gmpmon("inspect", str(exe))
    line = r.one_line()
    assert r.code == errors.BinaryFormatError.exit_code, (r.code, line)
    assert says in line, line
    print(f"\n{case}: {r.figure()}\n  {line}")
    r.within_limits()


@pytest.mark.parametrize("section", [".debug_info", ".debug_abbrev"])
def test_debug_section_past_the_file_is_gone_without(tmp_path: Path, section: str) -> None:
    exe = go_binary(tmp_path)
    rewrite(exe, lambda d: set_shdr(d, section, "sh_size", HUGE))
    r = gmpmon("inspect", str(exe))
    no_traceback(r)
    assert r.code == 0, r.err
    note = " ".join(r.out.split())
    assert f"{DWARF_NOTE}DWARF section {section} lies beyond the end of the file)" in note
    r.within_limits()


def test_a_symbol_table_over_the_cap_is_refused_before_it_is_read(tmp_path: Path) -> None:
    """.symtab pointed at 300 MB of the sparse tail: refused before anything is copied."""
    exe = go_binary(tmp_path)
    size = os.path.getsize(exe)

    def point_symtab_at_the_tail(d: bytearray) -> None:
        set_shdr(d, ".symtab", "sh_offset", size)
        set_shdr(d, ".symtab", "sh_size", 300 << 20)

    rewrite(exe, point_symtab_at_the_tail)
    os.truncate(exe, size + (300 << 20))
    r = gmpmon("inspect", str(exe))
    line = r.one_line()
    assert r.code == errors.BinaryFormatError.exit_code, (r.code, line)
    assert ".symtab holds 13107200 symbols, over gmpmon's cap" in line, line
    print(f"\n.symtab of 300 MiB: {r.figure()}\n  {line}")
    r.within_limits()


# --- processes: gmpmon ps, attach and run ------------------------------------------------


@pytest.fixture
def running() -> Iterator[Callable[[Path], Target]]:
    started: list[Target] = []

    def start(exe: Path) -> Target:
        t = start_target(str(exe), "-n", "1000", "-d", "60s", env={"GOMAXPROCS": "2"})
        started.append(t)
        return t

    yield start
    for t in started:
        t.stop()


def attach(pid: int) -> Measured:
    return gmpmon("attach", str(pid), "--no-tui", "--mode", "sample", "-d", "1")


def within_of(r: Measured, normal: Measured) -> None:
    """A capture of a hostile program: at most LIMIT_S more than the same capture of the
    unmodified program (BPF compile and attach included), and LIMIT_MB."""
    assert r.seconds <= normal.seconds + LIMIT_S, (r.figure(), normal.figure())
    assert r.max_rss_mb <= LIMIT_MB, r.figure()


def ps_row(tmp_path: Path, pid: int) -> tuple[dict[str, object], Measured]:
    r = gmpmon("ps", "--json", "--no-cache", "--match", str(tmp_path))
    no_traceback(r)
    assert r.code == 0, r.err
    row = next((x for x in json.loads(r.out) if x["pid"] == pid), None)
    assert row is not None, f"ps left the process out: {r.out}"
    return row, r


@pytest.mark.bpf
def test_attach_and_run_go_on_without_a_dwarf_bomb(
    tmp_path: Path, bomb_stream: bytes, running: Callable[[Path], Target]
) -> None:
    plain = go_binary(tmp_path, "plain")
    exe = go_binary(tmp_path)
    plant_debug_info(exe, BOMB_CLAIM, bomb_stream)
    normal = attach(running(plain).pid)
    assert normal.code == 0, normal.err
    r = attach(running(exe).pid)
    no_traceback(r)
    assert r.code == 0, r.err
    lines = [ln for ln in r.lines() if ln not in normal.lines()]  # what the bomb added
    assert len(lines) == 1 and lines[0].startswith(f"gmpmon: {exe}: {DWARF_NOTE}"), r.err
    assert "struct offsets come from gmpmon's go1.27 table instead" in lines[0]
    print(f"\nattach, DWARF bomb: {r.figure()}\n  {lines[0]}\n  normal: {normal.figure()}")
    within_of(r, normal)

    def run(exe: Path) -> Measured:
        return gmpmon("run", "--no-tui", "--mode", "sample", "-d", "1", "--", str(exe),
                      "-n", "100", "-d", "2s")

    normal_run, bomb_run = run(plain), run(exe)
    no_traceback(bomb_run)
    assert normal_run.code == 0 and DWARF_NOTE not in normal_run.err, normal_run.err
    assert bomb_run.code == 0 and DWARF_NOTE in bomb_run.err, bomb_run.err
    print(f"run, DWARF bomb: {bomb_run.figure()}\n  normal: {normal_run.figure()}")
    within_of(bomb_run, normal_run)


@pytest.mark.bpf
def test_ps_and_attach_read_a_sparse_executable_in_bounded_memory(
    tmp_path: Path, running: Callable[[Path], Target]
) -> None:
    plain = go_binary(tmp_path, "plain")
    exe = go_binary(tmp_path)
    os.truncate(exe, SPARSE_SIZE)
    normal = attach(running(plain).pid)
    t = running(exe)
    row, r = ps_row(tmp_path, t.pid)
    assert row["attachable"] and row["goroutines"] == 1001, row
    print(f"\nps, sparse 3.9 GB executable: {r.figure()}")
    r.within_limits()
    a = attach(t.pid)
    no_traceback(a)
    assert a.code == 0 and a.lines() == normal.lines(), a.err
    print(f"attach, sparse 3.9 GB executable: {a.figure()}\n  normal: {normal.figure()}")
    within_of(a, normal)


@pytest.mark.bpf
@pytest.mark.parametrize("case", ["pclntab-offset-past-the-file", "buildinfo-size-1TiB",
                                  "shstrndx-60000", "symtab-size-1TiB"])
def test_ps_says_why_on_the_line_of_a_process_with_hostile_headers(
    tmp_path: Path, running: Callable[[Path], Target], case: str
) -> None:
    """The kernel runs a program by its program headers: hostile section headers do not stop
    it. ps used to leave such a process out silently; attach refuses it in one line."""
    _mode, change, says = HOSTILE[case]
    exe = go_binary(tmp_path)
    rewrite(exe, change)
    t = running(exe)
    row, r = ps_row(tmp_path, t.pid)
    assert not row["attachable"] and says in str(row["attach_note"]), row
    print(f"\nps, {case}: {r.figure()}\n  note: {row['attach_note']}")
    r.within_limits()
    a = attach(t.pid)
    line = a.one_line()
    assert a.code == errors.BinaryFormatError.exit_code and says in line, (a.code, line)
    a.within_limits()
