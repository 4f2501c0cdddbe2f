"""scripts/setup-headers: the merged Debian header tree BCC compiles against, made without
overwriting anything. Runs against temporary module/header dirs, never the real ones."""

from __future__ import annotations

import glob
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "setup-headers"


def debian_header_pair() -> bool:
    return any(
        os.path.isdir(c.removesuffix("-common") + "-amd64")
        for c in glob.glob("/usr/src/linux-headers-*-common")
    )


def run(mods: Path, dest: Path) -> subprocess.CompletedProcess[str]:
    env = dict(
        os.environ, GMPMON_NO_APT="1", GMPMON_MODULES_DIR=str(mods), GMPMON_HEADERS_DEST=str(dest)
    )
    return subprocess.run([str(SCRIPT)], capture_output=True, text=True, env=env, timeout=120)


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    assert debian_header_pair(), (
        "no Debian linux-headers-*-common/-amd64 pair installed (scripts/setup adds one)"
    )
    return tmp_path / "modules", tmp_path / "kheaders"


def test_merges_and_links_then_is_a_no_op(dirs: tuple[Path, Path]) -> None:
    mods, dest = dirs
    r = run(mods, dest)
    assert r.returncode == 0, r.stderr
    assert f"linked {mods}/build -> {dest}" in r.stdout
    assert f"linked {mods}/source -> {dest}" in r.stdout
    assert (dest / ".gmpmon-merged").exists()
    # -common's generic headers and -amd64's generated ones, in one tree.
    assert (mods / "build" / "include" / "linux" / "types.h").exists()
    assert (mods / "build" / "include" / "generated" / "autoconf.h").exists()
    assert (mods / "build" / "arch" / "x86" / "include" / "generated").is_dir()
    assert (dest / "include" / "linux" / "types.h").is_symlink()  # links, not copies
    again = run(mods, dest)
    assert again.returncode == 0 and again.stdout == "", again.stdout


def test_leaves_existing_entries_alone(dirs: tuple[Path, Path]) -> None:
    mods, dest = dirs
    mods.mkdir()
    (mods / "source").write_text("someone else's\n")
    (mods / "build").symlink_to(mods / "gone")  # dangling: points at nothing
    r = run(mods, dest)
    assert r.returncode == 0, r.stderr
    assert (mods / "source").read_text() == "someone else's\n"
    assert "left as it is" in r.stdout
    assert "replacing dangling symlink" in r.stdout
    assert os.readlink(mods / "build") == str(dest)


def test_foreign_destination_is_not_touched(dirs: tuple[Path, Path]) -> None:
    mods, dest = dirs
    dest.mkdir()
    (dest / "mine").write_text("x")
    r = run(mods, dest)
    assert r.returncode != 0
    assert "not made by gmpmon" in r.stderr
    assert sorted(p.name for p in dest.iterdir()) == ["mine"]
    assert not (mods / "build").exists()


@pytest.mark.bpf
def test_bcc_compiles_against_the_merged_tree(dirs: tuple[Path, Path]) -> None:
    mods, dest = dirs
    assert run(mods, dest).returncode == 0
    r = subprocess.run(
        [sys.executable, "-m", "gmpmon", "doctor"],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, BCC_KERNEL_SOURCE=str(mods / "build")),
    )
    assert r.returncode == 0, r.stdout + r.stderr
    line = next(ln for ln in r.stdout.splitlines() if "BPF compile+load" in ln)
    assert line.startswith("ok") and str(dest) in line
