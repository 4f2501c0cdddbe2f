"""Source "tracepoints": kernel raw tracepoints on the target's threads (probes/tracepoints.bpf.c),
attached by name (bpf_raw_tracepoint_open: no tracefs).

Two groups, attached separately so each can be measured and chosen alone:

- ``sched``: sched_switch, sched_wakeup, sched_wakeup_new, sched_process_exit. Each M's
  on-CPU and off-CPU time, voluntary/involuntary switches, and its kernel run-queue delay
  (runnable -> on a CPU): CPU contention from outside Go.
- ``syscalls``: sys_enter, sys_exit. Syscalls by thread, number and duration, attributed to
  the P and G that made them. The kernel takes its syscall-tracepoint slow path for every task
  while these are attached, so they cost every syscall of the target something: opt-in.

Everything is aggregated in the kernel; this module turns the `counters` table into COUNTER
deltas (tables gmpmon.events.Counter.M_* / RUNQ_LAT / SYS_*), 10 times a second.
"""

from __future__ import annotations

import contextlib
import ctypes as ct
from typing import Any

from gmpmon.binary.info import BinaryInfo
from gmpmon.capture.kernelbpf import CounterReader, compile_program
from gmpmon.errors import CaptureError, UnsupportedError
from gmpmon.events import (
    LAT_BUCKETS,
    M_SW_INVOLUNTARY,
    M_SW_RUNQ,
    M_SW_VOLUNTARY,
    Counter,
    EventTuple,
    Kind,
)

GROUPS: dict[str, tuple[str, ...]] = {
    "sched": ("sched_switch", "sched_wakeup", "sched_wakeup_new", "sched_process_exit"),
    "syscalls": ("sys_enter", "sys_exit"),
}
_FIELDS = {
    "G_M": "runtime.g.m",
    "G_GOID": "runtime.g.goid",
    "M_G0": "runtime.m.g0",
    "M_CURG": "runtime.m.curg",
    "M_PROCID": "runtime.m.procid",
    "M_P": "runtime.m.p",
    "M_OLDP": "runtime.m.oldp",
    "P_ID": "runtime.p.id",
}


# gm_thr totals in order, as (Counter table, M_SW_* key kind or None for key = tid)
_THR_FIELDS = (
    (Counter.M_ONCPU_NS, None),
    (Counter.M_OFFCPU_NS, None),
    (Counter.M_RUNQ_NS, None),
    (Counter.M_SWITCHES, M_SW_RUNQ),
    (Counter.M_SWITCHES, M_SW_VOLUNTARY),
    (Counter.M_SWITCHES, M_SW_INVOLUNTARY),
)


def _thr_totals(v: Any) -> tuple[int, ...]:
    return (v.on_ns, v.off_ns, v.runq_ns, v.runq_n, v.vol, v.invol)


def _items(table: Any) -> list[tuple[Any, Any]]:
    try:
        return list(table.items_lookup_batch())
    except Exception:  # kernels without batch ops: BCC raises a bare Exception
        return list(table.items())


def _drain(table: Any) -> list[Any]:
    """Every value of ``table``, each entry deleted as it is read (one syscall where the
    kernel has batch ops). BCC's batch calls yield plain ints for scalar keys, never
    ctypes keys, so nothing here indexes the table by a key the batch returned."""
    try:
        return [v for _k, v in table.items_lookup_and_delete_batch()]
    except Exception:  # kernels without batch ops: BCC raises a bare Exception
        out = []
        for k, v in list(table.items()):
            out.append(v)
            with contextlib.suppress(KeyError):
                del table[k]
        return out


def tracepoint_defs(info: BinaryInfo, tgid: int) -> dict[str, int]:
    defs = {"TGID": tgid}
    for flag, key in _FIELDS.items():
        if key not in info.offsets:
            raise UnsupportedError(f"no offset for {key} in {info.path}: no tracepoints")
        defs[flag] = info.offsets[key]
    return defs


