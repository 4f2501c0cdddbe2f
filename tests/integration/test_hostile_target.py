"""A hostile target: an unprivileged Go process (1,000 parked goroutines) whose runtime
memory this test rewrites through /proc/PID/mem after gmpmon has attached and checked it.

A pointer >= 2^63 used to crash gmpmon's readers (os.pread raises OverflowError, not OSError):
the census thread died with a traceback and the run exited 0 without a census; a bad
``allp[0].m`` ended the capture with "Python int too large to convert to C long"; a pointer
to an unmapped page froze the census at its last walk, silently. Now a bad pointer in one
element (one G of allgs, one P's M) costs that element: the reader skips it and goes on, and a
bad structural value (allglen) stops only the part it sizes. Either way one line says which
part and why, the report and the summary JSON say it too, and the exit is 14.
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
UNMAPPED = 0x1000  # user space, but no page there: the read fails while the target runs
MAX_RSS_MB = 300
GOROUTINES = 1001  # `parked -n 1000`: 1,000 parked and main


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
                    duration: float = 2.5, *extra: str,
                    ) -> tuple[subprocess.CompletedProcess[str], float, int]:
    """`gmpmon attach -d` on pid; once attached, write each (addr, value) a few times (the
    runtime may write the word itself meanwhile). (result, seconds from the first write to
    gmpmon's exit, gmpmon's peak RSS in MB). The whole run's time is printed too."""
    rss = summary.with_suffix(".rss")
    start = time.monotonic()
    p = subprocess.Popen(
        [TIME, "-q", "-f", "%M", "-o", str(rss),  # peak RSS of gmpmon alone (tests/hostile.py)
         sys.executable, "-m", "gmpmon", "attach", str(pid), "--no-tui", "--mode", "sample",
         "-d", str(duration), "--summary-json", str(summary), *extra],
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


def one_line_about(r: subprocess.CompletedProcess[str], what: str) -> str:
    """The one line at the end about the reader ``what`` (e.g. "P sampler skipped"), exit 14,
    no traceback."""
    assert "Traceback" not in r.stdout + r.stderr, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if "the capture went on without it" in ln]
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith(f"gmpmon: {what}"), lines[0]
    assert r.returncode == errors.TargetMemoryError.exit_code, (r.returncode, r.stderr)
    return lines[0]


def failed_part(summary: Path, part: str) -> dict[str, object]:
    rt = json.loads(summary.read_text())["runtime"]
    got = [f for f in rt["failed"] if f["part"] == part]
    assert len(got) == 1 and len(rt["failed"]) == 1, rt["failed"]
    return got[0]


def debug2_goroutines(r: Measured) -> int:
    return sum(1 for ln in r.out.splitlines() if ln.startswith("goroutine "))


@pytest.mark.parametrize("bad", [KERNEL_HALF, UNMAPPED], ids=["kernel-half", "unmapped"])
def test_a_bad_pointer_in_allgs_costs_that_goroutine_only(
    target: tuple[Target, Path], tmp_path: Path, bad: int
) -> None:
    """allgs[300] rewritten: the census walks on without that G and says so (it used to die
    with a traceback, or, for an unmapped page, to freeze at its last walk as if the target
    had exited); `gmpmon goroutines` lists the other 1,000 and says which one it could not
    read; `ps` is unaffected (it reads allglen only)."""
    t, exe = target
    ptr, n = struct.unpack("<QQ", peek(t.pid, runtime_addr(exe, "runtime.allgs"), 16))
    assert n >= GOROUTINES
    summary, rec = tmp_path / "s.json", tmp_path / "r.gmp"
    r, took, rss = attach_and_poke(t.pid, summary, [(ptr + 8 * 300, bad)], 2.5,
                                   "--record", str(rec))
    line = one_line_about(r, "goroutine census skipped what it could not read: ")
    assert f"(first: allgs[300] = {bad:#x}: " in line, line
    why = "not a user-space address" if bad == KERNEL_HALF else "no mapped page there"
    assert why in line, line
    report = " ".join(r.stdout.split())  # the report wraps its long lines
    assert "1 unreadable, skipped (not counted)" in report, r.stdout
    assert "goroutine census (allgs): " in report and "skipped, the reader went on (first: " \
        f"allgs[300] = {bad:#x}" in report, r.stdout
    doc = json.loads(summary.read_text())
    census = doc["census"]
    assert census["skipped"] == 1 and census["goroutines"] == GOROUTINES - 1, census
    assert census["number"] >= 3  # walks went on after the write (one a second, -d 2.5)
    part = failed_part(summary, "goroutine census (allgs)")
    assert part["stopped"] is False and int(str(part["skipped_reads"])) >= 1, part
    assert f"allgs[300] = {bad:#x}" in str(part["why"]), part
    assert doc["runtime"]["goroutines"] == GOROUTINES  # gcount: the counters never read Gs
    assert took <= LIMIT_S and rss <= MAX_RSS_MB, (took, rss)
    print(f"\nallgs[300]={bad:#x}: attach exit {r.returncode}, {took:.1f} s after the write "
          f"(-d 2.5), peak RSS {rss} MB: {line}")
    again = tmp_path / "again.json"  # the recording says the same: part, count and why
    assert gmpmon("replay", str(rec), "--summary-json", str(again)).code == 0
    replayed = json.loads(again.read_text())
    assert (replayed["runtime"], replayed["census"]) == (doc["runtime"], doc["census"])

    g = gmpmon("goroutines", str(t.pid))
    err = g.one_line()
    assert g.code == errors.TargetMemoryError.exit_code, (g.code, err)
    assert err.startswith("gmpmon: 1 goroutine of allgs could not be read, not listed "
                          f"(first: allgs[300] = {bad:#x}: "), err
    assert debug2_goroutines(g) == GOROUTINES - 1
    gj = gmpmon("goroutines", str(t.pid), "--json")
    doc = json.loads(gj.out)
    assert doc["unreadable"]["count"] == 1 and doc["goroutines_shown"] == GOROUTINES - 1, doc
    print(f"goroutines: {g.figure()}\n  {err}")
    g.within_limits()

    rows, p = ps_rows(exe.parent.name)
    row = next(x for x in rows if x["pid"] == t.pid)
    assert row["goroutines"] == GOROUTINES and not row["note"], row
    p.within_limits()


