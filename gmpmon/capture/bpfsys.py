"""The few bpf(2) commands the hot-probe controller needs, by raw syscall (no BCC): the
controller runs in its own small process, which must start fast and never import a compiler.

Layouts are ``union bpf_attr`` from include/uapi/linux/bpf.h (Linux 6.6+ for uprobe_multi).
"""

from __future__ import annotations

import ctypes as ct
import errno
import os
from collections.abc import Iterator
from typing import Any

_libc = ct.CDLL(None, use_errno=True)
SYS_BPF = 321  # x86_64
BPF_MAP_LOOKUP_ELEM = 1
BPF_MAP_UPDATE_ELEM = 2
BPF_PROG_LOAD = 5
BPF_MAP_LOOKUP_BATCH = 24
BPF_LINK_CREATE = 28
BPF_ENABLE_STATS = 32
BPF_PROG_TYPE_KPROBE = 2
BPF_TRACE_UPROBE_MULTI = 48
BPF_STATS_RUN_TIME = 0
ATTR_SIZE = 128


def bpf_call(cmd: int, attr: ct.Array[ct.c_char]) -> int:
    r = int(_libc.syscall(SYS_BPF, cmd, attr, ATTR_SIZE))
    if r < 0:
        err = ct.get_errno()
        raise OSError(err, f"bpf({cmd}): {os.strerror(err)}")
    return r


def link_uprobe_multi(prog_fd: int, path: str, offsets: list[int], cookies: list[int]) -> int:
    """One BPF_TRACE_UPROBE_MULTI link: every offset of ``path``, for every process."""
    n = len(offsets)
    cpath = ct.create_string_buffer(path.encode())
    offs = (ct.c_uint64 * n)(*offsets)
    cks = (ct.c_uint64 * n)(*cookies)
    attr = ct.create_string_buffer(ATTR_SIZE)
    ct.c_uint32.from_buffer(attr, 0).value = prog_fd
    ct.c_uint32.from_buffer(attr, 8).value = BPF_TRACE_UPROBE_MULTI
    ct.c_uint64.from_buffer(attr, 16).value = ct.addressof(cpath)
    ct.c_uint64.from_buffer(attr, 24).value = ct.addressof(offs)
    ct.c_uint64.from_buffer(attr, 40).value = ct.addressof(cks)
    ct.c_uint32.from_buffer(attr, 48).value = n
    return bpf_call(BPF_LINK_CREATE, attr)


def load_noop_prog() -> int:
    """A uprobe_multi program that does nothing (``r0 = 0; exit``): what one trap costs by
    itself, for calibration."""
    insns = (ct.c_uint64 * 2)(0x00000000000000B7, 0x0000000000000095)  # mov64 r0,0 ; exit
    lic = ct.create_string_buffer(b"GPL")
    attr = ct.create_string_buffer(ATTR_SIZE)
    ct.c_uint32.from_buffer(attr, 0).value = BPF_PROG_TYPE_KPROBE
    ct.c_uint32.from_buffer(attr, 4).value = 2
    ct.c_uint64.from_buffer(attr, 8).value = ct.addressof(insns)
    ct.c_uint64.from_buffer(attr, 16).value = ct.addressof(lic)
    ct.c_uint32.from_buffer(attr, 68).value = BPF_TRACE_UPROBE_MULTI  # expected_attach_type
    return bpf_call(BPF_PROG_LOAD, attr)


def enable_run_time_stats() -> int:
    """BPF_ENABLE_STATS: the kernel times every BPF program run while this fd is open
    (reference counted, undone when the fd closes; no sysctl is changed)."""
    attr = ct.create_string_buffer(ATTR_SIZE)
    ct.c_uint32.from_buffer(attr, 0).value = BPF_STATS_RUN_TIME
    return bpf_call(BPF_ENABLE_STATS, attr)


def prog_run_stats(prog_fd: int) -> tuple[int, int] | None:
    """(run_time_ns, run_cnt) of a program, from /proc/self/fdinfo; None if not shown."""
    try:
        with open(f"/proc/self/fdinfo/{prog_fd}") as f:
            text = f.read()
    except OSError:
        return None
    vals: dict[str, int] = {}
    for line in text.splitlines():
        k, _, v = line.partition(":")
        if k in ("run_time_ns", "run_cnt"):
            vals[k] = int(v)
    if len(vals) != 2:
        return None
    return vals["run_time_ns"], vals["run_cnt"]


