"""The BPF side of capture: compile probes/gmpmon.bpf.c for one binary, attach and detach its
uprobes, and read its maps (ring buffer fd, counters, lost records, probe hits, stacks).

This module and :mod:`gmpmon.capture.capture` are the only ones that know BCC.
"""

from __future__ import annotations

import contextlib
import ctypes as ct
import errno
import gc
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gmpmon._bcc import (
    SYS_BPF,
    UPROBE_PMU,
    captured_output,
    first_compile_error,
    header_dir,
    headers_present,
    scalar_items,
)
from gmpmon.binary.info import BinaryInfo, ProbeSite
from gmpmon.capture import bpfmaps, bpfobj
from gmpmon.capture.bpfsys import PerCpuU64Array, U64Hash
from gmpmon.capture.sites import BinaryText, Site
from gmpmon.errors import (
    CaptureError,
    GmpmonError,
    KernelHeadersError,
    KernelSupportError,
    PermissionDenied,
    UnsupportedError,
)
from gmpmon.probetable import (
    CALL,
    CALL_RESULT,
    ENTRY,
    EXITS,
    HANDLERS,
    LAST_CALL,
    PROBES,
    RETS,
    Probe,
)

_libc = ct.CDLL(None, use_errno=True)
PROBE_DIR = Path(__file__).resolve().parent.parent / "probes"
RINGBUF_PAGES = 4096  # 16 MiB: ~300k records, ~300 ms of the hottest target at full rate
# Sample mode without triggers: only cold probes write, read every 50 ms (Prometheus under
# wrk: ~5k mutex contentions a second, ~15 KiB a read). The ring's pages are mapped twice
# into gmpmon (the kernel's wrap-around mapping) and all count in its RSS: 32 MiB at 4096.
RINGBUF_SAMPLE_PAGES = 256  # 1 MiB: ~18k records
COUNTERS_MAX = 20480  # keys of the `counters` hash: 64 Ps x 256 latency buckets, plus the
# per-P totals (starts, syscalls, hand-offs: ~5 keys a P) and the per-reason ones


# Rows of the `wait_rows` hash: (lock address, stack, lock kind) of finished waits, summed in
# the kernel (gmpmon/capture/waitrows.py). A wait that finds it full goes to the ring.
WAIT_ROWS_MAX = 1024


def wait_rows_max() -> int:
    """The `wait_rows` hash size. GMPMON_WAIT_ROWS_MAX makes it smaller, so that a test can
    fill it and see the waits that do not fit come as ring records."""
    v = os.environ.get("GMPMON_WAIT_ROWS_MAX", "")
    return int(v) if v.isdigit() and 0 < int(v) <= WAIT_ROWS_MAX else WAIT_ROWS_MAX


def counters_max() -> int:
    """The `counters` hash size. GMPMON_COUNTERS_MAX makes it smaller, so that a test can
    fill it on a small target and see every refused update counted."""
    v = os.environ.get("GMPMON_COUNTERS_MAX", "")
    return int(v) if v.isdigit() and 0 < int(v) <= COUNTERS_MAX else COUNTERS_MAX

BPF_LINK_CREATE = 28
BPF_TRACE_UPROBE_MULTI = 48


@dataclass
class ProbePlan:
    """Every uprobe for one binary, split by tier, plus what could not be placed."""

    hot: list[Site] = field(default_factory=list)
    cold: list[Site] = field(default_factory=list)
    features: list[str] = field(default_factory=list)
    missing: dict[str, str] = field(default_factory=dict)  # handler -> why
    defines: dict[str, int] = field(default_factory=dict)  # Probe.ra_define -> RA offset


def _sites(probe: Probe, ps: ProbeSite, multi: bool) -> tuple[tuple[int, int], ...]:
    """(address, condition) of each uprobe of ``probe`` (condition 0: always); ``multi``:
    uprobe_multi links, whose attach cookie carries an exit's condition."""
    if probe.site == EXITS and ps.exits and multi:
        return ps.exits
    if probe.site in (RETS, EXITS):
        addrs = ps.rets
    elif probe.site == ENTRY:
        addrs = (ps.entry_site,)
    elif probe.site == CALL_RESULT:
        addrs = ps.call_results.get(probe.callee, ())
    elif probe.site == CALL:
        addrs = ps.call_sites.get(probe.callee, ())
    elif probe.site == LAST_CALL:
        addrs = ps.call_sites.get(probe.callee, ())[-1:] or (ps.entry_site,)
    else:
        raise ValueError(f"unknown site rule {probe.site!r}")
    return tuple((a, 0) for a in addrs)


