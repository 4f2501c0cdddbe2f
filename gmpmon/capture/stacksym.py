"""The fix-ups capture makes to records before the model sees them: a MUTEX record's (caller
pc, kernel stack id) becomes a small stack id, symbolized once, root first; a GO_CREATE's
packed (startpc, gopc) becomes a go site id (capture/gosites.py)."""

from __future__ import annotations

from itertools import compress
from typing import TYPE_CHECKING

from gmpmon.binary.info import BinaryInfo
from gmpmon.capture.gosites import GoSites
from gmpmon.capture.waitrows import WaitRows
from gmpmon.events import MISSED_STACK, EventTuple, Kind, unknown_frame

if TYPE_CHECKING:
    from gmpmon.capture.bpfprog import BpfProgram

_MUTEX = int(Kind.MUTEX)
_GO_CREATE = int(Kind.GO_CREATE)


def fix_go_sites(go_sites: GoSites, events: list[EventTuple], kinds: list[int]) -> None:
    """GO_CREATE records carry the new G's packed (startpc, gopc): make it a go site id."""
    if _GO_CREATE not in kinds:
        return
    packed, known = go_sites.packed, go_sites.by_word.get
    for i in compress(range(len(kinds)), map(_GO_CREATE.__eq__, kinds)):
        e = events[i]
        word = e[6]
        if word:
            sid = known(word)
            events[i] = (e[0], e[1], e[2], e[3], e[4], e[5],
                         packed(word) if sid is None else sid)


class MutexStacks:
    def __init__(self) -> None:
        self._ids: dict[int, int] = {}
        self._new: dict[int, tuple[str, ...]] = {}  # defined since the last fix()
        self._rows: WaitRows | None = None

    def fix(self, events: list[EventTuple], kinds: list[int], prog: BpfProgram | None,
            info: BinaryInfo) -> dict[int, tuple[str, ...]]:
        """MUTEX records carry (caller pc << 16 | kernel stack id): give each distinct pair a
        small stack id and symbolize it once, root first. Returns the new stacks (those of
        the rows read since the last call too). ``info`` is the capture's now: `run` of a
        PIE learns its load bias after the exec."""
        if _MUTEX in kinds:
            for i in compress(range(len(kinds)), map(_MUTEX.__eq__, kinds)):
                e = events[i]
                events[i] = (e[0], e[1], e[2], e[3], e[4], e[5], self.sid(e[6], prog, info))
        new, self._new = self._new, {}
        return new

    def sid(self, word: int, prog: BpfProgram | None, info: BinaryInfo) -> int:
        """The small stack id of a (caller pc << 16 | kernel stack id) word; a new one is
        symbolized and handed on by the next fix()."""
        sid = self._ids.get(word)
        if sid is None:
            sid = len(self._ids) + 1
            self._ids[word] = sid
            self._new[sid] = self.symbolize(word, prog, info)
        return sid

    def read_rows(self, now: int, out: list[EventTuple], prog: BpfProgram,
                  info: BinaryInfo) -> None:
        """MUTEX_ROWS events for the rows of the kernel's `wait_rows` hash that grew since
        the last call (their stacks handed on by the next fix())."""
        if self._rows is None:
            self._rows = WaitRows(prog.bpf[b"wait_rows"])
        self._rows.read(now, out, lambda word: self.sid(word, prog, info))

    def symbolize(self, word: int, prog: BpfProgram | None, info: BinaryInfo
                  ) -> tuple[str, ...]:
        kid = word & 0xFFFF
        caller = word >> 16
        pcs = prog.stack(kid) if (prog is not None and kid != 0xFFFF) else []
        # Kernels >= 6.10 add the caller themselves for a probe on a function's `push rbp`
        # (is_uprobe_at_func_entry); older ones miss it.
        if not pcs:
            pcs = [caller] if caller else []
        elif caller and (len(pcs) < 2 or pcs[1] != caller):
            pcs = [pcs[0], caller, *pcs[1:]]
        bias = info.load_bias
        frames = []
        for i, pc in enumerate(pcs):
            # Return addresses point after the CALL: look up pc-1 to stay inside the caller.
            name = info.functab.lookup(pc - bias - (1 if i else 0))
            frames.append(name if name else unknown_frame(pc))
        if not frames:
            frames = list(MISSED_STACK)
        return tuple(reversed(frames))
