"""Go's runtime/trace as an oracle: the facts of one trace, from `go tool trace -d=parsed`.

The 1.27 toolchain's `go tool trace` reads traces of Go 1.21 and later and prints each event
as one line (``M=.. P=.. G=.. StateTransition Time=.. GoID=7 Waiting->Runnable ...``,
``RangeBegin Time=.. Name="stop-the-world (GC mark termination)" ...``), stacks on indented
lines after it. ``parse_trace`` streams that text once and keeps what the tests compare:

- ``stw``: (name, begin, end) of every stop-the-world range; ``gc_stw_ns`` sums the GC ones;
- ``latencies``: for each G that became Runnable (from Waiting, NotExist or Running) and then
  ran, the time in between, with where it came from: the trace's scheduling latency;
- ``starts_by_p``: Runnable->Running per P; ``created``; ``parks`` by wait reason;
  ``transitions``: every goroutine state transition, counted by (from, to);
  ``syscalls``: Running->Syscall;
- ``to_runnable``: Running->Runnable by reason ("preempted", "runtime.Gosched");
- ``proc_steals``: Ps taken from a goroutine in a syscall (the P's Syscall->Idle: ProcSteal);
- ``created_at``: goid -> when it was created (to line gmpmon's clock up with a trace whose
  times are relative to its start);
- ``moved``: starts on another P than the one whose event made the G runnable (a steal, or
  the global queue: the trace does not record runq steals themselves).

Latencies count from Waiting, NotExist, Running and Syscall (a G back from a syscall
without a P is queued: Syscall->Runnable).

Times are the runtime's nanotime (CLOCK_MONOTONIC), the clock gmpmon's BPF timestamps use.
"""

from __future__ import annotations

import re
import subprocess
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.gotargets import ensure_go

_HEAD = re.compile(r"^M=(-?\d+) P=(-?\d+) G=(-?\d+) (\w+) Time=(\d+)")
_TRANSITION = re.compile(r"GoID=(\d+) (\w+)->(\w+) Reason=\"([^\"]*)\"")
_NAME = re.compile(r'Name="([^"]*)"')
_PROC = re.compile(r"ProcID=(\d+) (\w+)->(\w+)")
# The old format's syscall exit that takes a P: GoSysExit and GoStart 0.3 us apart (nats-server)
EXIT_TAKE_NS = 5_000


@dataclass
class TraceFacts:
    stw: list[tuple[str, int, int]] = field(default_factory=list)
    latencies: list[tuple[str, int]] = field(default_factory=list)  # (from state, ns)
    starts_by_p: Counter[int] = field(default_factory=Counter)
    created: int = 0
    parks: Counter[str] = field(default_factory=Counter)
    # every goroutine transition, (from, to): ("Running", "Syscall") is a syscall or cgo call
    # entered, ("Syscall", "Runnable") one left without a P (it was retaken meanwhile)
    transitions: Counter[tuple[str, str]] = field(default_factory=Counter)
    to_runnable: Counter[str] = field(default_factory=Counter)
    proc_steals: int = 0
    # a P taken Running->Idle by an M with no P and no G: sysmon's retake (ProcSteal), which
    # then hands the P off (1.22+; a stop-the-world's takes run on a G)
    sysmon_steals: int = 0
    created_at: dict[int, int] = field(default_factory=dict)
    moved: int = 0
    syscalls: int = 0  # Running->Syscall
    syscall_lost_p: int = 0  # Syscall->Runnable: back from a syscall without its P
    lost_p_spans: list[tuple[int, int]] = field(default_factory=list)  # (enter, exit) of those
    # Of those, the ones whose P another goroutine's syscall exit took while this one was in
    # its syscall, the P never stopped (old format, Go <= 1.21): exitsyscallfast CASes its
    # M's old P out of _Psyscall, and exitsyscallfast_reacquired then declares the P's
    # current syscall blocked (traceGoSysBlock) with no handoffp. 1.22+ traces show that
    # take as a ProcSteal instead, so there it stays in lost_p_spans only.
    lost_p_taken_on_exit: list[tuple[int, int]] = field(default_factory=list)
    moved_created: int = 0  # moved starts of new goroutines (queued on their creator's P)
    p_running_ns: Counter[int] = field(default_factory=Counter)  # P id -> ns held by an M
    p_running: list[tuple[int, int, int]] = field(default_factory=list)  # (P, begin, end)
    # (time, what) of each start, creation, syscall, park ("park:<reason>"), Running->
    # Runnable ("yield:<reason>"), move ("moved"), sysmon retake ("retake") and syscall left
    # without its P ("lost-p"): to count them within spans (default mode's windows)
    timeline: list[tuple[int, str]] = field(default_factory=list)

    def counts_within(self, spans: list[tuple[int, int]]) -> Counter[str]:
        """``timeline``'s events by what, within the given (begin, end) spans."""
        out: Counter[str] = Counter()
        for ts, what in self.timeline:
            if any(b <= ts <= e for b, e in spans):
                out[what] += 1
        return out

    def p_running_within(self, spans: list[tuple[int, int]]) -> int:
        """ns the Ps were Running within the given (begin, end) spans (disjoint)."""
        return sum(max(0, min(e, we) - max(b, wb))
                   for _, b, e in self.p_running for wb, we in spans)
    # The first and the last state change (a goroutine's or a P's): the span in which the
    # trace saw the program run. Not the first and last event: a 1.22+ trace ends with the
    # status of every goroutine (X->X), written when StopTrace's traceAdvance gets to it,
    # after tracing stopped for everyone else: gmpmon's window cut there counts what ran in
    # between, which the trace did not record. On a loaded host that gap can be long; the
    # likely cause of one CI run's Caddy counts all above the trace's (runtime.Gosched 2883
    # against 2522, syscalls +41, creations +2), never seen since.
    first_ns: int = 0
    last_ns: int = 0

    @property
    def gc_stw(self) -> list[tuple[str, int, int]]:
        return [s for s in self.stw if "GC" in s[0]]

    @property
    def gc_stw_ns(self) -> int:
        return sum(e - b for _, b, e in self.gc_stw)

    def latency_ns(self) -> list[int]:
        return sorted(ns for _, ns in self.latencies)


