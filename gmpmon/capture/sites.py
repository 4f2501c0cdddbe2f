"""Where each probe goes, as the attach code needs it: a handler on a file address.

The sites themselves (entry, RETs, call and call-result sites) are computed once, by the
binary layer (BinaryInfo.probe_sites, gmpmon/binary/probes.py); which handler goes where is
the probe table's (gmpmon/probetable.py). This module only maps addresses to file offsets.
"""

from __future__ import annotations

from dataclasses import dataclass

from gmpmon.probetable import Probe


@dataclass(frozen=True, slots=True)
class Site:
    """One uprobe to attach: a probe-table handler on a file-virtual address."""

    probe: Probe
    addr: int  # link-time virtual address in the file
    role: str  # which runtime function symbol (for messages and docs)
    cond: int = 0  # EXITS: fire only when this x86 condition holds (gmpmon/binary/exits.py)

    @property
    def hot(self) -> bool:  # hot probes are duty-cycled in default mode, absent in sample
        return self.probe.hot

    @property
    def hid(self) -> int:  # the handler id
        return self.probe.hid

    @property
    def cookie(self) -> int:  # the attach cookie: the handler id, the condition above it
        return self.probe.hid | self.cond << 32


class BinaryText:
    """Maps an ELF file's virtual addresses to file offsets (uprobes attach by offset)."""

    def __init__(self, path: str) -> None:
        from elftools.elf.elffile import ELFFile

        with open(path, "rb") as f:
            elf = ELFFile(f)
            self._segs = [
                (s["p_vaddr"], s["p_filesz"], s["p_offset"])
                for s in elf.iter_segments()
                if s["p_type"] == "PT_LOAD"
            ]
        self.path = path

    def file_offset(self, vaddr: int) -> int | None:
        for va, size, off in self._segs:
            if va <= vaddr < va + size:
                return int(off + vaddr - va)
        return None

