"""The records of the scheduler model's state machines (gmpmon.model.sched): one ``G`` per
goroutine seen, one ``P`` per P, with ``__slots__`` (they are touched on every hot event)."""

from __future__ import annotations

from collections import deque

from gmpmon.model import hist as h
from gmpmon.model.legal import G_UNKNOWN, P_UNKNOWN
from gmpmon.model.phistory import Folded
from gmpmon.model.snapshot import Span


class G:
    __slots__ = (
        "epoch",
        "executes",
        "goid",
        "p",
        "parent",
        "park_ts",
        "ready_ts",
        "reason",
        "since",
        "site",
        "state",
        "wait_ns",
        "wake",
    )

    def __init__(self, goid: int, ts: int, epoch: int) -> None:
        self.goid = goid
        self.state = G_UNKNOWN
        self.p = -1
        self.reason = -1  # last wait-reason index
        self.since = ts
        self.parent = 0
        self.executes = 0
        self.wait_ns = 0
        self.ready_ts = -1  # became runnable at (latency clock), -1 none
        self.wake = 0  # why it became runnable (wait reason or WAKE_*)
        self.park_ts = -1
        self.epoch = epoch
        self.site = 0  # go site stack id (start function, creator, file:line), 0 unknown


class P:
    __slots__ = (
        "after",
        "exact",
        "executes",
        "folded",
        "goid",
        "id",
        "lat",
        "lat_counter",
        "lat_max",
        "lat_sum",
        "m",
        "runq",
        "since",
        "span_views",
        "starts_counter",
        "state",
        "timeline",
        "times",
    )

    def __init__(self, pid: int, ts: int) -> None:
        self.id = pid
        self.state = P_UNKNOWN
        self.goid = 0
        self.since = ts
        self.exact = True  # the open span's time counts in ``times``
        self.m = 0
        self.runq = 0
        self.times = [0] * 6  # ns per PState
        self.executes = 0
        self.starts_counter = 0  # COUNTER GO_START (the Sched's ``starts`` Counted says which)
        # Its last closed spans, exactly (Sched.p_to bounds them by count); older ones are
        # folded into time buckets (model/phistory.py), allocated once the first leaves.
        self.timeline: deque[tuple[int, int, int, int]] = deque()
        self.folded: Folded | None = None
        self.span_views: deque[Span] = deque()  # the snapshot's Spans of it (model/view.py)
        # The latency part's per-P histograms (kept here: one attribute, no lookup, per hit)
        self.lat = h.new_hist()  # event-derived
        self.lat_sum = 0
        self.lat_max = 0
        self.lat_counter = h.new_hist()  # COUNTER SCHED_LAT
        self.after: tuple[int, int] = (P_UNKNOWN, 0)  # state to resume at STW_END
