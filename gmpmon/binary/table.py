"""Per-Go-minor facts for binaries without DWARF: offsets_table.json and status names.

offsets_table.json is written by scripts/gen-offsets-table from the DWARF (offsets) and the
runtime's own string arrays (wait and STW reasons) of reference builds of every toolchain.
"""

from __future__ import annotations

import json
import os
from functools import cache
from importlib import resources
from typing import Any

from gmpmon.errors import UnsupportedError

TABLE_FILE = "offsets_table.json"

# runtime2.go: the _G* constants (gStatusStrings has the same names, lower case).
G_STATUS_BASE: tuple[str, ...] = (
    "idle",
    "runnable",
    "running",
    "syscall",
    "waiting",
    "moribund_unused",
    "dead",
    "enqueue_unused",
    "copystack",
    "preempted",
)
G_STATUS_126: tuple[str, ...] = (*G_STATUS_BASE, "leaked", "deadextra")
GSCAN = 0x1000


def g_status_names(minor: int) -> tuple[str, ...]:
    return G_STATUS_126 if minor >= 26 else G_STATUS_BASE


def p_status_names(minor: int) -> tuple[str, ...]:
    # 1.26 stopped using _Psyscall: a P in a syscall stays _Prunning (go-runtime.md §5).
    return ("idle", "running", "syscall_unused" if minor >= 26 else "syscall", "gcstop", "dead")


# A table file to use instead of the built-in one (same format): for a Go release newer
# than this gmpmon, or to check that a wrong table is refused (tests).
TABLE_ENV = "GMPMON_OFFSETS_TABLE"


@cache
def load_table() -> dict[str, Any]:
    """{"1.22": {"go_version":..., "offsets":{...}, "wait_reasons":[...], ...}, ...}"""
    override = os.environ.get(TABLE_ENV)
    if override:
        try:
            with open(override) as f:
                table: dict[str, Any] = json.load(f)["versions"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise UnsupportedError(f"${TABLE_ENV}={override}: not an offsets table ({e})") from e
        return table
    try:
        text = resources.files("gmpmon.binary").joinpath(TABLE_FILE).read_text()
    except FileNotFoundError:
        return {}
    versions: dict[str, Any] = json.loads(text).get("versions", {})
    return versions


def table_for(minor: int) -> dict[str, Any] | None:
    entry: dict[str, Any] | None = load_table().get(f"1.{minor}")
    return entry


def table_minors() -> list[str]:
    return sorted(load_table(), key=lambda v: int(v.split(".")[1]))
