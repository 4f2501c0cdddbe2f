"""validate_layout on live Go processes: it holds on every build, and wrong layouts fail it.

Needs root (or ptrace rights) to read /proc/PID/mem, not BPF. The refusal tests run the real
`gmpmon attach`, which refuses before compiling anything: one line, its exit code, no
traceback, and the target keeps running.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gmpmon.binary import BinaryInfo, load_pid
from gmpmon.binary.table import TABLE_FILE, table_minors
from gmpmon.binary.validate import GROUPS
from gmpmon.capture.sampler import LayoutError, Sampler, check_layout
from gmpmon.errors import UnsupportedError
from tests.cli import inspect
from tests.gotargets import versions
from tests.integration.test_attach import Proc, attach, copy_target
from tests.integration.test_capture import GM, TIMEOUT, env
from tests.unit.test_globals import future_minor, patched_version

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="reads /proc/PID/mem: needs root")

BUSY = ("runq", ("-g", "6", "-t", "60s"))  # every P running, goroutines in run queues
IDLE = ("sleeper", ("-n", "1000000", "-d", "1ms"))


def started(tmp_path: Path, name: str, args: tuple[str, ...], go: str, mode: str) -> Proc:
    target = Proc([str(copy_target(tmp_path, name, go, mode)), *args], env=env(GOMAXPROCS="2"))
    target.wait_line("ready")
    return target


@pytest.fixture
def busy(tmp_path: Path) -> Iterator[tuple[Proc, BinaryInfo]]:
    t = started(tmp_path, *BUSY, versions()[-1], "stripped")
    try:
        yield t, load_pid(t.p.pid)
    finally:
        t.kill()


@pytest.mark.parametrize("mode", ["default", "stripped"])
@pytest.mark.parametrize("go", versions())
def test_layout_holds_on_idle_and_busy_targets(tmp_path: Path, go: str, mode: str) -> None:
    for name, args in (IDLE, BUSY):
        t = started(tmp_path, name, args, go, mode)
        try:
            layout = check_layout(load_pid(t.p.pid), t.p.pid, GROUPS)
        finally:
            t.kill()
        assert layout.failed == {}, (name, layout.failed)
        assert layout.gomaxprocs == 2


def test_layout_holds_on_64_busy_ps(tmp_path: Path) -> None:
    """64 Ps, 20k parked goroutines and 64 wakers (the scale workload): the Ps move between
    the reads of one pass, all the time. The checks once failed here on every attempt ("a
    running P's curg is running (allp[21]: read 1)": that curg had just been descheduled),
    which turned the sampler, runtime counters and GOMAXPROCS off on a healthy target."""
    exe = copy_target(tmp_path, "scale", versions()[-1], "stripped")
    t = Proc([str(exe), "-procs", "64", "-g", "100000", "-wakers", "64", "-t", "60s"])
    try:
        t.wait_line("ready", timeout=60)
        time.sleep(0.5)  # the wakers are at work
        info = load_pid(t.p.pid)
        for _ in range(10):
            layout = check_layout(info, t.p.pid, GROUPS)
            assert layout.failed == {}, layout.failed
            assert layout.gomaxprocs == 64
    finally:
        t.kill()


# offset key, shift -> the words of the check that must fail (on the busy target)
WRONG_OFFSETS = (
    ("runtime.p.id", 4, "allp[0].id == 0"),
    ("runtime.p.status", 8, "an idle P has no M"),
    ("runtime.m.p", 8, "a running P's m.p points back to it"),
    ("runtime.g.m", 8, "g0.m.g0 == g0"),
    ("runtime.m.procid", 8, "procid is a thread of the process"),
    ("runtime.g.atomicstatus", 8, "a running P's curg is running"),
    ("runtime.g.goid", 8, "allgs[0].goid == 1"),
)


@pytest.mark.parametrize(("key", "shift", "check"), WRONG_OFFSETS,
                         ids=[w[0] for w in WRONG_OFFSETS])
def test_a_wrong_offset_fails_naming_the_check(
    busy: tuple[Proc, BinaryInfo], key: str, shift: int, check: str
) -> None:
    t, info = busy
    offsets = dict(info.offsets, **{key: info.offsets[key] + shift})
    wrong = dataclasses.replace(info, offsets=offsets)
    layout = check_layout(wrong, t.p.pid, GROUPS)
    assert any(check in why for why in layout.failed.values()), layout.failed
    assert not layout.ok()


@pytest.mark.parametrize("name", ["runtime.allp", "runtime.sched", "runtime.gomaxprocs"])
def test_a_wrong_global_address_turns_the_sampler_off_with_one_line(
    busy: tuple[Proc, BinaryInfo], name: str
) -> None:
    t, info = busy
    wrong = dataclasses.replace(info, globals=dict(info.globals, **{name: info.globals[name] + 8}))
    with pytest.raises(LayoutError) as e:
        Sampler(wrong, t.p.pid)
    msg = str(e.value)
    assert msg.startswith("layout check failed: ") and "\n" not in msg, msg
    assert "globals: disasm; offsets: table go1." in msg, msg


def wrong_table(tmp_path: Path, minor: str, **shifts: int) -> Path:
    """A copy of gmpmon's offsets table with some of go`minor`'s offsets moved."""
    import gmpmon.binary

    table = json.loads((Path(gmpmon.binary.__file__).parent / TABLE_FILE).read_text())
    for key, d in shifts.items():
        table["versions"][minor]["offsets"][key.replace("__", ".")] += d
    out = tmp_path / "wrong-table.json"
    out.write_text(json.dumps(table))
    return out


def refused(pid: int, table: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*GM, "attach", str(pid), "--no-tui", "--mode", "sample", "-d", "1"],
        capture_output=True, text=True, timeout=TIMEOUT,
        env=env(GMPMON_OFFSETS_TABLE=str(table)),
    )


def assert_one_line(r: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert r.returncode == UnsupportedError.exit_code, (r.returncode, r.stderr)
    assert r.stdout == "" and "Traceback" not in r.stderr
    first = r.stderr.splitlines()[0]
    assert first.startswith("gmpmon: "), r.stderr
    for n in needles:
        assert n in first, first
    # a hint line may follow, never more
    assert len(r.stderr.splitlines()) <= 2, r.stderr


def test_attach_refuses_a_wrong_offsets_table(tmp_path: Path) -> None:
    go = versions()[-1]
    t = started(tmp_path, *BUSY, go, "stripped")
    try:
        r = refused(t.p.pid, wrong_table(tmp_path, go, runtime__p__id=4, runtime__p__status=4))
        assert t.p.poll() is None  # untouched
    finally:
        t.kill()
    assert_one_line(r, f"the go{go} offsets table does not fit this process",
                    "layout check failed: allp[0].id == 0 (read 1)")


def test_attach_refuses_a_newer_go_when_the_newest_table_does_not_fit(tmp_path: Path) -> None:
    newest = table_minors()[-1]
    src = copy_target(tmp_path, BUSY[0], newest, "stripped")
    real = load_pid_version(src)
    fut = patched_version(tmp_path, src, real, f"go{future_minor()}.0".ljust(len(real), "0"))
    t = Proc([str(fut), *BUSY[1]], env=env(GOMAXPROCS="2"))
    try:
        t.wait_line("ready")
        r = refused(t.p.pid, wrong_table(tmp_path, newest, runtime__m__p=8))
        assert t.p.poll() is None
    finally:
        t.kill()
    assert_one_line(r, "is newer than gmpmon's offsets table", f"go{newest}'s layout does not fit",
                    "a running P's m.p points back to it")


def load_pid_version(exe: Path) -> str:
    from gmpmon.binary import load

    return load(str(exe)).go_version


@pytest.mark.bpf
def test_a_newer_go_without_dwarf_runs_on_the_validated_newest_table(tmp_path: Path) -> None:
    newest = table_minors()[-1]
    src = copy_target(tmp_path, BUSY[0], newest, "stripped")
    real = load_pid_version(src)
    fut = patched_version(tmp_path, src, real, f"go{future_minor()}.0".ljust(len(real), "0"))
    t = Proc([str(fut), *BUSY[1]], env=env(GOMAXPROCS="2"))
    try:
        t.wait_line("ready")
        summary = tmp_path / "s.json"
        gm = attach(t.p.pid, "--mode", "sample", "-d", "1.5", "--summary-json", str(summary))
        line = gm.wait_line("Tracing Go scheduler of PID")
        assert gm.p.wait(timeout=TIMEOUT) == 0, gm.err
    finally:
        t.kill()
    assert f"go{future_minor()}.0" in line and f"offsets of go{newest}, validated on it" in line
    assert "no sampler" not in gm.err and "Traceback" not in gm.err, gm.err
    s = json.loads(summary.read_text())
    assert s["target"]["gomaxprocs"] == 2
    assert all(p["running_ns"] > 0 for p in s["procs"]), s["procs"]


def test_inspect_of_a_pid_runs_the_layout_checks(tmp_path: Path) -> None:
    go = versions()[-1]
    t = started(tmp_path, *BUSY, go, "stripped")
    try:
        good = inspect(str(t.p.pid))
        j = json.loads(inspect(str(t.p.pid), "--json").stdout)
        bad = subprocess.run(
            [*GM, "inspect", str(t.p.pid)], capture_output=True, text=True, timeout=TIMEOUT,
            env=env(GMPMON_OFFSETS_TABLE=str(wrong_table(tmp_path, go, runtime__p__id=4))),
        )
    finally:
        t.kill()
    assert "layout checks on the live process: all hold" in good.stdout, good.stdout
    assert "runtime.allp                0x" in good.stdout and "disasm runtime.procresize+0x" in (
        good.stdout)
    assert j["layout"] == {"checked": True, "failed": {}}
    assert bad.returncode == 0, bad.stderr
    assert "layout check failed (procs): allp[0].id == 0 (read 1)" in (
        bad.stdout), bad.stdout


@pytest.mark.bpf
def test_a_layout_check_failing_on_sched_turns_off_only_what_reads_it(tmp_path: Path) -> None:
    """-w build (symbols, table offsets) with a wrong schedt.npidle in the table: the P
    layout holds, so gmpmon traces; runtime.sched is dropped, said in one line (and not
    again by each reader)."""
    go = versions()[-1]
    t = started(tmp_path, *BUSY, go, "nodwarf")
    try:
        gm = Proc([*GM, "attach", str(t.p.pid), "--no-tui", "--mode", "sample", "-d", "1"],
                  env=env(GMPMON_OFFSETS_TABLE=str(
                      wrong_table(tmp_path, go, runtime__schedt__npidle=8))))
        gm.wait_line("Tracing Go scheduler of PID")
        assert gm.p.wait(timeout=TIMEOUT) == 0, gm.err
    finally:
        t.kill()
    lines = gm.err.splitlines()
    assert len(lines) == 1 and "Traceback" not in gm.err, gm.err
    assert lines[0].startswith(
        "gmpmon: layout check failed: sched.npidle == the number of idle Ps (read "), lines
    assert lines[0].endswith("; off: memory sampler, runtime counters, global runq"), lines
