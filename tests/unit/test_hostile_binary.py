"""Hostile binaries, built by the test from a real Go executable: a compressed-DWARF bomb
(a SHF_COMPRESSED .debug_info claiming 3 GiB, and one whose stream inflates far past what it
claims) and a sparse executable padded to 3.9 GB with truncate (it still runs). `gmpmon
inspect` used to take 35 s and 6.3 GB on the first, 4-8 GB on the second; now each ends in
one line (or a normal answer) within LIMIT_S and LIMIT_MB."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

from gmpmon import errors
from gmpmon.binary.elf import Elf
from tests.gotargets import build
from tests.hostile import gmpmon

BOMB_CLAIM = 3 << 30
BOMB_REAL = 512 << 20  # what the bomb's stream really inflates to (over the 128 MiB cap)


def go_binary(tmp_path: Path, name: str = "parked") -> Path:
    exe = tmp_path / name
    shutil.copy2(build("parked", "1.27"), exe)
    return exe


def zeros_stream(n: int) -> bytes:
    c = zlib.compressobj(1)
    chunk = bytes(16 << 20)
    parts = [c.compress(chunk) for _ in range(n // len(chunk))]
    return b"".join(parts) + c.flush()


def plant_debug_info(exe: Path, claim: int, stream: bytes) -> None:
    """Point .debug_info's section header at a new SHF_COMPRESSED body appended to the
    file: an Elf64_Chdr (zlib, ``claim`` bytes) and ``stream``."""
    data = bytearray(exe.read_bytes())
    elf = Elf(bytes(data))
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize = struct.unpack_from("<H", data, 0x3A)[0]
    names = [s.name for s in elf._by_index]
    idx = names.index(".debug_info")
    body = struct.pack("<IIQQ", 1, 0, claim, 1) + stream
    at = len(data)
    hdr = shoff + idx * shentsize
    struct.pack_into("<QQ", data, hdr + 0x18, at, len(body))  # sh_offset, sh_size
    exe.write_bytes(bytes(data) + body)


@pytest.fixture(scope="module")
def bomb_stream() -> bytes:
    return zeros_stream(BOMB_REAL)


@pytest.mark.parametrize("claim", [BOMB_CLAIM, 300_000], ids=["claims-3GiB", "lies-small"])
def test_compressed_dwarf_bomb_is_refused_in_one_line(
    tmp_path: Path, bomb_stream: bytes, claim: int
) -> None:
    exe = go_binary(tmp_path)
    plant_debug_info(exe, claim, bomb_stream)
    assert os.path.getsize(exe) < 8 << 20
    r = gmpmon("inspect", str(exe))
    line = r.one_line()
    assert r.code == errors.BinaryFormatError.exit_code, (r.code, line)
    assert ".debug_info" in line, line
    assert ("over gmpmon's cap" in line) if claim == BOMB_CLAIM else ("does not inflate" in line)
    print(f"\nDWARF bomb ({claim} claimed, {BOMB_REAL} real): {r.figure()}\n  {line}")
    r.within_limits()


def test_sparse_3_9_gb_executable_still_reads_in_bounded_memory(tmp_path: Path) -> None:
    exe = go_binary(tmp_path)
    os.truncate(exe, 3_900_000_000)
    assert os.stat(exe).st_blocks * 512 < 64 << 20  # sparse: holes take no disk
    # The padded program still runs.
    run = subprocess.run([str(exe), "-n", "3", "-d", "1ms"], capture_output=True, text=True,
                         timeout=30)
    assert run.returncode == 0 and "done 4" in run.stdout, run
    r = gmpmon("inspect", str(exe))
    assert r.code == 0, r.err
    assert "Traceback" not in r.err
    assert "go1.27" in r.out
    print(f"\nsparse 3.9 GB executable: {r.figure()}")
    r.within_limits()


def test_a_symbol_table_over_the_cap_is_one_line(tmp_path: Path) -> None:
    """.symtab pointed at 300 MB of the sparse tail: refused before anything is copied."""
    exe = go_binary(tmp_path)
    data = bytearray(exe.read_bytes())
    elf = Elf(bytes(data))
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize = struct.unpack_from("<H", data, 0x3A)[0]
    idx = [s.name for s in elf._by_index].index(".symtab")
    struct.pack_into("<QQ", data, shoff + idx * shentsize + 0x18, len(data), 300 << 20)
    exe.write_bytes(bytes(data))
    os.truncate(exe, len(data) + (300 << 20))
    r = gmpmon("inspect", str(exe))
    line = r.one_line()
    assert r.code == errors.BinaryFormatError.exit_code, (r.code, line)
    assert ".symtab is 300 MiB, over gmpmon's cap" in line, line
    print(f"\n.symtab of 300 MiB: {r.figure()}\n  {line}")
    r.within_limits()
