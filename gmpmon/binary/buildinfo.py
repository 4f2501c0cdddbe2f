"""The Go version from `.go.buildinfo` (present even in `-s -w` builds).

Layout (debug/buildinfo/buildinfo.go): 16 bytes "\\xff Go buildinf:", then ptrSize (u8) and
flags (u8). With ``flags & 2`` (Go 1.18+) the version and modinfo follow at offset 32 as
varint-length-prefixed strings; before that, offsets 16 and 16+ptrSize hold pointers to Go
string headers.
"""

from __future__ import annotations

import re
import struct

from gmpmon.binary.elf import Elf
from gmpmon.errors import BinaryFormatError

BUILDINFO_MAGIC = b"\xff Go buildinf:"
# The version comes first (then the module list, which can be long): this much is read at most,
# whatever the section header claims.
MAX_BUILDINFO_READ = 64 << 10
_VERSION_RE = re.compile(r"go1\.(\d+)(?:\.(\d+)|rc\d+|beta\d+)?")


def read_buildinfo_version(elf: Elf) -> str | None:
    """The version string ("go1.27.3"), or None when the binary has no build info."""
    data = elf.section_data(".go.buildinfo", MAX_BUILDINFO_READ)
    if data is None:
        return None
    if len(data) < 32 or not data.startswith(BUILDINFO_MAGIC):
        raise BinaryFormatError(f"{elf.path}: .go.buildinfo has a bad header")
    ptr_size, flags = data[14], data[15]
    if flags & 2:
        version, _ = _varint_string(data, 32, elf.path)
        return version
    if ptr_size != 8:
        raise BinaryFormatError(f"{elf.path}: .go.buildinfo pointer size {ptr_size}")
    (vptr,) = struct.unpack_from("<Q", data, 16)
    ptr, length = struct.unpack("<QQ", elf.read_vaddr(vptr, 16))
    if length > 256:
        raise BinaryFormatError(f"{elf.path}: .go.buildinfo version string is {length} bytes")
    return elf.read_vaddr(ptr, length).decode("utf-8", "replace")


def _varint_string(data: bytes, off: int, path: str) -> tuple[str, int]:
    n = shift = 0
    while True:
        if off >= len(data) or shift > 63:
            raise BinaryFormatError(f"{path}: .go.buildinfo truncated")
        b = data[off]
        off += 1
        n |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            break
    if off + n > len(data):
        raise BinaryFormatError(f"{path}: .go.buildinfo truncated")
    return data[off : off + n].decode("utf-8", "replace"), off + n


def go_minor(version: str) -> int | None:
    """27 for "go1.27.3" (also "go1.27rc1", "devel go1.28-abc..."), None if unparsable."""
    m = _VERSION_RE.search(version)
    return int(m.group(1)) if m else None
