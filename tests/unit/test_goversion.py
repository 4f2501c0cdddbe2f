"""The Go version of a binary built without build info (gmpmon.binary.goversion).

Each toolchain builds scripts/targets/sleeper with -buildvcs=false, with and without its
symbol table; binutils' objcopy then removes .go.buildinfo from a copy, as a binary like npm's
esbuild ships. Truth: the build info of the same build before the removal (what `go
version` reads). The copies still run (checked on one).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import shutil
import struct
import subprocess
import tempfile
from pathlib import Path

import pytest

from gmpmon.binary import load
from gmpmon.binary.buildinfo import read_buildinfo_version
from gmpmon.binary.elf import Elf
from gmpmon.binary.goversion import scan_build_version
from gmpmon.errors import BinaryFormatError, UnsupportedError
from tests import gotargets

VERSIONS = ("1.19", "1.22", "1.27")
FLAGS = {"default": "", "stripped": "-s -w"}
OUT = Path(tempfile.mkdtemp(prefix="gmpmon-test-goversion-"))
atexit.register(shutil.rmtree, OUT, True)


@functools.cache
def built(go: str, mode: str) -> tuple[Path, str]:
    """(a copy without .go.buildinfo, the version its build info said)."""
    exe = OUT / f"sleeper-{go}-{mode}"
    subprocess.run(
        [str(gotargets.ensure_go(go)), "build", "-buildvcs=false", f"-ldflags={FLAGS[mode]}",
         "-o", str(exe), "./sleeper"],
        cwd=gotargets.TARGETS_SRC, env=gotargets._go_env(), check=True, capture_output=True,
    )
    truth = read_buildinfo_version(Elf(exe.read_bytes(), str(exe)))
    assert truth is not None and truth.startswith(f"go{go}")
    bare = exe.with_name(exe.name + "-nobuildinfo")
    objcopy = shutil.which("objcopy")
    assert objcopy is not None, "objcopy (binutils, installed with gcc by scripts/setup)"
    subprocess.run([objcopy, "--remove-section", ".go.buildinfo", str(exe), str(bare)],
                   check=True)
    assert Elf(bare.read_bytes(), str(bare)).section(".go.buildinfo") is None
    return bare, truth


@pytest.mark.parametrize("mode", list(FLAGS))
@pytest.mark.parametrize("go", VERSIONS)
def test_version_without_build_info_is_runtime_build_version(go: str, mode: str) -> None:
    bare, truth = built(go, mode)
    info = load(str(bare))
    assert info.go_version == truth
    assert info.go_minor == int(go.split(".")[1])
    how = "by its symbol" if mode == "default" else "found by a scan"
    assert how in info.go_version_source, info.go_version_source
    assert "agrees with the pclntab magic" in info.go_version_source
    assert "runtime functions" in info.go_version_source
    # the scan alone finds the same one string, with or without the symbol table
    assert scan_build_version(Elf(bare.read_bytes(), str(bare))) == [truth]


def test_the_copy_without_build_info_still_runs() -> None:
    bare, _ = built("1.27", "stripped")
    r = subprocess.run([str(bare), "-h"], capture_output=True, text=True, timeout=30)
    assert "length of each sleep" in r.stderr


def _patched(go: str, old: str, new: bytes) -> Path:
    bare, _ = built(go, "stripped")
    data = bare.read_bytes()
    assert data.count(old.encode()) >= 1
    out = bare.with_name(bare.name + f"-{new[:8].hex()}")
    out.write_bytes(data.replace(old.encode(), new))
    return out


@pytest.mark.parametrize("go", ["1.19", "1.27"])
def test_a_version_the_binary_contradicts_is_refused(go: str) -> None:
    _, truth = built(go, "stripped")
    # the same length, so the string header still fits: only the cross-checks object
    lie = ("go1.27" if go == "1.19" else "go1.19") + truth[6:]
    with pytest.raises(BinaryFormatError) as e:
        load(str(_patched(go, truth, lie.encode())))
    assert f"runtime.buildVersion says {lie}" in str(e.value)
    assert "pclntab magic" in str(e.value) or "runtime." in str(e.value).split("but")[1]


def test_no_version_anywhere_is_refused_with_the_reason() -> None:
    _, truth = built("1.22", "stripped")
    with pytest.raises(UnsupportedError, match=r"no build info, no runtime\.buildVersion"):
        load(str(_patched("1.22", truth, b"x" * len(truth))))


def test_another_version_string_in_the_data_is_told_apart(tmp_path: Path) -> None:
    # A second Go string variable holding "go1.19.x" (a program's minimum, say): rewrite the
    # bytes of some other 8-byte Go string that a header in .data points at.
    bare, truth = built("1.27", "stripped")
    data = bytearray(bare.read_bytes())
    elf = Elf(bytes(data), str(bare))
    dsec, rodata = elf.section(".data"), elf.section(".rodata")
    assert dsec is not None and rodata is not None
    other = f"go1.19.{truth[-1]}".encode()
    assert len(other) == len(truth)
    for off in range(0, dsec.size - 16, 8):
        ptr, length = struct.unpack_from("<QQ", data, dsec.offset + off)
        at = ptr - rodata.addr + rodata.offset
        if (length == len(truth) and rodata.addr <= ptr < rodata.addr + rodata.size
                and bytes(data[at:at + length]) != truth.encode()
                and bytes(data[at:at + length]).isascii()):
            data[at:at + length] = other
            break
    else:
        raise AssertionError("no other 8-byte Go string in .data")
    two = tmp_path / "two"
    two.write_bytes(bytes(data))
    assert scan_build_version(Elf(bytes(data), str(two))) == sorted([truth, other.decode()])
    info = load(str(two))
    assert info.go_version == truth
    assert "of 2 candidates the only one that fits" in info.go_version_source


def test_damaged_binaries_without_build_info_never_raise_a_traceback(tmp_path: Path) -> None:
    # ps (discover) lists or skips them; load says one line (a GmpmonError)
    import random

    from gmpmon.errors import GmpmonError
    from gmpmon.fleet.discover import go_version_of

    bare, truth = built("1.27", "stripped")
    src = bare.read_bytes()
    pcln = Elf(src, str(bare)).section(".gopclntab")
    assert pcln is not None
    rnd = random.Random(25)
    seen = set()
    for i in range(30):
        b = bytearray(src)
        for _ in range(16):
            at = pcln.offset + rnd.randrange(4096) if i % 2 else rnd.randrange(len(b))
            b[at] = rnd.randrange(256)
        if i % 3 == 0:
            b = b[: pcln.offset + rnd.randrange(pcln.size)]
        p = tmp_path / f"d{i}"
        p.write_bytes(bytes(b))
        v = go_version_of(str(p))
        assert v is None or v == "?" or v.startswith("go1."), v
        seen.add(v)
        with contextlib.suppress(GmpmonError):
            load(str(p))
    assert truth in seen  # some damage leaves the version readable
