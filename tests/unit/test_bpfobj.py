"""The BPF object cache's pure parts: map references rewritten, entries checked, keys."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import pytest

from gmpmon.capture import bpfobj
from gmpmon.capture.bpfobj import MapSpec, ObjSpec


def ld_map(dst: int, src: int, imm: int) -> bytes:
    """ld_imm64 dst, <pseudo src> imm: two instruction slots."""
    return struct.pack("<BBhi", 0x18, (src << 4) | dst, 0, imm) + struct.pack("<BBhi", 0, 0, 0, 0)


MOV_R0_0 = struct.pack("<BBhi", 0xB7, 0, 0, 0)
EXIT = struct.pack("<BBhi", 0x95, 0, 0, 0)
# A mov whose immediate looks like a map fd, and an ld_imm64 of a plain 64-bit constant
# whose second slot's bytes would read as an ld_imm64 map reference if it were parsed alone.
DECOY = struct.pack("<BBhi", 0xB7, 1, 0, 7) + struct.pack("<BBhi", 0x18, 0, 0, 7) + \
    struct.pack("<BBhi", 0x18, 0x10, 0, 7)


def imms(code: bytes) -> list[int]:
    return [struct.unpack_from("<i", code, i + 4)[0] for i in range(0, len(code), 8)]


def test_map_references_are_rewritten_and_nothing_else() -> None:
    code = MOV_R0_0 + ld_map(1, 1, 7) + DECOY + ld_map(2, 2, 9) + EXIT
    out = bpfobj._relocate(code, {7: 0, 9: 1})
    assert len(out) == len(code)
    assert imms(out) == [0, 0, 0, 7, 7, 7, 1, 0, 0]
    # and back: index -> the new fds
    assert imms(bpfobj._relocate(out, {0: 40, 1: 41})) == [0, 40, 0, 7, 7, 7, 41, 0, 0]


def test_an_unknown_map_or_pseudo_source_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown map 8"):
        bpfobj._relocate(ld_map(1, 1, 8), {7: 0})
    with pytest.raises(ValueError, match="pseudo source 4"):
        bpfobj._relocate(ld_map(1, 4, 0), {})


SPEC = ObjSpec(b"GPL", (MapSpec("cfg", 2, 4, 4, 1, 0, '"int"', '"unsigned int"'),),
               {"prog": MOV_R0_0 + ld_map(1, 1, 0) + EXIT})


def test_an_entry_round_trips_and_damaged_ones_are_misses(tmp_path: Path) -> None:
    assert bpfobj.from_json(json.loads(json.dumps(bpfobj.to_json(SPEC)))) == SPEC
    path = tmp_path / "e.json"
    bpfobj.write_entry(str(tmp_path), str(path), SPEC)
    assert bpfobj.read_entry(str(path)) == SPEC
    good = bpfobj.to_json(SPEC)
    bad = [
        "not json", json.dumps({**good, "schema": 0}),
        json.dumps({**good, "maps": [{**good["maps"][0], "type": "2"}]}),
        json.dumps({**good, "maps": [{"name": "cfg"}]}),
        json.dumps({**good, "funcs": {"prog": "AAAA"}}),  # 3 bytes: not whole instructions
        json.dumps({**good, "funcs": {"prog": "!!"}}),
    ]
    for text in bad:
        path.write_text(text)
        assert bpfobj.read_entry(str(path)) is None, text


def test_the_cache_keeps_its_newest_entries(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bpfobj, "MAX_ENTRIES", 3)
    for i in range(5):
        p = tmp_path / f"{i}.json"
        bpfobj.write_entry(str(tmp_path), str(p), SPEC)
        os.utime(p, ns=(i * 10**9, i * 10**9))
    bpfobj.write_entry(str(tmp_path), str(tmp_path / "5.json"), SPEC)
    assert sorted(os.listdir(tmp_path)) == ["3.json", "4.json", "5.json"]


def test_the_key_covers_text_flags_and_headers(tmp_path: Path) -> None:
    (tmp_path / "gmpmon.h").write_text("#define A 1\n")
    base = bpfobj.cache_key(b"text", ["-DX=1"], str(tmp_path), "0.26.0", "/hdr")
    assert base == bpfobj.cache_key(b"text", ["-DX=1"], str(tmp_path), "0.26.0", "/hdr")
    assert base != bpfobj.cache_key(b"text2", ["-DX=1"], str(tmp_path), "0.26.0", "/hdr")
    assert base != bpfobj.cache_key(b"text", ["-DX=2"], str(tmp_path), "0.26.0", "/hdr")
    assert base != bpfobj.cache_key(b"text", ["-DX=1"], str(tmp_path), "0.27.0", "/hdr")
    assert base != bpfobj.cache_key(b"text", ["-DX=1"], str(tmp_path), "0.26.0", "/hdr2")
    (tmp_path / "gmpmon.h").write_text("#define A 2\n")
    assert base != bpfobj.cache_key(b"text", ["-DX=1"], str(tmp_path), "0.26.0", "/hdr")


def test_a_cache_directory_others_can_write_is_not_used(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GMPMON_CACHE_DIR", str(tmp_path / "c"))
    assert bpfobj.cache_dir() == str(tmp_path / "c" / "bpf")
    os.chmod(tmp_path / "c" / "bpf", 0o777)
    assert bpfobj.cache_dir() is None
    monkeypatch.setenv("GMPMON_CACHE_DIR", "")
    assert bpfobj.cache_dir() is None
