"""Fuzzing the parsers of untrusted bytes beyond tests/unit/test_binary_fuzz.py (random byte
damage of real binaries) and tests/unit/test_record.py (random damage of a recording, which
its CRCs mostly catch):

- recordings crafted by an attacker, not damaged by accident: frames with *valid* CRCs
  around hostile JSON headers, hostile zlib payloads, and well-formed batches of arbitrary
  events, fed all the way through `gmpmon replay` and every exporter (the model and the
  exporters parse recordings too);
- the DWARF reader on decompressed debug sections (Go compresses them, so byte damage of
  the file only ever reaches zlib), the .gopclntab header fields, and .go.buildinfo.

Each property: the code either succeeds or raises a GmpmonError (one line, an exit code).
Bounded examples by default; GMPMON_FULL_MATRIX=1 (or --full) runs many more, and
GMPMON_FUZZ_EXAMPLES sets the count.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import struct
import subprocess
import tempfile
import zlib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gmpmon import cli
from gmpmon.binary import load_elf
from gmpmon.binary.elf import Elf
from gmpmon.errors import GmpmonError
from gmpmon.events import EventTuple, Kind
from gmpmon.record import BATCH_FRAME, BATCH_TAG, END_FRAME, END_TAG, MAGIC, PREAMBLE, VERSION
from tests import gotargets

FULL = gotargets.full_matrix()


def fuzz_settings(ci: int, full: int) -> settings:
    n = int(os.environ.get("GMPMON_FUZZ_EXAMPLES", full if FULL else ci))
    return settings(
        max_examples=n,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                               HealthCheck.function_scoped_fixture],
        derandomize=not FULL,
    )


# --- recordings, crafted ---------------------------------------------------------------------

GOOD_HEADER: dict[str, Any] = {
    "pid": 42, "exe": "/srv/app", "go_version": "go1.27.3", "gomaxprocs": 2, "mode": "full",
    "start_ns": 1_000, "wall_start": 0.0, "wait_reasons": ["", "chan receive"],
    "stw_reasons": [], "g_status": [], "p_status": [], "duty_window_ms": 0,
    "duty_period_ms": 0, "features": [], "extra": {},
}


def header_frame(body: bytes) -> bytes:
    return PREAMBLE.pack(MAGIC, VERSION, 0) + struct.pack("<II", len(body), zlib.crc32(body)) + body


def batch_frame(payload: bytes, n: int, first: int = 0, last: int = 0) -> bytes:
    head = BATCH_FRAME.pack(BATCH_TAG, len(payload), n, first, last, 0)[:-4]
    crc = zlib.crc32(payload, zlib.crc32(head[2:]))
    return head + struct.pack("<I", crc) + payload


def end_frame(batches: int) -> bytes:
    body = END_FRAME.pack(END_TAG, batches, 0)[:-4]
    return body + struct.pack("<I", zlib.crc32(body[2:]))


def run_cli(argv: list[str]) -> int:
    """gmpmon's CLI as a user runs it: an int back, whatever happens inside (a non-gmpmon
    exception would propagate out of cli.main as a traceback)."""
    code = cli.main(argv)
    assert isinstance(code, int)
    return code


def replay_and_export(path: Path, out_dir: Path) -> None:
    for argv in (
        ["replay", str(path), "--no-tui"],
        ["replay", str(path), "--summary-json", str(out_dir / "s.json")],
        ["export", str(path), "--format", "folded", "-o", str(out_dir / "f")],
        ["export", str(path), "--format", "perfetto", "-o", str(out_dir / "p")],
        ["export", str(path), "--format", "pprof", "-o", str(out_dir / "pp")],
        ["export", str(path), "--format", "json", "-o", str(out_dir / "j")],
    ):
        code = run_cli(argv)
        assert code in (0, 9), (argv, code)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner,
                                                                  max_size=4),
    max_leaves=12,
)


@fuzz_settings(ci=60, full=2000)
@given(field=st.sampled_from(sorted(GOOD_HEADER)), value=json_values)
def test_hostile_header_fields(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                               field: str, value: Any) -> None:
    hdr = dict(GOOD_HEADER, **{field: value})
    path = tmp_path / "h.gmp"
    path.write_bytes(header_frame(json.dumps(hdr).encode()) + end_frame(0))
    replay_and_export(path, tmp_path)
    capsys.readouterr()


HOSTILE_HEADERS = {
    "nesting-beyond-recursion-limit": b"[" * 200_000 + b"]" * 200_000,
    "float-overflow": b'{"pid": 1e999999}',
    "not-utf8": b"\xff\xfe not utf-8",
    "gomaxprocs-2^40": json.dumps(dict(GOOD_HEADER, gomaxprocs=2**40)).encode(),
    "gomaxprocs-negative": json.dumps(dict(GOOD_HEADER, gomaxprocs=-3)).encode(),
    "10MB-of-wait-reasons": json.dumps(dict(GOOD_HEADER, wait_reasons=["x" * 100] * 100_000)
                                       ).encode(),
}


@pytest.mark.parametrize("name", sorted(HOSTILE_HEADERS))
def test_hostile_headers(tmp_path: Path, name: str, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "h.gmp"
    path.write_bytes(header_frame(HOSTILE_HEADERS[name]) + end_frame(0))
    code = run_cli(["replay", str(path), "--no-tui"])
    assert code in (0, 9)
    capsys.readouterr()


@fuzz_settings(ci=60, full=2000)
@given(raw=st.binary(max_size=400), n=st.integers(0, 64), compress=st.booleans())
def test_hostile_batch_payloads_with_valid_crc(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               raw: bytes, n: int, compress: bool) -> None:
    payload = zlib.compress(raw) if compress else raw
    path = tmp_path / "b.gmp"
    path.write_bytes(header_frame(json.dumps(GOOD_HEADER).encode()) + batch_frame(payload, n))
    replay_and_export(path, tmp_path)
    capsys.readouterr()


U64 = st.integers(0, 2**64 - 1)
events = st.tuples(
    st.integers(0, 2**40),  # ts
    st.sampled_from([int(k) for k in Kind]) | st.integers(0, 2**32 - 1),  # kind
    st.integers(-(2**31), 2**31 - 1),  # p
    st.integers(0, 2**32 - 1),  # m
    U64 | st.integers(0, 40),  # g
    U64 | st.integers(0, 40),  # a0
    U64 | st.integers(0, 40),  # a1
)


@fuzz_settings(ci=80, full=3000)
@given(evs=st.lists(events, max_size=40),
       stacks=st.dictionaries(st.integers(-5, 2**40), st.lists(st.text(max_size=12), max_size=4),
                              max_size=3))
def test_arbitrary_events_replay_and_export(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                            evs: list[EventTuple],
                                            stacks: dict[int, list[str]]) -> None:
    """Well-formed frames, arbitrary content: what a hostile (or buggy) writer can put in a
    recording. The model and every exporter must cope: succeed, or one RecordingError."""
    from gmpmon.events import Batch
    from gmpmon.record import encode_batch

    evs = sorted(evs)
    payload, n, first, last = encode_batch(Batch(evs, {k: tuple(v) for k, v in stacks.items()}))
    path = tmp_path / "e.gmp"
    path.write_bytes(header_frame(json.dumps(GOOD_HEADER).encode())
                     + batch_frame(payload, n, first, last) + end_frame(1))
    replay_and_export(path, tmp_path)
    capsys.readouterr()


# --- binaries: DWARF, pclntab, buildinfo -------------------------------------------------------


@functools.cache
def go_binary(mode: str) -> bytes:
    return gotargets.build("sleeper", go=gotargets.versions()[-1], mode=mode).read_bytes()


@functools.cache
def decompressed_dwarf() -> tuple[bytes, dict[str, tuple[int, int]]]:
    """The default build with its DWARF sections decompressed (objcopy), and where they are."""
    assert shutil.which("objcopy"), "objcopy missing: binutils (gcc's dependency, scripts/setup)"
    with tempfile.TemporaryDirectory() as d:
        src, dst = Path(d, "in"), Path(d, "out")
        src.write_bytes(go_binary("default"))
        subprocess.run(["objcopy", "--decompress-debug-sections", str(src), str(dst)],
                       check=True, capture_output=True)
        data = dst.read_bytes()
    elf = Elf(data, "dwarf")
    where = {}
    for name in (".debug_info", ".debug_abbrev", ".debug_str", ".debug_line"):
        sec = elf.section(name)
        if sec is not None:
            where[name] = (sec.offset, sec.size)
    assert ".debug_info" in where and ".debug_abbrev" in where
    return data, where


def must_load_or_fail_cleanly(data: bytes) -> None:
    try:
        load_elf(data, "mutant")
    except GmpmonError as e:
        assert str(e) and "\n" not in e.one_line()


def test_decompressed_dwarf_still_loads() -> None:
    data, _ = decompressed_dwarf()
    info = load_elf(data, "dwarf")
    assert info.dwarf and info.offsets["runtime.g.goid"] > 0


@fuzz_settings(ci=25, full=800)
@given(section=st.sampled_from([".debug_info", ".debug_abbrev", ".debug_str"]),
       edits=st.lists(st.tuples(st.integers(0, 2**24), st.integers(0, 255)), min_size=1,
                      max_size=12),
       near_start=st.booleans())
def test_damaged_dwarf(section: str, edits: list[tuple[int, int]], near_start: bool) -> None:
    data, where = decompressed_dwarf()
    off, size = where.get(section, where[".debug_info"])
    buf = bytearray(data)
    span = min(size, 4096) if near_start else size
    for pos, v in edits:
        buf[off + pos % max(span, 1)] = v
    must_load_or_fail_cleanly(bytes(buf))


@functools.cache
def pclntab_at() -> tuple[int, int]:
    sec = Elf(go_binary("stripped"), "s").section(".gopclntab")
    assert sec is not None
    return sec.offset, sec.size


@fuzz_settings(ci=60, full=2000)
@given(magic=st.sampled_from([0xFFFFFFF1, 0xFFFFFFF0, 0xFFFFFFFA, 0]) | st.integers(0, 2**32 - 1),
       ptr=st.sampled_from([8, 4, 0, 255]),
       fields=st.lists(st.one_of(st.integers(0, 2**64 - 1), st.integers(0, 1 << 22)),
                       min_size=8, max_size=8),
       keep=st.lists(st.booleans(), min_size=8, max_size=8))
def test_hostile_pclntab_header(magic: int, ptr: int, fields: list[int], keep: list[bool]) -> None:
    """The eight pcHeader words (nfunc, nfiles, textStart, funcname/cu/filetab/pctab/pcln
    offsets) of a stripped binary, each kept or replaced by a hostile value."""
    data = bytearray(go_binary("stripped"))
    off, _ = pclntab_at()
    old = struct.unpack_from("<8Q", data, off + 8)
    new = [o if k else f for o, f, k in zip(old, fields, keep, strict=True)]
    struct.pack_into("<IBBBB", data, off, magic, 0, 0, 1, ptr)
    struct.pack_into("<8Q", data, off + 8, *new)
    must_load_or_fail_cleanly(bytes(data))


@functools.cache
def buildinfo_at() -> tuple[int, int]:
    sec = Elf(go_binary("stripped"), "s").section(".go.buildinfo")
    assert sec is not None
    return sec.offset, sec.size


@fuzz_settings(ci=60, full=2000)
@given(ptr_size=st.sampled_from([8, 4, 0]), flags=st.integers(0, 255),
       body=st.binary(max_size=64),
       ptrs=st.tuples(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1)))
def test_hostile_buildinfo(ptr_size: int, flags: int, body: bytes,
                           ptrs: tuple[int, int]) -> None:
    """.go.buildinfo: a good magic, then hostile pointer size, flags, version pointers (pre-1.18
    layout) or varint-prefixed strings (1.18+ layout)."""
    data = bytearray(go_binary("stripped"))
    off, size = buildinfo_at()
    blob = b"\xff Go buildinf:" + bytes([ptr_size, flags]) + struct.pack("<QQ", *ptrs) + body
    blob = blob[:size].ljust(min(size, 32), b"\0")
    data[off:off + len(blob)] = blob
    must_load_or_fail_cleanly(bytes(data))
