"""The target's cgroup CPU controller: quota, period and throttling, cgroup v1 and v2.

Read from the cgroup filesystem, never from the target: ``/proc/PID/cgroup`` names the
target's cgroup, ``/proc/self/mountinfo`` where each hierarchy is mounted. Then

- v2 (``cgroup2``): ``cpu.max`` ("$MAX $PERIOD", "max" for no limit) and ``cpu.stat``
  (``usage_usec``, ``nr_periods``, ``nr_throttled``, ``throttled_usec``);
- v1 (``cgroup`` with the ``cpu`` controller): ``cpu.cfs_quota_us`` (-1 for no limit),
  ``cpu.cfs_period_us``, ``cpu.stat`` (``nr_periods``, ``nr_throttled``, ``throttled_time``
  in ns) and ``cpuacct.usage`` (ns) where cpuacct is co-mounted.

A limit set on an ancestor applies to every cgroup below it: the quota reported is the most
restrictive one (smallest quota/period) from the target's cgroup up to the mount's root, and
the throttling counters are that cgroup's (the kernel throttles where the limit is). A host
with both (v1 cpu controller plus a controller-less cgroup2, as on these machines) is read
through v1: that is where the CPU controller is. Output: CGROUP_CPU events (events.py), so a
recording replays the same numbers.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from gmpmon.events import U64_MAX, CgroupField, EventTuple, Kind

READ_EVERY_NS = 500_000_000
_CGROUP_CPU = int(Kind.CGROUP_CPU)


@dataclass(frozen=True, slots=True)
class CpuCgroup:
    """Where the target's CPU limits live."""

    version: int  # 1 or 2
    leaf: str  # the target's own cgroup directory
    dirs: tuple[str, ...]  # leaf first, up to the mount point


@dataclass(frozen=True, slots=True)
class CpuReading:
    version: int
    path: str  # the cgroup whose limit applies (the leaf when there is none)
    quota_us: int  # -1: no limit
    period_us: int
    nr_periods: int
    nr_throttled: int
    throttled_ns: int
    usage_ns: int
    leaf_quota_us: int = -1  # the target's own cgroup's limit (what Go 1.25+ reads)
    leaf_period_us: int = 0


def parse_proc_cgroup(text: str) -> tuple[str | None, str | None]:
    """``/proc/PID/cgroup`` -> (v1 cpu controller path, v2 path); None where absent."""
    v1 = v2 = None
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hid, controllers, path = parts
        if hid == "0" and controllers == "":
            v2 = path
        elif "cpu" in controllers.split(","):
            v1 = path
    return v1, v2


def parse_mountinfo(text: str) -> tuple[tuple[str, str] | None, tuple[str, str] | None]:
    """``/proc/self/mountinfo`` -> ((root, mount point) of the v1 cpu hierarchy, same for
    cgroup2); None where not mounted. Octal escapes (``\\040``) in paths are decoded."""
    v1 = v2 = None
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        f = left.split()
        r = right.split()
        if len(f) < 5 or len(r) < 1:
            continue
        root, point = _unescape(f[3]), _unescape(f[4])
        fstype = r[0]
        opts = r[2].split(",") if len(r) > 2 else []
        if fstype == "cgroup2" and v2 is None:
            v2 = (root, point)
        elif fstype == "cgroup" and "cpu" in opts and v1 is None:
            v1 = (root, point)
    return v1, v2


def _unescape(s: str) -> str:
    if "\\" not in s:
        return s
    return s.encode().decode("unicode_escape").encode("latin-1").decode(errors="replace")


def _join(mount: tuple[str, str], path: str) -> tuple[str, ...]:
    root, point = mount
    rel = path
    if root != "/" and (rel == root or rel.startswith(root.rstrip("/") + "/")):
        rel = rel[len(root.rstrip("/")):]
    rel = rel.strip("/")
    dirs = []
    parts = rel.split("/") if rel else []
    for i in range(len(parts), -1, -1):
        dirs.append(os.path.join(point, *parts[:i]))
    return tuple(dirs)


