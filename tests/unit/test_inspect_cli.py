"""`gmpmon inspect` as a user runs it: output shape, and bad input ending in one line on
stderr with the error class's own exit code, never a traceback."""

from __future__ import annotations

import functools
import json
import os
import subprocess
from pathlib import Path

import pytest

from gmpmon.binary import load
from gmpmon.errors import (
    BinaryFormatError,
    MissingSymbolsError,
    NotGoError,
    TargetError,
    UnsupportedError,
)
from tests import gotargets
from tests.cli import inspect

REPO = Path(__file__).resolve().parents[2]
CROSS_ROOT = REPO / "build" / "targets" / "cross"


def assert_one_line_error(r: subprocess.CompletedProcess[str], code: int, needle: str) -> None:
    assert r.returncode == code, (r.returncode, r.stderr)
    assert r.stdout == ""
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("gmpmon: ")
    assert needle in lines[0], lines[0]
    assert "Traceback" not in r.stderr


@functools.cache
def cross_build(goarch: str) -> Path:
    """The sleeper workload for another GOARCH (386, arm64), cached under build/."""
    out = CROSS_ROOT / f"sleeper-{goarch}"
    if not out.exists():
        go = gotargets.ensure_go("1.27")
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(out.name + ".tmp")
        env = gotargets._go_env() | {"GOARCH": goarch, "GOOS": "linux"}
        subprocess.run(
            [str(go), "build", "-trimpath", "-o", str(tmp), "./sleeper"],
            cwd=gotargets.TARGETS_SRC,
            env=env,
            check=True,
            capture_output=True,
        )
        tmp.replace(out)
    return out


def go_exe(mode: str = "default") -> Path:
    return gotargets.build("sleeper", go=gotargets.versions()[-1], mode=mode)


def test_text_summary_fits_80_columns() -> None:
    r = inspect(str(go_exe()))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert all(len(line) < 80 for line in lines), [x for x in lines if len(x) >= 80]
    info = load(str(go_exe()))
    assert info.go_version in r.stdout
    for role, site in info.probe_sites.items():
        row = next(x for x in lines if x.startswith(role + " "))
        assert f"{site.entry_site:#x}" in row
        assert site.entry_insn.split()[0] in row


def test_json_is_to_json() -> None:
    r = inspect(str(go_exe("stripped")), "--json")
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert j["stripped"] is True and j["offsets_source"] == "table"
    assert j["probe_sites"]["runtime.gopark"]["entry_insn"] == "push rbp"
    # -s -w: the globals come from the code, and say so
    assert "sample" not in j["missing_optional"]
    assert j["globals"]["runtime.allp"]["how"].startswith("disasm runtime.procresize+0x")
    assert j["offsets_table"] == j["go_version"][2:6].rstrip(".")


def test_not_elf(tmp_path: Path) -> None:
    p = tmp_path / "notes.txt"
    p.write_text("hello\n")
    assert_one_line_error(inspect(str(p)), NotGoError.exit_code, "not an ELF")


def test_c_binary() -> None:
    assert_one_line_error(inspect("/bin/true"), NotGoError.exit_code, "not a Go program")


def test_missing_file() -> None:
    assert_one_line_error(inspect("/nonexistent/x"), TargetError.exit_code, "no such file")


def test_directory(tmp_path: Path) -> None:
    assert_one_line_error(inspect(str(tmp_path)), NotGoError.exit_code, "directory")


@pytest.mark.parametrize("keep", [64, 4096, 300_000])
def test_truncated_go_elf(tmp_path: Path, keep: int) -> None:
    p = tmp_path / "trunc"
    p.write_bytes(go_exe().read_bytes()[:keep])
    assert_one_line_error(inspect(str(p)), BinaryFormatError.exit_code, "truncated")


def _corrupt_section(tmp_path: Path, section: str, at: int, mode: str) -> Path:
    from gmpmon.binary.elf import Elf

    data = bytearray(go_exe(mode).read_bytes())
    sec = Elf(bytes(data), "x").section(section)
    assert sec is not None
    data[sec.offset + at : sec.offset + at + 4] = b"\xde\xad\xbe\xef"
    p = tmp_path / f"corrupt-{section}"
    p.write_bytes(bytes(data))
    return p


def test_corrupt_pclntab_magic(tmp_path: Path) -> None:
    p = _corrupt_section(tmp_path, ".gopclntab", 0, "stripped")
    assert_one_line_error(inspect(str(p)), BinaryFormatError.exit_code, ".gopclntab")


def test_corrupt_buildinfo(tmp_path: Path) -> None:
    p = _corrupt_section(tmp_path, ".go.buildinfo", 0, "default")
    assert_one_line_error(inspect(str(p)), BinaryFormatError.exit_code, ".go.buildinfo")


def test_corrupt_section_header_table(tmp_path: Path) -> None:
    data = bytearray(go_exe().read_bytes())
    data[0x28:0x30] = (len(data) + 1000).to_bytes(8, "little")  # e_shoff past the end
    p = tmp_path / "badshoff"
    p.write_bytes(bytes(data))
    assert_one_line_error(inspect(str(p)), BinaryFormatError.exit_code, "section header")


@pytest.mark.parametrize(("goarch", "name"), [("386", "386"), ("arm64", "arm64")])
def test_other_architectures(goarch: str, name: str) -> None:
    r = inspect(str(cross_build(goarch)))
    assert_one_line_error(r, UnsupportedError.exit_code, name)
    assert "amd64" in r.stderr


def _patched(tmp_path: Path, mode: str, old: bytes, new: bytes, section: str) -> Path:
    from gmpmon.binary.elf import Elf

    data = bytearray(go_exe(mode).read_bytes())
    sec = Elf(bytes(data), "x").section(section)
    assert sec is not None
    at = data.index(old, sec.offset, sec.offset + sec.size)
    data[at : at + len(old)] = new
    p = tmp_path / f"patched-{mode}"
    p.write_bytes(bytes(data))
    return p


def test_missing_required_runtime_function_is_named(tmp_path: Path) -> None:
    # rename the symbol in .strtab: as if the linker had dropped or the compiler inlined it
    p = _patched(tmp_path, "default", b"runtime.handoffp\0", b"runtime.handoffq\0", ".strtab")
    r = inspect(str(p))
    assert_one_line_error(r, MissingSymbolsError.exit_code, "runtime.handoffp")


@pytest.mark.parametrize(("fake", "needle"), [(b"go1.17", "1.19 or newer"), (b"go1.20", "1.20")])
def test_unsupported_go_versions(tmp_path: Path, fake: bytes, needle: str) -> None:
    real = load(str(go_exe("stripped"))).go_version.encode()
    p = _patched(tmp_path, "stripped", real[:6], fake, ".go.buildinfo")
    assert_one_line_error(inspect(str(p)), UnsupportedError.exit_code, needle)


def test_special_files_are_refused_without_reading(tmp_path: Path) -> None:
    # reading /dev/zero would never end, opening a FIFO would block
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for p in ("/dev/zero", str(fifo)):
        assert_one_line_error(inspect(p), NotGoError.exit_code, "not a regular file")


def test_buildinfo_is_cross_checked_with_runtime_build_version(tmp_path: Path) -> None:
    real = load(str(go_exe("default"))).go_version.encode()
    fake = real[:-1] + (b"8" if real[-1:] != b"8" else b"7")
    p = _patched(tmp_path, "default", real, fake, ".go.buildinfo")
    assert_one_line_error(inspect(str(p)), BinaryFormatError.exit_code, "runtime.buildVersion")
