"""The BPF side of capture: compile probes/gmpmon.bpf.c for one binary, attach and detach its
uprobes, and read its maps (ring buffer fd, counters, lost records, probe hits, stacks).

This module and :mod:`gmpmon.capture.capture` are the only ones that know BCC.
"""

from __future__ import annotations

import contextlib
import ctypes as ct
import errno
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gmpmon._bcc import import_bcc
from gmpmon.binary.info import BinaryInfo
from gmpmon.capture.sites import BinaryText, Site, call_result_site, call_sites, func_range
from gmpmon.capture.sites import probe_site as find_probe_site
from gmpmon.doctor import _captured_output
from gmpmon.errors import (
    CaptureError,
    GmpmonError,
    KernelHeadersError,
    KernelSupportError,
    PermissionDenied,
    UnsupportedError,
)

_libc = ct.CDLL(None, use_errno=True)
PROBE_DIR = Path(__file__).resolve().parent.parent / "probes"
RINGBUF_PAGES = 4096  # 16 MiB: ~300k records, ~300 ms of the hottest target at full rate

# Handler ids: the attach cookie of each site (uprobe_multi), the H_* -D flags, the index
# into the BPF `hits` array and the Counter.PROBE_HITS keys. Named after the BPF functions.
HANDLERS: tuple[str, ...] = (
    "execute",
    "findrunnable",
    "gopark",
    "ready",
    "gocreate",
    "newproc1_ret",
    "goexit",
    "sysenter",
    "sysexit",
    "gosched",
    "steal_try",
    "steal_got",
    "handoffp",
    "sysenterblk",
    "preemptone",
    "gopreempt",
    "stw_stop",
    "stw_start",
    "lock_enter",
    "lock_exit",
    "pidleput",  # appended: PROBE_HITS keys of older recordings keep their meaning
    "sema_enter",
    "sema_exit",
)

BPF_LINK_CREATE = 28
BPF_TRACE_UPROBE_MULTI = 48
SYS_BPF = 321  # x86_64

# (BPF function, runtime function candidates in preference order, hot?, feature)
_ENTRY_PROBES: tuple[tuple[str, tuple[str, ...], bool, str], ...] = (
    ("gmpmon_execute", ("runtime.execute",), True, "timeline"),
    ("gmpmon_findrunnable", ("runtime.findRunnable", "runtime.findrunnable"), True, "timeline"),
    ("gmpmon_gopark", ("runtime.gopark",), True, "park"),
    ("gmpmon_ready", ("runtime.ready",), True, "park"),
    ("gmpmon_goexit", ("runtime.gdestroy", "runtime.goexit0"), True, "goroutines"),
    ("gmpmon_sysenter", ("runtime.entersyscall",), True, "syscall"),
    ("gmpmon_sysexit", ("runtime.exitsyscall",), True, "syscall"),
    ("gmpmon_steal_try", ("runtime.runqsteal",), True, "steal"),
    ("gmpmon_pidleput", ("runtime.pidleput",), True, "idle"),
    ("gmpmon_handoffp", ("runtime.handoffp",), False, "syscall"),
    ("gmpmon_sysenterblk", ("runtime.entersyscallblock",), False, "syscall"),
    ("gmpmon_preemptone", ("runtime.preemptone",), False, "preempt"),
    ("gmpmon_stw_stop", ("runtime.stopTheWorldWithSema",), False, "stw"),
    ("gmpmon_stw_start", ("runtime.startTheWorldWithSema",), False, "stw"),
    (
        "gmpmon_lock_enter",
        ("mutex.lockSlow", "internal/sync.(*Mutex).lockSlow", "sync.(*Mutex).lockSlow"),
        False,
        "mutex",
    ),
    # Hot, though RET-probed: net/http makes hundreds of semaphore waits a second (fd locks,
    # WaitGroups), which `sample` mode must not pay ~25 µs each for.
    ("gmpmon_sema_enter", ("runtime.semacquire1",), True, "waits"),
)


@dataclass
class ProbePlan:
    """Every uprobe for one binary, split by tier, plus what could not be placed."""

    hot: list[Site] = field(default_factory=list)
    cold: list[Site] = field(default_factory=list)
    features: list[str] = field(default_factory=list)
    missing: dict[str, str] = field(default_factory=dict)
    lock_ra_off: int = 0  # return address of lockSlow at [RSP + this] at its probe site
    sema_ra_off: int = 0  # the same for semacquire1


