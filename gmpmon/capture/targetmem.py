"""Reads of the target's memory through /proc/PID/mem (pread: the target never stops).

The target is not trusted: every address and length gmpmon reads comes from the target's own
memory, which its owner may rewrite. So every read goes through :func:`check_span` first: an
address must lie in the canonical user half of x86-64/arm64 (``0 < addr``, ``addr + size <=
USER_END``) and a length must be under a cap. Anything else raises :class:`TargetMemoryError`,
gmpmon's own error, never ``OverflowError`` (what ``os.pread`` raises for an offset >= 2^63)
and never a gigabyte allocation.

Two ways to read:

* :meth:`TargetMemory.read` — one span, whole or an error (``OSError`` when the target is gone
  or the page is unmapped, ``TargetMemoryError`` when the span itself is implausible);
* :meth:`TargetMemory.readv` — many spans in few syscalls (``process_vm_readv``, up to IOV_MAX
  spans a call); a span that cannot be read, or fails :func:`check_span`, comes back as
  ``None`` instead of failing the batch. Falls back to one ``pread`` a span where
  ``process_vm_readv`` is refused (seccomp, an old kernel).

A reader meets two kinds of bad value. A structural one (``allgs``' or ``allp``'s slice
header, a count that sizes a loop) leaves it nothing to read: it stops and says why. One
element's pointer (``allgs[300]``, ``allp[0].m``) costs that element only: the reader skips
the read, counts it in its :class:`Skips` (said in the report, the summary and one line at
the end), and goes on. An unmapped page while the target still runs is such a bad value
too (:func:`unreadable`), never "the target exited".
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import itertools
import os
import select
import struct
import time
from collections.abc import Callable

from gmpmon.errors import TargetMemoryError

_Q = struct.Struct("<Q")

# The canonical user half (47-bit virtual addresses on x86-64 and arm64 without LA57/52-bit VA,
# which Go's own heap never uses): 0x0000_8000_0000_0000 is the first non-user address.
USER_END = 0x0000_8000_0000_0000
# One read never exceeds this: the largest thing gmpmon reads at once is a P array or a chunk
# of goroutine descriptors, a few MB at most.
MAX_READ = 64 << 20
_IOV_MAX = 1024
# Plausible ranges of runtime values that size a loop or an allocation (check_count).
# Each goroutine takes >= 2 KiB of stack plus its g: 2^26 of them is over 150 GB.
MAX_GOROUTINES = 1 << 26
MAX_ALLP = 1 << 20  # len(allp): GOMAXPROCS at its highest so far


def check_span(addr: int, size: int, cap: int = MAX_READ) -> None:
    """Raise :class:`TargetMemoryError` unless ``[addr, addr+size)`` is a plausible read:
    a user-space address (not null, below :data:`USER_END`) and ``0 <= size <= cap``."""
    if not 0 <= size <= cap:
        raise TargetMemoryError(
            f"refused a read of {size} bytes of the target's memory (cap {cap})",
            hint="a runtime value in the target is implausible",
        )
    if addr <= 0 or addr + size > USER_END:
        raise TargetMemoryError(
            f"refused a read of the target's memory at {addr:#x}: not a user-space address",
            hint="a runtime pointer in the target is implausible",
        )


def check_count(name: str, n: int, most: int) -> int:
    """A value read from the target that sizes a loop or an allocation: ``0 <= n <= most``."""
    if not 0 <= n <= most:
        raise TargetMemoryError(
            f"the target's {name} is {n}, outside 0..{most}",
            hint="the target's runtime state is implausible",
        )
    return n


def why(e: BaseException) -> str:
    """One line: why a read of the target's memory failed."""
    if isinstance(e, TargetMemoryError):
        return e.one_line()
    if isinstance(e, OSError):
        return f"cannot read the target's memory ({e.strerror or e}): no mapped page there"
    return f"{type(e).__name__}: {e}"


def unreadable(pid: int, what: str, e: OSError) -> TargetMemoryError:
    """An OSError reading ``what`` while process ``pid`` still runs: its page is not mapped
    (a pointer the target holds leads nowhere), which no reader may take for "the target
    exited". Re-raises ``e`` when the target is gone."""
    if not running(pid):
        raise e
    return TargetMemoryError(f"{what}: {why(e)}, though the target runs",
                             hint="a runtime pointer in the target leads nowhere")


