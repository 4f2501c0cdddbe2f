"""The legal G and P transitions of the model's state machines (gmpmon/model/sched.py), one
row per event kind: the states a G (a P) may be in when that event happens to it, and the
state it moves to. Anything else is a violation, counted by kind (Snapshot.violations); the
state moves on and nothing raises. The states are plain ints here (IntEnum compares are
slower in the hot loop)."""

from __future__ import annotations

from gmpmon.events import Kind
from gmpmon.model.values import GState, PState

P_UNKNOWN, P_RUNNING, P_SEARCHING, P_IDLE, P_SYSCALL, P_GCSTOP = (int(s) for s in PState)
G_UNKNOWN, G_RUNNABLE, G_RUNNING, G_WAITING, G_SYSCALL, G_DEAD = (int(s) for s in GState)
ANY_P = frozenset(int(s) for s in PState)

# The legal G transitions, one row per event kind: the states a G may be in when that event
# happens to it (UNKNOWN always qualifies: attached mid-flight, or after a loss/window edge),
# and the state it moves to. Anything else is a G violation.
LEGAL_G: dict[int, tuple[frozenset[int], int]] = {
    # WAITING -> RUNNING without a READY is real: injectglist (netpoll wake-ups, GC assist
    # wake-ups) and findRunnableGCWorker make Gs runnable with a bare casgstatus, no ready().
    Kind.EXECUTE: (frozenset({G_UNKNOWN, G_RUNNABLE, G_WAITING}), G_RUNNING),
    Kind.PARK: (frozenset({G_UNKNOWN, G_RUNNING}), G_WAITING),
    Kind.READY: (frozenset({G_UNKNOWN, G_WAITING}), G_RUNNABLE),
    Kind.GO_CREATE: (frozenset({G_UNKNOWN}), G_RUNNABLE),
    Kind.GO_EXIT: (frozenset({G_UNKNOWN, G_RUNNING}), G_DEAD),
    Kind.SYSCALL_ENTER: (frozenset({G_UNKNOWN, G_RUNNING}), G_SYSCALL),
    # exitsyscall with its P: running again; without: queued, or an idle P taken silently.
    Kind.SYSCALL_EXIT: (frozenset({G_UNKNOWN, G_SYSCALL}), G_RUNNING),
    Kind.PREEMPTED: (frozenset({G_UNKNOWN, G_RUNNING}), G_RUNNABLE),
}

# The legal P transitions, the same way. A P found in another state is a P violation only
# with evidence: the G we believe is running on it (same epoch) never left it as far as we saw.
LEGAL_P: dict[int, tuple[frozenset[int], int]] = {
    # EXECUTE on a P RUNNING another G: that G's leaving was missed.
    Kind.EXECUTE: (ANY_P - {P_RUNNING}, P_RUNNING),
    # pidleput: its M searched and gave up, a syscall's P handed off, a stopped world
    # restarted, or a repeat.
    Kind.P_IDLE: (frozenset({P_UNKNOWN, P_SEARCHING, P_IDLE, P_SYSCALL, P_GCSTOP}), P_IDLE),
    Kind.FIND_RUNNABLE: (ANY_P, P_SEARCHING),  # a G left by a path not probed: no violation
    # handoffp: idle, or SEARCHING when its runq or the global one has work (startm); in
    # sample mode without work, UNKNOWN until the next status read (sched.on_handoff).
    Kind.HANDOFF: (ANY_P, P_IDLE),
    Kind.SYSCALL_ENTER: (ANY_P, P_SYSCALL),
    Kind.STW_START: (ANY_P, P_GCSTOP),
}
LEGAL_P_IDLE_FROM = LEGAL_P[Kind.P_IDLE][0]
# The hot handlers' rows, looked up once.
G_FROM = {int(k): v[0] for k, v in LEGAL_G.items()}
G_FROM_EXECUTE, G_FROM_PARK, G_FROM_READY = (
    G_FROM[Kind.EXECUTE], G_FROM[Kind.PARK], G_FROM[Kind.READY]
)
P_FROM_EXECUTE = LEGAL_P[Kind.EXECUTE][0]