def plan_probes(info: BinaryInfo) -> ProbePlan:
    """Place every row of the probe table that applies to this binary's Go version on the
    sites BinaryInfo computed (the one register-aware site rule, gmpmon/binary/probes.py)."""
    plan = ProbePlan()
    multi = uprobe_multi_supported()
    feats: set[str] = set()
    placed: set[str] = set()
    for probe in PROBES:
        if not probe.applies(info.go_minor):
            continue
        if probe.fallback_for and probe.fallback_for in placed:
            continue
        ps = next((info.probe_sites[f.name] for f in probe.funcs if f.name in info.probe_sites),
                  None)
        addrs = _sites(probe, ps, multi) if ps is not None else ()
        if ps is None or not addrs:
            if not any(p.fallback_for == probe.handler for p in PROBES):
                plan.missing[probe.handler] = probe.why
            continue
        for a, cond in addrs:
            (plan.hot if probe.hot else plan.cold).append(Site(probe, a, ps.symbol, cond))
        if probe.ra_define:
            plan.defines[probe.ra_define] = -ps.entry_sp_delta
        placed.add(probe.handler)
        feats.add(probe.feature)
    for probe in PROBES:  # a fallback that could not be placed either: say why the first
        if probe.fallback_for and probe.fallback_for not in placed and probe.handler not in placed:
            plan.missing[probe.fallback_for] = probe.why
    plan.features = sorted(feats)
    return plan


def _off(info: BinaryInfo, key: str) -> int:
    try:
        return info.offsets[key]
    except KeyError as e:
        raise UnsupportedError(
            f"no offset for {key} in {info.path} ({info.go_version})",
            hint="build with DWARF or use a supported Go version",
        ) from e


def _reason(info: BinaryInfo, name: str) -> int:
    """This binary's waitReason value for `name`; 256 (no u8 equals it) when absent."""
    try:
        return info.wait_reasons.index(name)
    except ValueError:
        return 256


def cflags(info: BinaryInfo, tgid: int, plan: ProbePlan | None = None,
           ring_pages: int = RINGBUF_PAGES) -> list[str]:
    defs: dict[str, int] = {
        "TGID": tgid,
        "RINGBUF_PAGES": ring_pages,
        "COUNTERS_MAX": counters_max(),
        "WAIT_ROWS_MAX": wait_rows_max(),
        "G_M": _off(info, "runtime.g.m"),
        "G_GOID": _off(info, "runtime.g.goid"),
        "G_WAITREASON": _off(info, "runtime.g.waitreason"),
        # GO_CREATE's a1 (the new G's function and go statement): optional, 0 = not read.
        "G_STARTPC": info.offsets.get("runtime.g.startpc", 0),
        "G_GOPC": info.offsets.get("runtime.g.gopc", 0),
        "M_PROCID": _off(info, "runtime.m.procid"),
        "M_CURG": _off(info, "runtime.m.curg"),
        "M_P": _off(info, "runtime.m.p"),
        "P_ID": _off(info, "runtime.p.id"),
        "P_M": _off(info, "runtime.p.m"),
        "P_RUNQHEAD": _off(info, "runtime.p.runqhead"),
        "P_RUNQTAIL": _off(info, "runtime.p.runqtail"),
        "P_RUNNEXT": _off(info, "runtime.p.runnext"),
        "HAVE_RUNQSIZE": 1 if runqsize_link_addr(info) else 0,
        "STW_HAS_REASON": 1 if info.go_minor >= 21 else 0,
        **{p.ra_define: 0 for p in PROBES if p.ra_define},
        **(plan.defines if plan else {}),
        "SEMA_HAS_REASON": 1 if info.go_minor >= 21 else 0,
        "WR_SYNC_MUTEX": _reason(info, "sync.Mutex.Lock"),
        "WR_RWMUTEX_R": _reason(info, "sync.RWMutex.RLock"),
        "WR_RWMUTEX_W": _reason(info, "sync.RWMutex.Lock"),
        "GM_PERF_FALLBACK": 0 if uprobe_multi_supported() else 1,
    }
    for probe in PROBES:
        defs[f"H_{probe.handler.upper()}"] = probe.hid
    return [f"-D{k}={v}" for k, v in defs.items()]


def runqsize_link_addr(info: BinaryInfo) -> int:
    """Link-time address of the global runq length (sched.runqsize / sched.runq.size)."""
    sched = info.globals.get("runtime.sched")
    runqsize = info.offsets.get("runtime.schedt.runqsize")
    return sched + runqsize if sched and runqsize is not None else 0