def allp_pointers(read: Callable[[int, int], bytes], pid: int, ptr: int,
                  n: int) -> tuple[int, ...]:
    """allp's ``n`` P pointers at ``ptr`` (``read(addr, size)``: the caller's checked reader)."""
    try:
        return struct.unpack(f"<{n}Q", read(ptr, 8 * n)) if n else ()
    except OSError as e:
        raise unreadable(pid, f"allp's array at {ptr:#x}", e) from e


def why_span(addr: int, size: int) -> str:
    """Why a span that ``readv`` gave back as None was not read."""
    try:
        check_span(addr, size)
    except TargetMemoryError as e:
        return e.one_line()
    return f"cannot read the target's memory at {addr:#x}: no mapped page there"


class Skips:
    """Reads one reader skipped and went on without: how many (``n``; ``take()`` gives the
    ones since its last call) and the first one's reason. A hostile pointer in one element
    (one G, one P's M) costs that element, not the reader."""

    __slots__ = ("_taken", "first", "n")

    def __init__(self) -> None:
        self.n = 0
        self.first = ""
        self._taken = 0

    def add(self, what: str, e: BaseException | str) -> None:
        if not self.first:  # before n: another thread may take() the count meanwhile
            self.first = f"{what}: {e if isinstance(e, str) else why(e)}"
        self.n += 1

    def failed(self, pid: int, what: str, e: OSError | TargetMemoryError) -> None:
        """A read of ``what`` failed: skipped, unless it is OSError and process ``pid`` is
        gone (then ``e`` is raised: the reader's caller ends for the target's exit)."""
        if isinstance(e, OSError) and not running(pid):
            raise e
        self.add(what, e)

    def take(self) -> int:
        new, self._taken = self.n - self._taken, self.n
        return new


class _Iovec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


def _libc_vm_readv() -> object | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6", use_errno=True)
        fn = libc.process_vm_readv
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_ssize_t
    fn.argtypes = [
        ctypes.c_int, ctypes.POINTER(_Iovec), ctypes.c_ulong,
        ctypes.POINTER(_Iovec), ctypes.c_ulong, ctypes.c_ulong,
    ]
    return fn


_vm_readv = _libc_vm_readv()