class Tracepoints:
    """The raw-tracepoint source of one target. ``start(groups)``, then ``read_counters()``."""

    def __init__(self, info: BinaryInfo, pid: int) -> None:
        self.info = info
        self.pid = pid
        self.defs = tracepoint_defs(info, pid)
        self.bpf: Any = None
        self.counters: CounterReader | None = None
        self.groups: list[str] = []
        self._own = True
        self._thr_prev: dict[int, tuple[int, ...]] = {}  # tid -> totals already sent
        self._hist_prev = [0] * LAT_BUCKETS

    def start(self, groups: tuple[str, ...] = ("sched",), bpf: Any = None) -> None:
        """Attach ``groups``; ``bpf``: an already compiled object holding tracepoints.bpf.c
        (gmpmon/capture/kernelsources.py), else tracepoints.bpf.c is compiled here alone."""
        for g in groups:
            if g not in GROUPS:
                raise CaptureError(f"unknown tracepoint group {g!r} (known: {', '.join(GROUPS)})")
        self._own = bpf is None
        self.bpf = compile_program("tracepoints.bpf.c", self.defs) if bpf is None else bpf
        if self._own:
            self.counters = CounterReader(self.bpf)
        try:
            for g in groups:
                self.attach(g)
        except BaseException:
            self.close()
            raise

    def attach(self, group: str) -> None:
        if group in self.groups or self.bpf is None:
            return
        done = []
        try:
            for tp in GROUPS[group]:
                self.bpf.attach_raw_tracepoint(tp=tp.encode(), fn_name=f"gmpmon_{tp}".encode())
                done.append(tp)
        except Exception as e:
            for tp in done:
                self.bpf.detach_raw_tracepoint(tp=tp.encode())
            raise CaptureError(f"cannot attach raw tracepoint {GROUPS[group][len(done)]}: {e}",
                               hint="needs BPF raw tracepoints (Linux >= 4.17)") from e
        self.groups.append(group)

    def detach(self, group: str) -> None:
        if group not in self.groups:
            return
        for tp in GROUPS[group]:
            self.bpf.detach_raw_tracepoint(tp=tp.encode())
        self.groups.remove(group)

    def close(self) -> None:
        if self.bpf is not None:
            for g in list(self.groups):
                self.detach(g)
            if self._own:
                self.bpf.cleanup()
            self.bpf = None

    def read_counters(self, now: int, out: list[EventTuple]) -> None:
        """COUNTER deltas: the sched totals, and (own object only) the `counters` table."""
        if self.counters is not None:
            self.counters.emit(now, out)
        self.sched_deltas(now, out)

    def sched_deltas(self, now: int, out: list[EventTuple]) -> None:
        """The per-thread totals (`ours`, `dead`) and the run-queue histogram as COUNTER
        deltas of M_ONCPU_NS, M_OFFCPU_NS, M_RUNQ_NS, M_SWITCHES and RUNQ_LAT."""
        if self.bpf is None or ("sched" not in self.groups and not self._thr_prev):
            return
        totals: dict[int, tuple[int, ...]] = {}
        for _k, v in _items(self.bpf[b"ours"]):
            totals[v.tid] = _thr_totals(v)
        gone = []
        for v in _drain(self.bpf[b"dead"]):
            totals[v.tid] = _thr_totals(v)
            gone.append(v.tid)
        for tid, tot in totals.items():
            prev = self._thr_prev.get(tid, (0,) * len(tot))
            for (table, sw), a, b in zip(_THR_FIELDS, tot, prev, strict=True):
                if a > b:
                    key = tid if sw is None else (sw << 24) | tid
                    out.append((now, Kind.COUNTER, -1, 0, table, key, a - b))
            self._thr_prev[tid] = tot
        for tid in gone:
            self._thr_prev.pop(tid, None)
        hist = self.bpf[b"runq_hist"]
        for i in range(len(self._hist_prev)):
            n = int(sum(hist[ct.c_int(i)]))
            if n > self._hist_prev[i]:
                out.append((now, Kind.COUNTER, -1, 0, Counter.RUNQ_LAT, i,
                            n - self._hist_prev[i]))
                self._hist_prev[i] = n
