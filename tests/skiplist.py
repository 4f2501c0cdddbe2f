"""The skip allow-list: in CI (``GMPMON_REQUIRE_BPF=1``) a skipped test fails unless it is listed.

tests/skip-allowlist.txt holds one entry a line, ``PATTERN | MESSAGE | REASON``:

- PATTERN: a glob on the pytest node id (``tests/integration/test_x.py::test_y*``), or
  ``@marker`` for every test that carries that marker (``@slow``);
- MESSAGE: text the skip's own message must contain, so that a listed test skipping for
  another cause (a missing tool, a missing kernel feature) still fails;
- REASON: why that skip is expected in CI; printed with the skip at the end of the run.

A skip (or xfail) that matches no entry becomes a failure in CI; outside CI it stays a
skip and the summary says it would fail there. tests/conftest.py wires the hooks below;
``GMPMON_SKIP_ALLOWLIST`` names another file (the tests of this module use it).
"""

from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.bpfcheck import bpf_required

DEFAULT_PATH = Path(__file__).resolve().parent / "skip-allowlist.txt"


class AllowListError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class Entry:
    pattern: str
    message: str
    reason: str
    line: int

    def matches(self, nodeid: str, markers: set[str], skip_message: str) -> bool:
        if self.message not in skip_message:
            return False
        if self.pattern.startswith("@"):
            return self.pattern[1:] in markers
        return fnmatch.fnmatchcase(nodeid, self.pattern)


def parse(text: str, where: str = "skip-allowlist.txt") -> tuple[Entry, ...]:
    entries = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = [p.strip() for p in line.split("|")]
        if len(parts) != 3 or not all(parts):
            raise AllowListError(f"{where}:{n}: want 'PATTERN | MESSAGE | REASON', got {raw!r}")
        entries.append(Entry(parts[0], parts[1], parts[2], n))
    return tuple(entries)


def load() -> tuple[Entry, ...]:
    path = Path(os.environ.get("GMPMON_SKIP_ALLOWLIST", "") or DEFAULT_PATH)
    return parse(path.read_text(), str(path))


def skip_message(rep: pytest.TestReport | pytest.CollectReport) -> str:
    """The message a skip or xfail report carries."""
    if getattr(rep, "wasxfail", None) is not None:
        return f"xfail: {rep.wasxfail}"  # type: ignore[union-attr]
    lr = rep.longrepr
    if isinstance(lr, tuple) and len(lr) == 3:
        return str(lr[2]).removeprefix("Skipped: ")
    return str(lr)


@dataclass(frozen=True, slots=True)
class Skip:
    nodeid: str
    message: str
    entry: Entry | None


class SkipGate:
    """Matches every skip against the list; fails the unlisted ones when CI requires it."""

    def __init__(self, entries: tuple[Entry, ...], strict: bool) -> None:
        self.entries = entries
        self.strict = strict
        self.skips: list[Skip] = []

    @classmethod
    def from_env(cls) -> SkipGate:
        return cls(load(), bpf_required())

    def judge(self, rep: pytest.TestReport | pytest.CollectReport, markers: set[str]) -> None:
        """Called for every report that is skipped; turns it into a failure if unlisted."""
        msg = skip_message(rep)
        entry = next((e for e in self.entries if e.matches(rep.nodeid, markers, msg)), None)
        self.skips.append(Skip(rep.nodeid, msg, entry))
        if entry is None and self.strict:
            rep.outcome = "failed"
            if hasattr(rep, "wasxfail"):
                del rep.wasxfail  # type: ignore[union-attr]
            rep.longrepr = (
                f"skipped ({msg}), and no entry of tests/skip-allowlist.txt allows it: "
                "CI (GMPMON_REQUIRE_BPF=1) runs every test not on the allow-list"
            )

    def summary(self) -> list[str]:
        """Lines for the end of the run: allowed skips grouped by entry, then unlisted ones."""
        out: list[str] = []
        by_entry: dict[Entry, list[Skip]] = {}
        for s in self.skips:
            if s.entry is not None:
                by_entry.setdefault(s.entry, []).append(s)
        for e, skips in by_entry.items():
            out.append(f"{len(skips)} skipped, allowed by line {e.line} ({e.pattern}): {e.reason}")
            out += [f"    {s.nodeid}" for s in skips]
        unlisted = [s for s in self.skips if s.entry is None]
        if unlisted:
            verdict = "FAILED: not on the allow-list" if self.strict else (
                "not on the allow-list: each would fail in CI (GMPMON_REQUIRE_BPF=1)")
            out.append(f"{len(unlisted)} skipped, {verdict}")
            out += [f"    {s.nodeid}: {s.message}" for s in unlisted]
        return out
