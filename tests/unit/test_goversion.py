"""The Go version of a binary built without build info (gmpmon.binary.goversion).

Each toolchain builds scripts/targets/sleeper with -buildvcs=false, with and without its
symbol table; binutils' objcopy then removes .go.buildinfo from a copy, as a binary like npm's
esbuild ships. Truth: the build info of the same build before the removal (what `go
version` reads). The copies still run (checked on one).
"""

from __future__ import annotations

import atexit
import functools
import shutil
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
