"""gmpmon.binary on live processes: /proc/PID/exe (also from another mount namespace), the PIE
load bias checked against the process's own memory, and pids that are gone or not Go."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from gmpmon.binary import BinaryInfo, load_pid
from gmpmon.errors import NotGoError, TargetError
from tests import gotargets
from tests.cli import inspect

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="reads /proc/PID/mem (needs root)")


@contextmanager
def running(argv: list[str]) -> Iterator[subprocess.Popen[str]]:
    """A process we start and always end (by its pid), once it has printed its first line."""
    p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None
        p.stdout.readline()  # "ready" from the gate handshake (or the first line)
        yield p
    finally:
        p.kill()
        p.wait(timeout=10)


def sleeper(mode: str) -> list[str]:
    exe = gotargets.build("sleeper", go=gotargets.versions()[-1], mode=mode)
    return [str(exe), "-wait-stdin"]


def runtime_bytes(pid: int, addr: int, n: int) -> bytes:
    with open(f"/proc/{pid}/mem", "rb") as f:
        f.seek(addr)
        return f.read(n)


def file_bytes(info: BinaryInfo, addr: int, n: int) -> bytes:
    from gmpmon.binary.elf import Elf

    return Elf(Path(info.path).read_bytes(), info.path).read_vaddr(addr, n)


@needs_root
@pytest.mark.parametrize("mode", ["default", "pie"])
def test_load_bias_maps_probe_sites_onto_the_running_code(mode: str) -> None:
    with running(sleeper(mode)) as p:
        info = load_pid(p.pid)
        assert info.pid == p.pid
        assert info.path == sleeper(mode)[0]  # same mount namespace: the plain path
        assert info.pie == (mode == "pie")
        if mode == "default":
            assert info.load_bias == 0
        for role, site in info.probe_sites.items():
            want = file_bytes(info, site.entry, 32)
            got = runtime_bytes(p.pid, site.entry + info.load_bias, 32)
            assert got == want, f"{role}: code at entry+bias differs from the file"


@needs_root
def test_inspect_pid_json() -> None:
    with running(sleeper("pie")) as p:
        r = inspect(str(p.pid), "--json")
        assert r.returncode == 0, r.stderr
        j = json.loads(r.stdout)
        assert j["pid"] == p.pid
        assert j["pie"] is True
        maps = Path(f"/proc/{p.pid}/maps").read_text()
        text = int(j["probe_sites"]["runtime.execute"]["entry"], 16) + int(j["load_bias"], 16)
        assert any(
            int(line.split("-")[0], 16) <= text < int(line.split()[0].split("-")[1], 16)
            and line.split()[1].startswith("r-x")
            for line in maps.splitlines()
        ), "execute's runtime address is not in an executable mapping"
        r = inspect(str(p.pid))
        assert r.returncode == 0 and f"pid {p.pid}, load bias" in r.stdout


@needs_root
def test_target_in_another_mount_namespace(tmp_path: Path) -> None:
    """The executable's path exists only inside the target's mount namespace."""
    assert shutil.which("unshare"), "unshare(1) missing: util-linux (scripts/setup installs it)"
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(sleeper("default")[0], src / "app")
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    script = f"mount --bind {src} {hidden} && exec {hidden}/app -wait-stdin"
    with running(["unshare", "--mount", "--propagation", "private", "sh", "-c", script]) as p:
        # the pid of the Go program is the unshare child's (exec replaced sh)
        assert not (hidden / "app").exists()
        info = load_pid(p.pid)
        assert info.path == f"/proc/{p.pid}/root{hidden}/app"
        assert info.go_version.startswith("go1.")


def test_no_such_pid() -> None:
    pid = 4_000_000  # above the kernel's pid_max limit (2^22)
    with pytest.raises(TargetError):
        load_pid(pid)
    r = inspect(str(pid))
    assert r.returncode == TargetError.exit_code
    assert r.stderr.startswith("gmpmon: no such process") and len(r.stderr.splitlines()) == 1


@needs_root
def test_non_go_pid() -> None:
    with running([sys.executable, "-u", "-c", "print('ready'); import time; time.sleep(60)"]) as p:
        with pytest.raises(NotGoError):
            load_pid(p.pid)
        r = inspect(str(p.pid))
        assert r.returncode == NotGoError.exit_code, r.stderr
        assert len(r.stderr.splitlines()) == 1 and "not a Go program" in r.stderr