def _compile(flags: list[str]) -> Any:
    """gmpmon.bpf.c, compiled by BCC or loaded from the cache (gmpmon/capture/bpfobj.py).
    BCC's compiler writes diagnostics to fds 1 and 2 (C++ streams): they are caught and
    folded into one line, like `gmpmon doctor` does."""
    hdr, origin = header_dir()
    if not headers_present(hdr, origin):
        # Checked first: libbcc 0.29 segfaults compiling gmpmon.bpf.c without headers.
        raise KernelHeadersError(
            f"no kernel headers to compile the probes against: {hdr} has no include/"
            + (" ($BCC_KERNEL_SOURCE)" if origin == "BCC_KERNEL_SOURCE" else ""),
            hint="apt-get install linux-headers-$(uname -r), or run scripts/setup",
        )
    with captured_output() as lines:
        try:
            return bpfobj.build((PROBE_DIR / "gmpmon.bpf.c").read_bytes(),
                                [f"-I{PROBE_DIR}", *flags], str(PROBE_DIR), hdr)
        except Exception as e:  # BCC raises bare Exceptions for compile/load failures
            err: Exception = e
    why = first_compile_error(lines) or str(err).splitlines()[0]
    raise KernelSupportError(f"cannot load the BPF program: {why}",
                             hint="run `gmpmon doctor`") from err


class CounterTable:
    """(key, value) of a `counters` hash (u64 -> u64), read every 100 ms: raw batch lookups
    (bpfsys.U64Hash), BCC's item walk where the kernel has no batch ops for hashes."""

    def __init__(self, table: Any) -> None:
        self.table = table
        self._raw: U64Hash | None = U64Hash(table.map_fd)

    def items(self) -> list[tuple[int, int]]:
        if self._raw is not None:
            try:
                return self._raw.items()
            except OSError:
                self._raw = None
        return scalar_items(self.table)


