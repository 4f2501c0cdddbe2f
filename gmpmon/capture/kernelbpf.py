"""What the two kernel sources (perf-event samples, raw tracepoints) share: compiling one of
their probes/*.bpf.c files, reading a `counters` table as deltas, and the `lost` count.

Each source is its own BPF object (its own maps and programs), separate from the uprobe
program in gmpmon/capture/bpfprog.py, so either can be loaded, turned off or benchmarked
alone. Like bpfprog, this module is one of the few that know BCC.
"""

from __future__ import annotations

import os
from typing import Any

from gmpmon._bcc import (
    captured_output,
    first_compile_error,
    header_dir,
    headers_present,
)
from gmpmon.capture import bpfobj
from gmpmon.capture.bpfprog import PROBE_DIR, CounterTable, decode_counter_key
from gmpmon.capture.bpfsys import PerCpuU64Array
from gmpmon.errors import KernelHeadersError, KernelSupportError, PermissionDenied
from gmpmon.events import EventTuple, Kind


def compile_program(src: str | tuple[str, ...], defs: dict[str, int]) -> Any:
    """probes/`src` with `defs` as -D flags, compiled by BCC or loaded from the cache
    (gmpmon/capture/bpfobj.py). Headers are checked first (libbcc
    segfaults without them); BCC's own prints on fds 1 and 2 are caught and folded into one
    line (HACKING.md).

    Several files are compiled as one object (one compile: seconds saved, and BCC crashes
    compiling two programs at once): their texts are concatenated, each after a #line
    marker so that errors still name the file. (An #include of one .c from another does not
    work: BCC only turns functions of the main file into programs.)"""
    if os.geteuid() != 0:
        raise PermissionDenied("loading BPF programs needs root", hint="run with sudo")
    hdr, origin = header_dir()
    if not headers_present(hdr, origin):
        raise KernelHeadersError(
            f"no kernel headers to compile {src} against: {hdr} has no include/",
            hint="apt-get install linux-headers-$(uname -r), or run scripts/setup",
        )
    flags = [f"-I{PROBE_DIR}", *(f"-D{k}={v}" for k, v in defs.items())]
    srcs = ("kernel_common.bpf.c", *((src,) if isinstance(src, str) else src))
    text = "".join(f"/* ---- {s} ---- */\n" + (PROBE_DIR / s).read_text() + "\n" for s in srcs)
    src = "+".join(srcs[1:])
    with captured_output() as lines:
        try:
            return bpfobj.build(text.encode(), flags, str(PROBE_DIR), hdr)
        except Exception as e:  # BCC raises bare Exceptions for compile/load failures
            err: Exception = e
    why = first_compile_error(lines) or str(err).splitlines()[0]
    raise KernelSupportError(f"cannot load {src}: {why}", hint="run `gmpmon doctor`") from err


class CounterReader:
    """Deltas of one program's `counters` hash (GM_COUNTER_KEY keys) and of its loss arrays
    (`lost`: sample records the ring buffer dropped; `ctr_full`: counter updates that found
    the table full)."""

    def __init__(self, bpf: Any) -> None:
        self.bpf = bpf
        self._prev: dict[int, int] = {}
        self._prev_lost = 0
        names = (b"lost", b"ctr_full")
        self._loss = [PerCpuU64Array(bpf[n].map_fd) for n in names
                      if n in getattr(bpf, "tables", {}) or _has(bpf, n)]
        self._counters = CounterTable(bpf[b"counters"])

    def totals(self) -> dict[int, int]:
        return dict(self._counters.items())

    def deltas(self) -> list[tuple[int, int, int, int]]:
        """(table, p, key, delta) for every counter that grew since the last call."""
        out = []
        prev = self._prev
        for k, v in self.totals().items():
            d = v - prev.get(k, 0)
            if d:
                prev[k] = v
                out.append((*decode_counter_key(k), d))
        return out

    def lost_delta(self) -> int:
        total = sum(a.total(0) for a in self._loss)
        d = total - self._prev_lost
        self._prev_lost = total
        return d

    def emit(self, now: int, out: list[EventTuple]) -> list[tuple[int, int, int, int]]:
        """Append COUNTER deltas and a LOST to ``out``; returns the deltas."""
        deltas = self.deltas()
        for table, p, key, delta in deltas:
            out.append((now, Kind.COUNTER, p, 0, table, key, delta))
        lost = self.lost_delta()
        if lost:
            out.append((now, Kind.LOST, -1, 0, 0, lost, 0))
        return deltas


def _has(bpf: Any, name: bytes) -> bool:
    try:
        bpf[name]
    except Exception:  # BCC raises KeyError or a bare Exception for an unknown map
        return False
    return True
