"""Where goroutines come from: (gopc, startpc) pairs named once, as ``Batch.stacks`` entries.

A goroutine's *start function* is ``g.startpc``; its *creation site* is the ``go`` statement,
``g.gopc`` (the return address of the call newproc makes there: ``gopc - 1`` stays inside
it), named by the function that holds it and its file:line. Both the census (every live
goroutine, capture/census.py) and GO_CREATE records (the probe reads them from the new G,
probes/gmpmon.bpf.c: gm_go_site) refer to a pair by one stack id from :data:`GO_SITE_BASE`
up, whose frames are ``(start function, creating function, "file.go:line")``. The start
function of ``go f(x)`` is f, not the ``gowrapN`` closure Go 1.22+ builds around the call.

Shared by the census thread and capture's thread: one lock. Bounded: at most
``MAX_SITES`` distinct pairs (a program has as many as it has ``go`` statements; more means
closures built at run time); past that a pair gets id 0 (no site).
"""

from __future__ import annotations

import bisect
import os
import re
import struct
import threading

from gmpmon.binary.elf import Elf
from gmpmon.binary.info import BinaryInfo
from gmpmon.binary.load import read_file_stat
from gmpmon.binary.pcline import LineTable, short_path
from gmpmon.binary.probes import disasm_lite
from gmpmon.errors import GmpmonError
from gmpmon.events import GO_SITE_BASE, unknown_frame

MAX_SITES = 50_000
_GOWRAP = re.compile(r"\.gowrap\d+$")
Stacks = dict[int, tuple[str, ...]]


class GoSites:
    def __init__(self, info: BinaryInfo) -> None:
        self.info = info
        self._lock = threading.Lock()
        self._ids: dict[tuple[int, int], int] = {}
        self._new: Stacks = {}
        self.by_word: dict[int, int] = {}
        self._names: dict[tuple[int, int], tuple[str, str, str]] = {}
        self._lines: LineTable | None = None
        self._lines_tried = False
        self._text: tuple[int, int, int] | None = None  # .text: address, file offset, size
        ft = info.functab
        self.text_lo = (ft.starts[0] if ft.starts else 0) + info.load_bias

    def rebind(self, info: BinaryInfo) -> None:
        """`run` of a PIE: the load bias is known only after exec (before any record)."""
        self.info = info
        self.by_word.clear()
        ft = info.functab
        self.text_lo = (ft.starts[0] if ft.starts else 0) + info.load_bias

    def sid(self, gopc: int, startpc: int) -> int:
        """The stack id of this pair (runtime addresses), naming it the first time."""
        key = (gopc, startpc)
        with self._lock:
            sid = self._ids.get(key)
            if sid is None:
                if len(self._ids) >= MAX_SITES:
                    return 0
                sid = self._ids[key] = GO_SITE_BASE + len(self._ids) + 1
                self._new[sid] = self._named(key)
            return sid

    def names(self, gopc: int, startpc: int) -> tuple[str, str, str]:
        """(start function, creating function, file:line) of this pair."""
        with self._lock:
            return self._named((gopc, startpc))

    def _named(self, key: tuple[int, int]) -> tuple[str, str, str]:
        name = self._names.get(key)
        if name is None:
            name = self._name(*key)
            if len(self._names) < MAX_SITES:
                self._names[key] = name
        return name

    def packed(self, word: int) -> int:
        """The stack id of GO_CREATE's a1 (low32(startpc) | low32(gopc) << 32); 0 stays 0."""
        if not word:
            return 0
        sid = self.by_word.get(word)  # capture's thread only: no lock on the way in
        if sid is not None:
            return sid
        lo = self.text_lo
        start = lo + (((word & 0xFFFFFFFF) - lo) & 0xFFFFFFFF)
        gopc = lo + (((word >> 32) - lo) & 0xFFFFFFFF)
        sid = self.sid(gopc, start)
        if len(self.by_word) < MAX_SITES:
            self.by_word[word] = sid
        return sid

    def take(self) -> Stacks:
        """The names given since the last call (to go out ahead of the events using them)."""
        with self._lock:
            new, self._new = self._new, {}
        return new

    def _name(self, gopc: int, startpc: int) -> tuple[str, str, str]:
        bias = self.info.load_bias
        look = self.info.functab.lookup
        start = (look(startpc - bias) if startpc else None) or unknown_frame(startpc)
        if _GOWRAP.search(start):
            start = self._wrapped(startpc - bias) or start
        creator = (look(gopc - 1 - bias) if gopc else None) or unknown_frame(gopc)
        where = ""
        lines = self._line_table()
        if lines is not None and gopc:
            at = lines.at(gopc - 1 - bias)
            if at is not None:
                where = f"{short_path(at[0])}:{at[1]}"
        return (start, creator, where)

    def _wrapped(self, entry: int) -> str | None:
        """The function a ``go f(x)`` wrapper (``main.main.gowrap1``, Go 1.22+) calls: its
        first CALL on the ``go`` statement's line (the wrapper's own). None when f was
        inlined into it: its calls then sit on f's lines (``go sleeper()`` would otherwise
        read as ``time.Sleep``)."""
        ft = self.info.functab
        i = bisect.bisect_right(ft.starts, entry) - 1
        lines = self._line_table()
        if i < 0 or self._text is None or lines is None:
            return None
        home = lines.at(entry)
        addr, off, size = self._text
        end = min(ft.ends[i], entry + 512)
        if not addr <= entry < end <= addr + size:
            return None
        try:
            with open(self.info.path, "rb") as f:
                code = os.pread(f.fileno(), end - entry, off + entry - addr)
        except (OSError, OverflowError):  # a hostile .text offset (>= 2^63): OverflowError
            return None
        for at, _n, mnemonic, op in disasm_lite(code, entry):
            if mnemonic == "call" and op.startswith("0x") and lines.at(at) == home:
                name = ft.lookup(int(op, 16))
                if name and not name.startswith("runtime.morestack"):
                    return name
        return None

    def _line_table(self) -> LineTable | None:
        if not self._lines_tried:
            self._lines_tried = True
            try:
                # Mapped, not read whole: an executable padded to gigabytes costs nothing.
                elf = Elf(read_file_stat(self.info.path)[0], self.info.path)
                self._lines = LineTable(elf)
                text = elf.section(".text")
                if text is not None:
                    self._text = (text.addr, text.offset, text.size)
            except (OSError, GmpmonError, ValueError, IndexError, struct.error):
                self._lines = None  # names without file:line
        return self._lines