class BpfProgram:
    """One compiled gmpmon.bpf.c for one target, with its uprobes."""

    def __init__(self, info: BinaryInfo, tgid: int, plan: ProbePlan,
                 cold_only: bool = False) -> None:
        """``cold_only``: no hot probe will ever be attached (sample mode, no triggers)."""
        if os.geteuid() != 0:
            raise PermissionDenied("attaching uprobes needs root", hint="run with sudo")
        self.info = info
        self.path = info.path
        self.ring_pages = RINGBUF_SAMPLE_PAGES if cold_only else RINGBUF_PAGES
        self.bpf: Any = _compile(cflags(info, tgid, plan, self.ring_pages))
        release_freed_memory()  # the compiler's ~100 MB of freed heap back to the system
        self._groups: dict[str, list[int]] = {}  # group -> link fd, or perf event fds
        self._multi: bool | None = None  # uprobe_multi links work here (None: not tried)
        self._text = BinaryText(info.path)
        self._lib: Any = bpfmaps.lib()  # attach calls without libbcc's LLVM
        self._kprobe_type: int = bpfmaps.KPROBE
        self._prev_counters: dict[int, int] = {}
        self._prev_lost = 0
        self._prev_hits = [0] * len(HANDLERS)
        # Raw bpf(2) lookups of the per-CPU arrays read every 100 ms (26 hit counters and 4
        # ring totals): BCC's item access allocates and converts per call, ~10x dearer.
        self._percpu: dict[bytes, PerCpuU64Array] = {}
        self._counters: CounterTable | None = None
        self.gen = 0

    # --- uprobes -------------------------------------------------------------------------

    def file_offsets(self, sites: list[Site]) -> list[int]:
        """Each site's offset in the binary's file (uprobes attach by offset)."""
        offsets = []
        for s in sites:
            off = self._text.file_offset(s.addr)
            if off is None:
                raise CaptureError(f"{s.role} at {s.addr:#x} is outside the file's segments")
            offsets.append(off)
        return offsets

    def attach(self, group: str, sites: list[Site]) -> None:
        """Attach ``sites`` as one group (one uprobe_multi link), on the binary's inode for
        every process (the program filters on TGID), so `gmpmon run` can attach before exec.
        Kernels without uprobe_multi get one perf-event uprobe per site."""
        if group in self._groups or not sites:
            return
        offsets = self.file_offsets(sites)
        if self._multi is None:
            self._multi = uprobe_multi_supported()
        if self._multi:
            try:
                fd = self._link_multi(offsets, [s.cookie for s in sites])
            except OSError as e:
                raise _attach_error(e) from e
            self._groups[group] = [fd]
            return
        first = not self._groups
        fds: list[int] = []
        self._groups[group] = fds
        failed: tuple[Site, int] | None = None
        # libbcc prints its own complaint on fd 2 when an attach fails; the first group is
        # attached before any TUI owns the terminal, so its chatter can be caught (if
        # uprobes cannot be attached at all, that is where it shows).
        quiet: contextlib.AbstractContextManager[list[str]] = (
            captured_output() if first else contextlib.nullcontext([])
        )
        with quiet:
            for s, off in zip(sites, offsets, strict=True):
                fn = self.bpf.load_func(s.probe.bpf_function.encode(), self._kprobe_type)
                ev = f"gmpmon_{os.getpid()}_{s.addr:x}".encode()
                pfd = self._lib.bpf_attach_uprobe(fn.fd, 0, ev, self.path.encode(), off, -1)
                if pfd < 0:
                    failed = (s, ct.get_errno())
                    break
                fds.append(pfd)
        if failed is not None:
            s, err = failed
            if not UPROBE_PMU.exists() or err in (errno.ENOENT, errno.EOPNOTSUPP,
                                                          errno.ENOSYS):
                raise KernelSupportError(
                    f"this kernel cannot attach uprobes ({os.strerror(err)}; no uprobe PMU"
                    " or tracefs uprobe_events)",
                    hint="needs CONFIG_UPROBES and CONFIG_UPROBE_EVENTS",
                )
            if err in (errno.EPERM, errno.EACCES):
                raise PermissionDenied(f"attaching uprobes was refused ({os.strerror(err)})",
                                       hint="needs root or CAP_BPF+CAP_PERFMON")
            raise CaptureError(f"cannot attach a uprobe on {s.role} at {s.addr:#x}: "
                               f"{os.strerror(err)}")

    def _link_multi(self, offsets: list[int], cookies: list[int]) -> int:
        fn = self.bpf.load_func(b"gmpmon_probe", self._kprobe_type, None, BPF_TRACE_UPROBE_MULTI)
        n = len(offsets)
        path = ct.create_string_buffer(self.path.encode())
        offs = (ct.c_uint64 * n)(*offsets)
        cks = (ct.c_uint64 * n)(*cookies)
        attr = ct.create_string_buffer(128)  # union bpf_attr, link_create member
        ct.c_uint32.from_buffer(attr, 0).value = fn.fd  # prog_fd
        ct.c_uint32.from_buffer(attr, 8).value = BPF_TRACE_UPROBE_MULTI  # attach_type
        ct.c_uint64.from_buffer(attr, 16).value = ct.addressof(path)  # uprobe_multi.path
        ct.c_uint64.from_buffer(attr, 24).value = ct.addressof(offs)  # .offsets
        ct.c_uint64.from_buffer(attr, 40).value = ct.addressof(cks)  # .cookies
        ct.c_uint32.from_buffer(attr, 48).value = n  # .cnt; .pid = 0: every process
        fd = int(_libc.syscall(SYS_BPF, BPF_LINK_CREATE, attr, 128))
        if fd < 0:
            err = ct.get_errno()
            raise OSError(err, os.strerror(err))
        return fd

    def detach(self, *groups: str) -> None:
        for group in groups:
            for fd in self._groups.pop(group, []):
                if self._multi:
                    os.close(fd)
                else:
                    self._lib.bpf_close_perf_event_fd(fd)

    def link_fd(self, group: str) -> int:
        """The uprobe_multi link of a group (-1: none, or per-site perf events)."""
        fds = self._groups.get(group, [])
        return fds[0] if self._multi and len(fds) == 1 else -1

    def set_load_bias(self, bias: int) -> None:
        """Tell the programs where the target's globals are (PIE: known once mapped)."""
        addr = runqsize_link_addr(self.info)  # 0 (unknown) when sched failed its checks
        self.bpf[b"runq_addr"][ct.c_int(0)] = ct.c_uint64(addr + bias if addr else 0)

    def new_window(self) -> None:
        """Bump the generation the hot probes stamp their timestamps with; the hot probes are
        about to be attached (set_hot_off(False))."""
        self.gen += 1
        self.bpf[b"cfg"][ct.c_int(0)] = ct.c_uint32(self.gen)
        self.set_hot_off(False)

    def set_hot_off(self, off: bool) -> None:
        """cfg[1]: the hot probes are detached between default mode's windows, and the cold
        handlers of window-only kinds stop counting (probes/gmpmon.bpf.c: gm_count_windowed)."""
        self.bpf[b"cfg"][ct.c_int(1)] = ct.c_uint32(int(off))

    def close(self) -> None:
        for group in list(self._groups):
            self.detach(group)
        self.bpf.cleanup()

    # --- maps ----------------------------------------------------------------------------

    def ringbuf_fd(self) -> int:
        fd: int = self.bpf[b"events"].map_fd
        return fd

    def counter_deltas(self) -> list[tuple[int, int, int, int]]:
        """(table, p, key, delta) for every counter that grew since the last call."""
        if self._counters is None:
            self._counters = CounterTable(self.bpf[b"counters"])
        items = self._counters.items()
        out = []
        prev = self._prev_counters
        for k, v in items:
            d = v - prev.get(k, 0)
            if d:
                prev[k] = v
                out.append((*decode_counter_key(k), d))
        return out

    def lost_delta(self) -> int:
        """Counter updates the full counters hash refused since the last call (a polled
        LOST). Records the full ring refused are marked in the ring itself (in-band LOST)."""
        total = self._total(b"ctr_full")
        d = total - self._prev_lost
        self._prev_lost = total
        return d

    def ring_totals(self) -> tuple[int, int, int, int]:
        """The kernel's side of the ring ledger (Counter.RING): records the probes tried to
        write, reserves the full ring refused, counter updates the full hash refused, and
        in-band LOST marks written."""
        return (self._total(b"emits"), self._total(b"lost"), self._total(b"ctr_full"),
                self._total(b"marks"))

    def _array(self, name: bytes) -> PerCpuU64Array:
        a = self._percpu.get(name)
        if a is None:
            a = self._percpu[name] = PerCpuU64Array(self.bpf[name].map_fd)
        return a

    def _total(self, name: bytes) -> int:
        return self._array(name).total(0)

    def hit_deltas(self) -> list[tuple[int, int]]:
        totals = self._array(b"hits").totals(len(HANDLERS))
        out = []
        for i, total in enumerate(totals):
            d = total - self._prev_hits[i]
            if d:
                self._prev_hits[i] = total
                out.append((i, d))
        return out

    def stack(self, stack_id: int) -> list[int]:
        try:
            return [int(a) for a in self.bpf[b"stacks"].walk(stack_id)]
        except Exception:
            return []