def plan_probes(info: BinaryInfo) -> ProbePlan:
    """Resolve every probe of gmpmon.bpf.c to an address in this binary."""
    text = BinaryText(info.path)
    plan = ProbePlan()
    feats: set[str] = set()

    def add(site: Site, feature: str) -> None:
        (plan.hot if site.hot else plan.cold).append(site)
        feats.add(feature)

    for fn, names, hot, feature in _ENTRY_PROBES:
        ps = find_probe_site(info, text, *names)
        if ps is None:
            plan.missing[fn] = f"{names[0]} not found"
            continue
        at = ps.entry_site
        if fn == "gmpmon_stw_start":
            # The world counts as stopped until startTheWorldWithSema has handed the Ps back:
            # the runtime takes its pause's end there (stwTotalTime*, MemStats, the trace's
            # STWDone), just before the one `call wakep`. Its entry is ~200 µs early.
            wakep = func_range(info, "runtime.wakep")
            restarted = call_sites(text, ps.entry, ps.size, wakep[0]) if wakep else ()
            at = restarted[-1] if restarted else at
        add(Site(fn, at, ps.symbol, hot), feature)
        if fn == "gmpmon_lock_enter":
            plan.lock_ra_off = -ps.entry_sp_delta
            for ret in ps.rets:
                add(Site("gmpmon_lock_exit", ret, ps.symbol, False), feature)
        if fn == "gmpmon_sema_enter":
            plan.sema_ra_off = -ps.entry_sp_delta
            for ret in ps.rets:
                add(Site("gmpmon_sema_exit", ret, ps.symbol, True), feature)
        if fn == "gmpmon_steal_try":
            got = list(ps.call_results.get("runtime.runqgrab", ()))
            if not got:
                grab = func_range(info, "runtime.runqgrab")
                site = call_result_site(text, ps.entry, ps.size, grab[0]) if grab else None
                got = [site] if site else []
            if got:
                for a in got:
                    add(Site("gmpmon_steal_got", a, ps.symbol, True), feature)
            else:
                plan.missing["gmpmon_steal_got"] = "no runqgrab result site in runqsteal"

    # Preemption: goschedImpl(gp, preempted bool) from 1.22; gopreempt_m before (cold there).
    if info.go_minor >= 22:
        ps = find_probe_site(info, text, "runtime.goschedImpl")
        if ps:
            add(Site("gmpmon_gosched", ps.entry_site, ps.symbol, True), "preempt")
    else:
        ps = find_probe_site(info, text, "runtime.gopreempt_m")
        if ps:
            add(Site("gmpmon_gopreempt", ps.entry_site, ps.symbol, False), "preempt")

    # Goroutine creation: the emulated CALL runqput inside newproc.func1, else newproc1's RETs.
    closure = func_range(info, "runtime.newproc.func1")
    runqput = func_range(info, "runtime.runqput")
    calls = call_sites(text, closure[0], closure[1], runqput[0]) if closure and runqput else ()
    if calls:
        for a in calls:
            add(Site("gmpmon_gocreate", a, "runtime.newproc.func1", True), "goroutines")
    else:
        ps = find_probe_site(info, text, "runtime.newproc1")
        if ps and ps.rets:
            for ret in ps.rets:
                add(Site("gmpmon_newproc1_ret", ret, ps.symbol, True), "goroutines")
        else:
            plan.missing["gmpmon_gocreate"] = "no goroutine-creation site"
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


def cflags(info: BinaryInfo, tgid: int, plan: ProbePlan | None = None) -> list[str]:
    defs: dict[str, int] = {
        "TGID": tgid,
        "RINGBUF_PAGES": RINGBUF_PAGES,
        "G_M": _off(info, "runtime.g.m"),
        "G_GOID": _off(info, "runtime.g.goid"),
        "G_WAITREASON": _off(info, "runtime.g.waitreason"),
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
        "LOCK_RA_OFF": plan.lock_ra_off if plan else 0,
        "SEMA_RA_OFF": plan.sema_ra_off if plan else 0,
        "SEMA_HAS_REASON": 1 if info.go_minor >= 21 else 0,
        "WR_SYNC_MUTEX": _reason(info, "sync.Mutex.Lock"),
        "WR_RWMUTEX_R": _reason(info, "sync.RWMutex.RLock"),
        "WR_RWMUTEX_W": _reason(info, "sync.RWMutex.Lock"),
        "GM_PERF_FALLBACK": 0 if uprobe_multi_supported() else 1,
    }
    for i, name in enumerate(HANDLERS):
        defs[f"H_{name.upper()}"] = i
    return [f"-D{k}={v}" for k, v in defs.items()]


def runqsize_link_addr(info: BinaryInfo) -> int:
    """Link-time address of the global runq length (sched.runqsize / sched.runq.size)."""
    sched = info.globals.get("runtime.sched")
    runqsize = info.offsets.get("runtime.schedt.runqsize")
    return sched + runqsize if sched and runqsize is not None else 0


def _compile(bcc: Any, flags: list[str]) -> Any:
    """BCC's BPF() on gmpmon.bpf.c. Its compiler writes diagnostics to fds 1 and 2 (C++
    streams): they are caught and folded into one line, like `gmpmon doctor` does."""
    from gmpmon.doctor import first_compile_error, header_dir

    hdr, origin = header_dir()
    if not _headers_present(hdr, origin):
        # Checked first: libbcc 0.29 segfaults compiling gmpmon.bpf.c without headers.
        raise KernelHeadersError(
            f"no kernel headers to compile the probes against: {hdr} has no include/"
            + (" ($BCC_KERNEL_SOURCE)" if origin == "BCC_KERNEL_SOURCE" else ""),
            hint="apt-get install linux-headers-$(uname -r), or run scripts/setup",
        )
    with _captured_output() as lines:
        try:
            return bcc.BPF(
                src_file=str(PROBE_DIR / "gmpmon.bpf.c").encode(),
                cflags=[f"-I{PROBE_DIR}", *flags],
            )
        except Exception as e:  # BCC raises bare Exceptions for compile/load failures
            err: Exception = e
    why = first_compile_error(lines) or str(err).splitlines()[0]
    raise KernelSupportError(f"cannot load the BPF program: {why}",
                             hint="run `gmpmon doctor`") from err


