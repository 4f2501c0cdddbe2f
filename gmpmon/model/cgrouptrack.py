"""The target's cgroup CPU quota and throttling, and its CPU affinity, as the CGROUP events
tell them (capture/cgroup.py): a part of the findings tracker (model/evidence.py)."""

from __future__ import annotations

from gmpmon.events import U64_MAX, CgroupField, EventTuple
from gmpmon.model.findingtypes import CgroupCpu


class CgroupTracker:
    def __init__(self) -> None:
        self._cg_first: dict[int, int] = {}
        self._cg_last: dict[int, int] = {}
        self._cg_version = 0
        self._cg_first_ts = 0
        self._cg_last_ts = 0
        self._cg_reads = 0
        self.affinity = 0  # CPUs in the target's sched_getaffinity mask; 0: not read

    def apply(self, e: EventTuple) -> None:
        """One CGROUP event."""
        ts, field, value, version = e[0], e[4], e[5], e[6]
        if field == CgroupField.AFFINITY_CPUS:  # not the cgroup's: kept apart
            self.affinity = value
            return
        if version != self._cg_version:
            self._cg_first.clear()
            self._cg_last.clear()
            self._cg_version = version
            self._cg_reads = 0
            self._cg_first_ts = ts
        if ts != self._cg_last_ts:
            self._cg_reads += 1
        self._cg_first.setdefault(field, value)
        self._cg_last[field] = value
        self._cg_last_ts = ts

    def view(self) -> CgroupCpu | None:
        """The quota and the throttling between the first and the last reading."""
        if not self._cg_last:
            return None
        f, last = self._cg_first, self._cg_last
        quota = last.get(CgroupField.QUOTA_US, U64_MAX)

        def delta(k: int) -> int:
            return max(0, last.get(k, 0) - f.get(k, 0))

        return CgroupCpu(
            version=self._cg_version,
            quota_us=-1 if quota == U64_MAX else quota,
            period_us=last.get(CgroupField.PERIOD_US, 0),
            nr_periods=delta(CgroupField.NR_PERIODS),
            nr_throttled=delta(CgroupField.NR_THROTTLED),
            throttled_ns=delta(CgroupField.THROTTLED_NS),
            first_ts=self._cg_first_ts,
            last_ts=self._cg_last_ts,
            readings=self._cg_reads,
            leaf_quota_us=_leaf(last.get(CgroupField.LEAF_QUOTA_US)),
            leaf_period_us=last.get(CgroupField.LEAF_PERIOD_US, 0),
        )


def _leaf(quota: int | None) -> int:
    """The leaf cgroup's own quota: -1 none, -2 not read (recordings made before it)."""
    return -2 if quota is None else -1 if quota == U64_MAX else quota