def possible_cpus() -> int:
    """Per-CPU maps hold one value per *possible* CPU (e.g. "0-3" -> 4)."""
    with open("/sys/devices/system/cpu/possible") as f:
        spec = f.read().strip()
    n = 0
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        n += (int(hi) if hi else int(lo)) - int(lo) + 1
    return n


class PerCpuU64Array:
    """Lookups in a BPF_PERCPU_ARRAY of u64 (the `hits` counters): the sum over CPUs."""

    def __init__(self, map_fd: int) -> None:
        self.fd = map_fd
        self.ncpu = possible_cpus()
        self._key = ct.c_uint32(0)
        self._val = (ct.c_uint64 * self.ncpu)()
        self._attr = ct.create_string_buffer(ATTR_SIZE)
        ct.c_uint32.from_buffer(self._attr, 0).value = map_fd
        ct.c_uint64.from_buffer(self._attr, 8).value = ct.addressof(self._key)
        ct.c_uint64.from_buffer(self._attr, 16).value = ct.addressof(self._val)
        self._batch: tuple[int, Any, Any, Any, Any] | None = None  # totals()' buffers
        self._batch_ok = True

    def total(self, index: int) -> int:
        self._key.value = index
        bpf_call(BPF_MAP_LOOKUP_ELEM, self._attr)
        return int(sum(self._val))

    def totals(self, n: int) -> list[int]:
        """The sums of entries 0..n-1: one BPF_MAP_LOOKUP_BATCH (n lookups where the
        kernel has no batch ops for arrays)."""
        if self._batch is None or self._batch[0] < n:
            keys = (ct.c_uint32 * n)()
            vals = (ct.c_uint64 * (n * self.ncpu))()
            attr = ct.create_string_buffer(ATTR_SIZE)
            ct.c_uint64.from_buffer(attr, 16).value = ct.addressof(keys)
            ct.c_uint64.from_buffer(attr, 24).value = ct.addressof(vals)
            ct.c_uint32.from_buffer(attr, 36).value = self.fd
            self._batch = (n, keys, vals, attr, (ct.c_uint32 * 1)())
        _n, _keys, vals, attr, token = self._batch
        if self._batch_ok:
            ct.c_uint64.from_buffer(attr, 8).value = ct.addressof(token)  # out_batch
            ct.c_uint32.from_buffer(attr, 32).value = n
            r = int(_libc.syscall(SYS_BPF, BPF_MAP_LOOKUP_BATCH, attr, ATTR_SIZE))
            if r == 0 and ct.c_uint32.from_buffer(attr, 32).value == n:
                flat = vals[: n * self.ncpu]
                c = self.ncpu
                return [sum(flat[i * c : (i + 1) * c]) for i in range(n)]
            self._batch_ok = False  # no batch ops for arrays here (or a short answer)
        return [self.total(i) for i in range(n)]


class U64Hash:
    """Every (key, value) of a BPF_HASH of u64 -> u64 (the `counters` tables), by
    BPF_MAP_LOOKUP_BATCH into buffers kept between calls. BCC's items_lookup_batch allocates
    and zeroes arrays of max_entries keys and values at every call (2 x 256 KiB for a
    32,768-entry hash, ten times a second): most of what reading a few counters cost.
    Raises OSError (EINVAL, ENOTSUPP) where the kernel has no batch ops for the map."""

    CHUNK = 1024

    def __init__(self, map_fd: int) -> None:
        self._keys = (ct.c_uint64 * self.CHUNK)()
        self._vals = (ct.c_uint64 * self.CHUNK)()
        self._token = (ct.c_uint64 * 2)()  # in_batch, out_batch (a u32 bucket for a hash)
        self._attr = ct.create_string_buffer(ATTR_SIZE)
        ct.c_uint64.from_buffer(self._attr, 16).value = ct.addressof(self._keys)
        ct.c_uint64.from_buffer(self._attr, 24).value = ct.addressof(self._vals)
        ct.c_uint32.from_buffer(self._attr, 36).value = map_fd

    def items(self) -> list[tuple[int, int]]:
        """In the kernel's bucket order (the order BCC's batch lookup yields)."""
        out: list[tuple[int, int]] = []
        for n in _lookup_batches(self._attr, self._token, self.CHUNK):
            out += zip(self._keys[:n], self._vals[:n], strict=True)
        return out


