"""Go's own goroutine dump as the oracle for `gmpmon goroutines`.

``parse(text)`` reads Go's ``/debug/pprof/goroutine?debug=2`` text (and gmpmon's, which has
the same form) into {goid: (state, [function, ...])}; ``compare(ours, go)`` counts, over the
goroutines parked in Go's dump (not running or runnable: their stacks move), how many
gmpmon's dump has, with the same function names frame by frame and the same wait reason.
"""

from __future__ import annotations

import re
import socket
import urllib.request
from dataclasses import dataclass

HEADER = re.compile(r"^goroutine (\d+)(?: gp=\S+ m=\S+(?: mp=\S+)?)? \[([^\]]*)\]:$")
MOVING = ("running", "runnable")
PORTS = range(18200, 18300)  # this suite's own range


def free_port() -> int:
    for port in PORTS:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port in 18200-18299")


def fetch(url: str, timeout: float = 20.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        data: bytes = r.read()
    return data.decode("utf-8", "replace")


def positions(text: str) -> dict[int, list[str]]:
    """{goid: every line after the header, arguments left out}: file:line +offset and the
    creation site too."""
    out: dict[int, list[str]] = {}
    for block in text.strip().split("\n\n"):
        lines = block.splitlines()
        m = HEADER.match(lines[0]) if lines else None
        if m is not None:
            out[int(m.group(1))] = [re.sub(r"\(.*\)$", "(...)", ln) for ln in lines[1:]]
    return out


def parse(text: str) -> dict[int, tuple[str, list[str]]]:
    out: dict[int, tuple[str, list[str]]] = {}
    for block in text.strip().split("\n\n"):
        lines = block.splitlines()
        if not lines:
            continue
        m = HEADER.match(lines[0])
        if m is None:
            continue
        state = m.group(2).split(", ")[0]
        funcs = []
        for line in lines[1:]:
            if line.startswith("created by "):
                break
            if line.startswith(("\t", "...")):
                continue
            funcs.append(line[: line.rindex("(")] if line.endswith(")") else line)
        out[int(m.group(1))] = (state, funcs)
    return out


@dataclass
class Result:
    parked: int  # goroutines parked in Go's dump
    present: int  # of those, in gmpmon's
    same_frames: int
    same_reason: int
    mismatches: list[str]
    same_text: int = 0  # also every file:line +offset and the creation site

    def pct(self, n: int) -> float:
        return 100.0 * n / self.parked if self.parked else 0.0

    def line(self) -> str:
        return (f"{self.parked} parked; present {self.pct(self.present):.1f}%, same frames "
                f"{self.pct(self.same_frames):.1f}%, same wait reason "
                f"{self.pct(self.same_reason):.1f}%, same text (arguments aside) "
                f"{self.pct(self.same_text):.1f}%")


def compare(ours: str, go: str, go_before: str | None = None) -> Result:
    """With ``go_before`` (Go's dump taken just before gmpmon's), only the goroutines parked
    at the same place in both of Go's dumps count: the others were created, or moved, while
    the dumps were taken (the oracle's own HTTP request makes a few)."""
    mine, theirs = parse(ours), parse(go)
    my_text, their_text = positions(ours), positions(go)
    before = parse(go_before) if go_before is not None else None
    r = Result(0, 0, 0, 0, [])
    for goid, (state, funcs) in theirs.items():
        if state in MOVING:
            continue
        if before is not None and before.get(goid) != (state, funcs):
            continue
        r.parked += 1
        got = mine.get(goid)
        if got is None:
            r.mismatches.append(f"goroutine {goid} [{state}] missing")
            continue
        r.present += 1
        if got[1] == funcs:
            r.same_frames += 1
        else:
            r.mismatches.append(f"goroutine {goid}: frames {got[1]} != Go's {funcs}")
        if my_text.get(goid) == their_text.get(goid):
            r.same_text += 1
        if got[0] == state:
            r.same_reason += 1
        else:
            r.mismatches.append(f"goroutine {goid}: state {got[0]!r} != Go's {state!r}")
    return r
