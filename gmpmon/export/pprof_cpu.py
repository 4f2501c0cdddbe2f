"""pprof CPU profile from perf-event samples (``gmpmon export FILE --format pprof --what cpu``).

Shaped like Go's own CPU profile (/debug/pprof/profile): sample types ``samples/count`` and
``cpu/nanoseconds``, period ``cpu/nanoseconds`` = the CPU time one sample stands for. One
sample per (stack, goroutine, P), with string labels ``goid`` and ``p`` (``go tool pprof
-tags`` lists them; ``-tagfocus='goid=^42$'`` keeps one goroutine: a bare 42 would be read
as a numeric range), and ``where`` = "go",
"runtime (g0)", "kernel" or "not in Go" (a sample whose R14 was no goroutine carries no goid
and no P). Stacks are symbolized names (one location per function, like the mutex profile in
gmpmon/export/pprof.py, whose protobuf helpers this uses).
"""

from __future__ import annotations

import gzip

from gmpmon.events import SAMPLE_G0, SAMPLE_GO, SAMPLE_KERNEL, Header
from gmpmon.export.base import Exporter
from gmpmon.export.pprof import _Strings, field_bytes, field_varint, packed
from gmpmon.model.snapshot import Snapshot

_WHERE = {SAMPLE_GO: "go", SAMPLE_G0: "runtime (g0)", SAMPLE_KERNEL: "kernel"}


class PprofCpuExporter(Exporter):
    def __init__(self, header: Header) -> None:
        super().__init__(header)
        # (stack, goid, p, outcome, samples)
        self.samples: list[tuple[tuple[str, ...], int, int, int, int]] = []
        self.period_ns = 0
        self.duration_ns = 0
        self.time_ns = int(header.wall_start * 1e9)

    def add(self, snapshot: Snapshot) -> None:
        k = snapshot.kernel
        self.duration_ns = max(0, snapshot.now - snapshot.start)
        if k is None or k.samples.off:
            return
        self.period_ns = k.samples.period_ns
        for sid, goid, p, outcome, n in k.profile:
            stack = k.stacks.get(sid, ()) or ("[unknown stack]",)
            self.samples.append((stack, goid, p, outcome, n))

    def profile(self) -> bytes:
        s = _Strings()
        funcs: dict[str, int] = {}
        body = bytearray()
        body += field_bytes(1, field_varint(1, s("samples")) + field_varint(2, s("count")))
        body += field_bytes(1, field_varint(1, s("cpu")) + field_varint(2, s("nanoseconds")))
        for stack, goid, p, outcome, n in self.samples:
            ids = []
            for name in reversed(stack):  # leaf first
                fid = funcs.get(name)
                if fid is None:
                    fid = funcs[name] = len(funcs) + 1
                ids.append(fid)
            labels = b""
            if goid:
                labels += field_bytes(3, field_varint(1, s("goid")) + field_varint(2, s(str(goid))))
            if p >= 0:
                labels += field_bytes(3, field_varint(1, s("p")) + field_varint(2, s(f"P{p}")))
            where = _WHERE.get(outcome, "not in Go")
            labels += field_bytes(3, field_varint(1, s("where")) + field_varint(2, s(where)))
            body += field_bytes(2, packed(1, ids) + packed(2, [n, n * self.period_ns]) + labels)
        exe = self.header.exe or "[unknown]"
        body += field_bytes(3, field_varint(1, 1) + field_varint(5, s(exe)) + field_varint(7, 1))
        for fid in funcs.values():
            line = field_varint(1, fid)
            body += field_bytes(4, field_varint(1, fid) + field_varint(2, 1) + field_bytes(4, line))
        for name, fid in funcs.items():
            body += field_bytes(
                5, field_varint(1, fid) + field_varint(2, s(name)) + field_varint(3, s(name))
            )
        tail = bytearray()
        tail += field_varint(9, self.time_ns)
        tail += field_varint(10, self.duration_ns)
        tail += field_bytes(11, field_varint(1, s("cpu")) + field_varint(2, s("nanoseconds")))
        tail += field_varint(12, self.period_ns)
        strings = b"".join(field_bytes(6, x.encode()) for x in s.table)
        return bytes(body) + strings + bytes(tail)

    def render(self) -> bytes:
        return gzip.compress(self.profile(), mtime=0)
