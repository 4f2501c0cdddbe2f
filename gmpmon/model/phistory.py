"""Each P's timeline older than its exact spans, in fixed time buckets (issue 27).

A P keeps its last spans exactly (``P.timeline``, bounded by count: what a Snapshot carries).
On a busy server that is tens of ms: Caddy under wrk makes ~100k P transitions a second per
P, and the Procs strip's widest automatic zoom is 5 s. So a span that leaves the exact spans
by their count is folded here instead of forgotten: per bucket, the ns the P spent in each
state, and the goroutine of its longest run (the running cell's colour). The buckets are a
ring covering the model's ``window_ns`` (10 s) at every event rate; what bounds them is memory,
not events: ``HISTORY_BYTES`` for all Ps together, reached by coarser buckets when there are
many Ps (0.5 ms up to 22 Ps over 10 s, 2 ms at 64). A ring is allocated only for a P whose
exact spans overflow, so a quiet program pays nothing; no more rings than fit
HISTORY_BYTES (a recording may name more Ps than its header: those keep exact spans only).
Only a model a TUI draws folds (``Model(history=True)``, the default): a report, an export or
a headless run has no timeline to fill, and folding is ~8% of a busy replay's CPU.

Exact spans and buckets never hold the same time: a cell of the strip adds both (tui/render.py).
A cell coarser than a bucket is exact in its time per state; a finer one gets a bucket's share
pro rata (the TUI's finest zooms are drawn from the exact spans, which cover them).
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass

from gmpmon.model.values import PState

BUCKET_CHOICES_NS = tuple(int(f * 1_000_000) for f in (0.5, 1, 2, 5, 10, 20, 50, 100))
HISTORY_BYTES = 32 << 20  # every P's ring together, at most
# A Snapshot's copy is made of chunks of the ring: those untouched since the last Snapshot
# are shared with it, so a Snapshot a quarter second later costs a chunk or two, not a ring.
CHUNK = 512
Chunk = tuple[bytes, bytes, bytes]  # CHUNK buckets' ids, ns per state, goroutines
_NSTATES = len(PState)
_RUNNING = int(PState.RUNNING)
BUCKET_BYTES = 8 * (1 + _NSTATES + 2)  # id, ns per state, longest run and its goroutine


def bucket_ns_for(window_ns: int, nprocs: int) -> int:
    """The finest bucket whose rings, for ``nprocs`` Ps over ``window_ns``, fit HISTORY_BYTES."""
    per_p = HISTORY_BYTES // (BUCKET_BYTES * max(nprocs, 1))  # buckets a P's ring may have
    for b in BUCKET_CHOICES_NS:
        if ring_len(window_ns, b) <= per_p:
            return b
    b = -(-window_ns // max(per_p - 2, 1))
    while ring_len(window_ns, b) > per_p:
        b += b // 8 + 1
    return b


def ring_len(window_ns: int, bucket_ns: int) -> int:
    """Buckets in a ring over ``window_ns`` (and the two it may straddle), whole chunks."""
    raw = window_ns // bucket_ns + 2
    chunk = min(CHUNK, raw)
    return -(-raw // chunk) * chunk


class Folded:
    """One P's ring of buckets (see the module docstring). ``end``: the end of the last span
    folded (the exact spans start there); ``start``: the start of the first one."""

    __slots__ = ("_chunks", "_dirty", "_view", "best", "bucket_ns", "chunk", "end", "goid",
                 "ids", "n", "ns", "start")

    def __init__(self, bucket_ns: int, window_ns: int) -> None:
        self.bucket_ns = bucket_ns
        self.n = n = ring_len(window_ns, bucket_ns)
        self.chunk = min(CHUNK, n)
        self.ids = array("q", [-1]) * n  # the bucket number each slot holds
        self.ns = array("q", bytes(8 * n * _NSTATES))  # slot * _NSTATES + state
        self.best = array("q", bytes(8 * n))  # the longest run's ns in the bucket
        self.goid = array("q", bytes(8 * n))  # and its goroutine
        self.start = -1
        self.end = -1
        self._view: History | None = None
        self._chunks: list[Chunk | None] = [None] * (n // self.chunk)  # the last copies
        self._dirty = -1  # the first bucket folded into since the last copy (-1: none)

    def fold(self, spans: list[tuple[int, int, int, int]]) -> None:
        """Add closed spans (start, end, state, goid), oldest first, older than any to come."""
        if not spans:
            return
        bns, n, ids, ns, best, goid = (self.bucket_ns, self.n, self.ids, self.ns, self.best,
                                       self.goid)
        if self._dirty < 0:
            self._dirty = spans[0][0] // bns  # spans come in time order: none touches before
        hi = -1  # the end of the bucket being added to (spans are in order, none overlap)
        i = k = top = 0
        for s, t, st, g in spans:
            if t > hi:  # not in the same bucket as the span before
                b = s // bns
                if (t - 1) // bns != b:
                    self._spread(s, t, st, g)
                    hi = -1
                    continue
                i = b % n
                if ids[i] != b:
                    self._clear(i, b)
                k = i * _NSTATES
                hi = (b + 1) * bns
                top = best[i]
            d = t - s
            ns[k + st] += d
            if d > top and st == _RUNNING:
                best[i] = top = d
                goid[i] = g
        if self.start < 0:
            self.start = spans[0][0]
        self.end = max(self.end, spans[-1][1])
        self._view = None

    def _clear(self, i: int, b: int) -> None:
        self.ids[i] = b
        k = i * _NSTATES
        self.ns[k:k + _NSTATES] = array("q", bytes(8 * _NSTATES))
        self.best[i] = 0
        self.goid[i] = 0

    def _spread(self, s: int, t: int, st: int, g: int) -> None:
        """A span over several buckets: each gets its part (only the last ring's worth)."""
        bns, n = self.bucket_ns, self.n
        first = max(s // bns, (t - 1) // bns - n + 1)
        for b in range(first, (t - 1) // bns + 1):
            lo, hi = max(s, b * bns), min(t, (b + 1) * bns)
            i = b % n
            if self.ids[i] != b:
                self._clear(i, b)
            self.ns[i * _NSTATES + st] += hi - lo
            if st == _RUNNING and hi - lo > self.best[i]:
                self.best[i] = hi - lo
                self.goid[i] = g

    def view(self, cutoff: int) -> History | None:
        """The frozen copy a Snapshot carries: the buckets from ``cutoff`` on (None if none).
        Reused while nothing was folded (a P whose spans all fit stays the same object)."""
        if self.end <= cutoff:
            return None
        v = self._view
        start = max(self.start, cutoff)
        if v is None or v.start != start:
            chunks = self._chunks
            bns, n, size = self.bucket_ns, self.n, self.chunk
            if self._dirty >= 0:
                last = (self.end - 1) // bns
                for b in range(max(self._dirty, last - n + 1), last + 1, size):
                    chunks[b % n // size] = None
                chunks[last % n // size] = None
                self._dirty = -1
            for c, got in enumerate(chunks):
                if got is None:
                    a, z = c * size, (c + 1) * size
                    chunks[c] = (self.ids[a:z].tobytes(),
                                 self.ns[a * _NSTATES:z * _NSTATES].tobytes(),
                                 self.goid[a:z].tobytes())
            v = self._view = History(bns, start, self.end, tuple(chunks))  # type: ignore[arg-type]
        return v


@dataclass(frozen=True, slots=True)
class History:
    """A P's folded timeline over [start, end), as a Snapshot carries it (ProcView.history).
    Bytes of the model's ring at the time (immutable); ``cell()`` reads them."""

    bucket_ns: int
    start: int
    end: int
    chunks: tuple[Chunk, ...]

    def cell(self, lo: int, hi: int) -> tuple[list[int], int]:
        """The ns per state (indexed by PState) in [lo, hi) ∩ [start, end), and the goroutine
        that ran longest in it (0: none). A bucket cut by the interval counts pro rata."""
        per = [0] * _NSTATES
        start, end = self.start, self.end
        lo, hi = max(lo, start), min(hi, end)
        if hi <= lo:
            return per, 0
        bns, chunks = self.bucket_ns, self.chunks
        size = len(chunks[0][0]) // 8
        n = len(chunks) * size
        read: dict[int, tuple[memoryview, ...]] = {}
        top: dict[int, int] = {}
        for b in range(lo // bns, (hi - 1) // bns + 1):
            c, i = divmod(b % n, size)
            got = read.get(c)
            if got is None:
                got = read[c] = tuple(memoryview(x).cast("q") for x in chunks[c])
            ids, ns, goids = got
            if ids[i] != b:
                continue  # not observed (the P's state was unknown), or overwritten
            # what of the bucket's time is in the cell: all of it, or a share (its time is
            # spread evenly over it, as far as the bucket knows; its first and last ones
            # hold only the folded part: from start, up to end)
            b0, b1 = max(b * bns, start), min((b + 1) * bns, end)
            a, z = max(lo, b0), min(hi, b1)
            k = i * _NSTATES
            if a == b0 and z == b1:
                for st in range(1, _NSTATES):
                    per[st] += ns[k + st]
                run = ns[k + _RUNNING]
            else:
                for st in range(1, _NSTATES):
                    per[st] += ns[k + st] * (z - a) // (b1 - b0)
                run = ns[k + _RUNNING] * (z - a) // (b1 - b0)
            if run:
                top[goids[i]] = top.get(goids[i], 0) + run
        goid = max(top.items(), key=lambda kv: (kv[1], -kv[0]))[0] if top else 0
        return per, goid

    @property
    def nbytes(self) -> int:
        return sum(len(x) for chunk in self.chunks for x in chunk)