class TargetMemory:
    """One open /proc/PID/mem. Every read raises OSError when the target is gone: an exited
    process's memory reads as ``b""``, not as an error, so lengths are checked here; and
    :class:`TargetMemoryError` for an address or length that is not plausible."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY)
        self.reads = 0
        self._vm_ok = _vm_readv is not None

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def read(self, addr: int, size: int, cap: int = MAX_READ) -> bytes:
        return read_fd(self._fd, addr, size, cap, self)

    def u64(self, addr: int) -> int:
        v: int = _Q.unpack(self.read(addr, 8))[0]
        return v

    def readv(self, spans: list[tuple[int, int]], cap: int = MAX_READ,
              views: bool = False) -> list[bytes | None]:
        """Read many ``(addr, size)`` spans; an unreadable or implausible one is ``None``.
        Raises OSError only when the target is gone (nothing at all could be read).
        ``views``: read-only memoryviews of one buffer per batch instead of a bytes copy
        each (for readers that only unpack them; typed bytes for their callers' sake)."""
        out: list[bytes | None] = [None] * len(spans)
        good = []
        for i, (addr, size) in enumerate(spans):
            try:
                check_span(addr, size, cap)
            except TargetMemoryError:
                continue
            good.append(i)
        if self._vm_ok:
            try:
                for k in range(0, len(good), _IOV_MAX):
                    self._vm_batch(spans, good[k : k + _IOV_MAX], out, views)
                return out
            except PermissionError:
                self._vm_ok = False  # refused here: fall back to pread for good
        for i in good:
            with contextlib.suppress(OSError):
                out[i] = self.read(*spans[i], cap)
        return out

    def _vm_batch(self, spans: list[tuple[int, int]], idx: list[int],
                  out: list[bytes | None], views: bool = False) -> None:
        # One buffer for the whole batch and both iovec arrays packed in one struct call:
        # a ctypes buffer and a cast per span cost more CPU than the syscall itself
        # (py-spy on a 100k-goroutine dump: ~40% of the dump was building iovecs).
        assert _vm_readv is not None
        while idx:
            n = len(idx)
            sizes = [spans[i][1] for i in idx]
            offs = [0, *itertools.accumulate(sizes)]
            total = offs.pop()
            buf = bytearray(max(total, 1))  # not c_char * total: a new ctypes type per size
            base = ctypes.addressof(ctypes.c_char.from_buffer(buf))
            flat = [0] * (2 * n)
            flat[1::2] = sizes
            rflat = flat[:]
            flat[0::2] = [base + o for o in offs]
            rflat[0::2] = [spans[i][0] for i in idx]
            pack = struct.Struct(f"<{2 * n}Q").pack
            local = (_Iovec * n).from_buffer_copy(pack(*flat))
            remote = (_Iovec * n).from_buffer_copy(pack(*rflat))
            self.reads += 1
            got = _vm_readv(self.pid, local, n, remote, n, 0)  # type: ignore[operator]
            if got < 0:
                e = ctypes.get_errno()
                if e in (errno.EPERM, errno.ENOSYS):
                    raise PermissionError(e, os.strerror(e))
                if e == errno.ESRCH:
                    raise ProcessLookupError(e, f"process {self.pid} is gone")
                got = 0  # EFAULT on the first span: it alone is unreadable
            raw = memoryview(buf).toreadonly()
            if got == total:  # the usual case: every span whole
                for i, o, size in zip(idx, offs, sizes, strict=True):
                    view = raw[o : o + size]
                    out[i] = view if views else view.tobytes()  # type: ignore[assignment]
                return
            # Whole iovecs are transferred in order; the first one short is unreadable (a
            # partial transfer stops there), the rest are tried again in the next call.
            j = 0
            while j < n and got >= sizes[j]:
                got -= sizes[j]
                view = raw[offs[j] : offs[j] + sizes[j]]
                out[idx[j]] = view if views else view.tobytes()  # type: ignore[assignment]
                j += 1
            idx = idx[j + 1 :]


def read_fd(fd: int, addr: int, size: int, cap: int = MAX_READ,
            counter: TargetMemory | None = None) -> bytes:
    """The one checked pread of /proc/PID/mem (for readers that hold their own fd)."""
    check_span(addr, size, cap)
    if counter is not None:
        counter.reads += 1
    b = os.pread(fd, size, addr)
    if len(b) < size:
        raise OSError(errno.EIO, f"short read of the target's memory at {addr:#x}")
    return b


def running(pid: int) -> bool:
    """The process exists and has not exited: a zombie's memory is already gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    state = stat.rfind(b")") + 2  # after "pid (comm) "; comm may hold ')'
    return stat[state : state + 1] not in (b"Z", b"X")


def exe_id(pid: int) -> tuple[int, int] | None:
    """(dev, ino) of the process's executable: an exec changes it."""
    try:
        st = os.stat(f"/proc/{pid}/exe")
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


class ExitWatch:
    """A pidfd of the process (Linux 5.3+): it polls readable once the whole thread group
    has exited (zombie or reaped), in ~1 µs; reading /proc/PID/stat, as running() does, is
    ~15 µs, and ~100 µs for gone() at 10 Hz in a capture under load (cold caches after each
    wakeup). ``maybe()`` is always True without a pidfd: callers then look as before."""

    def __init__(self, pid: int) -> None:
        self._poll: select.poll | None = None
        try:
            self._fd = os.pidfd_open(pid)
        except (OSError, AttributeError):
            self._fd = -1
            return
        self._poll = select.poll()
        self._poll.register(self._fd, select.POLLIN)

    def maybe(self) -> bool:
        """False while the process surely runs; True if it may have exited."""
        return self._poll is None or bool(self._poll.poll(0))

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
            self._poll = None


def gone(pid: int, exe: tuple[int, int] | None, exits: ExitWatch | None = None) -> str:
    """Why the process is no longer the one whose executable was ``exe`` ("" while it is):
    it exited, or it exec'd another program. A process whose exec runs on a thread other
    than its leader shows the leader as a zombie for a moment (the kernel's de_thread waits
    for it to die before the exec'ing thread takes its pid): a zombie is looked at twice more,
    20 and 100 ms on, before it counts as exited (a CI run took an exec for an exit).
    ``exits``: the process's ExitWatch; while it says the thread group lives, /proc/PID/stat
    is not read (the leader's zombie of an exec does not make its pidfd readable)."""
    if exits is None or exits.maybe():
        for pause in (0.0, 0.02, 0.1):
            if pause:
                time.sleep(pause)
            if running(pid):
                break
        else:
            return "exited"
    if exe is not None and exe_id(pid) not in (exe, None):
        return "exec'd another program"
    return ""
