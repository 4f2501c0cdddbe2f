"""The one checked reader of a target's memory: a hostile address or length is gmpmon's own
error, never OverflowError or a huge allocation; readv reads many spans and marks the
unreadable ones. Read from a real child process (no root needed for one's own child)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gmpmon.capture.targetmem import USER_END, TargetMemory, check_count, check_span
from gmpmon.errors import TargetMemoryError

# A child that holds a known buffer and prints its address.
CHILD = (
    "import ctypes,sys;b=ctypes.create_string_buffer(b'gmpmon-hostile'*4096);"
    "print(ctypes.addressof(b),flush=True);sys.stdin.read()"
)


@pytest.fixture
def child() -> tuple[int, int]:
    p = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None
    addr = int(p.stdout.readline())
    yield p.pid, addr
    p.kill()
    p.wait()


@pytest.mark.parametrize("addr,size", [
    (0, 8), (0xffff800000001000, 8), (0xffffffffffffff00, 8), (USER_END - 4, 8), (-8, 8),
    (0x1000, -1), (0x1000, 1 << 40), (1 << 64, 8),
])
def test_check_span_refuses(addr: int, size: int) -> None:
    with pytest.raises(TargetMemoryError):
        check_span(addr, size)


def test_check_span_and_count_pass_plausible_values() -> None:
    check_span(0xc000010000, 4096)
    check_span(USER_END - 8, 8)
    assert check_count("allglen", 100_000, 1 << 24) == 100_000
    with pytest.raises(TargetMemoryError, match="allglen is 1099511627771"):
        check_count("allglen", 1099511627771, 1 << 24)


def test_read_refuses_kernel_half_pointer_with_own_error(child: tuple[int, int]) -> None:
    pid, addr = child
    mem = TargetMemory(pid)
    try:
        assert mem.read(addr, 14) == b"gmpmon-hostile"
        for bad in (0xffff800000001000, 0xffffffffffffff00):
            with pytest.raises(TargetMemoryError, match="not a user-space address"):
                mem.read(bad, 8)
        with pytest.raises(TargetMemoryError):
            mem.read(addr, 1 << 40)
        with pytest.raises(OSError):
            mem.read(0x1000, 8)  # unmapped: the ordinary "cannot read" error
    finally:
        mem.close()


def test_readv_reads_many_spans_and_marks_bad_ones(child: tuple[int, int]) -> None:
    pid, addr = child
    mem = TargetMemory(pid)
    try:
        spans = [(addr + 14 * i, 14) for i in range(3000)]
        spans[5] = (0xffff800000001000, 8)    # kernel half
        spans[700] = (0x1000, 8)              # unmapped page
        spans[2500] = (addr, 1 << 40)         # over the cap
        before = mem.reads
        got = mem.readv(spans)
        assert got[5] is None and got[700] is None and got[2500] is None
        assert [g for i, g in enumerate(got) if i not in (5, 700, 2500)] == \
            [b"gmpmon-hostile"] * 2997
        assert mem.reads - before <= 8  # batched: a few calls, not 3000
    finally:
        mem.close()


def test_readv_of_a_gone_process_raises_oserror(child: tuple[int, int]) -> None:
    pid, addr = child
    mem = TargetMemory(pid)
    subprocess.run(["kill", "-9", str(pid)], check=True)
    import os
    os.waitpid(pid, 0)
    try:
        with pytest.raises(OSError):
            mem.readv([(addr, 8)])
    finally:
        mem.close()
