"""BPF maps and attach calls for objects loaded from the cache, without libbcc's compiler.

BCC's Python module loads libbcc.so, which links LLVM and clang: ~53 MB of resident pages
(relocations, static initialisers) mapped in gmpmon for its whole run, even when every
object comes from the cache and nothing is compiled. What the long-lived process needs of
BCC is small: a map's fd, its key and value types, element lookups, updates, deletes and
iteration (bpf(2)), and the attach calls for uprobes, perf events and raw tracepoints. The
latter come from libbcc_bpf.so (BCC's own libbpf-side library, the same functions libbcc
exports, without LLVM); the map types are decoded from BCC's JSON descriptions kept in each
cache entry, as BCC's ``BPF._decode_table_type`` does.
"""

from __future__ import annotations

import ctypes as ct
import errno
from collections.abc import Iterator
from functools import cache
from typing import Any

from gmpmon.capture import bpfsys
from gmpmon.capture.bpfsys import ATTR_SIZE, BPF_MAP_LOOKUP_ELEM, BPF_MAP_UPDATE_ELEM
from gmpmon.errors import KernelSupportError

BPF_MAP_DELETE_ELEM = 3
BPF_MAP_GET_NEXT_KEY = 4
# BCC's BPF.<TYPE> program types
KPROBE = 2
PERF_EVENT = 7
RAW_TRACEPOINT = 17
# map types
HASH, ARRAY, PERCPU_HASH, PERCPU_ARRAY, STACK_TRACE, LRU_HASH, RINGBUF = 1, 2, 5, 6, 7, 9, 27

_CTYPES: dict[str, Any] = {
    "_Bool": ct.c_bool, "char": ct.c_char, "wchar_t": ct.c_wchar, "unsigned char": ct.c_ubyte,
    "short": ct.c_short, "unsigned short": ct.c_ushort, "int": ct.c_int,
    "unsigned int": ct.c_uint, "long": ct.c_long, "unsigned long": ct.c_ulong,
    "long long": ct.c_longlong, "unsigned long long": ct.c_ulonglong, "float": ct.c_float,
    "double": ct.c_double, "long double": ct.c_longdouble,
    "__int128": ct.c_int64 * 2, "unsigned __int128": ct.c_uint64 * 2,
}


def decode_type(desc: Any) -> Any:
    """The ctypes type of BCC's JSON type description (bcc/__init__.py _decode_table_type):
    a scalar's name, or [name, fields, "struct" | "struct_packed" | "union"] where a field
    is [name, type], [name, type, [n]] (an array), [name, type, bits] or a nested type."""
    if isinstance(desc, str):
        try:
            return _CTYPES[desc]
        except KeyError:
            raise KernelSupportError(f"BPF map type {desc!r} is not supported here") from None
    anon: list[str] = []
    fields: list[tuple[Any, ...]] = []
    for t in desc[1]:
        if len(t) == 2:
            fields.append((t[0], decode_type(t[1])))
        elif len(t) == 3 and isinstance(t[2], list):
            fields.append((t[0], decode_type(t[1]) * t[2][0]))
        elif len(t) == 3 and isinstance(t[2], int):
            fields.append((t[0], decode_type(t[1]), t[2]))
        elif len(t) == 3 and t[2] in ("union", "struct", "struct_packed"):
            name = t[0] or f"__anon{len(anon)}"
            if not t[0]:
                anon.append(name)
            fields.append((name, decode_type(t)))
        else:
            raise KernelSupportError(f"BPF map field {t!r} cannot be decoded")
    kind = desc[2] if len(desc) > 2 else "struct"
    base = ct.Union if kind == "union" else ct.Structure
    ns: dict[str, Any] = {"_anonymous_": anon, "_fields_": fields}
    if kind == "struct_packed":
        ns["_pack_"] = 1
    return type(str(desc[0]), (base,), ns)


