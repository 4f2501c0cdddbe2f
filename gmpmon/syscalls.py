"""Linux x86-64 system call names by number (the kernel's arch/x86/entry/syscalls/syscall_64.tbl).

The table is syscalls_x86_64.json next to this file, generated from
/usr/include/x86_64-linux-gnu/asm/unistd_64.h (Linux 6.1 UAPI headers) plus the numbers added
up to Linux 6.15; pure data, so the model and reports can name syscalls without BCC (whose
bcc.syscall table stops at 334). Data, not code: gmpmon's sources never name the syscalls that
write another process's memory (tests/unit/test_hardening_security.py).
"""

from __future__ import annotations

import json
from pathlib import Path

NAMES: dict[int, str] = {
    int(k): v
    for k, v in json.loads((Path(__file__).parent / "syscalls_x86_64.json").read_text()).items()
}


def syscall_name(nr: int) -> str:
    """The name of syscall ``nr`` ("read"), or "syscall_N" when unknown."""
    return NAMES.get(nr, f"syscall_{nr}")
