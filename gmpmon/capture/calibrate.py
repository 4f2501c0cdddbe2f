"""What one emulated uprobe hit costs on this machine, now: measured, not assumed.

As `scripts/bench` does on a Go workload, but in a few tens of milliseconds and without
touching the target: a 32-byte x86-64 function file (``push rbp; pop rbp; ret`` and a loop
that calls it N times) is mapped executable from a private file, a uprobe_multi link with a
BPF program that does nothing is put on its ``push rbp`` (emulated, like gmpmon's sites), and
the loop's thread CPU time with and without the probe is compared. The trap is charged to
the calling thread, so its CPU time (user + system) grows by N x the trap's cost.
"""

from __future__ import annotations

import ctypes as ct
import mmap
import os
import shutil
import tempfile
import time
from collections.abc import Callable

from gmpmon.capture import bpfsys

# f:    push rbp ; pop rbp ; ret                      (offset 0: the probed push rbp)
# loop: test rdi,rdi ; jz done                        (offset 16, rdi = N)
# top:  call f ; dec rdi ; jnz top
# done: ret
CODE = bytes.fromhex("555dc3" + "90" * 13 + "4885ff740a" + "e8e6ffffff" + "48ffcf" + "75f6" + "c3")
LOOP_OFF = 16
DEFAULT_HITS = 10_000  # ~6 ms of traps a run here: 40,000 made attach's controller 1.2% of
# a core over a 10-s bench
REPS = 3
_libc = ct.CDLL(None, use_errno=True)
_libc.mmap.restype = ct.c_void_p
_libc.mmap.argtypes = [ct.c_void_p, ct.c_size_t, ct.c_int, ct.c_int, ct.c_int, ct.c_long]
_libc.munmap.argtypes = [ct.c_void_p, ct.c_size_t]
MAP_FAILED = (1 << 64) - 1


def calibrate_hit_cost(hits: int = DEFAULT_HITS, reps: int = REPS) -> float:
    """Seconds of CPU one emulated uprobe hit (no-op program) costs the hitting thread: the
    median of ``reps`` probed-minus-bare loops of ``hits`` calls. Needs root (bpf)."""
    d = tempfile.mkdtemp(prefix="gmpmon-calib-")
    path = os.path.join(d, "calib.bin")
    prog = link = -1
    size = mmap.PAGESIZE
    base = 0
    try:
        # A private directory (mkdtemp: 0700) and a new file in it.
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
        try:
            os.write(fd, CODE.ljust(size, b"\xcc"))
            base = _libc.mmap(None, size, mmap.PROT_READ | mmap.PROT_EXEC, mmap.MAP_PRIVATE,
                              fd, 0)
        finally:
            os.close(fd)
        if base in (None, MAP_FAILED):
            raise OSError(ct.get_errno(), "mmap of the calibration code failed")
        loop = ct.CFUNCTYPE(None, ct.c_uint64)(base + LOOP_OFF)
        prog = bpfsys.load_noop_prog()
        costs = []
        for _ in range(reps):
            bare = _cpu_of(loop, hits)
            link = bpfsys.link_uprobe_multi(prog, path, [0], [0])
            try:
                probed = _cpu_of(loop, hits)
            finally:
                os.close(link)
                link = -1
            costs.append(max(probed - bare, 0.0) / hits)
        return sorted(costs)[len(costs) // 2]
    finally:
        if link >= 0:
            os.close(link)
        if prog >= 0:
            os.close(prog)
        if base:
            _libc.munmap(ct.c_void_p(base), size)
        shutil.rmtree(d, ignore_errors=True)


def _cpu_of(loop: Callable[[int], None], n: int) -> float:
    t0 = time.thread_time()
    loop(n)
    return time.thread_time() - t0