class Table:
    """One map by its fd: BCC's table interface as gmpmon uses it (``map_fd``, ``Key``,
    ``Leaf``, ``t[key]``, ``t[key] = v``, ``del t[key]``, ``items()``, ``walk(id)``). A
    per-CPU map's ``Leaf`` is an array of one value per possible CPU, as in BCC."""

    def __init__(self, name: str, map_type: int, fd: int, key: Any, leaf: Any) -> None:
        self.name, self.ttype, self.map_fd = name, map_type, fd
        self.Key = key
        self.Leaf = leaf
        if map_type in (PERCPU_ARRAY, PERCPU_HASH):
            if ct.sizeof(leaf) % 8 == 0:
                self.Leaf = leaf * bpfsys.possible_cpus()
            elif leaf in (ct.c_uint, ct.c_int):
                wide = ct.c_uint64 if leaf is ct.c_uint else ct.c_int64
                self.Leaf = wide * bpfsys.possible_cpus()
            else:
                raise KernelSupportError(f"map {name}: per-CPU value not 8-byte aligned")

    def _call(self, cmd: int, key: Any, value: Any = None, flags: int = 0) -> int:
        attr = ct.create_string_buffer(ATTR_SIZE)
        ct.c_uint32.from_buffer(attr, 0).value = self.map_fd
        ct.c_uint64.from_buffer(attr, 8).value = ct.addressof(key)
        if value is not None:
            ct.c_uint64.from_buffer(attr, 16).value = ct.addressof(value)
        ct.c_uint64.from_buffer(attr, 24).value = flags
        return bpfsys.bpf_call(cmd, attr)

    def _key(self, key: Any) -> Any:
        return key if isinstance(key, self.Key) else self.Key(key)

    def __getitem__(self, key: Any) -> Any:
        leaf = self.Leaf()
        try:
            self._call(BPF_MAP_LOOKUP_ELEM, self._key(key), leaf)
        except OSError as e:
            raise KeyError(key) from e
        return leaf

    def __setitem__(self, key: Any, leaf: Any) -> None:
        self._call(BPF_MAP_UPDATE_ELEM, self._key(key), leaf)

    def __delitem__(self, key: Any) -> None:
        try:
            self._call(BPF_MAP_DELETE_ELEM, self._key(key))
        except OSError as e:
            raise KeyError(key) from e

    def __iter__(self) -> Iterator[Any]:
        """Its keys, as iterating a BCC table gives them (without this, ``for k in t`` falls
        back to ``t[0]``, ``t[1]``... and stops at the first missing key with a KeyError)."""
        return iter(self.keys())

    def keys(self) -> list[Any]:
        """Every key (BPF_MAP_GET_NEXT_KEY from none: the first key, then each next)."""
        out: list[Any] = []
        attr = ct.create_string_buffer(ATTR_SIZE)
        ct.c_uint32.from_buffer(attr, 0).value = self.map_fd
        while True:
            nxt = self.Key()
            ct.c_uint64.from_buffer(attr, 8).value = ct.addressof(out[-1]) if out else 0
            ct.c_uint64.from_buffer(attr, 16).value = ct.addressof(nxt)
            try:
                bpfsys.bpf_call(BPF_MAP_GET_NEXT_KEY, attr)
            except OSError as e:
                if e.errno == errno.ENOENT:
                    return out
                raise
            out.append(nxt)

    def items(self) -> list[tuple[Any, Any]]:
        out = []
        for k in self.keys():
            try:
                out.append((k, self[k]))
            except KeyError:
                continue  # deleted since the walk saw it
        return out

    def walk(self, stack_id: int) -> list[int]:
        """A BPF_STACK_TRACE entry's pcs, up to the first 0."""
        pcs = list(self[ct.c_int(stack_id)].ip)
        return pcs[: pcs.index(0)] if 0 in pcs else pcs


@cache
def lib() -> Any:
    """libbcc_bpf.so: BCC's attach calls, without its compiler (libbcc.so links LLVM)."""
    try:
        so = ct.CDLL("libbcc_bpf.so.0", use_errno=True)
    except OSError as e:
        raise KernelSupportError("libbcc_bpf.so.0 is not loadable",
                                 hint="apt-get install libbpfcc") from e
    so.bpf_attach_uprobe.restype = ct.c_int
    so.bpf_attach_uprobe.argtypes = [ct.c_int, ct.c_int, ct.c_char_p, ct.c_char_p,
                                     ct.c_uint64, ct.c_int]
    so.bpf_attach_perf_event.restype = ct.c_int
    so.bpf_attach_perf_event.argtypes = [ct.c_int, ct.c_uint32, ct.c_uint32, ct.c_uint64,
                                         ct.c_uint64, ct.c_int, ct.c_int, ct.c_int]
    so.bpf_close_perf_event_fd.restype = ct.c_int
    so.bpf_close_perf_event_fd.argtypes = [ct.c_int]
    so.bpf_attach_raw_tracepoint.restype = ct.c_int
    so.bpf_attach_raw_tracepoint.argtypes = [ct.c_int, ct.c_char_p]
    return so


def online_cpus() -> list[int]:
    with open("/sys/devices/system/cpu/online") as f:
        spec = f.read().strip()
    out: list[int] = []
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        out += range(int(lo), int(hi or lo) + 1)
    return out