def quantile(values: list[int], q: float) -> int:
    """The value at rank ceil(q * n) (1-based) of sorted ``values``."""
    if not values:
        return 0
    rank = max(1, -(-round(q * 1000) * len(values) // 1000))
    return values[rank - 1]


def parsed_lines(path: Path) -> Iterator[str]:
    """The lines of `go tool trace -d=parsed PATH` (1.27's tool), streamed; raises if the tool
    fails."""
    go = ensure_go("1.27")
    with subprocess.Popen(
        [str(go), "tool", "trace", "-d=parsed", str(path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1 << 20,
    ) as p:
        assert p.stdout is not None
        yield from p.stdout
        err = p.stderr.read() if p.stderr else ""
    if p.returncode != 0:
        raise RuntimeError(f"go tool trace -d=parsed {path} failed: {err[-2000:]}")


def parse_trace(path: Path) -> TraceFacts:
    facts = TraceFacts()
    runnable_at: dict[int, tuple[str, int]] = {}
    runnable_p: dict[int, int] = {}
    in_syscall: dict[int, int] = {}
    syscall_p: dict[int, int] = {}  # goid in a syscall -> the P it entered it on
    p_syscallers: dict[int, set[int]] = {}  # P -> goids in a syscall entered on it
    back_at: dict[int, int] = {}  # goid -> when it came back from a syscall without a P
    taken_on_exit: set[int] = set()  # goids whose syscall's P a syscall exit took
    p_since: dict[int, int] = {}  # P id -> when it went Running
    open_ranges: dict[tuple[int, str], int] = {}
    for line in parsed_lines(path):
        if line[0] != "M":
            continue
        h = _HEAD.match(line)
        if h is None:
            continue
        kind, ts = h.group(4), int(h.group(5))
        if kind == "StateTransition":
            t = _TRANSITION.search(line, h.end())
            if t is None:
                pt = _PROC.search(line, h.end())
                if pt is None:
                    continue
                pid, pold, pnew = int(pt.group(1)), pt.group(2), pt.group(3)
                if pold != pnew:
                    if not facts.first_ns:
                        facts.first_ns = ts
                    facts.last_ns = ts
                p_syscallers.pop(pid, None)  # the P stopped: no exit took it from them
                if pold == "Syscall" and pnew == "Idle":
                    facts.proc_steals += 1
                elif (pnew == "Idle" and pold == "Running" and h.group(2) == "-1"
                      and h.group(3) == "-1"):
                    facts.sysmon_steals += 1
                    facts.timeline.append((ts, "retake"))
                if pnew == "Running" and pid not in p_since:
                    p_since[pid] = ts
                elif pnew != "Running" and pid in p_since:
                    began = p_since.pop(pid)
                    facts.p_running_ns[pid] += ts - began
                    facts.p_running.append((pid, began, ts))
                continue
            goid, old, new, reason = int(t.group(1)), t.group(2), t.group(3), t.group(4)
            if old != new:
                if not facts.first_ns:
                    facts.first_ns = ts
                facts.last_ns = ts
            facts.transitions[(old, new)] += 1
            if new == "Runnable":
                if old in ("Waiting", "NotExist", "Running", "Syscall"):
                    runnable_at[goid] = (old, ts)
                    runnable_p[goid] = int(h.group(2))
                if old == "NotExist":
                    facts.created += 1
                    facts.timeline.append((ts, "create"))
                    facts.created_at[goid] = ts
                elif old == "Running":
                    facts.to_runnable[reason] += 1
                    facts.timeline.append((ts, "yield:" + reason))
                elif old == "Syscall":
                    facts.syscall_lost_p += 1
                    facts.timeline.append((ts, "lost-p"))
                    back_at[goid] = ts
                    if goid in in_syscall:
                        span = (in_syscall.pop(goid), ts)
                        facts.lost_p_spans.append(span)
                        if goid in taken_on_exit:
                            facts.lost_p_taken_on_exit.append(span)
            elif new == "Syscall" and old == "Running":
                facts.syscalls += 1
                facts.timeline.append((ts, "syscall"))
                in_syscall[goid] = ts
                syscall_p[goid] = int(h.group(2))
                p_syscallers.setdefault(int(h.group(2)), set()).add(goid)
            elif new == "Running" and old == "Runnable":
                on_p = int(h.group(2))
                if ts - back_at.pop(goid, -EXIT_TAKE_NS - 1) <= EXIT_TAKE_NS:
                    # back from a syscall and running at once on a P that others' syscalls
                    # still hold, which never stopped: exitsyscallfast took it from them
                    taken_on_exit.update(g for g in p_syscallers.pop(on_p, set())
                                         if g != goid)
                facts.starts_by_p[on_p] += 1
                facts.timeline.append((ts, "start"))
                was = runnable_at.pop(goid, None)
                if was is not None:
                    facts.latencies.append((was[0], ts - was[1]))
                made_on = runnable_p.pop(goid, -1)
                if made_on >= 0 and made_on != on_p:
                    facts.moved += 1
                    facts.timeline.append((ts, "moved"))
                    if was is not None and was[0] == "NotExist":
                        facts.moved_created += 1
            elif new == "Waiting" and old == "Running":
                facts.parks[reason] += 1
                facts.timeline.append((ts, "park:" + reason))
                runnable_at.pop(goid, None)
            if old == "Syscall":  # out of the syscall, with or without its P
                p_syscallers.get(syscall_p.pop(goid, -1), set()).discard(goid)
                taken_on_exit.discard(goid)
        elif kind in ("RangeBegin", "RangeEnd"):
            n = _NAME.search(line, h.end())
            if n is None or not n.group(1).startswith("stop-the-world"):
                continue
            key = (int(h.group(1)), n.group(1))
            if kind == "RangeBegin":
                open_ranges[key] = ts
            elif key in open_ranges:
                facts.stw.append((n.group(1), open_ranges.pop(key), ts))
    for pid, since in p_since.items():
        facts.p_running_ns[pid] += facts.last_ns - since
        facts.p_running.append((pid, since, facts.last_ns))
    return facts


@dataclass
class MutexParks:
    """sync.Mutex parks in one trace: goroutines that parked in ``sync.(*Mutex).Lock``
    (lockSlow's semacquire: the trace's "sync" block with Lock on its stack) and for how long,
    until made runnable. A subset of a lock's slow path: spins and the time runnable after
    the wake are not in it."""

    span_ns: int = 0
    parks: Counter[str] = field(default_factory=Counter)  # function on the stack -> parks
    parked_ns: Counter[str] = field(default_factory=Counter)  # function on the stack -> ns
    total_parks: int = 0
    total_ns: int = 0


def mutex_parks(path: Path) -> MutexParks:
    """Every function on the stacks of a trace's sync.Mutex parks, with the parks and the
    parked time it was on the stack of (so a lock's caller, and its callers, are found by
    name, as gmpmon's lock-contention finding names its site)."""
    out = MutexParks()
    parked: dict[int, tuple[int, set[str]]] = {}  # goid -> (since, functions on its stack)
    first = last = 0
    stack: set[str] | None = None  # the stack being read (of the park just seen)
    goid = since = 0
    for line in parsed_lines(path):
        if line[:1] == "\t":
            if stack is not None and " @ " in line and not line.startswith("\t\t"):
                stack.add(line.strip().split(" @ ", 1)[0])
            continue
        if stack is not None and not line.startswith("TransitionStack"):
            if "sync.(*Mutex).Lock" in stack:
                parked[goid] = (since, stack)
            stack = None
        if line[:1] != "M":
            continue
        h = _HEAD.match(line)
        if h is None or h.group(4) != "StateTransition":
            continue
        t = _TRANSITION.search(line, h.end())
        if t is None:
            continue
        ts, g, old, new = int(h.group(5)), int(t.group(1)), t.group(2), t.group(3)
        if old == new:
            continue
        first = first or ts
        last = ts
        if old == "Running" and new == "Waiting" and t.group(4) == "sync":
            stack, goid, since = set(), g, ts
        elif old == "Waiting" and g in parked:
            began, fns = parked.pop(g)
            out.total_parks += 1
            out.total_ns += ts - began
            for fn in fns:
                out.parks[fn] += 1
                out.parked_ns[fn] += ts - began
    out.span_ns = last - first
    return out
