"""A hostile target: an unprivileged Go process (1,000 parked goroutines) whose runtime
memory this test rewrites through /proc/PID/mem after gmpmon has attached and checked it.

A pointer >= 2^63 used to crash gmpmon's readers (os.pread raises OverflowError, not OSError):
the census thread died with a traceback and the run exited 0 without a census; a bad
``allp[0].m`` ended the capture with "Python int too large to convert to C long". Now the
reader that meets it stops, says so in one line, the report and the summary JSON say which
part is missing, the rest of the capture goes on, and the exit is TargetMemoryError's (14).
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gmpmon import errors
from tests.gotargets import build
from tests.hostile import LIMIT_S, TIME, Measured, gmpmon
from tests.integration.test_hardening_common import REPO, Target, start_target, wait_attached

pytestmark = pytest.mark.bpf

NOBODY = ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all")
KERNEL_HALF = 0xFFFF_8000_0000_1000
ALL_ONES = 0xFFFF_FFFF_FFFF_FF00
MAX_RSS_MB = 300


@pytest.fixture
def target() -> Iterator[tuple[Target, Path]]:
    """`parked`: 1,000 parked goroutines, main asleep, 2 idle Ps; run by nobody from a
    copy of its binary that nobody may execute."""
    d = Path(tempfile.mkdtemp(prefix="gmpmon-hostile-"))
    os.chmod(d, 0o755)
    exe = d / "parked"
    shutil.copy2(build("parked", "1.27"), exe)
    os.chmod(exe, 0o755)
    t = start_target(NOBODY[0], *NOBODY[1:], str(exe), "-n", "1000", env={"GOMAXPROCS": "2"})
    try:
        yield t, exe
    finally:
        t.stop()
        shutil.rmtree(d, ignore_errors=True)


def poke(pid: int, addr: int, value: int) -> None:
    with open(f"/proc/{pid}/mem", "r+b", buffering=0) as f:
        f.seek(addr)
        f.write(struct.pack("<Q", value))


def peek(pid: int, addr: int, n: int = 8) -> bytes:
    with open(f"/proc/{pid}/mem", "rb", buffering=0) as f:
        f.seek(addr)
        return f.read(n)


def runtime_addr(exe: Path, name: str) -> int:
    from gmpmon.binary import load

    return load(str(exe)).globals[name]  # not a PIE: the address is the runtime's


def offset(exe: Path, name: str) -> int:
    from gmpmon.binary import load

    return load(str(exe)).offsets[name]


def attach_and_poke(pid: int, summary: Path, pokes: list[tuple[int, int]],
                    duration: float = 2.5) -> tuple[subprocess.CompletedProcess[str], float, int]:
    """`gmpmon attach -d` on pid; once attached, write each (addr, value) a few times (the
    runtime may write the word itself meanwhile). (result, seconds from the first write to
    gmpmon's exit, gmpmon's peak RSS in MB). The whole run's time is printed too."""
    rss = summary.with_suffix(".rss")
    start = time.monotonic()
    p = subprocess.Popen(
        [TIME, "-q", "-f", "%M", "-o", str(rss),  # peak RSS of gmpmon alone (tests/hostile.py)
         sys.executable, "-m", "gmpmon", "attach", str(pid), "--no-tui", "--mode", "sample",
         "-d", str(duration), "--summary-json", str(summary)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
        stdin=subprocess.DEVNULL,
    )
    try:
        wait_attached(pid)
        time.sleep(0.3)  # the first census and samples are in
        t0 = time.monotonic()
        for _ in range(3):
            for addr, value in pokes:
                poke(pid, addr, value)
            time.sleep(0.1)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    took = time.monotonic() - t0
    print(f"\n(gmpmon attach -d {duration}: {time.monotonic() - start:.1f} s in all, BPF "
          "compile and attach included)", end="")
    kb = [w for w in rss.read_text().split() if w.isdigit()]
    return subprocess.CompletedProcess(p.args, p.returncode, out, err), took, int(kb[-1]) // 1024


def one_stopped_line(r: subprocess.CompletedProcess[str], what: str) -> str:
    assert "Traceback" not in r.stdout + r.stderr, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if "stopped" in ln]
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith(f"gmpmon: {what} stopped: refused a read"), lines[0]
    assert r.returncode == errors.TargetMemoryError.exit_code, (r.returncode, r.stderr)
    return lines[0]


def test_kernel_pointer_in_allgs_stops_the_census_and_says_so(
    target: tuple[Target, Path], tmp_path: Path
) -> None:
    t, exe = target
    ptr, n = struct.unpack("<QQ", peek(t.pid, runtime_addr(exe, "runtime.allgs"), 16))
    assert n >= 1000
    summary = tmp_path / "s.json"
    r, took, rss = attach_and_poke(t.pid, summary, [(ptr + 8 * 300, KERNEL_HALF)])
    line = one_stopped_line(r, "goroutine census")
    assert "0xffff8000000010" in line, line  # the g pointer + the offset of its first field
    assert "not available: goroutine census (allgs) (its reader stopped" in r.stdout, r.stdout
    rt = json.loads(summary.read_text())["runtime"]
    assert rt["stopped"] == ["goroutine census (allgs)"], rt
    assert rt["goroutines"] >= 1000  # the counters went on
    assert took <= LIMIT_S
    print(f"\nallgs[300]={KERNEL_HALF:#x}: exit {r.returncode}, {took:.1f} s after the write "
          f"(-d 2.5), peak RSS {rss} MB: {line}")
    assert rss <= MAX_RSS_MB