def _attach_error(e: OSError) -> GmpmonError:
    """What a failed uprobe_multi link means to the user."""
    if e.errno in (errno.EOPNOTSUPP, errno.ENOSYS):
        return KernelSupportError(
            f"this kernel cannot attach uprobes ({e.strerror})",
            hint="needs CONFIG_UPROBES; `gmpmon doctor` checks",
        )
    if e.errno in (errno.EPERM, errno.EACCES):
        return PermissionDenied(f"attaching uprobes was refused ({e.strerror})",
                                hint="needs root or CAP_BPF+CAP_PERFMON")
    return CaptureError(f"cannot attach uprobes: {e}")


def uprobe_multi_supported() -> bool:
    """BPF_TRACE_UPROBE_MULTI links exist since Linux 6.6. GMPMON_NO_UPROBE_MULTI=1 forces
    the per-site fallback (to test it on a newer kernel)."""
    if os.environ.get("GMPMON_NO_UPROBE_MULTI", "") not in ("", "0"):
        return False
    try:
        major, minor = (int(x) for x in os.uname().release.split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= (6, 6)


def decode_counter_key(k: int) -> tuple[int, int, int]:
    """(table, p, key) of a GM_COUNTER_KEY (probes/gmpmon.h)."""
    return k >> 56, ((k >> 32) & 0xFFFFFF) - 1, k & 0xFFFFFFFF


M_TRIM_THRESHOLD = -1  # glibc's mallopt parameter
TRIM_THRESHOLD = 8 << 20


def release_freed_memory() -> None:
    """gc, then malloc_trim(0): what the attach freed goes back to the system (glibc keeps
    free pages otherwise, in every thread's arena).

    Then glibc may keep up to TRIM_THRESHOLD free at the top of the heap: by default it gives
    back anything over 128 KiB at each free, so the ~256 KiB a zlib compressor allocates for
    each recorded batch (20 a second) were faulted in again every time (~3 page faults and
    15-30% of a batch's compression time)."""
    gc.collect()  # the binary's parse leaves ~20 MB in reference cycles (Caddy)
    with contextlib.suppress(OSError, AttributeError):
        libc = ct.CDLL(None)
        libc.malloc_trim(0)
        libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)
