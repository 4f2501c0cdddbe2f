"""`gmpmon doctor`: one line per prerequisite, ok/FAIL/warn, with the exact fix on failure.

Exits 0 only when gmpmon can attach (every required check passed).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from gmpmon.errors import KernelSupportError, PermissionDenied

EPILOG = """\
examples:
  sudo gmpmon doctor                       # can this machine attach?
  BCC_KERNEL_SOURCE=/path/to/headers sudo -E gmpmon doctor
"""


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "doctor",
        help="check that this machine can attach (root, BPF, uprobes, headers, ...)",
        description="Check every prerequisite of `gmpmon attach`; print the fix for each failure.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from gmpmon.doctor import Status, run_checks

    checks = run_checks()
    width = max(len(c.name) for c in checks)
    for c in checks:
        line = f"{c.status.value:<4}  {c.name:<{width}}  {c.detail}"
        if c.fix and c.status is not Status.OK:
            line += f"\n      {'':<{width}}  fix: {c.fix}"
        print(line)
    sys.stdout.flush()
    blocking = [c for c in checks if c.blocks_attach]
    if not blocking:
        print("gmpmon can attach on this machine.")
        return 0
    names = ", ".join(c.name for c in blocking)
    if blocking[0].name == "privileges":
        raise PermissionDenied(f"cannot attach: {names} failed", hint="see the fixes above")
    raise KernelSupportError(f"cannot attach: {names} failed", hint="see the fixes above")