def test_all_ones_allp0_m_stops_the_sampler_not_the_capture(
    target: tuple[Target, Path], tmp_path: Path
) -> None:
    t, exe = target
    allp, n = struct.unpack("<QQ", peek(t.pid, runtime_addr(exe, "runtime.allp"), 16))
    assert n == 2
    p0 = struct.unpack("<Q", peek(t.pid, allp))[0]
    summary = tmp_path / "s.json"
    r, took, rss = attach_and_poke(t.pid, summary, [(p0 + offset(exe, "runtime.p.m"), ALL_ONES)])
    line = one_stopped_line(r, "P sampler")
    assert f"{ALL_ONES + offset(exe, 'runtime.m.procid'):#x}" in line or "user-space" in line
    rt = json.loads(summary.read_text())["runtime"]
    assert rt["stopped"] == ["P states sampled from memory (allp)"], rt
    assert rt["reads"] > 0  # the runtime counters went on
    assert took <= LIMIT_S
    print(f"\nallp[0].m={ALL_ONES:#x}: exit {r.returncode}, {took:.1f} s after the write "
          f"(-d 2.5), peak RSS {rss} MB: {line}")
    assert rss <= MAX_RSS_MB


# --- `gmpmon ps` and attach on hostile processes and executables --------------------------


def ps_rows(match: str) -> tuple[list[dict[str, object]], Measured]:
    r = gmpmon("ps", "--json", "--no-cache", "--match", match)
    assert r.code == 0 and "Traceback" not in r.err, r.err
    return json.loads(r.out), r


def test_ps_checks_allglen_and_says_why_on_the_line(target: tuple[Target, Path]) -> None:
    t, exe = target
    poke(t.pid, runtime_addr(exe, "runtime.allglen"), 1099511627771)
    rows, r = ps_rows(str(exe.parent.name))
    row = next(x for x in rows if x["pid"] == t.pid)
    assert row["goroutines"] is None, row  # it printed 1099511627771 goroutines
    assert "allglen is 1099511627771" in str(row["note"]), row
    print(f"\nps, allglen=1099511627771: {r.figure()}\n  note: {row['note']}")
    r.within_limits()


def test_ps_lists_a_process_whose_build_info_is_damaged(tmp_path: Path) -> None:
    """A damaged .go.buildinfo does not stop the program; ps used to leave it out silently."""
    d = Path(tempfile.mkdtemp(prefix="gmpmon-hostile-bi-"))
    exe = d / "parked"
    data = bytearray(build("parked", "1.27").read_bytes())
    at = data.find(b"\xff Go buildinf:")
    assert data[at + 15] & 2  # the version string inline, after its varint length
    data[at + 32 : at + 37] = b"\xff\xff\xff\xff\x0f"  # a 4 GiB version string
    exe.write_bytes(bytes(data))
    os.chmod(exe, 0o755)
    t = start_target(str(exe), "-n", "10", env={"GOMAXPROCS": "2"})
    try:
        rows, r = ps_rows(d.name)
        row = next((x for x in rows if x["pid"] == t.pid), None)
        assert row is not None, (rows, r.err)
        assert row["note"], row  # says why it could not be read
        print(f"\nps, damaged build info: {r.figure()}\n  note: {row['note']}")
        r.within_limits()
    finally:
        t.stop()
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def sparse_target() -> Iterator[tuple[Target, Path]]:
    """`parked` padded to 3.9 GB with truncate (holes: no disk); it still runs."""
    d = Path(tempfile.mkdtemp(prefix="gmpmon-hostile-sparse-"))
    os.chmod(d, 0o755)
    exe = d / "parked"
    shutil.copy2(build("parked", "1.27"), exe)
    os.truncate(exe, 3_900_000_000)
    os.chmod(exe, 0o755)
    t = start_target(NOBODY[0], *NOBODY[1:], str(exe), "-n", "100", env={"GOMAXPROCS": "2"})
    try:
        yield t, exe
    finally:
        t.stop()
        shutil.rmtree(d, ignore_errors=True)


def test_ps_of_a_sparse_3_9_gb_executable(sparse_target: tuple[Target, Path]) -> None:
    t, exe = sparse_target
    rows, r = ps_rows(exe.parent.name)
    row = next(x for x in rows if x["pid"] == t.pid)
    assert row["goroutines"] is not None and int(str(row["goroutines"])) >= 100, row
    print(f"\nps, sparse 3.9 GB executable: {r.figure()}")
    r.within_limits()


def test_attach_to_a_sparse_3_9_gb_executable(sparse_target: tuple[Target, Path],
                                              tmp_path: Path) -> None:
    """It took 8.1 GB and 17 s (the file read whole, then copied). The limit here is on
    memory; the time is the attach's own (BPF compile included), reported."""
    t, _exe = sparse_target
    summary = tmp_path / "s.json"
    r = gmpmon("attach", str(t.pid), "--no-tui", "--mode", "sample", "-d", "1",
               "--summary-json", str(summary), timeout=120)
    assert r.code == 0 and "Traceback" not in r.err, r.err
    assert json.loads(summary.read_text())["runtime"]["goroutines"] >= 100
    print(f"\nattach -d 1, sparse 3.9 GB executable: {r.figure()}")
    assert r.max_rss_mb <= MAX_RSS_MB, r.figure()
