"""`gmpmon attach` (placeholder until its issue lands: exits 1 with a clear line)."""

from __future__ import annotations

import argparse
from typing import Any

from gmpmon.errors import GmpmonError


def add_parser(sub: Any) -> None:
    p = sub.add_parser("attach", help="attach (not implemented yet)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    raise GmpmonError("'attach' is not implemented yet")
