"""tests/gotargets.py: the Go workloads build, run, print what they promise, and cache."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import gotargets
from tests.gotargets import build


def run_target(exe: Path, *args: str, timeout: float = 30) -> list[str]:
    r = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stderr
    return r.stdout.splitlines()


def test_matrix_honours_full_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GMPMON_FULL_MATRIX", raising=False)
    assert set(gotargets.CI_VERSIONS) >= {"1.19", "1.22", "1.25", "1.27"}
    assert gotargets.versions() == gotargets.CI_VERSIONS
    assert ("1.19", "stripped") in gotargets.matrix()
    assert ("1.21", "pie") not in gotargets.matrix()
    monkeypatch.setenv("GMPMON_FULL_MATRIX", "1")
    assert gotargets.versions() == gotargets.ALL_VERSIONS
    assert len(gotargets.matrix()) == len(gotargets.ALL_VERSIONS) * len(gotargets.MODES)


@pytest.mark.parametrize("go", ["1.19", "1.27"])
def test_finite_workloads_print_their_result(go: str) -> None:
    expect = {
        ("sleeper", "-n", "7", "-d", "1ms"): "done 7",
        ("spawn", "-n", "123"): "spawned 123",
        ("gc", "-n", "3"): "gcs 3",
        ("syscall", "-n", "5"): "syscalls 5",
        ("mutex", "-g", "3", "-n", "11"): "locks 33",
        ("fanout", "-k", "4", "-work", "1000"): "done",
        ("spin", "-t", "100ms"): "done",
    }
    for (name, *args), last in expect.items():
        out = run_target(build(name, go), *args)
        assert out[0] == "ready", (name, out)
        assert out[-1] == last, (name, out)
    out = run_target(build("pingpong", go), "-t", "100ms")
    words = out[-1].split()
    assert words[0] == "ops" and int(words[1]) > 0 and words[2] == "rate", out


def test_churn_checksum_is_deterministic_across_versions() -> None:
    a = run_target(build("churn", "1.19"), "-iters", "60", "-seed", "7")[-1]
    b = run_target(build("churn", "1.27"), "-iters", "60", "-seed", "7")[-1]
    c = run_target(build("churn", "1.27"), "-iters", "60", "-seed", "8")[-1]
    assert a.startswith("checksum ") and a == b
    assert c != a


def test_wait_stdin_holds_work_until_a_line_arrives() -> None:
    exe = build("sleeper", "1.27")
    p = subprocess.Popen(
        [str(exe), "-n", "1", "-wait-stdin"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert p.stdout is not None and p.stdin is not None
    assert p.stdout.readline() == "ready\n"
    assert p.poll() is None  # still waiting for its go-ahead
    out, _ = p.communicate("go\n", timeout=10)
    assert out == "done 1\n"


def test_build_modes_differ_as_promised() -> None:
    from elftools.elf.elffile import ELFFile

    def sections(path: Path) -> tuple[set[str], str]:
        with open(path, "rb") as f:
            elf = ELFFile(f)
            return {s.name for s in elf.iter_sections()}, elf.header["e_type"]

    default, t_default = sections(build("spawn", "1.27", "default"))
    nodwarf, _ = sections(build("spawn", "1.27", "nodwarf"))
    stripped, _ = sections(build("spawn", "1.27", "stripped"))
    _, t_pie = sections(build("spawn", "1.27", "pie"))
    assert ".debug_info" in default and ".symtab" in default and t_default == "ET_EXEC"
    assert ".debug_info" not in nodwarf and ".symtab" in nodwarf
    assert ".symtab" not in stripped and ".gopclntab" in stripped
    assert t_pie == "ET_DYN"


def test_build_is_cached_and_rebuilt_when_sources_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gotargets, "BUILD_ROOT", tmp_path)
    exe = build("spawn", "1.27")
    assert exe.is_relative_to(tmp_path)
    first = exe.stat().st_mtime_ns
    assert build("spawn", "1.27").stat().st_mtime_ns == first
    monkeypatch.setattr(gotargets, "source_hash", lambda *a: "changed")
    assert build("spawn", "1.27").stat().st_mtime_ns != first


def test_concurrent_builds_of_one_target_agree(tmp_path: Path) -> None:
    code = (
        "import sys; from tests import gotargets as g; from pathlib import Path;"
        f"g.BUILD_ROOT = Path({str(tmp_path)!r}); print(g.build('sleeper', '1.27'))"
    )
    env = dict(os.environ, PYTHONPATH=str(gotargets.REPO))
    procs = [
        subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env)
        for _ in range(3)
    ]
    outs = [p.communicate(timeout=120)[0].strip() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert len(set(outs)) == 1
    assert run_target(Path(outs[0]), "-n", "1")[-1] == "done 1"
    assert not [f for f in tmp_path.rglob(".sleeper.*")]  # no temp files left behind


def test_unknown_workload_or_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="no Go workload"):
        build("nope")
    with pytest.raises(ValueError, match="unknown build mode"):
        build("spawn", mode="debug")


@pytest.mark.parametrize(("go", "mode"), gotargets.matrix())
def test_matrix_builds_and_runs(go: str, mode: str) -> None:
    # One workload per pair of the tested matrix (CI subset, or every pair with --full):
    # proves the toolchain exists and the mode's flags produce a runnable program.
    assert run_target(build("spawn", go, mode), "-n", "10") == ["ready", "spawned 10"]
