"""Every uprobe gmpmon places, declared once.

One :class:`Probe` row per BPF handler (``on_<handler>`` in probes/gmpmon.bpf.c): the runtime
function(s) it sits on and the site rule, its tier, its handler id, the event kinds it emits,
the Go versions it applies to, the feature that needs it and what is lost without it. From
this table come the handler ids (attach cookies, the ``-DH_*`` flags, the ``hits`` index and
the ``Counter.PROBE_HITS`` keys), the probe plan (:func:`gmpmon.capture.bpfprog.plan_probes`)
and the runtime functions the binary layer must find (:data:`ROLES`, required or not).
tests/unit/test_probetable.py fails when the C (switch, GM_PROBE list, ``GM_*`` numbers, the
kinds each handler emits) disagrees with it.

Adding a probe: one row here (next free ``hid``, never renumber one: recordings keep
PROBE_HITS keys), its ``on_<handler>`` in gmpmon.bpf.c with its ``case`` and ``GM_PROBE``
line, and the model handler of its event kind (gmpmon/model). This module is pure data: it
imports nothing but the event vocabulary.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from gmpmon.events import Kind

# Registers (64-bit family names) a probe reads at an entry site. R14 (g) is always kept.
ARGS = ("rax", "rbx", "rcx", "rdi", "rsi", "r8", "r9", "r10", "r11")

# Site rules (where on the function the uprobe goes; the binary layer computes each):
ENTRY = "entry"  # the cheapest emulated instruction after the stack check that still sees
#                  the registers read (gmpmon/binary/probes.py: find_entry_site)
RETS = "rets"  # every RET (single-stepped: ~25 µs a hit)
EXITS = "exits"  # the emulated branches into the RETs' tails, each with its condition (the
#                  handler must read nothing the tail writes: R14 only); RETS where a RET
#                  cannot be covered so, or without uprobe_multi (no cookie for the condition)
CALL_RESULT = "call_result"  # the first jcc after each CALL <callee> (RAX = its result)
CALL = "call"  # each CALL <callee> instruction itself (the arguments are in registers)
LAST_CALL = "last_call"  # the last CALL <callee>, else the entry site

HOT, COLD = True, False
ANY_GO = (19, 99)  # Go minor versions, inclusive


@dataclass(frozen=True, slots=True)
class Role:
    """A runtime function gmpmon reads or probes (BinaryInfo.probe_sites is keyed by name)."""

    name: str  # canonical name (what capture asks for)
    symbols: tuple[str, ...]  # symbol names to try, in order
    reads: tuple[str, ...] = ()  # registers read at the entry site ("*": all, first insn)
    rets: bool = False  # RET sites wanted
    calls: tuple[str, ...] = ()  # callees whose result is wanted right after the call
    call_sites: tuple[str, ...] = ()  # callees whose CALL instructions are wanted
    required: bool = True  # absent -> the binary is not supported
    why: str = ""  # optional and absent: what the user loses


def _role(
    name: str,
    *symbols: str,
    reads: tuple[str, ...] = (),
    rets: bool = False,
    required: bool = True,
    why: str = "",
) -> Role:
    return Role(name, symbols or (name,), reads, rets, required=required, why=why)


EXECUTE = _role("runtime.execute", reads=("rax", "rbx"))
# rets: not probed, listed by `gmpmon inspect` (findRunnable's many exits)
FINDRUNNABLE = _role("runtime.findRunnable", rets=True)
GOPARK = _role("runtime.gopark", reads=ARGS[:5])
READY = _role("runtime.ready", reads=("rax", "rbx", "rcx"))
NEWPROC_FUNC1 = _role(
    "runtime.newproc.func1", reads=("rdx",), required=False,
    why="no symbol: runqput from newproc is not told apart",
)
NEWPROC1 = _role("runtime.newproc1", reads=ARGS[:5])
GDESTROY = _role(
    "runtime.gdestroy", reads=("rax",), required=False,
    why="no symbol (Go < 1.22): goroutine exits are seen at runtime.goexit0",
)
GOEXIT0 = _role("runtime.goexit0", reads=("rax",))
ENTERSYSCALL = _role("runtime.entersyscall")
EXITSYSCALL = _role("runtime.exitsyscall")
GOSCHEDIMPL = _role("runtime.goschedImpl", reads=("rax", "rbx"))
RUNQSTEAL = _role("runtime.runqsteal", reads=("rax", "rbx", "rcx"), rets=True)
HANDOFFP = _role("runtime.handoffp", reads=("rax",))
ENTERSYSCALLBLOCK = _role("runtime.entersyscallblock")
PREEMPTONE = _role("runtime.preemptone", reads=("rax",))
GOPREEMPT_M = _role(
    "runtime.gopreempt_m", reads=("rax",), required=False,
    why="no symbol (inlined since Go 1.26): preemptions are seen at "
    "runtime.goschedImpl with preempted=1 instead",
)
# gosched_m(gp *g) (runtime.Gosched and, from 1.21, the GC sweeper's goschedIfBusy), reached
# by mcall: RAX = gp. Only needed up to 1.21, where goschedImpl(gp) does not say why.
GOSCHED_M = _role(
    "runtime.gosched_m", reads=("rax",), required=False,
    why="no symbol: runtime.Gosched calls (the GC sweeper's among them) get no latency",
)
# goyield_m(gp *g) (all versions), by mcall from goyield: a semaphore release that hands
# the semaphore over (a starving sync.Mutex) puts the releaser on its P's runq. RAX = gp.
GOYIELD_M = _role(
    "runtime.goyield_m", reads=("rax",), required=False,
    why="no symbol: yields of a handed-over semaphore get no latency",
)
# The slow way out of a syscall whose P was taken: exitsyscall0(gp *g) (<= 1.25, by mcall)
# and exitsyscallNoP(gp *g) (1.26+) make the G runnable with a bare casgstatus (from
# _Gsyscall, resp. _Grunning on 1.26+, to _Grunnable), then queue it globally or run it on an
# idle P: a goroutine start with no ready().
EXITSYSCALL0 = _role(
    "runtime.exitsyscall0", required=False,
    why="no symbol: goroutines back from a syscall without a P get no latency",
)
EXITSYSCALLNOP = _role(
    "runtime.exitsyscallNoP", required=False,
    why="no symbol: goroutines back from a syscall without a P get no latency",
)
STOPTHEWORLD = _role("runtime.stopTheWorldWithSema", reads=("rax",), rets=True)
STARTTHEWORLD = _role("runtime.startTheWorldWithSema", reads=ARGS[:5])
LOCKSLOW = _role(
    "mutex.lockSlow", "internal/sync.(*Mutex).lockSlow", "sync.(*Mutex).lockSlow",
    reads=("rax",), required=False,
    why="no sync.Mutex slow path in this binary: mutex contention is not traced",
)
# pidleput(pp *p) (1.19) / pidleput(pp *p, now int64) int64 (1.20+): RAX = pp.
PIDLEPUT = _role(
    "runtime.pidleput", reads=("rax",), required=False,
    why="no symbol: a P that goes idle shows as searching until its next event (or a sample)",
)
SEMACQUIRE1 = _role(
    "runtime.semacquire1", reads=ARGS[:5], required=False,
    why="no symbol: semaphore wait reasons are not traced",
)
INJECTGLIST = _role(
    "runtime.injectglist", required=False,
    why="no symbol: netpoll's batched wake-ups get no scheduling latency",
)
GCWORKER = _role(
    "runtime.(*gcControllerState).findRunnableGCWorker", required=False,
    why="no symbol: GC workers' wake-ups get no scheduling latency",
)

# Functions read but not probed: callees whose CALL/result sites are probed, and what
# `gmpmon inspect` shows.
READ_ONLY_ROLES: tuple[Role, ...] = (
    _role("runtime.runqgrab", reads=("rax", "rbx", "rcx", "rdi"), rets=True),
    _role("runtime.runqput", reads=("rax", "rbx", "rcx")),
    # Assembly (ABI0), entered by a call the SIGURG handler injects: every register holds
    # the interrupted user state, so only its very first instruction is safe.
    _role(
        "runtime.asyncPreempt", "runtime.asyncPreempt", "runtime.asyncPreempt.abi0",
        reads=("*",), required=False, why="no symbol: signal-based preemptions are not traced",
    ),
)


@dataclass(frozen=True, slots=True)
class Probe:
    handler: str  # on_<handler> in gmpmon.bpf.c; H_<HANDLER>; GM_PROBE(<handler>, ...)
    hid: int  # handler id: never renumber (PROBE_HITS keys in recordings)
    funcs: tuple[Role, ...]  # where, in preference order (the first this binary has)
    site: str  # ENTRY | RETS | EXITS | CALL_RESULT | CALL | LAST_CALL
    hot: bool  # hot: duty-cycled in default mode, absent in sample mode
    kinds: tuple[Kind, ...]  # event kinds its C handler emits (() = state for another probe)
    feature: str  # Header.features name of what it serves
    why: str  # what is lost when it cannot be placed
    callee: str = ""  # CALL_RESULT / CALL / LAST_CALL: the callee
    go: tuple[int, int] = ANY_GO  # Go minor versions it applies to (inclusive)
    fallback_for: str = ""  # placed only when that handler could not be placed
    ra_define: str = ""  # -D flag: where its return address is relative to RSP at the site

    @property
    def bpf_function(self) -> str:
        """The BPF function of the per-site fallback (kernels without uprobe_multi)."""
        return f"gmpmon_{self.handler}"

    def applies(self, go_minor: int) -> bool:
        return self.go[0] <= go_minor <= self.go[1]


PROBES: tuple[Probe, ...] = (
    Probe("execute", 0, (EXECUTE,), ENTRY, HOT, (Kind.EXECUTE,), "timeline",
          "no runtime.execute: nothing runs"),
    Probe("findrunnable", 1, (FINDRUNNABLE,), ENTRY, HOT, (Kind.FIND_RUNNABLE,), "timeline",
          "no findRunnable entry: searching Ps are not seen"),
    Probe("gopark", 2, (GOPARK,), ENTRY, HOT, (Kind.PARK,), "park", "parks are not seen"),
    Probe("ready", 3, (READY,), ENTRY, HOT, (Kind.READY,), "park", "wake-ups are not seen"),
    # The emulated CALL runqput inside newproc.func1: RAX = P, RBX = the new G (goid set).
    Probe("gocreate", 4, (NEWPROC_FUNC1,), CALL, HOT, (Kind.GO_CREATE,), "goroutines",
          "no CALL runqput in newproc.func1", callee="runtime.runqput"),
    Probe("newproc1_ret", 5, (NEWPROC1,), RETS, HOT, (Kind.GO_CREATE,), "goroutines",
          "no goroutine-creation site", fallback_for="gocreate"),
    Probe("goexit", 6, (GDESTROY, GOEXIT0), ENTRY, HOT, (Kind.GO_EXIT,), "goroutines",
          "goroutine exits are not seen"),
    Probe("sysenter", 7, (ENTERSYSCALL,), ENTRY, HOT, (Kind.SYSCALL_ENTER,), "syscall",
          "syscalls are not seen"),
    Probe("sysexit", 8, (EXITSYSCALL,), ENTRY, HOT, (Kind.SYSCALL_EXIT,), "syscall",
          "syscall returns are not seen"),
    # goschedImpl(gp, preempted bool) from 1.22 (BL = preempted); gopreempt_m before.
    Probe("gosched", 9, (GOSCHEDIMPL,), ENTRY, HOT, (Kind.PREEMPTED,), "preempt",
          "preemptions and Gosched are not seen", go=(22, 99)),
    Probe("steal_try", 10, (RUNQSTEAL,), ENTRY, HOT, (), "steal", "steals are not seen"),
    Probe("steal_got", 11, (RUNQSTEAL,), CALL_RESULT, HOT, (Kind.STEAL,), "steal",
          "no runqgrab result site in runqsteal", callee="runtime.runqgrab"),
    Probe("handoffp", 12, (HANDOFFP,), ENTRY, COLD, (Kind.HANDOFF,), "syscall",
          "P handoffs are not seen"),
    Probe("sysenterblk", 13, (ENTERSYSCALLBLOCK,), ENTRY, COLD, (Kind.SYSCALL_ENTER,),
          "syscall", "blocking syscalls are not seen"),
    Probe("preemptone", 14, (PREEMPTONE,), ENTRY, COLD, (Kind.PREEMPT_REQ,), "preempt",
          "preemption requests are not seen"),
    Probe("gopreempt", 15, (GOPREEMPT_M,), ENTRY, COLD, (Kind.PREEMPTED,), "preempt",
          "preemptions are not seen", go=(0, 21)),
    Probe("stw_stop", 16, (STOPTHEWORLD,), ENTRY, COLD, (Kind.STW_START,), "stw",
          "stop-the-world pauses are not seen"),
    # The world counts as stopped until startTheWorldWithSema has handed the Ps back: the
    # runtime takes its pause's end there (stwTotalTime*, MemStats, the trace's STWDone),
    # just before the one `call wakep`. Its entry is ~200 µs early.
    Probe("stw_start", 17, (STARTTHEWORLD,), LAST_CALL, COLD, (Kind.STW_END,), "stw",
          "stop-the-world ends are not seen", callee="runtime.wakep"),
    Probe("lock_enter", 18, (LOCKSLOW,), ENTRY, COLD, (), "mutex",
          LOCKSLOW.why, ra_define="LOCK_RA_OFF"),
    Probe("lock_exit", 19, (LOCKSLOW,), EXITS, COLD, (Kind.MUTEX_ADDR, Kind.MUTEX), "mutex",
          LOCKSLOW.why),
    Probe("pidleput", 20, (PIDLEPUT,), ENTRY, HOT, (Kind.P_IDLE,), "idle", PIDLEPUT.why),
    # Hot: net/http makes hundreds of semaphore waits a second (fd locks, WaitGroups), which
    # `sample` mode must not pay for (~0.7 µs each at the exits, ~25 µs at a RET).
    Probe("sema_enter", 21, (SEMACQUIRE1,), ENTRY, HOT, (), "waits", SEMACQUIRE1.why,
          ra_define="SEMA_RA_OFF"),
    Probe("sema_exit", 22, (SEMACQUIRE1,), EXITS, HOT, (Kind.MUTEX_ADDR, Kind.MUTEX), "waits",
          SEMACQUIRE1.why),
    # Wake-ups without ready: the bare casgstatus(gp, _Gwaiting, _Grunnable) calls (the C
    # filters on EBX/ECX) of netpoll in findRunnable, of injectglist and of the GC worker.
    Probe("wake_sched", 23, (FINDRUNNABLE,), CALL, HOT, (Kind.WAKE,), "park",
          "netpoll and GC-worker wake-ups get no latency", callee="runtime.casgstatus"),
    Probe("wake_inject", 24, (INJECTGLIST,), CALL, HOT, (Kind.WAKE,), "park",
          INJECTGLIST.why, callee="runtime.casgstatus"),
    Probe("wake_gcworker", 25, (GCWORKER,), CALL, HOT, (Kind.WAKE,), "park",
          GCWORKER.why, callee="runtime.casgstatus"),
    # Running -> Runnable paths up to 1.21 that neither gopreempt_m nor anything else sees:
    # runtime.Gosched, which the GC's background sweeper calls between spans (215 of every
    # 1,000 goroutine starts of Debian's Prometheus, go1.19, under wrk).
    Probe("gosched_m", 26, (GOSCHED_M,), ENTRY, HOT, (Kind.PREEMPTED,), "preempt",
          GOSCHED_M.why, go=(0, 21)),
    # goyield_m: the trace records it as a preemption (GoPreempt), so does gmpmon (a0 = 1).
    Probe("goyield", 27, (GOYIELD_M,), ENTRY, HOT, (Kind.PREEMPTED,), "preempt",
          GOYIELD_M.why),
    # Back from a syscall with no P (the C filters old = _Gsyscall or _Grunning, new =
    # _Grunnable): WAKE with a0 = 1. As rare as the hand-offs whose G finds no P on return.
    Probe("wake_sysexit", 28, (EXITSYSCALLNOP, EXITSYSCALL0), CALL, HOT, (Kind.WAKE,),
          "syscall", EXITSYSCALL0.why, callee="runtime.casgstatus"),
)

HANDLERS: tuple[str, ...] = tuple(p.handler for p in sorted(PROBES, key=lambda p: p.hid))
BY_HANDLER: dict[str, Probe] = {p.handler: p for p in PROBES}


def _roles() -> tuple[Role, ...]:
    """Every runtime function of PROBES and READ_ONLY_ROLES, with the RET, call-result and
    call sites its probes' site rules need."""
    out: dict[str, Role] = {}
    for r in (*(f for p in PROBES for f in p.funcs), *READ_ONLY_ROLES):
        out.setdefault(r.name, r)
    for p in PROBES:
        for f in p.funcs:
            r = out[f.name]
            if p.site in (RETS, EXITS) and not r.rets:
                r = dataclasses.replace(r, rets=True)
            if p.site == CALL_RESULT and p.callee not in r.calls:
                r = dataclasses.replace(r, calls=(*r.calls, p.callee))
            if p.site in (CALL, LAST_CALL) and p.callee not in r.call_sites:
                r = dataclasses.replace(r, call_sites=(*r.call_sites, p.callee))
            out[f.name] = r
    return tuple(out.values())


ROLES: tuple[Role, ...] = _roles()
