"""pprof: a gzipped profile.proto, shaped like Go's own mutex profile, for ``go tool pprof``.

Sample types ``contentions/count`` and ``delay/nanoseconds`` (as runtime/pprof writes for
/debug/pprof/mutex), one sample per contended stack, locations leaf first. The lock's own
frames at the leaf (sync.*, internal/sync.*, runtime.*) are dropped so that ``pprof -top``
lists the function that waited for the lock first. The handful of
protobuf messages needed (Profile, ValueType, Sample, Location, Line, Function) are encoded
here by hand: varints and length-delimited fields, nothing else.
Field numbers: github.com/google/pprof/proto/profile.proto.
"""

from __future__ import annotations

import gzip

from gmpmon.events import MISSED_STACK, Header
from gmpmon.export.base import Exporter
from gmpmon.model.snapshot import Snapshot


def varint(n: int) -> bytes:
    if n < 0:
        n += 1 << 64  # int64 fields: two's complement, 10 bytes
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field_varint(num: int, value: int) -> bytes:
    return varint(num << 3) + varint(value)


def field_bytes(num: int, data: bytes) -> bytes:
    return varint(num << 3 | 2) + varint(len(data)) + data


def packed(num: int, values: list[int]) -> bytes:
    return field_bytes(num, b"".join(varint(v) for v in values))


# Leaf-side frames of the lock implementation itself. pprof -top ranks by flat (leaf) time:
# without them the leaf is the function that waited on the lock, which is what users look
# for (Go's own mutex profile has sync.(*Mutex).Unlock there instead).
LOCK_FRAME_PREFIXES = ("sync.", "internal/sync.", "runtime.")


def trim_lock_frames(stack: tuple[str, ...]) -> tuple[str, ...]:
    end = len(stack)
    while end > 1 and stack[end - 1].startswith(LOCK_FRAME_PREFIXES):
        end -= 1
    return stack[:end]


class _Strings:
    def __init__(self) -> None:
        self.index: dict[str, int] = {"": 0}
        self.table: list[str] = [""]

    def __call__(self, s: str) -> int:
        i = self.index.get(s)
        if i is None:
            i = self.index[s] = len(self.table)
            self.table.append(s)
        return i


class PprofExporter(Exporter):
    def __init__(self, header: Header) -> None:
        super().__init__(header)
        self.stacks: list[tuple[tuple[str, ...], int, int]] = []
        self.duration_ns = 0
        self.time_ns = int(header.wall_start * 1e9)

    def add(self, snapshot: Snapshot) -> None:
        for ms in snapshot.mutex_stacks:
            stack = trim_lock_frames(ms.stack or MISSED_STACK)
            self.stacks.append((stack, ms.count, ms.wait_ns))
        self.duration_ns = max(0, snapshot.now - snapshot.start)

    def profile(self) -> bytes:
        s = _Strings()
        funcs: dict[str, int] = {}
        body = bytearray()
        body += field_bytes(1, field_varint(1, s("contentions")) + field_varint(2, s("count")))
        body += field_bytes(1, field_varint(1, s("delay")) + field_varint(2, s("nanoseconds")))
        # One location per function (we have names, not PCs): id == function id.
        for stack, count, wait in self.stacks:
            ids = []
            for name in reversed(stack):  # leaf first
                fid = funcs.get(name)
                if fid is None:
                    fid = funcs[name] = len(funcs) + 1
                ids.append(fid)
            body += field_bytes(2, packed(1, ids) + packed(2, [count, wait]))
        # One mapping (the target executable) that says symbols are already resolved,
        # so pprof neither looks for the binary nor tries to symbolize addresses.
        exe = self.header.exe or "[unknown]"
        body += field_bytes(3, field_varint(1, 1) + field_varint(5, s(exe)) + field_varint(7, 1))
        for fid in funcs.values():
            line = field_varint(1, fid)
            loc = field_varint(1, fid) + field_varint(2, 1) + field_bytes(4, line)
            body += field_bytes(4, loc)
        for name, fid in funcs.items():
            body += field_bytes(
                5, field_varint(1, fid) + field_varint(2, s(name)) + field_varint(3, s(name))
            )
        # Strings are interned above; the table must come after every s() call.
        tail = bytearray()
        tail += field_varint(9, self.time_ns)
        tail += field_varint(10, self.duration_ns)
        tail += field_bytes(11, field_varint(1, s("contentions")) + field_varint(2, s("count")))
        tail += field_varint(12, 1)
        strings = b"".join(field_bytes(6, x.encode()) for x in s.table)
        return bytes(body) + strings + bytes(tail)

    def render(self) -> bytes:
        return gzip.compress(self.profile(), mtime=0)