def locate(proc_cgroup: str, mountinfo: str) -> CpuCgroup | None:
    """The target's CPU cgroup from the two /proc files' text, v1 preferred (see module doc)."""
    p1, p2 = parse_proc_cgroup(proc_cgroup)
    m1, m2 = parse_mountinfo(mountinfo)
    if p1 is not None and m1 is not None:
        dirs = _join(m1, p1)
        return CpuCgroup(1, dirs[0], dirs)
    if p2 is not None and m2 is not None:
        dirs = _join(m2, p2)
        return CpuCgroup(2, dirs[0], dirs)
    return None


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def parse_cpu_stat(text: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in text.splitlines():
        k, _, v = line.partition(" ")
        try:
            out[k] = int(v)
        except ValueError:
            continue
    return out


def parse_cpu_max(text: str) -> tuple[int, int] | None:
    """cgroup v2 ``cpu.max`` -> (quota µs or -1, period µs)."""
    f = text.split()
    if not f:
        return None
    try:
        period = int(f[1]) if len(f) > 1 else 100_000
        quota = -1 if f[0] == "max" else int(f[0])
    except ValueError:
        return None
    return quota, period


def _limit(cg: CpuCgroup, d: str) -> tuple[int, int] | None:
    if cg.version == 2:
        t = _read(os.path.join(d, "cpu.max"))
        return parse_cpu_max(t) if t is not None else None
    q, p = _read(os.path.join(d, "cpu.cfs_quota_us")), _read(os.path.join(d, "cpu.cfs_period_us"))
    try:
        return (int(q), int(p)) if q is not None and p is not None else None
    except ValueError:
        return None


def read_cpu(cg: CpuCgroup) -> CpuReading | None:
    """The quota that applies and its cgroup's counters; None when the leaf is unreadable."""
    best: tuple[float, str, int, int] | None = None
    for d in cg.dirs:
        lim = _limit(cg, d)
        if lim is None:
            continue
        quota, period = lim
        if quota > 0 and period > 0:
            ratio = quota / period
            if best is None or ratio < best[0]:
                best = (ratio, d, quota, period)
    where = best[1] if best else cg.leaf
    stat_text = _read(os.path.join(where, "cpu.stat"))
    if stat_text is None:
        return None
    st = parse_cpu_stat(stat_text)
    if cg.version == 2:
        throttled = st.get("throttled_usec", 0) * 1000
        usage = st.get("usage_usec", 0) * 1000
    else:
        throttled = st.get("throttled_time", 0)
        acct = _read(os.path.join(where, "cpuacct.usage"))
        try:
            usage = int(acct) if acct is not None else 0
        except ValueError:
            usage = 0
    leaf = _limit(cg, cg.leaf) or (-1, 100_000)
    period = best[3] if best else leaf[1]
    return CpuReading(
        version=cg.version,
        path=where,
        quota_us=best[2] if best else -1,
        period_us=period,
        nr_periods=st.get("nr_periods", 0),
        nr_throttled=st.get("nr_throttled", 0),
        throttled_ns=throttled,
        usage_ns=usage,
        leaf_quota_us=leaf[0] if leaf[0] > 0 else -1,
        leaf_period_us=leaf[1],
    )


def reading_fields(r: CpuReading) -> dict[int, int]:
    return {
        CgroupField.QUOTA_US: U64_MAX if r.quota_us < 0 else r.quota_us,
        CgroupField.PERIOD_US: max(r.period_us, 0),
        CgroupField.NR_PERIODS: r.nr_periods,
        CgroupField.NR_THROTTLED: r.nr_throttled,
        CgroupField.THROTTLED_NS: r.throttled_ns,
        CgroupField.USAGE_NS: r.usage_ns,
        CgroupField.LEAF_QUOTA_US: U64_MAX if r.leaf_quota_us < 0 else r.leaf_quota_us,
        CgroupField.LEAF_PERIOD_US: max(r.leaf_period_us, 0),
    }


def affinity_cpus(pid: int) -> int:
    """CPUs in the target's sched_getaffinity mask (its main thread's); 0 if unreadable."""
    try:
        return len(os.sched_getaffinity(pid))
    except OSError:
        return 0


class CgroupCpuReader:
    """CGROUP_CPU events for one target, at most every READ_EVERY_NS. The target's cgroup is
    looked up again on each read: a process can be moved while gmpmon watches it."""

    def __init__(self, pid: int, proc: str = "/proc") -> None:
        self.pid = pid
        self.proc = proc
        self._next = 0
        self._last: dict[int, int] = {}
        self._version = 0
        self._affinity = 0

    def read(self, now: int, out: list[EventTuple], *, force: bool = False) -> None:
        if now < self._next and not force:
            return
        self._next = now + READ_EVERY_NS
        ncpu = affinity_cpus(self.pid) if self.proc == "/proc" else 0
        if ncpu and self._affinity != ncpu:
            self._affinity = ncpu
            out.append((now, _CGROUP_CPU, -1, 0, int(CgroupField.AFFINITY_CPUS), ncpu,
                        self._version))
        pc = _read(f"{self.proc}/{self.pid}/cgroup")
        mi = _read(f"{self.proc}/self/mountinfo")
        if pc is None or mi is None:
            return
        cg = locate(pc, mi)
        r = read_cpu(cg) if cg is not None else None
        if r is None:
            return
        if r.version != self._version:
            self._last = {}
            self._version = r.version
        for field, value in reading_fields(r).items():
            if self._last.get(field) != value:
                self._last[field] = value
                out.append((now, _CGROUP_CPU, -1, 0, field, value, r.version))
