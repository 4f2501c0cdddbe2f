"""`gmpmon doctor` passes on this machine, and names each removed prerequisite and its fix."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def doctor(
    *, env: dict[str, str] | None = None, prefix: tuple[str, ...] = (), python: str = sys.executable
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*prefix, python, "-m", "gmpmon", "doctor"],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, **(env or {})),
        cwd="/",  # the installed gmpmon, not whatever is in the caller's cwd
    )


def lines_by_check(stdout: str) -> dict[str, str]:
    """{check name: status} from doctor's `status  name  detail` lines."""
    out: dict[str, str] = {}
    for line in stdout.splitlines():
        status, _, rest = line.partition("  ")
        if status.strip() in ("ok", "FAIL", "warn"):
            out[rest.strip().split("  ")[0].strip()] = status.strip()
    return out


@pytest.mark.bpf
def test_doctor_passes_on_this_machine() -> None:
    r = doctor()
    assert r.returncode == 0, r.stdout + r.stderr
    checks = lines_by_check(r.stdout)
    for name in (
        "privileges",
        "bpf() syscall",
        "uprobe events",
        "BCC",
        "BPF compile+load",
        "ring buffer",
    ):
        assert checks.get(name) == "ok", (name, r.stdout)
    assert "gmpmon can attach" in r.stdout
    assert r.stderr == ""


@pytest.mark.bpf
def test_empty_kernel_headers_fail_the_compile_check(tmp_path: Path) -> None:
    r = doctor(env={"BCC_KERNEL_SOURCE": str(tmp_path)})
    assert r.returncode == 8, r.stdout + r.stderr
    checks = lines_by_check(r.stdout)
    assert checks["BPF compile+load"] == "FAIL"
    assert checks["ring buffer"] == "FAIL"
    assert checks["privileges"] == "ok"
    fail_line = next(ln for ln in r.stdout.splitlines() if "BPF compile+load" in ln)
    assert str(tmp_path) in fail_line and "BCC_KERNEL_SOURCE" in fail_line
    assert "fix: unset BCC_KERNEL_SOURCE" in r.stdout and "linux-headers" in r.stdout
    # BCC's own "Unable to find kernel headers" chatter is folded into doctor's line.
    assert "Unable to find kernel headers" not in r.stdout + r.stderr
    assert r.stderr.startswith("gmpmon: cannot attach: BPF compile+load")
    assert len(r.stderr.splitlines()) == 1


@pytest.mark.bpf
def test_root_without_capabilities_fails_privileges() -> None:
    setpriv = shutil.which("setpriv")
    assert setpriv, "setpriv (util-linux) is part of Debian's base system"
    r = doctor(prefix=(setpriv, "--bounding-set=-all", "--inh-caps=-all", "--"))
    assert r.returncode == 7, r.stdout + r.stderr
    checks = lines_by_check(r.stdout)
    assert checks["privileges"] == "FAIL"
    assert checks["bpf() syscall"] == "FAIL"
    assert checks["BPF compile+load"] == "FAIL"
    assert "fix: " in r.stdout
    assert r.stderr.startswith("gmpmon: cannot attach: privileges")


def _nobody_python(setpriv: str, spare: Path) -> tuple[str, dict[str, str]] | None:
    """An interpreter uid 65534 can run gmpmon with: ours, or Debian's with our paths, or
    Debian's with a world-readable copy of the gmpmon package in `spare` (a checkout under
    a 0700 home, as a CI clone may be: doctor needs only the standard library)."""
    drop = (setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "--")
    site = next(Path(sys.prefix, "lib").glob("python3*/site-packages"), None)
    tries: list[tuple[str, dict[str, str]]] = [(sys.executable, {})]
    if site is not None:
        tries.append(("/usr/bin/python3", {"PYTHONPATH": f"{REPO}:{site}"}))
    spare.chmod(0o755)
    shutil.copytree(REPO / "gmpmon", spare / "gmpmon",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for d in (spare, *spare.rglob("*")):
        d.chmod(0o755 if d.is_dir() else 0o644)
    for parent in spare.parents:
        if not parent.stat().st_mode & 0o001:
            break
    else:
        tries.append(("/usr/bin/python3", {"PYTHONPATH": str(spare)}))
    for python, env in tries:
        r = subprocess.run(
            [*drop, python, "-c", "import gmpmon.doctor"],
            capture_output=True,
            timeout=60,
            env=dict(os.environ, **env),
            cwd="/",
        )
        if r.returncode == 0:
            return python, env
    return None


@pytest.mark.bpf
def test_non_root_user_fails_privileges() -> None:
    setpriv = shutil.which("setpriv")
    assert setpriv, "setpriv (util-linux) is part of Debian's base system"
    with tempfile.TemporaryDirectory(prefix="gmpmon-nobody-", dir="/tmp") as spare:
        found = _nobody_python(setpriv, Path(spare))
        assert found is not None, "no Python interpreter and gmpmon copy uid 65534 can read"
        _non_root_user_fails_privileges(setpriv, *found)


def _non_root_user_fails_privileges(setpriv: str, python: str, env: dict[str, str]) -> None:
    r = doctor(
        env=env,
        python=python,
        prefix=(setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "--"),
    )
    assert r.returncode == 7, r.stdout + r.stderr
    checks = lines_by_check(r.stdout)
    assert checks["privileges"] == "FAIL"
    assert "uid 65534" in r.stdout
    assert "fix: run as root: sudo gmpmon" in r.stdout