def _headers_present(hdr: str, origin: str) -> bool:
    """Where BCC looks for kernel headers (its KERNEL_SOURCE env, /lib/modules/R/build or
    source, else the kernel's own kheaders archive)."""
    if os.path.isdir(os.path.join(hdr, "include")):
        return True
    if origin == "BCC_KERNEL_SOURCE":
        return False
    release = os.uname().release
    return os.path.isdir(f"/lib/modules/{release}/source/include") or os.path.exists(
        "/sys/kernel/kheaders.tar.xz"
    )


class BpfProgram:
    """One compiled gmpmon.bpf.c for one target, with its uprobes."""

    def __init__(self, info: BinaryInfo, tgid: int, plan: ProbePlan) -> None:
        if os.geteuid() != 0:
            raise PermissionDenied("attaching uprobes needs root", hint="run with sudo")
        bcc = import_bcc()
        self.info = info
        self.path = info.path
        self.bpf: Any = _compile(bcc, cflags(info, tgid, plan))
        self._groups: dict[str, list[int]] = {}  # group -> link fd, or perf event fds
        self._multi: bool | None = None  # uprobe_multi links work here (None: not tried)
        self._text = BinaryText(info.path)
        self._lib: Any = bcc.lib
        self._kprobe_type: int = bcc.BPF.KPROBE
        self._prev_counters: dict[int, int] = {}
        self._prev_lost = 0
        self._prev_hits = [0] * len(HANDLERS)
        self.gen = 0

    # --- uprobes -------------------------------------------------------------------------

    def attach(self, group: str, sites: list[Site]) -> None:
        """Attach ``sites`` as one group (one uprobe_multi link), on the binary's inode for
        every process (the program filters on TGID), so `gmpmon run` can attach before exec.
        Kernels without uprobe_multi get one perf-event uprobe per site."""
        if group in self._groups or not sites:
            return
        offsets = []
        for s in sites:
            off = self._text.file_offset(s.addr)
            if off is None:
                raise CaptureError(f"{s.role} at {s.addr:#x} is outside the file's segments")
            offsets.append(off)
        if self._multi is None:
            self._multi = uprobe_multi_supported()
        if self._multi:
            try:
                fd = self._link_multi(offsets, [HANDLERS.index(s.fn_name[7:]) for s in sites])
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
            _captured_output() if first else contextlib.nullcontext([])
        )
        with quiet:
            for s, off in zip(sites, offsets, strict=True):
                fn = self.bpf.load_func(s.fn_name.encode(), self._kprobe_type)
                ev = f"gmpmon_{os.getpid()}_{s.addr:x}".encode()
                pfd = self._lib.bpf_attach_uprobe(fn.fd, 0, ev, self.path.encode(), off, -1)
                if pfd < 0:
                    failed = (s, ct.get_errno())
                    break
                fds.append(pfd)
        if failed is not None:
            s, err = failed
            if not os.path.exists(UPROBE_PMU) or err in (errno.ENOENT, errno.EOPNOTSUPP,
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

    def detach(self, group: str) -> None:
        for fd in self._groups.pop(group, []):
            if self._multi:
                os.close(fd)
            else:
                self._lib.bpf_close_perf_event_fd(fd)

    def n_attached(self) -> int:
        return len(self._groups)

    def set_load_bias(self, bias: int) -> None:
        """Tell the programs where the target's globals are (PIE: known once mapped)."""
        addr = runqsize_link_addr(self.info)
        if addr:
            self.bpf[b"runq_addr"][ct.c_int(0)] = ct.c_uint64(addr + bias)

    def new_window(self) -> None:
        """Bump the generation the hot probes stamp their timestamps with."""
        self.gen += 1
        self.bpf[b"cfg"][ct.c_int(0)] = ct.c_uint32(self.gen)

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
        table = self.bpf[b"counters"]
        try:
            items = [(k.value, v.value) for k, v in table.items_lookup_batch()]
        except Exception:
            items = [(k.value, v.value) for k, v in table.items()]
        out = []
        prev = self._prev_counters
        for k, v in items:
            d = v - prev.get(k, 0)
            if d:
                prev[k] = v
                out.append((*decode_counter_key(k), d))
        return out

    def lost_delta(self) -> int:
        total = sum(self.bpf[b"lost"][ct.c_int(0)])
        d = total - self._prev_lost
        self._prev_lost = total
        return int(d)

    def hit_deltas(self) -> list[tuple[int, int]]:
        hits = self.bpf[b"hits"]
        out = []
        for i in range(len(HANDLERS)):
            total = int(sum(hits[ct.c_int(i)]))
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


UPROBE_PMU = "/sys/bus/event_source/devices/uprobe"


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