@pytest.mark.parametrize("bad", [ALL_ONES, UNMAPPED], ids=["all-ones", "unmapped"])
def test_a_bad_allp0_m_costs_that_read_only(
    target: tuple[Target, Path], tmp_path: Path, bad: int
) -> None:
    """allp[0].m rewritten after the layout checks passed (it ended the capture, exit 10): the
    P sampler skips that P's M at each tick, still samples both Ps' states, and says so."""
    t, exe = target
    allp, n = struct.unpack("<QQ", peek(t.pid, runtime_addr(exe, "runtime.allp"), 16))
    assert n == 2
    p0 = struct.unpack("<Q", peek(t.pid, allp))[0]
    summary = tmp_path / "s.json"
    r, took, rss = attach_and_poke(t.pid, summary, [(p0 + offset(exe, "runtime.p.m"), bad)])
    line = one_line_about(r, "P sampler skipped what it could not read: ")
    assert f"(first: allp[0].m = {bad:#x}: " in line, line
    part = failed_part(summary, "P states sampled from memory (allp)")
    # One skip a tick at 50 Hz: >= 50 means it sampled on for a second or more after the
    # write (~2.2 s are left of -d 2.5; a sampler that stopped would count 1)
    assert part["stopped"] is False and int(str(part["skipped_reads"])) >= 50, part
    doc = json.loads(summary.read_text())
    assert len(doc["procs"]) == 2 and all(p["idle_ns"] > 0 for p in doc["procs"]), doc["procs"]
    assert doc["runtime"]["reads"] > 0 and doc["runtime"]["stopped"] == []
    assert took <= LIMIT_S and rss <= MAX_RSS_MB, (took, rss)
    print(f"\nallp[0].m={bad:#x}: exit {r.returncode}, {took:.1f} s after the write "
          f"(-d 2.5), peak RSS {rss} MB: {line}")


def test_an_implausible_allglen_stops_the_goroutine_count_only(
    target: tuple[Target, Path], tmp_path: Path
) -> None:
    """allglen = 1099511627771 after attach: the runtime counters' goroutine count stops (it
    is no count), their histograms and gauges read on, the census still counts; `ps` says why
    on the process's line; `gmpmon goroutines` refuses in one line."""
    t, exe = target
    summary = tmp_path / "s.json"
    glen = runtime_addr(exe, "runtime.allglen")
    r, took, rss = attach_and_poke(t.pid, summary, [(glen, 1099511627771)])
    line = one_line_about(r, "runtime counters' goroutine count stopped: ")
    assert "allglen is 1099511627771, outside 0..67108864" in line, line
    assert "not available: goroutine count (allglen, free lists) (its reader stopped: " \
        "the target's allglen is 1099511627771" in " ".join(r.stdout.split()), r.stdout
    doc = json.loads(summary.read_text())
    rt = doc["runtime"]
    assert rt["stopped"] == ["goroutine count (allglen, free lists)"], rt
    assert rt["goroutines"] is None and rt["npidle"] == 2 and rt["reads"] > 10, rt
    assert doc["census"]["goroutines"] == GOROUTINES  # the census walks len(allgs)
    assert doc["goroutines"]["live"] == GOROUTINES and doc["goroutines"]["source"] == "census"
    assert took <= LIMIT_S and rss <= MAX_RSS_MB, (took, rss)
    print(f"\nallglen=1099511627771: attach exit {r.returncode}, {took:.1f} s after the "
          f"write (-d 2.5), peak RSS {rss} MB: {line}")

    g = gmpmon("goroutines", str(t.pid))
    err = g.one_line()
    assert g.code == errors.MissingSymbolsError.exit_code, (g.code, err)
    assert "allglen <= 2^24 (read 1099511627771)" in err, err
    print(f"goroutines: {g.figure()}\n  {err}")
    g.within_limits()

    rows, p = ps_rows(exe.parent.name)  # it printed 1099511627771 goroutines
    row = next(x for x in rows if x["pid"] == t.pid)
    assert row["goroutines"] is None, row
    assert "allglen is 1099511627771" in str(row["note"]), row
    print(f"ps: {p.figure()}\n  note: {row['note']}")
    p.within_limits()


# --- `gmpmon ps` and attach on hostile processes and executables --------------------------


def ps_rows(match: str) -> tuple[list[dict[str, object]], Measured]:
    r = gmpmon("ps", "--json", "--no-cache", "--match", match)
    assert r.code == 0 and "Traceback" not in r.err, r.err
    return json.loads(r.out), r


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
