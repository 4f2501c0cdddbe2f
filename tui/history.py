"""The states the TUI saw each goroutine in, refresh by refresh, for the details screen.

Bounded: only the goroutines of the newest Snapshot's table (the census's, else the probes';
bounded by the model), and the last HISTORY_LEN changes of each. A replay going back in
time starts over.
"""

from __future__ import annotations

from gmpmon.model.snapshot import GState, Snapshot

HISTORY_LEN = 16
Entry = tuple[int, GState, str, int]  # (ts, state, wait reason, P)


class GHistory:
    def __init__(self) -> None:
        self.now = 0
        self._by_g: dict[int, list[Entry]] = {}

    def feed(self, snap: Snapshot) -> None:
        if snap.now < self.now:
            self._by_g.clear()
        self.now = snap.now
        keep: dict[int, list[Entry]] = {}
        rows = snap.census_goroutines  # the table's rows: their states are the census's
        for g in rows if rows is not None else snap.goroutines:
            seen = self._by_g.get(g.goid) or []
            entry = (g.since or snap.now, g.state, g.wait_reason, g.p)
            if not seen or seen[-1][1:] != entry[1:]:
                seen.append(entry)
                del seen[:-HISTORY_LEN]
            keep[g.goid] = seen
        self._by_g = keep

    def of(self, goid: int) -> tuple[Entry, ...]:
        return tuple(self._by_g.get(goid, ()))