def _lookup_batches(attr: ct.Array[ct.c_char], token: ct.Array[ct.c_uint64],
                    chunk: int) -> Iterator[int]:
    """BPF_MAP_LOOKUP_BATCH over a whole hash, ``chunk`` rows a call, into the key and value
    buffers ``attr`` points at (set up by the caller, with the map's fd): yields the rows
    each call left there, to be read before the next."""
    in_batch = ct.c_uint64.from_buffer(attr, 0)
    count = ct.c_uint32.from_buffer(attr, 32)
    in_batch.value = 0  # NULL: from the first bucket
    ct.c_uint64.from_buffer(attr, 8).value = ct.addressof(token) + 8
    while True:
        count.value = chunk
        r = int(_libc.syscall(SYS_BPF, BPF_MAP_LOOKUP_BATCH, attr, ATTR_SIZE))
        err = ct.get_errno() if r < 0 else 0
        if count.value:
            yield count.value
        if r < 0:
            if err == errno.ENOENT:  # no more buckets
                return
            raise OSError(err, f"bpf(BPF_MAP_LOOKUP_BATCH): {os.strerror(err)}")
        token[0] = token[1]
        in_batch.value = ct.addressof(token)


class RawHash:
    """Every (key, value) of a BPF_HASH as raw bytes (fixed sizes), by BPF_MAP_LOOKUP_BATCH
    into buffers kept between calls, as U64Hash: the `wait_rows` hash of struct keys.
    Raises OSError where the kernel has no batch ops for the map."""

    CHUNK = 256

    def __init__(self, map_fd: int, key_size: int, value_size: int) -> None:
        self.key_size, self.value_size = key_size, value_size
        self._keys = ct.create_string_buffer(key_size * self.CHUNK)
        self._vals = ct.create_string_buffer(value_size * self.CHUNK)
        self._token = (ct.c_uint64 * 2)()
        self._attr = ct.create_string_buffer(ATTR_SIZE)
        ct.c_uint64.from_buffer(self._attr, 16).value = ct.addressof(self._keys)
        ct.c_uint64.from_buffer(self._attr, 24).value = ct.addressof(self._vals)
        ct.c_uint32.from_buffer(self._attr, 36).value = map_fd

    def items(self) -> tuple[bytes, bytes]:
        """(keys, values), each the rows' bytes end to end, in the kernel's bucket order."""
        keys: list[bytes] = []
        vals: list[bytes] = []
        for n in _lookup_batches(self._attr, self._token, self.CHUNK):
            keys.append(self._keys.raw[: n * self.key_size])
            vals.append(self._vals.raw[: n * self.value_size])
        return b"".join(keys), b"".join(vals)


class StackMap:
    """Lookups in a BPF_STACK_TRACE map: the pcs of one stack id, leaf first (BCC's walk
    goes through a Python generator and a ctypes access per frame: ~40 µs a stack)."""

    def __init__(self, map_fd: int, value_size: int) -> None:
        self._key = ct.c_uint32(0)
        self._val = (ct.c_uint64 * (value_size // 8))()
        self._words = memoryview(self._val).cast("B").cast("Q")  # tolist() at C speed
        self._attr = ct.create_string_buffer(ATTR_SIZE)
        ct.c_uint32.from_buffer(self._attr, 0).value = map_fd
        ct.c_uint64.from_buffer(self._attr, 8).value = ct.addressof(self._key)
        ct.c_uint64.from_buffer(self._attr, 16).value = ct.addressof(self._val)

    def pcs(self, stack_id: int) -> list[int]:
        """The stack's pcs up to the first 0; [] for an id the map does not hold."""
        self._key.value = stack_id
        if int(_libc.syscall(SYS_BPF, BPF_MAP_LOOKUP_ELEM, self._attr, ATTR_SIZE)) < 0:
            return []
        pcs: list[int] = self._words.tolist()
        try:
            return pcs[: pcs.index(0)]
        except ValueError:
            return pcs


def array_set_u32(map_fd: int, index: int, value: int) -> None:
    """cfg[index] = value in a BPF_ARRAY of u32."""
    key = ct.c_uint32(index)
    val = ct.c_uint32(value)
    attr = ct.create_string_buffer(ATTR_SIZE)
    ct.c_uint32.from_buffer(attr, 0).value = map_fd
    ct.c_uint64.from_buffer(attr, 8).value = ct.addressof(key)
    ct.c_uint64.from_buffer(attr, 16).value = ct.addressof(val)
    bpf_call(BPF_MAP_UPDATE_ELEM, attr)
