"""A function's way out, on instructions the kernel emulates: the branches into its epilogue.

A RET is single-stepped by the x86 uprobe code (~25 µs a hit here), and for a function that
returns with a lock held (sync.Mutex's lockSlow) those 25 µs lengthen every contended
critical section: on Prometheus 2.42 under wrk the waiters piled up behind gmpmon's own RET
probe (HACKING.md, "Prometheus's Tracer-mutex finding"). Conditional and direct jumps are
emulated (~0.7 µs). So the exit is moved back from each RET to the edges into its *tail*: the
straight-line code that ends in the RET (no call, no branch; at most ``MAX_TAIL``
instructions), reached only by

* a direct ``jmp`` into the tail: the probe fires whenever it runs (condition 0);
* a ``jcc`` into the tail: the probe fires when the jump is taken (condition ``0x10 | cc``);
* a ``jcc`` that falls through into the tail: fires when it is not taken (``0x10 | cc ^ 1``);
* a direct ``call`` whose return lands in the tail (semacquire1's last ``releaseSudog``):
  fires whenever it runs, before the callee (bookkeeping after the wait has ended).

The condition is the x86 condition-code nibble of the jump (``0x7c`` jl -> cc 0xc); the BPF
side (``gm_cond``, probes/gmpmon.bpf.c) evaluates it on the user's RFLAGS in the trap's
registers, which are the flags the jump is about to test. A function whose tails cannot be
reached that way (an indirect jump anywhere, an indirect call returning into a tail, a tail
over ``MAX_TAIL``) keeps its RETs.

The exit then fires a few instructions before the RET: in lockSlow the tail is the starving
hand-off's ``lock xadd`` (where the lock is taken) and the frame teardown; nothing the exit
handlers read (R14, the goroutine) changes there.
"""

from __future__ import annotations

from gmpmon.binary.probes import Lite, is_emulated, jcc_cc, lite_target

MAX_TAIL = 16  # instructions from a tail's first to its RET
COND = 0x10  # a site's condition: bit 4 set = conditional, low nibble = the x86 cc


def find_exit_edges(code: bytes, entry: int, lite: list[Lite]) -> tuple[tuple[int, int], ...]:
    """(address, condition) of every emulated branch into a RET's tail, covering every RET of
    the function; () when some RET cannot be covered that way (then probe the RETs)."""
    rets = [k for k, i in enumerate(lite) if i[2] == "ret"]
    if not rets:
        return ()
    if any(i[2].startswith("j") and lite_target(i) is None for i in lite):
        return ()  # an indirect jump (a jump table) could enter a tail unseen

    def raw(k: int) -> bytes:
        a, s, _m, _o = lite[k]
        return code[a - entry: a - entry + s]

    tail: set[int] = set()  # addresses of the tails' instructions
    falls: list[int] = []  # jccs that fall through into a tail
    calls: list[int] = []  # calls that return into a tail
    for r in rets:
        k = r
        while True:
            tail.add(lite[k][0])
            if r - k + 1 > MAX_TAIL:
                return ()
            if k == 0:
                return ()  # the function's first instruction is in a tail: no way in to probe
            prev = lite[k - 1]
            mnem = prev[2]
            if mnem in ("ret", "jmp", "int3", "ud2"):
                break  # no fall-through into the tail: only jumps enter it
            if mnem.startswith("j"):
                falls.append(k - 1)
                break
            if mnem == "call":
                calls.append(k - 1)  # a direct call returns into the tail: it is a way in
                break
            k -= 1
    out: dict[int, int] = {}
    for k, insn in enumerate(lite):
        if insn[0] in tail:
            continue
        t = lite_target(insn)
        if t is None or t not in tail or insn[2] == "call":
            continue
        b = raw(k)
        if not is_emulated(b):
            return ()
        cc = jcc_cc(b)
        out[insn[0]] = 0 if cc is None else COND | cc
    for k in falls:
        b = raw(k)
        cc = jcc_cc(b)
        if cc is None or not is_emulated(b):
            return ()
        a = lite[k][0]
        out[a] = 0 if a in out else COND | (cc ^ 1)  # both ways lead into a tail: always
    for k in calls:
        if lite_target(lite[k]) is None or not is_emulated(raw(k)):
            return ()  # an indirect call: single-stepped
        out[lite[k][0]] = 0
    return tuple(sorted(out.items()))
